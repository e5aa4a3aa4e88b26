"""An in-memory kube-apiserver for the unit tests of the writers, served at
the wire: ``FakeKube.api_client()`` is a real kubernetes ``ApiClient`` whose
HTTP pool answers from memory, so the client's own serialisation, content
types and ``ApiException`` run as they do against a cluster, and the code
under test needs no monkeypatching.

What it keeps of kube-apiserver, and no more than the writers use
(tests/harness/test_fake_kube_honest.py runs the same calls on the bed's API server
and here, and asserts the same outcomes):

- one resourceVersion counter for everything, grown by each write; a write
  that changes nothing keeps the object's version; a list carries the
  counter as it is;
- create: 201, or 409 AlreadyExists; a new uid, generation 1 for custom
  resources and Pods, the status dropped where the kind has a status subresource
  (a Pod starts Pending), a Secret's stringData made data;
- a JSON merge patch (RFC 7386) or a replace (PUT): a
  ``metadata.resourceVersion`` or ``metadata.uid`` in the body that is not
  the object's is a 409 Conflict; a replace without a resourceVersion is
  refused (422) for a custom resource only; a write of the object keeps its
  status, a patch of ``/status`` keeps everything but the status;
  generation grows when anything but metadata and status changes;
- delete: preconditions (uid, resourceVersion) refused with 409, 404 on a
  missing object; the answer a Status, or a Pod; DeleteOptions in a body
  make the query's (``gracePeriodSeconds``) unread; with finalizers the
  object is only marked (deletionTimestamp, its generation grown) and goes
  once a write empties them (answered with its last resourceVersion); a
  bound Pod with a grace period is only marked (its kubelet would finish
  it);
- the garbage collector's orphaning (``propagationPolicy: Orphan``) done at
  once: the dependents lose their owner reference to the object, then the
  object goes; its deletion of dependents whose owners are all gone only
  when a test calls ``collect_garbage`` (the window before it is what a
  test of a stale owner reference stands in).

Everything else (field pruning, schema defaults, validation, managedFields,
watches, other patch types) is not served: a request it does not know fails the test.
"""

import base64
import copy
import itertools
import json
import uuid
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

from kubernetes import client

HOST = "https://fake-kube.invalid"


class Resource:
    def __init__(self, kind, api_version, status=False, custom=False, generation=None):
        self.kind = kind
        self.api_version = api_version
        self.status = status  # served with a status subresource
        self.custom = custom
        self.generation = custom if generation is None else generation


_JUMPSTARTER = "jumpstarter.dev/v1alpha1"
_POOL = "virtualtarget.jumpstarter.dev/v1alpha1"
RESOURCES = {
    ("", "pods"): Resource("Pod", "v1", status=True, generation=True),
    ("", "secrets"): Resource("Secret", "v1"),
    ("", "configmaps"): Resource("ConfigMap", "v1"),
    ("", "events"): Resource("Event", "v1"),
    ("jumpstarter.dev", "exporters"): Resource("Exporter", _JUMPSTARTER, status=True, custom=True),
    ("jumpstarter.dev", "leases"): Resource("Lease", _JUMPSTARTER, status=True, custom=True),
    ("virtualtarget.jumpstarter.dev", "exportersets"): Resource("ExporterSet", _POOL, status=True, custom=True),
    ("virtualtarget.jumpstarter.dev", "virtualtargetclasses"): Resource(
        "VirtualTargetClass", _POOL, status=True, custom=True),
    ("virtualtarget.jumpstarter.dev", "exportersetpolicies"): Resource(
        "ExporterSetPolicy", _POOL, status=True, custom=True),
}
BY_KIND = {resource.kind: resource for resource in RESOURCES.values()}
# What a client cannot set in metadata; the server's own.
SYSTEM_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                 "deletionGracePeriodSeconds", "namespace", "name")
ORPHAN = "orphan"
REASONS = {400: "Bad Request", 404: "Not Found", 409: "Conflict", 415: "Unsupported Media Type",
           422: "Unprocessable Entity"}


class Refused(Exception):
    def __init__(self, code, reason, message):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


class Request:
    """One request as the server saw it: ``verb`` is kube's (get, list,
    create, patch, delete), ``body`` the decoded JSON."""

    def __init__(self, verb, kind, name, subresource, body, query):
        self.verb, self.kind, self.name = verb, kind, name
        self.subresource, self.body, self.query = subresource, body, query


class _Response:
    def __init__(self, status, body):
        self.status = status
        self.reason = "OK" if status < 300 else REASONS.get(status, "Error")
        self.data = json.dumps(body).encode()
        self.headers = {"content-type": "application/json"}


class _Wire:
    """The client's urllib3 pool, as RESTClientObject uses it, answered by the fake."""

    def __init__(self, fake):
        self.fake = fake

    def request(self, method, url, body=None, headers=None, **_):
        return self.fake.serve(method, url, body, headers or {})

    def clear(self):
        pass


