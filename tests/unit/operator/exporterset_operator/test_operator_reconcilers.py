"""The operator's reconcilers by kind: typed work-queue keys, the dispatch
on their type, how the controller treats what a reconcile raises
(controller-runtime's terminal error, requeue-after and retry with backoff),
the backend lane's shared state, and a backend run that waits for
credentials on the Exporter cache's events instead of polling it."""

from __future__ import annotations

import copy
import threading
import time

import pytest
from exporterset_operator.backends import BackendRuns
from exporterset_operator.controller import Controller
from exporterset_operator.keys import ClassKey, PolicyKey, SetKey, typed
from exporterset_operator.metrics import Metrics
from exporterset_operator.reconciler import Reconciler
from exporterset_operator.results import ReconcileError, RequeueAfter, Result, TerminalError
from exporterset_operator.set_reconciler import BATCH_WINDOW
from pool_builders import NOW, exporter, exporter_set, target_class


class Store:
    """An informer's cache in memory: get, list and its event handlers."""

    def __init__(self, objects=()):
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.handlers = []
        self.gets = 0

    def get(self, namespace, name):
        self.gets += 1
        return self.objects.get(name)

    def list(self, namespace=None):
        return list(self.objects.values())

    def put(self, obj):
        previous = self.objects.get(obj["metadata"]["name"])
        self.objects[obj["metadata"]["name"]] = obj
        for handler in self.handlers:
            handler("MODIFIED", obj, previous)


def caches(sets=(), classes=(), exporters=()):
    return {"ExporterSet": Store(sets), "VirtualTargetClass": Store(classes), "Exporter": Store(exporters),
            "Lease": Store(), "Pod": Store(), "ExporterSetPolicy": Store()}


def until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"not within {timeout}s")


# -- keys --------------------------------------------------------------------

def test_each_kind_has_its_key_and_no_two_kinds_keys_are_equal():
    assert typed(("lab", "pool")) == SetKey("lab", "pool") and type(typed(("lab", "pool"))) is SetKey
    assert type(typed(("lab", "small", "VirtualTargetClass"))) is ClassKey
    assert type(typed(("lab", "p", "ExporterSetPolicy"))) is PolicyKey
    assert len({SetKey("lab", "x"), ClassKey("lab", "x"), PolicyKey("lab", "x")}) == 3
    # A plain tuple from an older caller coalesces with its typed key in the queue.
    assert {SetKey("lab", "x"), ("lab", "x")} == {("lab", "x")}
    with pytest.raises(ValueError, match="'Pod'"):
        typed(("lab", "x", "Pod"))


def test_the_controller_queues_typed_keys():
    controller = Controller(None, lambda _: None, Metrics(), workers=1, resync_period=0)
    vclass = {**target_class(), "metadata": {"name": "qemu-small", "namespace": "lab"}}
    keys = list(controller._map_set(exporter_set(), None))
    assert [type(k) for k in keys] == [SetKey, ClassKey], keys
    assert [type(k) for k in controller._map_class(vclass, None)] == [ClassKey]


def test_the_reconciler_dispatches_on_the_keys_type():
    reconciler = Reconciler(caches(), None, None, Metrics(), {"qemu.jumpstarter.dev"})
    calls = []
    reconciler.classes.reconcile = lambda key: calls.append(("class", key)) or Result(path="class")
    reconciler.policies.reconcile = lambda key: calls.append(("policy", key)) or Result(path="policy")
    reconciler.reconcile_set = lambda key: calls.append(("set", key)) or Result(path="set")
    for key in (("lab", "a"), ("lab", "a", "VirtualTargetClass"), PolicyKey("lab", "a")):
        reconciler.reconcile(key)
    assert calls == [("set", SetKey("lab", "a")), ("class", ClassKey("lab", "a")), ("policy", PolicyKey("lab", "a"))]
    assert all(type(key) in (SetKey, ClassKey, PolicyKey) for _, key in calls)
    with pytest.raises(TerminalError, match="no reconciler for a key of kind 'Pod'"):
        reconciler.reconcile(("lab", "a", "Pod"))


def test_a_set_whose_class_names_an_unknown_provisioner_is_terminal_once_reported():
    unknown = target_class(provisioner="qemu.example.com")
    the_set = exporter_set()
    the_set["spec"]["virtualTargetClassName"] = unknown["metadata"]["name"]
    reconciler = Reconciler(caches([the_set], [unknown]), None, None, Metrics(), {"qemu.jumpstarter.dev"})
    written = []
    reconciler._apply_in_process = lambda *args, **kwargs: written.append(args) or {}
    with pytest.raises(TerminalError, match="spec.provisioner 'qemu.example.com'") as raised:
        reconciler.reconcile(("lab", the_set["metadata"]["name"]))
    assert raised.value.path == "unusable"
    assert written, "the status saying so is written before the error is raised"


# -- what a reconcile raises -------------------------------------------------

class Scripted:
    """Returns or raises what it is given, once per key."""

    def __init__(self, outcome):
        self.outcome = outcome
        self.calls = 0
        self.done = threading.Event()

    def reconcile(self, key):
        self.calls += 1
        try:
            if isinstance(self.outcome, BaseException):
                raise self.outcome
            return self.outcome
        finally:
            self.done.set()


KEY = SetKey("lab", "pool")


