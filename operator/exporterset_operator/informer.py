"""List-then-watch caches over the Kubernetes API.

The streaming, bookmarks and resourceVersion tracking are the kubernetes
client's ``watch.Watch``; this module adds what an informer needs on top:
a local cache of plain dicts, a relist when the API answers 410 Gone, and a
reconnect with capped exponential backoff and jitter on any other failure.
"""

from __future__ import annotations

import itertools
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import bounded_json
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.pool_index import Snapshot
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import backoff_delay
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)

ObjectKey = tuple[str, str]  # (namespace, name)
Handler = Callable[[str, dict, dict | None], None]  # (event type, object, previous)
# Revisions of every cache in the process: one counter, so none is reused.
_revision_counter = itertools.count(1)


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API and how to list it."""

    kind: str
    group: str
    version: str
    plural: str
    label_selector: str | None = None
    # A kind whose CRD may not be installed (ExporterSetPolicy beside
    # upstream's CRDs): while the API server says 404 the cache is synced and
    # empty, and the kind is looked for again with backoff.
    optional: bool = False
    # Only the objects' metadata is asked for and kept (Secrets: their
    # version, never their data).
    metadata_only: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def key_of(obj: dict) -> ObjectKey:
    meta = obj.get("metadata", {})
    return meta.get("namespace", ""), meta["name"]


class _PlainWatch(watch.Watch):
    """The client's watch, handing out events as plain dicts.

    The client's own ``deserialize=False`` skips the decoding step that adds
    ``raw_object``, which its handling of an in-stream ERROR event reads: an
    expired resourceVersion, which kube-apiserver reports in the stream,
    would surface as a KeyError. With no return type the client decodes the
    JSON only, keeps ``raw_object`` and raises an ApiException carrying the
    event's code (410 for an expired resourceVersion).
    """

    def get_return_type(self, func):
        return None

    def unmarshal_event(self, data, return_type):
        """Any depth the API server sends, kept to what the operator reads
        (bounded_json): one deeply nested object must not stop the watch."""
        try:
            event = super().unmarshal_event(data, return_type)
        except RecursionError:
            event = super().unmarshal_event(bounded_json.clip_text(data), return_type)
        if isinstance(event, dict) and isinstance(event.get("object"), (dict, list)):
            bounded_json.clip(event["object"])
        return event


def _slim(obj: dict) -> dict:
    """Drop what the operator never reads, so the cache stays small."""
    meta = obj.get("metadata")
    if meta:
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if annotations:
            annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return obj


# What a metadata-only list and watch accept: the server's PartialObjectMetadata
# (a list, or one object per watch event), plain JSON if it cannot.
_METADATA_ACCEPT = "application/json;as={};g=meta.k8s.io;v=v1,application/json"


def _metadata_of(obj: dict) -> dict:
    """The object's metadata alone, whatever the server sent."""
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": obj.get("metadata") or {}}