def merge_patch(target, patch):
    """``target`` with the JSON merge patch ``patch`` (RFC 7386) applied: a
    null removes its key, an object merges, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _matches(labels, selector):
    """Whether ``labels`` satisfy an equality-based label selector."""
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if term.startswith("!"):
            if term[1:] in labels:
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


def _now():
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeKube:
    """The objects of a cluster in memory, and every request made to it."""

    def __init__(self, namespace="default"):
        self.namespace = namespace  # of ``put``, ``write`` and ``objects``
        self.revision = 0
        self.requests = []
        self._store = {}  # (kind, namespace, name) -> object
        self._before = []  # (verb, kind, action) run once before the first such request
        self._uids = (f"{n:08x}-0000-4000-8000-000000000000" for n in itertools.count(1))

    # -- what tests use ------------------------------------------------------

    def api_client(self):
        """A kubernetes ``ApiClient`` whose requests this fake answers."""
        api_client = client.ApiClient(client.Configuration(host=HOST))
        api_client.rest_client.pool_manager = _Wire(self)
        return api_client

    @property
    def objects(self):
        """A copy of every object but Events of ``namespace``, by (kind, name)."""
        return {(kind, name): copy.deepcopy(obj) for (kind, ns, name), obj in sorted(self._store.items())
                if kind != "Event" and ns == self.namespace}

    @property
    def events(self):
        """A copy of the Events of ``namespace``, oldest first."""
        return [copy.deepcopy(obj) for (kind, ns, _), obj in self._store.items()
                if kind == "Event" and ns == self.namespace]

    @property
    def calls(self):
        """Every request as (verb, kind, name); a list's name is its label selector."""
        return [(r.verb, r.kind, r.name) for r in self.requests]

    def put(self, kind, name, namespace=None, **fields):
        """Store an object as another party made it (not a request of the
        code under test): status and a chosen ``metadata.uid`` kept as given."""
        namespace = namespace or self.namespace
        meta = copy.deepcopy(fields.pop("metadata", {}))
        resource = BY_KIND[kind]
        obj = {"apiVersion": resource.api_version, "kind": kind, **copy.deepcopy(fields),
               "metadata": {**meta, "name": name, "namespace": namespace, "uid": meta.get("uid") or next(self._uids),
                            "creationTimestamp": _now()}}
        obj["metadata"].pop("resourceVersion", None)
        if resource.generation:
            obj["metadata"]["generation"] = 1
        self._write((kind, namespace, name), obj)
        return copy.deepcopy(obj)

    def write(self, kind, name, patch, subresource=None, namespace=None):
        """A merge patch by another writer (not recorded in ``requests``)."""
        return self._patch(kind, namespace or self.namespace, name, subresource, patch)

    def before(self, verb, kind, action):
        """Run ``action(name)`` once, just before the next ``verb`` of ``kind`` is served."""
        self._before.append((verb, kind, action))

    def exec(self, namespace, name, container, command, timeout):
        """``api/core.CoreApi.exec`` for a test to put in its place (an exec
        is a WebSocket, not served here): recorded as a create of
        ``pods/exec``; the command exits 0."""
        if ("Pod", namespace, name) not in self._store:
            return None, f'pods "{name}" not found'
        self.requests.append(Request("create", "pods/exec", name, None, {"container": container,
                                                                       "command": command}, {}))
        return 0, ""

    def collect_garbage(self):
        """The garbage collector's pass: an object whose owners are all gone
        goes; one with some owners gone loses the references to those."""
        while True:
            uids = {(ns, obj["metadata"]["uid"]) for (_, ns, _), obj in self._store.items()}
            changed = False
            for key, obj in list(self._store.items()):
                refs = obj["metadata"].get("ownerReferences") or []
                alive = [ref for ref in refs if (key[1], ref.get("uid")) in uids]
                if not refs or len(alive) == len(refs):
                    continue
                changed = True
                if alive:
                    self._patch(key[0], key[1], key[2], None, {"metadata": {"ownerReferences": alive}})
                else:
                    self._delete(key, {"propagationPolicy": "Background"})
            if not changed:
                return

    # -- the wire --------------------------------------------------------------

    def serve(self, method, url, body, headers):
        parts = urlsplit(url)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        path = parts.path.strip("/").split("/")
        group, rest = ("", path[2:]) if path[0] == "api" else (path[1], path[3:])
        if len(rest) < 3 or rest[0] != "namespaces" or (group, rest[2]) not in RESOURCES:
            raise NotImplementedError(f"{method} {parts.path} is not served by the fake")
        namespace, resource = rest[1], RESOURCES[(group, rest[2])]
        name = rest[3] if len(rest) > 3 else None
        subresource = rest[4] if len(rest) > 4 else None
        decoded = json.loads(body) if body else None
        verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}.get(method)
        if verb is None or (subresource and (subresource != "status" or not resource.status or verb == "update")):
            raise NotImplementedError(f"{method} {parts.path} is not served by the fake")
        if verb == "patch" and headers.get("Content-Type") != "application/merge-patch+json":
            raise NotImplementedError(f"a {headers.get('Content-Type')} patch is not served by the fake")
        logged = {"list": query.get("labelSelector"),
                  "create": ((decoded or {}).get("metadata") or {}).get("name")}.get(verb, name)
        self.requests.append(Request(verb, resource.kind, logged, subresource, decoded, query))
        for hook in [hook for hook in self._before if hook[:2] == (verb, resource.kind)][:1]:
            self._before.remove(hook)
            hook[2](name)
        try:
            if verb == "get":
                return _Response(200, self._get(resource.kind, namespace, name))
            if verb == "list":
                return _Response(200, self._list(resource, namespace, query.get("labelSelector")))
            if verb == "create":
                return _Response(201, self._create(resource, namespace, decoded or {}))
            if verb == "patch":
                return _Response(200, self._patch(resource.kind, namespace, name, subresource, decoded))
            if verb == "update":
                return _Response(200, self._update(resource, namespace, name, decoded or {}))
            # A body's DeleteOptions are all there is: the query's are not read then.
            options = decoded if decoded else {key: int(value) if key == "gracePeriodSeconds" else value
                                               for key, value in query.items()}
            return _Response(200, self._delete((resource.kind, namespace, name), options))
        except Refused as refused:
            return _Response(refused.code, {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": refused.message, "reason": refused.reason,
                "details": {"name": name, "kind": rest[2]}, "code": refused.code})

    # -- the server ----------------------------------------------------------

    def _get(self, kind, namespace, name):
        found = self._store.get((kind, namespace, name))
        if found is None:
            raise Refused(404, "NotFound", f'{kind} "{name}" not found')
        return copy.deepcopy(found)

    def _list(self, resource, namespace, selector):
        items = [copy.deepcopy(obj) for (kind, ns, _), obj in sorted(self._store.items())
                 if kind == resource.kind and ns == namespace
                 and _matches(obj["metadata"].get("labels") or {}, selector)]
        return {"apiVersion": resource.api_version, "kind": f"{resource.kind}List",
                "metadata": {"resourceVersion": str(self.revision)}, "items": items}

    def _write(self, key, obj):
        self.revision += 1
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not meta.get("deletionGracePeriodSeconds"):
            # Its last finalizer gone: it goes, answered as last written.
            self._store.pop(key, None)
            return copy.deepcopy(obj)
        meta["resourceVersion"] = str(self.revision)
        self._store[key] = obj
        written = copy.deepcopy(obj)
        if meta.get("deletionTimestamp") and ORPHAN in (meta.get("finalizers") or []):
            self._orphan(key)
        return written

    def _create(self, resource, namespace, body):
        meta = body.get("metadata") or {}
        name = meta.get("name")
        if not name:
            raise Refused(422, "Invalid", f"{resource.kind}: metadata.name: Required value")
        if meta.get("namespace") not in (None, namespace):
            raise Refused(400, "BadRequest", "the namespace of the provided object does not match the namespace "
                                             "sent on the request")
        key = (resource.kind, namespace, name)
        if key in self._store:
            raise Refused(409, "AlreadyExists", f'{resource.kind} "{name}" already exists')
        obj = copy.deepcopy(body)
        obj["metadata"] = {k: v for k, v in meta.items() if k not in SYSTEM_FIELDS}
        obj["metadata"].update(name=name, namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=_now())
        obj.update(apiVersion=resource.api_version, kind=resource.kind)
        if resource.generation:
            obj["metadata"]["generation"] = 1
        if resource.status:
            obj.pop("status", None)
        if resource.kind == "Pod":
            obj["status"] = {"phase": "Pending"}
        if resource.kind == "Secret" and "stringData" in obj:
            obj["data"] = {**(obj.get("data") or {}), **{
                k: base64.b64encode(v.encode()).decode() for k, v in obj.pop("stringData").items()}}
        return self._write(key, obj)

    def _current(self, kind, namespace, name, body):
        """The object a write of ``body`` is made on, after its preconditions."""
        current = self._store.get((kind, namespace, name))
        if current is None:
            raise Refused(404, "NotFound", f'{kind} "{name}" not found')
        if not isinstance(body, dict):
            raise Refused(400, "BadRequest", "the body must be a JSON object")
        wanted = body.get("metadata") or {}
        for field in ("resourceVersion", "uid"):
            if wanted.get(field) and wanted[field] != current["metadata"][field]:
                raise Refused(409, "Conflict", f'Operation cannot be fulfilled on {kind} "{name}": the object has '
                                               "been modified; please apply your changes to the latest version "
                                               "and try again")
        return current

    def _patch(self, kind, namespace, name, subresource, body):
        current = self._current(kind, namespace, name, body)
        patched = merge_patch(current, body)
        if subresource == "status":
            new = copy.deepcopy(current)
            new.pop("status", None)
            if "status" in patched:
                new["status"] = patched["status"]
            return self._store_update((kind, namespace, name), current, new)
        return self._store_update((kind, namespace, name), current, self._as_written(current, patched))

    def _update(self, resource, namespace, name, body):
        current = self._current(resource.kind, namespace, name, body)
        if resource.custom and not (body.get("metadata") or {}).get("resourceVersion"):
            raise Refused(422, "Invalid", f'{resource.kind} "{name}" is invalid: metadata.resourceVersion: '
                                          "Invalid value: 0x0: must be specified for an update")
        new = copy.deepcopy(body)
        if resource.kind == "Secret" and "stringData" in new:
            new["data"] = {**(new.get("data") or {}), **{
                k: base64.b64encode(v.encode()).decode() for k, v in new.pop("stringData").items()}}
        return self._store_update((resource.kind, namespace, name), current, self._as_written(current, new))

    def _as_written(self, current, new):
        """``new`` as a write of the object (not its status) leaves it: the
        server's metadata and, with a status subresource, the status kept."""
        resource = BY_KIND[current["kind"]]
        new = copy.deepcopy(new)
        new["metadata"] = {**{k: v for k, v in (new.get("metadata") or {}).items() if k not in SYSTEM_FIELDS},
                           **{k: v for k, v in current["metadata"].items() if k in SYSTEM_FIELDS}}
        for field in ("apiVersion", "kind"):
            new[field] = current[field]
        if resource.status:
            new.pop("status", None)
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
        if resource.generation and {k: v for k, v in new.items() if k not in ("metadata", "status")} != {
                k: v for k, v in current.items() if k not in ("metadata", "status")}:
            new["metadata"]["generation"] = current["metadata"]["generation"] + 1
        return new

    def _store_update(self, key, current, new):
        if new == current:
            return copy.deepcopy(current)
        return self._write(key, new)

    def _delete(self, key, options):
        current = self._store.get(key)
        if current is None:
            raise Refused(404, "NotFound", f'{key[0]} "{key[2]}" not found')
        meta = current["metadata"]
        for field, expected in (options.get("preconditions") or {}).items():
            if expected is not None and expected != meta.get(field):
                raise Refused(409, "Conflict", f"Precondition failed: {field} in precondition: {expected}, "
                                               f"{field} in object meta: {meta.get(field)}")
        policy = options.get("propagationPolicy") or "Background"
        if policy not in ("Orphan", "Background"):
            raise NotImplementedError(f"propagationPolicy {policy} is not served by the fake")
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Orphan" and ORPHAN not in finalizers:
            finalizers.append(ORPHAN)
        grace = options.get("gracePeriodSeconds")
        if key[0] == "Pod" and (current.get("spec") or {}).get("nodeName"):
            grace = int(grace if grace is not None else current["spec"].get("terminationGracePeriodSeconds", 30))
        else:
            grace = 0
        marked = copy.deepcopy(current)
        marked["metadata"].update(deletionTimestamp=meta.get("deletionTimestamp") or _now(),
                                  deletionGracePeriodSeconds=grace)
        if "generation" in meta and not meta.get("deletionTimestamp"):
            marked["metadata"]["generation"] = meta["generation"] + 1
        if not finalizers and not grace:
            del self._store[key]
            self.revision += 1
            if key[0] == "Pod":
                marked["metadata"]["resourceVersion"] = str(self.revision)
                return marked
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": key[2], "kind": current["kind"], "uid": meta["uid"]}}
        if meta.get("deletionTimestamp") and finalizers == list(meta.get("finalizers") or []):
            return copy.deepcopy(current)
        if finalizers:
            marked["metadata"]["finalizers"] = finalizers
        return self._write(key, marked)

    def _orphan(self, key):
        """The garbage collector orphaning the dependents of ``key``, then
        taking its ``orphan`` finalizer off."""
        uid = self._store[key]["metadata"]["uid"]
        for other, obj in list(self._store.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if other[1] == key[1] and any(ref.get("uid") == uid for ref in refs):
                kept = [ref for ref in refs if ref.get("uid") != uid]
                self._patch(other[0], other[1], other[2], None, {"metadata": {"ownerReferences": kept or None}})
        finalizers = [f for f in self._store[key]["metadata"]["finalizers"] if f != ORPHAN]
        self._patch(key[0], key[1], key[2], None, {"metadata": {"finalizers": finalizers or None}})
