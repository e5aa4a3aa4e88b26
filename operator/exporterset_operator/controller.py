"""Wires the informers, the event → ExporterSet mapping, the work queue and
the workers together."""

from __future__ import annotations

import logging
import threading
import time

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import (
    constants,
    k8s_objects,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.selectors import (
    selector_matches,
)

from .informer import Informer, Resource
from .metrics import Metrics
from .reconciler import Reconciler
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

SET_LABEL_SELECTOR = constants.LABEL_EXPORTER_SET

RESOURCES = (
    Resource("ExporterSet", constants.GROUP, "v1alpha1", "exportersets"),
    Resource("VirtualTargetClass", constants.GROUP, "v1alpha1", "virtualtargetclasses"),
    Resource("Exporter", "jumpstarter.dev", "v1alpha1", "exporters"),
    Resource("Lease", "jumpstarter.dev", "v1alpha1", "leases"),
    # Only the Pods and Secrets the pool made, never the whole namespace.
    Resource("Pod", "", "v1", "pods", label_selector=SET_LABEL_SELECTOR),
    Resource("Secret", "", "v1", "secrets", label_selector=SET_LABEL_SELECTOR),
)


class Controller:
    def __init__(
        self,
        api_client,
        reconciler_factory,
        metrics: Metrics,
        workers: int,
        namespace: str | None = None,
        resync_period: float = 300.0,
    ):
        self.api_client = api_client
        self.metrics = metrics
        self.workers = workers
        self.resync_period = resync_period
        self.queue = WorkQueue()
        self.caches: dict[str, Informer] = {}
        for resource in RESOURCES:
            informer = Informer(resource, api_client, namespace=namespace)
            informer.handlers.append(self._handler_for(resource.kind))
            self.caches[resource.kind] = informer
        self.reconciler: Reconciler = reconciler_factory(self.caches)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- event mapping ---------------------------------------------------------
    def _handler_for(self, kind: str):
        mapper = {
            "ExporterSet": self._map_set,
            "VirtualTargetClass": self._map_class,
            "Exporter": self._map_exporter,
            "Lease": self._map_lease,
            "Pod": self._map_labelled,
            "Secret": self._map_labelled,
        }[kind]

        def handle(event_type: str, obj: dict, previous: dict | None) -> None:
            for key in mapper(obj, previous):
                self.queue.add(key)
            self.metrics.queue_depth.set(self.queue.depth())

        return handle

    @staticmethod
    def _map_set(obj, previous):
        meta = obj["metadata"]
        yield meta["namespace"], meta["name"]

    def _sets_in(self, namespace):
        return self.caches["ExporterSet"].list(namespace)

    def _map_class(self, obj, previous):
        meta = obj["metadata"]
        for exporter_set in self._sets_in(meta["namespace"]):
            if exporter_set["spec"].get("virtualTargetClassName") == meta["name"]:
                yield meta["namespace"], exporter_set["metadata"]["name"]

    def _map_exporter(self, obj, previous):
        meta = obj["metadata"]
        owner = k8s_objects.controller_of(obj, "ExporterSet")
        if owner:
            yield meta["namespace"], owner
            return
        # Any other Exporter can satisfy a pending lease and so change the
        # demand of the sets whose labels that lease asks for.
        if previous is None or _availability(obj) != _availability(previous):
            for exporter_set in self._sets_in(meta["namespace"]):
                yield meta["namespace"], exporter_set["metadata"]["name"]

    def _map_lease(self, obj, previous):
        meta = obj["metadata"]
        selector = (obj.get("spec") or {}).get("selector") or {}
        for exporter_set in self._sets_in(meta["namespace"]):
            labels = ((exporter_set["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
            if selector_matches(selector, labels):
                yield meta["namespace"], exporter_set["metadata"]["name"]

    @staticmethod
    def _map_labelled(obj, previous):
        meta = obj["metadata"]
        owner = (meta.get("labels") or {}).get(constants.LABEL_EXPORTER_SET)
        if owner:
            yield meta["namespace"], owner

    # -- running -----------------------------------------------------------------
    def start_informers(self) -> None:
        for informer in self.caches.values():
            self._threads.append(informer.start())

    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.caches.values())

    def wait_synced(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for informer in self.caches.values():
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not informer.synced.wait(remaining):
                return False
        return True

    def start_workers(self) -> None:
        for index in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"worker-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        resync = threading.Thread(target=self._resync, name="resync", daemon=True)
        resync.start()
        self._threads.append(resync)

    def _resync(self) -> None:
        while not self._stop.wait(self.resync_period):
            for exporter_set in self.caches["ExporterSet"].list():
                meta = exporter_set["metadata"]
                self.queue.add((meta["namespace"], meta["name"]))

    def _work(self) -> None:
        while not self._stop.is_set():
            key = self.queue.get()
            if key is None:
                return
            started = time.monotonic()
            path = "error"
            try:
                result = self.reconciler.reconcile(key)
                path = result.path
                if result.error:
                    delay = self.queue.add_rate_limited(key)
                    log.warning(
                        "reconcile failed",
                        extra={"namespace": key[0], "exporterset": key[1],
                               "error": result.error[:500], "retry_in": round(delay, 2)},
                    )
                else:
                    self.queue.forget(key)
                    if result.requeue_after:
                        self.queue.add_after(key, result.requeue_after)
            except Exception as exc:  # the loop must survive anything a reconcile does
                delay = self.queue.add_rate_limited(key)
                log.exception(
                    "reconcile raised",
                    extra={"namespace": key[0], "exporterset": key[1], "error": str(exc)[:500],
                           "retry_in": round(delay, 2)},
                )
            finally:
                elapsed = time.monotonic() - started
                self.metrics.reconcile_duration.labels(path).observe(elapsed)
                self.metrics.reconciles.labels(path).inc()
                if path == "fastpath":
                    self.metrics.fast_path_hits.inc()
                self.metrics.queue_depth.set(self.queue.depth())
                log.debug("reconciled", extra={"namespace": key[0], "exporterset": key[1],
                                               "path": path, "seconds": round(elapsed, 4)})
                self.queue.done(key)

    def stop(self) -> None:
        self._stop.set()
        self.queue.shutdown()
        for informer in self.caches.values():
            informer.stop()


def _availability(exporter: dict) -> tuple:
    status = exporter.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return (
        (exporter.get("spec") or {}).get("enabled", True),
        conditions.get("Online"),
        conditions.get("Registered"),
        (status.get("leaseRef") or {}).get("name"),
    )