@dataclass
class Informer:
    resource: Resource
    api_client: client.ApiClient
    namespace: str | None = None
    handlers: list[Handler] = field(default_factory=list)
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    watch_timeout: int = 300
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._store: dict[ObjectKey, dict] = {}
        # namespace -> the revision of its objects in this cache, given at
        # list() and dropped with any change there, so the next list() gives
        # a new one.
        self._revisions: dict[str, int] = {}
        self._lock = threading.RLock()
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._rng = random.Random()
        self.relists = 0
        # When the API server last answered this informer: a successful list,
        # any watch event (bookmarks included), or a watch it ended on its own
        # timeout. Starts at creation, so a process that never gets through
        # counts as silent from then.
        self.last_contact = self.clock()

    def heard(self) -> None:
        self.last_contact = self.clock()

    def silent_for(self) -> float:
        return self.clock() - self.last_contact

    # -- cache reads ---------------------------------------------------------
    def get(self, namespace: str, name: str) -> dict | None:
        with self._lock:
            return self._store.get((namespace, name))

    def list(self, namespace: str | None = None) -> list[dict]:
        """The objects of ``namespace`` (all, without one). A namespace's
        list is a ``Snapshot`` carrying the cache's revision of that
        namespace, which changes with every event in it, so the planner
        knows an unchanged pool without reading each object's version."""
        with self._lock:
            if namespace is None:
                return list(self._store.values())
            revision = self._revisions.get(namespace)
            if revision is None:
                revision = self._revisions[namespace] = next(_revision_counter)
            return Snapshot((obj for (ns, _), obj in self._store.items() if ns == namespace), revision)

    def items(self) -> Iterable[dict]:
        return self.list()

    def __len__(self) -> int:
        with self._lock:
            return len(self._store)

    # -- API plumbing ----------------------------------------------------------
    def _list_call(self, watching: bool = False) -> tuple[Callable[..., Any], dict]:
        res = self.resource
        kwargs: dict[str, Any] = {}
        if res.label_selector:
            kwargs["label_selector"] = res.label_selector
        if res.metadata_only:
            kwargs["_headers"] = {"Accept": _METADATA_ACCEPT.format(
                "PartialObjectMetadata" if watching else "PartialObjectMetadataList")}
        if res.group:
            api = client.CustomObjectsApi(self.api_client)
            if self.namespace:
                return api.list_namespaced_custom_object, dict(
                    group=res.group, version=res.version, namespace=self.namespace,
                    plural=res.plural, **kwargs)
            return api.list_cluster_custom_object, dict(
                group=res.group, version=res.version, plural=res.plural, **kwargs)
        core = client.CoreV1Api(self.api_client)
        # The client's names: ConfigMap -> config_map.
        kind = re.sub(r"(?<!^)(?=[A-Z])", "_", res.kind).lower()
        if self.namespace:
            return getattr(core, f"list_namespaced_{kind}"), dict(
                namespace=self.namespace, **kwargs)
        return getattr(core, f"list_{kind}_for_all_namespaces"), kwargs

    def _relist(self) -> str:
        func, kwargs = self._list_call()
        response = func(_preload_content=False, **kwargs)
        body = bounded_json.loads(response.data)
        # A PartialObjectMetadataList of nothing has "items": null.
        fresh = {key_of(obj): self._kept(obj) for obj in body.get("items") or []}
        with self._lock:
            old = self._store
            self._store = fresh
            # A relist may change any namespace: each gets a new revision.
            self._revisions.clear()
        self.relists += 1
        self.heard()
        for key, obj in fresh.items():
            previous = old.get(key)
            if previous is None:
                self._dispatch("ADDED", obj, None)
            elif previous["metadata"].get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                self._dispatch("MODIFIED", obj, previous)
        for key, obj in old.items():
            if key not in fresh:
                self._dispatch("DELETED", obj, obj)
        self.synced.set()
        return body["metadata"]["resourceVersion"]

    def _apply(self, event_type: str, obj: dict) -> None:
        key = key_of(obj)
        obj = self._kept(obj)
        with self._lock:
            previous = self._store.get(key)
            if event_type == "DELETED":
                self._store.pop(key, None)
            else:
                self._store[key] = obj
            self._revisions.pop(key[0], None)
        self._dispatch(event_type, obj, previous)

    def _kept(self, obj: dict) -> dict:
        return _slim(_metadata_of(obj) if self.resource.metadata_only else obj)

    def _dispatch(self, event_type: str, obj: dict, previous: dict | None) -> None:
        for handler in self.handlers:
            try:
                handler(event_type, obj, previous)
            except Exception:  # a broken handler must not stop the watch
                log.exception("event handler failed", extra={"kind": self.resource.kind})

    def run(self) -> None:
        """List and watch until ``stop()``; never raises."""
        failures = 0
        resource_version: str | None = None
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._relist()
                func, kwargs = self._list_call(watching=True)
                self._watch = _PlainWatch()
                for event in self._watch.stream(
                    func,
                    resource_version=resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=self.watch_timeout,
                    **kwargs,
                ):
                    if event is None:
                        # A line that is no JSON: the stream cannot be
                        # trusted any more; relist.
                        raise ValueError("undecodable watch event")
                    failures = 0
                    self.heard()
                    event_type = event["type"]
                    obj = event["object"]
                    if event_type == "BOOKMARK":
                        resource_version = obj["metadata"]["resourceVersion"]
                        continue
                    if event_type == "ERROR":
                        raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                    resource_version = obj["metadata"]["resourceVersion"]
                    self._apply(event_type, obj)
                    if self._stop.is_set():
                        break
                else:
                    # The server closed the watch at timeout_seconds: it is
                    # there, just quiet.
                    self.heard()
            except ApiException as exc:
                if exc.status == 410:
                    log.info("watch expired; relisting", extra={"kind": self.resource.kind})
                    resource_version = None
                    continue
                if exc.status == 404 and self.resource.optional:
                    self._absent(failures == 0)
                    resource_version = None
                    failures += 1
                    self._stop.wait(backoff_delay(failures, self.backoff_base, self.backoff_cap,
                                                  jitter=self._rng.uniform(0, 1), floor=0.5))
                    continue
                failures += 1
                self._sleep_backoff(failures, exc)
            except Exception as exc:  # connection refused, reset, timeouts
                failures += 1
                self._sleep_backoff(failures, exc)
                # After an outage (an API server restart, say) what the
                # cache saw may no longer be what the server holds, and its
                # resourceVersion may have left the server's window; a fresh
                # list is the one reliable way back, so take it.
                resource_version = None

    def _absent(self, first: bool) -> None:
        """An optional kind the API server does not serve: an empty, synced cache."""
        with self._lock:
            old = self._store
            self._store = {}
            self._revisions.clear()
        for obj in old.values():
            self._dispatch("DELETED", obj, obj)
        self.heard()
        if first:
            log.info("kind not served (its CRD is not installed): taken as none; looked for again",
                     extra={"kind": self.resource.kind})
        self.synced.set()

    def _sleep_backoff(self, failures: int, exc: BaseException) -> None:
        if self._stop.is_set():
            return
        delay = backoff_delay(failures, self.backoff_base, self.backoff_cap, jitter=self._rng.uniform(0, 1), floor=0.5)
        log.warning(
            "watch failed; reconnecting",
            extra={"kind": self.resource.kind, "error": str(exc)[:300], "retry_in": round(delay, 2)},
        )
        self._stop.wait(delay)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name=f"informer-{self.resource.kind}", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
