"""The Kubernetes side of the Jumpstarter controller stand-in.

One controller serves one namespace, as the real one does (its NAMESPACE
setting). A thread watches Exporters, Clients, Leases, ExporterAccessPolicies
and credential Secrets there and reconciles them the way the controller at
jumpstarter b1f2bb41 does (see docs/controller.md and CONTROLLER.md):

* Exporters and Clients get a credential Secret (``<name>-exporter`` /
  ``<name>-client``) holding a token bound to their UID. An existing Secret of
  that name is re-parented to the new owner and keeps its token while the
  token's signature is valid, so a name reused before the old Secret is gone
  inherits a token for the old UID.
* An Exporter's ``Online`` and ``Registered`` conditions follow what the
  exporter process reported over gRPC (``status.lastSeen``,
  ``status.exporterStatus``, ``status.devices``); ``status.leaseRef`` follows
  the active Leases.
* A Lease is matched in the real order: empty selector (Invalid), requested
  exporter, disabled matches (AllDisabled), access policies (NoAccess, also
  for zero matches), offline (Pending/Offline), leased (Pending/NotAvailable),
  not ready (Pending/NotReady), then the first by (unleased, non-spot,
  priority, name). An assigned Lease gets its Exporter as controller owner;
  an ended one the ``jumpstarter.dev/lease-ended`` label.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from datetime import UTC, datetime, timedelta

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from .tokens import Signer, TokenError, subject_of

log = logging.getLogger(__name__)

GROUP, VERSION = "jumpstarter.dev", "v1alpha1"
LEASE_ENDED_LABEL = "jumpstarter.dev/lease-ended"
ONLINE_TIMEOUT = timedelta(minutes=1)
MAX_PENDING_REQUEUE = 30.0
STATUS_OFFLINE = "Offline"
STATUS_AVAILABLE = "Available"
STATUS_UNSPECIFIED = "Unspecified"


def now_utc() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.strptime(text.replace(".000000", "")[:20], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def parse_duration(text: str | None) -> timedelta | None:
    """A Go duration such as ``1h30m``, ``90s`` or ``1h0m0s``."""
    if not text:
        return None
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    total, number, index = 0.0, "", 0
    while index < len(text):
        char = text[index]
        if char.isdigit() or char == ".":
            number += char
            index += 1
            continue
        unit = "ms" if text.startswith("ms", index) else char
        total += float(number) * units[unit]
        number = ""
        index += len(unit)
    return timedelta(seconds=total)


def selector_matches(selector: dict | None, labels: dict | None) -> bool:
    """Kubernetes label-selector semantics (matchLabels and matchExpressions)."""
    selector = selector or {}
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def selector_is_empty(selector: dict | None) -> bool:
    selector = selector or {}
    return not selector.get("matchLabels") and not selector.get("matchExpressions")


def condition_true(obj: dict, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or ())


def set_condition(conditions: list, kind: str, status: bool, reason: str, message: str,
                  generation: int | None = None) -> None:
    """meta.SetStatusCondition: the transition time moves only with the status."""
    value = "True" if status else "False"
    for condition in conditions:
        if condition.get("type") == kind:
            if condition.get("status") != value:
                condition["status"] = value
                condition["lastTransitionTime"] = format_time(now_utc())
            condition["reason"] = reason
            condition["message"] = message
            if generation is not None:
                condition["observedGeneration"] = generation
            return
    entry = {"type": kind, "status": value, "reason": reason, "message": message,
             "lastTransitionTime": format_time(now_utc())}
    if generation is not None:
        entry["observedGeneration"] = generation
    conditions.append(entry)


def is_enabled(exporter: dict) -> bool:
    return (exporter.get("spec") or {}).get("enabled") is not False


def is_active_lease(lease: dict) -> bool:
    return LEASE_ENDED_LABEL not in (lease["metadata"].get("labels") or {})


def controller_reference(owner: dict, kind: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def with_controller_reference(refs: list | None, owner_ref: dict) -> list:
    """controllerutil.SetControllerReference: the reference to the same
    group/kind/name is replaced (its UID too), others are kept."""
    same = (owner_ref["apiVersion"].split("/")[0], owner_ref["kind"], owner_ref["name"])
    kept = [r for r in refs or [] if (r.get("apiVersion", "").split("/")[0], r.get("kind"), r.get("name")) != same]
    return [*kept, owner_ref]


def wake_on_events(stop: threading.Event, wake: threading.Event, list_func, *args, on_event=None,
                   **kwargs) -> None:
    """Until ``stop`` is set, watch what ``list_func`` lists and set ``wake``
    on every event (after ``on_event``, if given); a broken watch is
    restarted, as informers do."""
    while not stop.is_set():
        stream = watch.Watch()
        try:
            for event in stream.stream(list_func, *args, timeout_seconds=30, **kwargs):
                if on_event is not None:
                    on_event(event)
                wake.set()
                if stop.is_set():
                    break
        except Exception as exc:  # noqa: BLE001 - a broken watch is restarted, as informers do
            if stop.is_set():
                return
            log.debug("watch restarted: %s", exc)
            time.sleep(0.5)
        finally:
            stream.stop()


def _namespace_terminating(exc: ApiException) -> bool:
    """A write refused because the namespace is going away (the end of a test)."""
    return exc.status == 403 and "being terminated" in str(exc.body or "")


class StandInController:
    """The reconcile loops of the Jumpstarter controller for one namespace."""

    def __init__(self, api_client: client.ApiClient, namespace: str, endpoint: str = "localhost:8082",
                 signer: Signer | None = None, online_timeout: timedelta = ONLINE_TIMEOUT):
        self.api_client = api_client
        self.namespace = namespace
        self.endpoint = endpoint
        self.signer = signer or Signer()
        self.online_timeout = online_timeout
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # Owners (by UID) whose credential Secret was ensured since it last changed.
        self._credentials_ensured: set[str] = set()
        # When the next pass is due without an event (lease expiry, pending
        # backoff, an exporter's lastSeen running out), as a monotonic time.
        self._due: float | None = None
        self.passes = 0
        self.errors: list[str] = []

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> StandInController:
        for plural in ("exporters", "leases", "clients", "exporteraccesspolicies"):
            self._spawn(self._watch_custom, plural)
        self._spawn(self._watch_secrets)
        self._spawn(self._loop)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        # Watches end on their own within their server-side timeout; only the
        # loop that writes is waited for.
        self._threads[-1].join(timeout=10)

    def poke(self) -> None:
        self._wake.set()

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True,
                                  name=f"standin-{self.namespace}-{target.__name__}")
        thread.start()
        self._threads.append(thread)

    def _watch_custom(self, plural: str) -> None:
        self._watch(self.custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace, plural)

    def _watch_secrets(self) -> None:
        def on_event(event):
            name = event["object"].metadata.name
            if name.endswith(("-exporter", "-client")):
                self._credentials_ensured.clear()
        self._watch(self.core.list_namespaced_secret, self.namespace, on_event=on_event)

    def _watch(self, list_func, *args, on_event=None) -> None:
        wake_on_events(self._stop, self._wake, list_func, *args, on_event=on_event)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=self._next_wait())
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.reconcile_once()
            except ApiException as exc:
                # Conflicts, objects that went away, throttling and server
                # errors are retried, as controller-runtime requeues them; a
                # request the API server refuses as wrong is a defect.
                if exc.status not in (404, 409, 429) and exc.status < 500 and not _namespace_terminating(exc):
                    self.errors.append(f"{exc.status} {exc.reason}: {str(exc.body)[:300]}")
                self._retry_soon()
            except (LookupError, OSError, urllib3.exceptions.HTTPError) as exc:
                # An object not seen yet, or the API server restarting.
                log.debug("requeued: %s", exc)
                self._retry_soon()
            except Exception as exc:  # noqa: BLE001 - the loop must survive, like a manager
                log.exception("stand-in reconcile failed")
                self.errors.append(repr(exc))
                self._retry_soon()

    def _retry_soon(self) -> None:
        time.sleep(0.3)
        self._wake.set()

    def _next_wait(self) -> float:
        if self._due is None:
            return 30.0
        return max(self._due - time.monotonic(), 0.05)

    def _requeue(self, seconds: float | None) -> None:
        if seconds is None:
            return
        due = time.monotonic() + max(seconds, 0.0)
        self._due = due if self._due is None else min(self._due, due)

    # -- one pass ------------------------------------------------------------
    def _list(self, plural: str) -> list[dict]:
        return self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, plural)["items"]

    def reconcile_once(self) -> None:
        """Every Client, active Lease and Exporter of the namespace, once.

        Leases come before Exporters so that an Exporter's leaseRef follows an
        assignment, as the real Exporter reconciler (which owns Leases) does.
        """
        self._due = None
        self.passes += 1
        clients = self._list("clients")
        for jclient in clients:
            self.reconcile_client(jclient)
        leases = self._list("leases")
        policies = self._list("exporteraccesspolicies")
        exporters = {e["metadata"]["name"]: e for e in self._list("exporters")}
        clients_by_name = {c["metadata"]["name"]: c for c in clients}
        for lease in sorted(leases, key=lambda x: (x["metadata"]["creationTimestamp"], x["metadata"]["name"])):
            if is_active_lease(lease) and not lease["metadata"].get("deletionTimestamp"):
                self._requeue(self.reconcile_lease(lease, exporters, leases, policies, clients_by_name))
        leases = self._list("leases")
        for exporter in exporters.values():
            self.reconcile_exporter(exporter, leases)

    # -- credentials -----------------------------------------------------------
    def ensure_credential(self, owner: dict, kind: str) -> str:
        """The owner's credential Secret, created or re-parented; returns its name."""
        meta = owner["metadata"]
        suffix = "exporter" if kind == "Exporter" else "client"
        name = f"{meta['name']}-{suffix}"
        owner_ref = controller_reference(owner, kind)
        subject = subject_of(suffix, meta["namespace"], meta["name"], meta["uid"])
        try:
            secret = self.core.read_namespaced_secret(name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Secret(
                metadata=client.V1ObjectMeta(name=name, namespace=self.namespace, owner_references=[owner_ref]),
                type="Opaque",
                data={"token": base64.b64encode(self.signer.issue(subject).encode()).decode()},
            )
            self.core.create_namespaced_secret(self.namespace, body)
            return name
        refs = [self.api_client.sanitize_for_serialization(r) for r in secret.metadata.owner_references or []]
        patch = {"metadata": {"ownerReferences": with_controller_reference(refs, owner_ref)}}
        token = base64.b64decode((secret.data or {}).get("token") or "").decode()
        try:
            self.signer.verify(token)
        except TokenError:
            patch["data"] = {"token": base64.b64encode(self.signer.issue(subject).encode()).decode()}
        if patch["metadata"]["ownerReferences"] != refs or "data" in patch:
            self.core.patch_namespaced_secret(name, self.namespace, patch)
        return name

    def reconcile_client(self, jclient: dict) -> None:
        uid = jclient["metadata"]["uid"]
        status = jclient.get("status") or {}
        if uid in self._credentials_ensured and status.get("credential") and status.get("endpoint") == self.endpoint:
            return
        secret = self.ensure_credential(jclient, "Client")
        self._credentials_ensured.add(uid)
        wanted = {"credential": {"name": secret}, "endpoint": self.endpoint}
        if {k: status.get(k) for k in wanted} != wanted:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, "clients", jclient["metadata"]["name"], {"status": wanted})

    # -- exporters -----------------------------------------------------------
    def reconcile_exporter(self, exporter: dict, leases: list[dict]) -> None:
        meta = exporter["metadata"]
        if meta.get("deletionTimestamp"):
            return
        old = exporter.get("status") or {}
        status = {key: old.get(key) for key in ("credential", "leaseRef", "endpoint", "exporterStatus",
                                                 "statusMessage")}
        conditions = [dict(c) for c in old.get("conditions") or ()]
        if meta["uid"] not in self._credentials_ensured or not old.get("credential"):
            status["credential"] = {"name": self.ensure_credential(exporter, "Exporter")}
            self._credentials_ensured.add(meta["uid"])
        status["leaseRef"] = None
        for lease in leases:
            lstatus = lease.get("status") or {}
            if (is_active_lease(lease) and not lstatus.get("ended")
                    and (lstatus.get("exporterRef") or {}).get("name") == meta["name"]):
                status["leaseRef"] = {"name": lease["metadata"]["name"]}
        self._online_conditions(exporter, status, conditions)
        status["endpoint"] = self.endpoint
        status["conditions"] = conditions
        patch = {k: v for k, v in status.items() if v != old.get(k)}
        if patch:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, "exporters", meta["name"], {"status": patch})

    def _online_conditions(self, exporter: dict, status: dict, conditions: list) -> None:
        generation = exporter["metadata"].get("generation")
        old = exporter.get("status") or {}
        last_seen = parse_time(old.get("lastSeen"))
        if last_seen is None:
            set_condition(conditions, "Online", False, "Seen", "Never seen", generation)
            status["statusMessage"] = "Never seen"
        elif now_utc() - last_seen > self.online_timeout:
            set_condition(conditions, "Online", False, "Seen", "Last seen more than 1 minute ago", generation)
            if status.get("exporterStatus") != STATUS_OFFLINE:
                status["exporterStatus"] = STATUS_OFFLINE
                status["statusMessage"] = "Connection lost - last seen more than 1 minute ago"
        elif status.get("exporterStatus") == STATUS_OFFLINE:
            set_condition(conditions, "Online", False, "Offline", status.get("statusMessage") or "", generation)
        else:
            set_condition(conditions, "Online", True, "Seen", "Last seen less than 1 minute ago", generation)
            self._requeue((last_seen + self.online_timeout - now_utc()).total_seconds() + 1)
        if old.get("devices") is None:
            set_condition(conditions, "Registered", False, "Unregister", "", generation)
        else:
            set_condition(conditions, "Registered", True, "Register", "", generation)

    # -- leases --------------------------------------------------------------
    def reconcile_lease(self, lease: dict, exporters: dict, leases: list, policies: list,
                        clients: dict) -> float | None:
        """One reconcile of a Lease; returns when to look again (seconds) or None."""
        status = dict(lease.get("status") or {})
        status.setdefault("ended", False)
        status["conditions"] = [dict(c) for c in status.get("conditions") or ()]
        requeue = None
        if not status["ended"] and not status.get("exporterRef"):
            requeue = self._match(lease, status, exporters, leases, policies, clients)
        if status.get("exporterRef") and not status.get("beginTime"):
            status["beginTime"] = format_time(now_utc())
            set_condition(status["conditions"], "Ready", True, "Ready", "An exporter has been acquired for the client")
        ended_requeue = self._reconcile_ended(lease, status)
        if ended_requeue is not None:
            requeue = ended_requeue if requeue is None else min(requeue, ended_requeue)
        # A full update, as the controller's Status().Update: a stale read is a 409.
        if status != (lease.get("status") or {}):
            body = dict(lease)
            body["status"] = status
            lease = self.custom.replace_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, "leases", lease["metadata"]["name"], body)
            # The controller reconciles one Lease at a time and reads the others
            # afresh each time, so a Lease assigned in this pass holds its
            # Exporter for the Leases after it.
            for index, other in enumerate(leases):
                if other["metadata"]["name"] == lease["metadata"]["name"]:
                    leases[index] = lease
        metadata = lease["metadata"]
        labels = dict(metadata.get("labels") or {})
        refs = list(metadata.get("ownerReferences") or [])
        if status["ended"]:
            labels[LEASE_ENDED_LABEL] = "true"
        exporter = exporters.get((status.get("exporterRef") or {}).get("name"))
        if exporter is not None:
            refs = with_controller_reference(refs, controller_reference(exporter, "Exporter"))
        if labels != (metadata.get("labels") or {}) or refs != (metadata.get("ownerReferences") or []):
            body = dict(lease)
            body["metadata"] = {**metadata, "labels": labels, "ownerReferences": refs}
            self.custom.replace_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "leases", metadata["name"], body)
        return requeue

    def _match(self, lease, status, exporters, leases, policies, clients) -> float | None:
        spec = lease.get("spec") or {}
        conditions = status["conditions"]
        begin = parse_time(spec.get("beginTime"))
        if begin is not None and begin > now_utc():
            return (begin - now_utc()).total_seconds()
        selector = spec.get("selector") or {}
        requested = (spec.get("exporterRef") or {}).get("name")
        if selector_is_empty(selector) and not requested:
            set_condition(conditions, "Invalid", True, "InvalidSelector",
                          "The selector for the lease is empty, a selector is required")
            return None
        if requested:
            exporter = exporters.get(requested)
            if exporter is None:
                set_condition(conditions, "Unsatisfiable", True, "ExporterNotFound",
                              f"Requested exporter {requested} was not found")
                return None
            if not selector_is_empty(selector) and not selector_matches(selector, exporter["metadata"].get("labels")):
                set_condition(conditions, "Unsatisfiable", True, "SelectorMismatch",
                              f"Requested exporter {requested} does not match selector")
                return None
            if not is_enabled(exporter) and not spec.get("allowDisabled"):
                set_condition(conditions, "Unsatisfiable", True, "ExporterDisabled",
                              f"Requested exporter {requested} is disabled")
                return None
            matching = [exporter]
        else:
            listed = [e for e in exporters.values() if selector_matches(selector, e["metadata"].get("labels"))]
            matching = [e for e in listed if is_enabled(e)]
            if not matching and listed:
                set_condition(conditions, "Unsatisfiable", True, "AllDisabled",
                              f"All {len(listed)} exporters matching the selector are disabled")
                return None
        approved = self._approve(lease, matching, policies, clients)
        if not approved:
            set_condition(conditions, "Unsatisfiable", True, "NoAccess",
                          f"While there are {len(matching)} exporters matching the selector, none of them "
                          "are approved by any policy for your client")
            return None
        online = [(e, p) for e, p in approved if condition_true(e, "Registered") and condition_true(e, "Online")]
        if not online:
            set_condition(conditions, "Pending", True, "Offline",
                          f"While there are {len(approved)} available exporters (i.e. "
                          f"{approved[0][0]['metadata']['name']}), none of them are online")
            return self._pending_requeue(status)
        holders = {}
        for other in leases:
            ostatus = other.get("status") or {}
            if is_active_lease(other) and ostatus.get("exporterRef"):
                holders[ostatus["exporterRef"]["name"]] = other
        online.sort(key=lambda ep: (ep[0]["metadata"]["name"] in holders, bool(ep[1].get("spotAccess")),
                                    -int(ep[1].get("priority") or 0), ep[0]["metadata"]["name"]))
        if online[0][1].get("spotAccess"):
            set_condition(conditions, "Unsatisfiable", True, "SpotAccess",
                          "The only possible exporters are under spot access, but spot access is still "
                          "not implemented")
            return None
        free = [(e, p) for e, p in online if e["metadata"]["name"] not in holders]
        if not free:
            set_condition(conditions, "Pending", True, "NotAvailable",
                          f"There are {len(online)} approved exporters, (i.e. {online[0][0]['metadata']['name']}) "
                          "but all of them are already leased")
            return self._pending_requeue(status)
        ready = [(e, p) for e, p in free
                 if (e.get("status") or {}).get("exporterStatus") in (STATUS_AVAILABLE, STATUS_UNSPECIFIED, None, "")]
        if not ready:
            set_condition(conditions, "Pending", True, "NotReady",
                          f"There are {len(free)} online exporters, but none are ready (still cleaning up "
                          "previous lease)")
            return self._pending_requeue(status)
        exporter, policy = ready[0]
        status["priority"] = int(policy.get("priority") or 0)
        status["spotAccess"] = bool(policy.get("spotAccess"))
        status["exporterRef"] = {"name": exporter["metadata"]["name"]}
        return None

    @staticmethod
    def _pending_requeue(status: dict) -> float:
        pending = next((c for c in status["conditions"] if c["type"] == "Pending"), None)
        since = parse_time((pending or {}).get("lastTransitionTime"))
        if since is None:
            return 1.0
        elapsed = (now_utc() - since).total_seconds()
        backoff = 1.0
        while backoff < MAX_PENDING_REQUEUE and backoff < elapsed:
            backoff *= 2
        return min(backoff, MAX_PENDING_REQUEUE)

    def _approve(self, lease, matching, policies, clients) -> list[tuple[dict, dict]]:
        if not policies:
            return [(e, {"priority": 0, "spotAccess": False}) for e in matching]
        spec = lease.get("spec") or {}
        jclient = clients.get((spec.get("clientRef") or {}).get("name"))
        if jclient is None:
            raise LookupError(f"client {(spec.get('clientRef') or {}).get('name')!r} of lease "
                              f"{lease['metadata']['name']!r} not found")
        client_labels = jclient["metadata"].get("labels") or {}
        requested = parse_duration(spec.get("duration"))
        if requested is None and spec.get("beginTime") and spec.get("endTime"):
            requested = parse_time(spec["endTime"]) - parse_time(spec["beginTime"])
        approved = []
        for exporter in matching:
            for policy in policies:
                pspec = policy.get("spec") or {}
                if not selector_matches(pspec.get("exporterSelector"), exporter["metadata"].get("labels")):
                    continue
                for rule in pspec.get("policies") or ():
                    for source in rule.get("from") or ():
                        if not selector_matches(source.get("clientSelector"), client_labels):
                            continue
                        maximum = parse_duration(rule.get("maximumDuration"))
                        if maximum is not None and (requested or timedelta()) > maximum:
                            continue
                        approved.append((exporter, rule))
        return approved

    def _reconcile_ended(self, lease: dict, status: dict) -> float | None:
        if status["ended"]:
            return None
        spec = lease.get("spec") or {}
        now = now_utc()
        if condition_true(status_holder := {"status": status}, "Unsatisfiable") or condition_true(
                status_holder, "Invalid"):
            status["ended"] = True
            status["endTime"] = format_time(now)
            return None
        if spec.get("release"):
            set_condition(status["conditions"], "Ready", False, "Released", "The lease was marked for release")
            status["ended"] = True
            status["endTime"] = format_time(now)
            return None
        begin = parse_time(status.get("beginTime"))
        if begin is None:
            return None
        duration = parse_duration(spec.get("duration"))
        if spec.get("endTime"):
            expiration = parse_time(spec["endTime"])
        elif spec.get("beginTime") and duration is not None:
            expiration = parse_time(spec["beginTime"]) + duration
        elif duration is not None:
            expiration = begin + duration
        else:
            expiration = begin
        if expiration < now:
            set_condition(status["conditions"], "Ready", False, "Expired", "The lease has expired")
            status["ended"] = True
            status["endTime"] = format_time(now)
            return None
        return (expiration - now).total_seconds()
