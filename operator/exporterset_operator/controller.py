"""Wires the informers, the event → ExporterSet mapping, the work queue and
the workers together, and says whether they are ready and alive."""

from __future__ import annotations

import logging
import threading
import time

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import objects as k8s_objects
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import controller_ca
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import permissions as pool_permissions
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.selectors import (
    selector_matches,
)

from .backends import BackendRuns
from .config_inputs import ConfigInputs
from .informer import Informer, Resource
from .keys import CLASS_KIND, POLICY_KIND, ClassKey, PolicyKey, SetKey
from .metrics import Metrics
from .reconciler import Reconciler
from .results import ReconcileError, RequeueAfter, TerminalError
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

SET_LABEL_SELECTOR = constants.LABEL_EXPORTER_SET
# Work-queue keys are typed (keys.py): SetKey, ClassKey, PolicyKey. The
# kinds the class and policy keys carry:
CLASS_KEY = CLASS_KIND
POLICY_KEY = POLICY_KIND

RESOURCES = (
    *(Resource(gvr.kind, *gvr[:3])
      for gvr in (constants.EXPORTER_SET, constants.VIRTUAL_TARGET_CLASS, constants.EXPORTER, constants.LEASE)),
    # Not installed beside upstream's CRDs: then every set runs with the defaults.
    Resource(constants.EXPORTER_SET_POLICY.kind, *constants.EXPORTER_SET_POLICY[:3], optional=True),
    # Only the Pods the pool made, never the whole namespace. Secrets and
    # ConfigMaps are watched only in the namespaces of Pod-backed pools, and
    # Secrets as metadata only (config_inputs.py).
    Resource(constants.POD.kind, *constants.POD[:3], label_selector=SET_LABEL_SELECTOR),
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
        stuck_reconcile_timeout: float = 600.0,
        watch_silence_timeout: float = 900.0,
        clock=time.monotonic,
        watch_dependent_resources: bool = True,
        backend_workers: int | None = None,
        permissions: pool_permissions.Permissions = pool_permissions.ALL_GRANTED,
    ):
        self.api_client = api_client
        # Kinds the account may not list and watch: their caches stay empty
        # and synced, and nothing asks the API server for them.
        self.unwatched = set() if permissions.on("policies") else {POLICY_KEY}
        self.metrics = metrics
        self.workers = workers
        self.resync_period = resync_period
        # watches.yaml watchDependentResources: whether a change to what the
        # set owns (its Exporters, Pods) reconciles it.
        self.watch_dependent_resources = watch_dependent_resources
        self.stuck_reconcile_timeout = stuck_reconcile_timeout
        self.watch_silence_timeout = watch_silence_timeout
        self.clock = clock
        self.queue = WorkQueue()
        self.caches: dict[str, Informer] = {}
        # A quiet watch is only heard from when the server ends it or sends
        # a bookmark (about once a minute), so the server ends each watch
        # well inside the silence bound: a healthy but idle informer never
        # counts as silent.
        watch_timeout = Informer.watch_timeout
        if watch_silence_timeout:
            watch_timeout = max(1, min(watch_timeout, int(watch_silence_timeout / 2)))
        for resource in RESOURCES:
            informer = Informer(resource, api_client, namespace=namespace, clock=clock,
                                watch_timeout=watch_timeout)
            informer.handlers.append(self._handler_for(resource.kind))
            self.caches[resource.kind] = informer
        self.reconciler: Reconciler = reconciler_factory(self.caches)
        # The inputs of Pod-backed instances' config (token, CA), per pool
        # namespace, started by the set reconciler where it needs them.
        self.config_inputs = ConfigInputs(api_client, self._handler_for, clock=clock)
        if self.reconciler is not None:
            self.reconciler.config_inputs = self.config_inputs
        # The backend lane: playbook runs for Pods, lab hosts and Corellium,
        # off the workers, so no pool decision waits for one; a work queue of
        # its own, with its own backoff for failed runs, handing each set
        # back to the pool loop when its run ends.
        self.backends = BackendRuns(lambda key: self.reconciler.backend_pass(key), self.queue.add,
                                    workers=backend_workers or max(2, workers), clock=clock)
        if self.reconciler is not None:
            self.reconciler.backends = self.backends
        self.metrics.backend_runs.set_function(
            lambda: self.backends.depth() + len(self.backends.in_flight()))
        self._stop = threading.Event()
        # Threads that must live as long as the process: the informers from
        # start_informers(), the workers and the resync from start_workers(),
        # and whatever else the caller adds (the leader election).
        self._threads: list[threading.Thread] = []
        # Worker thread name -> (key, when its reconcile started).
        self._in_flight: dict[str, tuple[tuple[str, str], float]] = {}
        self._in_flight_lock = threading.Lock()

    # -- event mapping ---------------------------------------------------------
    def _handler_for(self, kind: str):
        mapper = {
            "ExporterSet": self._map_set,
            "VirtualTargetClass": self._map_class,
            "Exporter": self._map_exporter,
            "Lease": self._map_lease,
            "Pod": self._map_labelled,
            "ExporterSetPolicy": self._map_policy,
            "Secret": self._map_secret,
            "ConfigMap": self._map_configmap,
        }[kind]

        def handle(event_type: str, obj: dict, previous: dict | None) -> None:
            for key in mapper(obj, previous):
                self.queue.add(key)
            self.metrics.queue_depth.set(self.queue.depth())

        return handle

    def _map_set(self, obj, previous):
        meta = obj["metadata"]
        yield SetKey(meta["namespace"], meta["name"])
        # The class it names (and the one it named before) counts its sets.
        classes = {(s.get("spec") or {}).get("virtualTargetClassName") for s in (obj, previous or {})}
        for class_name in sorted(c for c in classes if c):
            yield ClassKey(meta["namespace"], class_name)
        # A set that comes, goes or changes its selector or template labels:
        # the other sets of its namespace may now collide with it, or no
        # longer (selectors.template_label_conflicts).
        if _claims(obj) != _claims(previous) or meta.get("deletionTimestamp"):
            for exporter_set in self._sets_in(meta["namespace"]):
                if exporter_set["metadata"]["name"] != meta["name"]:
                    yield SetKey(meta["namespace"], exporter_set["metadata"]["name"])
        # A set that comes or goes: the policies naming it say whether they are in force.
        if previous is None or meta.get("deletionTimestamp"):
            for policy in self._policies_naming(meta["namespace"], {meta["name"]}):
                yield PolicyKey(meta["namespace"], policy)

    def _map_policy(self, obj, previous):
        """The set a policy names (and the one it named before a rename),
        the policy itself (its status), and the other policies naming either
        set (a conflict begins or ends)."""
        meta = obj["metadata"]
        namespace = meta["namespace"]
        names = {(p.get("spec") or {}).get("exporterSetName") for p in (obj, previous or {})} - {None, ""}
        for name in sorted(names):
            yield SetKey(namespace, name)
        yield PolicyKey(namespace, meta["name"])
        for other in self._policies_naming(namespace, names):
            if other != meta["name"]:
                yield PolicyKey(namespace, other)

    def _policies_naming(self, namespace, set_names):
        return sorted(p["metadata"]["name"] for p in self.caches[POLICY_KEY].list(namespace)
                      if (p.get("spec") or {}).get("exporterSetName") in set_names)

    def _sets_in(self, namespace):
        return self.caches["ExporterSet"].list(namespace)

    def _map_class(self, obj, previous):
        meta = obj["metadata"]
        yield ClassKey(meta["namespace"], meta["name"])
        for exporter_set in self._sets_in(meta["namespace"]):
            if exporter_set["spec"].get("virtualTargetClassName") == meta["name"]:
                yield SetKey(meta["namespace"], exporter_set["metadata"]["name"])

    def _map_exporter(self, obj, previous):
        meta = obj["metadata"]
        owner = k8s_objects.controller_of(obj, "ExporterSet")
        if owner:
            if self.watch_dependent_resources:
                yield SetKey(meta["namespace"], owner)
            return
        # Any other Exporter can satisfy a pending lease and so change the
        # demand of the sets whose labels that lease asks for.
        if previous is None or _availability(obj) != _availability(previous):
            for exporter_set in self._sets_in(meta["namespace"]):
                yield SetKey(meta["namespace"], exporter_set["metadata"]["name"])

    def _map_lease(self, obj, previous):
        meta = obj["metadata"]
        selector = (obj.get("spec") or {}).get("selector") or {}
        for exporter_set in self._sets_in(meta["namespace"]):
            labels = ((exporter_set["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
            if selector_matches(selector, labels):
                yield SetKey(meta["namespace"], exporter_set["metadata"]["name"])

    def _map_labelled(self, obj, previous):
        meta = obj["metadata"]
        owner = (meta.get("labels") or {}).get(constants.LABEL_EXPORTER_SET)
        if owner and self.watch_dependent_resources:
            yield SetKey(meta["namespace"], owner)

    def _map_secret(self, obj, previous):
        """A credential or config Secret: the set owning its Exporter."""
        meta = obj["metadata"]
        if previous is not None and (previous.get("metadata") or {}).get("resourceVersion") == meta.get(
                "resourceVersion"):
            return
        exporter_name = k8s_objects.controller_of(obj, constants.EXPORTER.kind)
        exporter = self.caches["Exporter"].get(meta["namespace"], exporter_name) if exporter_name else None
        owner = k8s_objects.controller_of(exporter, "ExporterSet") if exporter else None
        if owner:
            yield SetKey(meta["namespace"], owner)

    def _map_configmap(self, obj, previous):
        """The controller CA's ConfigMap: the sets whose class reads it."""
        meta = obj["metadata"]
        namespace = meta["namespace"]
        for exporter_set in self._sets_in(namespace):
            class_name = (exporter_set.get("spec") or {}).get("virtualTargetClassName")
            vclass = self.caches["VirtualTargetClass"].get(namespace, class_name) if class_name else None
            if vclass is not None and controller_ca.configmap_reference(vclass)[0] == meta["name"]:
                yield SetKey(namespace, exporter_set["metadata"]["name"])

    # -- running -----------------------------------------------------------------
    def start_informers(self) -> None:
        for kind, informer in self.caches.items():
            if kind in self.unwatched:
                informer.synced.set()
                continue
            self._threads.append(informer.start())

    def keep_alive(self, thread: threading.Thread) -> None:
        """Count ``thread`` dying as the process being unhealthy."""
        self._threads.append(thread)

    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.caches.values())

    # -- probes --------------------------------------------------------------------
    def readiness(self) -> list[str]:
        """Why the process cannot serve yet (empty: it can). Leadership does
        not matter: a synced follower is a ready standby."""
        unsynced = [kind for kind, informer in self.caches.items() if not informer.synced.is_set()]
        return [f"caches not synced: {', '.join(unsynced)}"] if unsynced else []

    def liveness(self) -> list[str]:
        """Why the process is stuck (empty: it is not): a thread that must run
        has died, a worker has been in one reconcile for longer than
        ``stuck_reconcile_timeout``, or an informer has not heard from the API
        server for longer than ``watch_silence_timeout``. A bound of 0 turns
        its check off."""
        if self._stop.is_set():
            return []
        problems = [f"thread {thread.name} has died" for thread in self._threads if not thread.is_alive()]
        now = self.clock()
        if self.stuck_reconcile_timeout:
            with self._in_flight_lock:
                in_flight = sorted(self._in_flight.items())
            # Every key (keys.py) begins with the namespace and the name.
            # A backend run counts as a reconcile under way: one stuck past the
            # bound makes the process unhealthy too.
            in_flight += sorted((thread, (key, started))
                                for key, (thread, started) in self.backends.in_flight().items())
            for worker, ((namespace, name, *_), started) in in_flight:
                if now - started > self.stuck_reconcile_timeout:
                    problems.append(
                        f"{worker} has been reconciling {namespace}/{name} for {now - started:.0f}s "
                        f"(bound {self.stuck_reconcile_timeout:g}s)")
        if self.watch_silence_timeout:
            for kind, informer in self.caches.items():
                if kind in self.unwatched:
                    continue
                silent = now - informer.last_contact
                if silent > self.watch_silence_timeout:
                    problems.append(
                        f"{kind} informer has not heard from the API server for {silent:.0f}s "
                        f"(bound {self.watch_silence_timeout:g}s)")
        return problems

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
        self._threads.extend(self.backends.start())
        if self.resync_period > 0:  # watches.yaml reconcilePeriod 0: no periodic reconcile
            resync = threading.Thread(target=self._resync, name="resync", daemon=True)
            resync.start()
            self._threads.append(resync)

    def _resync(self) -> None:
        while not self._stop.wait(self.resync_period):
            self.requeue_all()

    def requeue_all(self) -> None:
        """Every set, class and policy of the caches to the queue."""
        for exporter_set in self.caches["ExporterSet"].list():
            meta = exporter_set["metadata"]
            self.queue.add(SetKey(meta["namespace"], meta["name"]))
        for vclass in self.caches["VirtualTargetClass"].list():
            meta = vclass["metadata"]
            self.queue.add(ClassKey(meta["namespace"], meta["name"]))
        for policy in self.caches[POLICY_KEY].list():
            meta = policy["metadata"]
            self.queue.add(PolicyKey(meta["namespace"], meta["name"]))

    def sets_of(self, provisioners: set[str]) -> list[dict]:
        """The cached sets whose class (cached too) is of one of ``provisioners``."""
        found = []
        for exporter_set in self.caches["ExporterSet"].list():
            meta = exporter_set["metadata"]
            class_name = (exporter_set.get("spec") or {}).get("virtualTargetClassName")
            vclass = self.caches["VirtualTargetClass"].get(meta["namespace"], class_name) if class_name else None
            if vclass is not None and (vclass.get("spec") or {}).get("provisioner") in provisioners:
                found.append(exporter_set)
        return found

    def _work(self) -> None:
        worker = threading.current_thread().name
        while not self._stop.is_set():
            key = self.queue.get()
            if key is None:
                return
            started = time.monotonic()
            with self._in_flight_lock:
                self._in_flight[worker] = (key, self.clock())
            path = "error"
            try:
                result = self.reconciler.reconcile(key)
                path = result.path
                self.queue.forget(key)
                if result.requeue_after:
                    self.queue.add_after(key, result.requeue_after)
            except RequeueAfter as exc:
                path = exc.path
                self.queue.forget(key)
                self.queue.add_after(key, exc.delay)
            except TerminalError as exc:
                # Not retried: the object's next change (or the resync) brings it back.
                path = exc.path
                self.queue.forget(key)
                log.warning("reconcile failed terminally",
                            extra={"namespace": key[0], "exporterset": key[1], "error": str(exc)[:500]})
            except Exception as exc:  # the loop must survive anything a reconcile does
                delay = self.queue.add_rate_limited(key)
                extra = {"namespace": key[0], "exporterset": key[1], "error": str(exc)[:500],
                         "retry_in": round(delay, 2)}
                if isinstance(exc, ReconcileError):  # what failed is known
                    path = exc.path
                    log.warning("reconcile failed", extra=extra)
                else:
                    log.exception("reconcile raised", extra=extra)
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
                with self._in_flight_lock:
                    self._in_flight.pop(worker, None)

    def wait_idle(self, timeout: float) -> bool:
        """After ``stop()``: wait up to ``timeout`` seconds for the reconciles
        and backend runs in flight to end. True when none is left."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.name.startswith("worker-"):
                thread.join(max(0.0, deadline - time.monotonic()))
        backends_idle = self.backends.wait_idle(max(0.0, deadline - time.monotonic()))
        with self._in_flight_lock:
            return not self._in_flight and backends_idle

    def stop(self) -> None:
        self._stop.set()
        self.queue.shutdown()
        self.backends.shutdown()
        for informer in self.caches.values():
            informer.stop()
        self.config_inputs.stop()


def _claims(exporter_set: dict | None):
    """What of a set decides whether it collides with another: its selector
    and template labels (None for no set)."""
    if exporter_set is None:
        return None
    spec = exporter_set.get("spec") or {}
    return (spec.get("selector"), ((spec.get("template") or {}).get("metadata") or {}).get("labels"))


def _availability(exporter: dict) -> tuple:
    status = exporter.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return (
        (exporter.get("spec") or {}).get("enabled", True),
        conditions.get("Online"),
        conditions.get("Registered"),
        (status.get("leaseRef") or {}).get("name"),
    )