def run_once(outcome, failures_before=0):
    scripted, metrics = Scripted(outcome), Metrics()
    controller = Controller(None, lambda _: scripted, metrics, workers=1, resync_period=0)
    for _ in range(failures_before):
        controller.queue.backoff.when(KEY)
    controller.start_workers()
    try:
        controller.queue.add(KEY)
        assert scripted.done.wait(10)
        until(lambda: not controller._in_flight)
        return controller, metrics
    finally:
        controller.stop()


def counted(metrics, path):
    return metrics.registry.get_sample_value("jumpstarter_exporterset_reconciles_total", {"outcome": path})


def test_a_terminal_error_is_recorded_and_not_retried():
    controller, metrics = run_once(TerminalError("no such provisioner", path="unusable"), failures_before=2)
    assert controller.queue.delayed() == 0 and controller.queue.depth() == 0
    assert controller.queue.backoff.failures(KEY) == 0
    assert counted(metrics, "unusable") == 1


def test_requeue_after_brings_the_key_back_after_its_delay_without_backoff():
    controller, metrics = run_once(RequeueAfter(42.0, path="teardown"), failures_before=2)
    assert controller.queue.delayed() == 1
    assert 41.0 < controller.queue._waiting_until[KEY] - time.monotonic() <= 42.0
    assert controller.queue.backoff.failures(KEY) == 0
    assert counted(metrics, "teardown") == 1


def test_a_reconcile_error_is_retried_with_backoff_under_its_path():
    controller, metrics = run_once(ReconcileError("409 Conflict", path="inprocess"))
    assert controller.queue.delayed() == 1
    assert controller.queue.backoff.failures(KEY) == 1
    assert counted(metrics, "inprocess") == 1


def test_any_other_exception_is_retried_with_backoff_as_an_error():
    controller, metrics = run_once(RuntimeError("boom"))
    assert controller.queue.backoff.failures(KEY) == 1
    assert counted(metrics, "error") == 1


# -- the backend lane's shared state ----------------------------------------------

def test_a_failed_run_holds_the_set_for_its_backoff_and_a_success_releases_it():
    outcomes = [ReconcileError("rc 2", path="playbook"), None]

    def run(key):
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    lane = BackendRuns(run)
    assert (lane.retry_in(KEY) or 0) <= 0 and not lane.failed(KEY)
    lane.run_now(KEY)
    assert lane.retry_in(KEY) > 0 and lane.failures() == {KEY: "rc 2"}
    assert not lane.submit(KEY), "held while its backoff lasts"
    lane.run_now(KEY)
    assert (lane.retry_in(KEY) or 0) <= 0 and lane.failures() == {}
    assert lane.backoff.failures(KEY) == 0
    with lane.acting_on(KEY, {"pool-0"}):
        assert lane.acting(KEY) == {"pool-0"} and lane.acting(SetKey("lab", "other")) == set()
    assert lane.acting(KEY) == set()


# -- a backend run waits for credentials on events ----------------------------------

def deleted_set_without_our_finalizer():
    """A set whose backend run observes it and then does nothing: it is
    being deleted and carries no finalizer of ours."""
    the_set = exporter_set()
    the_set["metadata"]["deletionTimestamp"] = NOW
    return the_set


def test_a_backend_run_waiting_for_a_credential_wakes_on_the_exporters_event():
    pool_0 = exporter("pool-0", ready=False)
    stores = caches([deleted_set_without_our_finalizer()], [target_class()], [pool_0])
    reconciler = Reconciler(stores, None, None, Metrics(), {"qemu.jumpstarter.dev"})
    issued = copy.deepcopy(pool_0)
    issued["status"]["credential"] = {"name": "pool-0-credential"}
    timer = threading.Timer(0.2, stores["Exporter"].put, (issued,))
    started = time.monotonic()
    timer.start()
    reconciler.run_backends(("lab", "rpi4"))
    elapsed = time.monotonic() - started
    timer.join()
    assert 0.15 < elapsed < BATCH_WINDOW - 0.3, elapsed


def test_a_backend_run_waiting_for_a_credential_does_not_poll_the_caches():
    """Nor does an Exporter's event in another namespace, or of another set
    of its namespace, wake it."""
    stores = caches([deleted_set_without_our_finalizer()], [target_class()], [exporter("pool-0", ready=False)])
    reconciler = Reconciler(stores, None, None, Metrics(), {"qemu.jumpstarter.dev"})
    elsewhere = exporter("pool-0", ready=False)
    elsewhere["metadata"]["namespace"] = "other"
    another_sets = exporter("other-0", ready=False, owner="other")
    timer = threading.Timer(0.2, lambda: [h("MODIFIED", e, None) for h in stores["Exporter"].handlers
                                          for e in (elsewhere, another_sets)])
    started = time.monotonic()
    timer.start()
    reconciler.run_backends(SetKey("lab", "rpi4"))
    timer.join()
    assert time.monotonic() - started >= BATCH_WINDOW - 0.05
    # One look at the start and one when the window ends: nothing between.
    assert stores["ExporterSet"].gets == 2, stores["ExporterSet"].gets


def test_a_backend_run_of_a_key_that_is_no_sets_is_terminal():
    reconciler = Reconciler(caches(), None, None, Metrics(), {"qemu.jumpstarter.dev"})
    with pytest.raises(TerminalError, match="not an ExporterSet") as raised:
        reconciler.backend_pass(ClassKey("lab", "small"))
    assert raised.value.path == "backends"
    reconciler.run_backends(ClassKey("lab", "small"))
    assert "not an ExporterSet" in reconciler._backend_failure[ClassKey("lab", "small")]
    assert reconciler.backends.retry_in(ClassKey("lab", "small")) is None
