"""/readyz and /healthz of the operator: what each one checks, on a
controller whose clock the test moves."""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from exporterset_operator.__main__ import duration, parse_args
from exporterset_operator.controller import RESOURCES, Controller
from exporterset_operator.informer import Informer, Resource
from exporterset_operator.metrics import Metrics, serve
from exporterset_operator.reconciler import Result

KINDS = [resource.kind for resource in RESOURCES]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class HeldReconciler:
    """Reconciles only when released; raises what it is told to."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.raise_: BaseException | None = None

    def reconcile(self, key):
        self.entered.set()
        if self.raise_ is not None:
            raise self.raise_
        self.release.wait(30)
        return Result()


def until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"not within {timeout}s")


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def reconciler():
    held = HeldReconciler()
    yield held
    held.release.set()


@pytest.fixture
def controller(clock, reconciler):
    made = Controller(None, lambda caches: reconciler, Metrics(), workers=1,
                      stuck_reconcile_timeout=600, watch_silence_timeout=900, clock=clock)
    yield made
    made.stop()


def test_not_ready_until_every_cache_has_synced_and_the_body_names_the_rest(controller):
    assert controller.readiness() == [f"caches not synced: {', '.join(KINDS)}"]
    for kind in KINDS[:-1]:
        controller.caches[kind].synced.set()
    assert controller.readiness() == [f"caches not synced: {KINDS[-1]}"]
    controller.caches[KINDS[-1]].synced.set()
    assert controller.readiness() == []


def test_ready_without_workers_a_follower_is_a_ready_standby(controller):
    for informer in controller.caches.values():
        informer.synced.set()
    # No start_workers(): leadership plays no part in readiness.
    assert controller.readiness() == []
    assert controller.liveness() == []


def test_a_reconcile_longer_than_the_bound_is_unhealthy_until_it_ends(controller, reconciler, clock):
    controller.start_workers()
    controller.queue.add(("lab", "pool"))
    assert reconciler.entered.wait(5)
    clock.now += 600
    assert controller.liveness() == []  # at the bound, not past it
    clock.now += 1
    assert controller.liveness() == ["worker-0 has been reconciling lab/pool for 601s (bound 600s)"]
    reconciler.release.set()
    until(lambda: controller.liveness() == [])


def test_a_bound_of_zero_turns_a_check_off(clock, reconciler):
    controller = Controller(None, lambda caches: reconciler, Metrics(), workers=1,
                            stuck_reconcile_timeout=0, watch_silence_timeout=0, clock=clock)
    try:
        controller.start_workers()
        controller.queue.add(("lab", "pool"))
        assert reconciler.entered.wait(5)
        clock.now += 10**6
        assert controller.liveness() == []
    finally:
        controller.stop()


class WorkerDeath(BaseException):
    """Escapes the worker's ``except Exception``, as nothing should."""


def test_a_dead_worker_thread_is_unhealthy(controller, reconciler, monkeypatch):
    monkeypatch.setattr(threading, "excepthook", lambda args: None)
    reconciler.raise_ = WorkerDeath()
    controller.start_workers()
    controller.queue.add(("lab", "pool"))
    problems = until(controller.liveness)
    assert "thread worker-0 has died" in problems


def test_a_dead_thread_the_caller_keeps_alive_is_unhealthy(controller):
    elector = threading.Thread(target=lambda: None, name="leader-election")
    elector.start()
    elector.join()
    controller.keep_alive(elector)
    assert controller.liveness() == ["thread leader-election has died"]


def test_informers_silent_for_longer_than_the_bound_are_unhealthy(controller, clock):
    clock.now += 901
    problems = controller.liveness()
    assert problems == [
        f"{kind} informer has not heard from the API server for 901s (bound 900s)" for kind in KINDS
    ]
    for informer in controller.caches.values():
        informer.heard()
    assert controller.liveness() == []


@pytest.mark.parametrize(("bound", "expected"), [(900, 300), (120, 60), (2, 1), (1, 1), (0, 300)])
def test_the_server_ends_each_watch_inside_the_silence_bound(clock, reconciler, bound, expected):
    """An idle but healthy watch is heard from when the server ends it; ended
    at half the bound at most, it never counts as silent."""
    controller = Controller(None, lambda caches: reconciler, Metrics(), workers=1,
                            watch_silence_timeout=bound, clock=clock)
    assert {informer.watch_timeout for informer in controller.caches.values()} == {expected}


def test_a_stopped_controller_is_not_judged(controller, clock):
    clock.now += 10**6
    controller.stop()
    assert controller.liveness() == []


class _Response:
    def __init__(self, body: dict) -> None:
        self.data = json.dumps(body).encode()


def test_a_successful_list_is_contact_a_failed_one_is_not(clock, monkeypatch):
    informer = Informer(Resource("Pod", "", "v1", "pods"), None, clock=clock)
    started = informer.last_contact
    clock.now += 50

    def failing(**kwargs):
        raise ConnectionRefusedError

    monkeypatch.setattr(informer, "_list_call", lambda: (failing, {}))
    with pytest.raises(ConnectionRefusedError):
        informer._relist()
    assert informer.last_contact == started and informer.silent_for() == 50

    def listing(**kwargs):
        return _Response({"metadata": {"resourceVersion": "7"}, "items": []})

    monkeypatch.setattr(informer, "_list_call", lambda: (listing, {}))
    assert informer._relist() == "7"
    assert informer.silent_for() == 0 and informer.synced.is_set()


def test_the_endpoints_answer_with_what_is_wrong():
    problems = {"/healthz": [], "/readyz": ["caches not synced: Lease"]}
    server = serve("127.0.0.1", 0, Metrics(), healthy=lambda: problems["/healthz"],
                   ready=lambda: problems["/readyz"])
    port = server.server_address[1]

    def get(path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    try:
        assert get("/healthz") == (200, "ok")
        assert get("/readyz") == (503, "caches not synced: Lease\n")
        problems["/healthz"] = ["thread worker-0 has died", "thread resync has died"]
        assert get("/healthz") == (503, "thread worker-0 has died\nthread resync has died\n")
        assert "jumpstarter_exporterset_leader 0.0" in get("/metrics")[1]
    finally:
        server.shutdown()
        server.server_close()


def test_durations_on_the_command_line():
    assert duration("600") == 600.0
    assert duration("1.5") == 1.5
    assert duration("10m") == 600.0
    for bad in ("-1", "ten", "-5m"):
        with pytest.raises(argparse.ArgumentTypeError):
            duration(bad)
    args = parse_args([])
    assert (args.stuck_reconcile_timeout, args.watch_silence_timeout) == (600.0, 900.0)
    args = parse_args(["--stuck-reconcile-timeout", "2", "--watch-silence-timeout", "1m"])
    assert (args.stuck_reconcile_timeout, args.watch_silence_timeout) == (2.0, 60.0)


def test_an_unreachable_api_server_is_a_failed_election_attempt_not_an_exception():
    """The leader election retries (and a leader gives up after its renew
    deadline) instead of its thread dying on a refused connection."""
    from exporterset_operator.election import ResilientLeaseLock
    from kubernetes import client
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        configuration = client.Configuration()
        configuration.host = f"http://127.0.0.1:{closed.getsockname()[1]}"
        configuration.retries = False
        api = client.CoordinationV1Api(client.ApiClient(configuration))

        def election(lock_class):
            lock = lock_class("pool-operator", "lab", "me")
            lock.api_instance = api
            return leaderelection.LeaderElection(electionconfig.Config(
                lock, lease_duration=15, renew_deadline=10, retry_period=2,
                onstarted_leading=lambda: None, onstopped_leading=lambda: None))

        with pytest.raises(Exception, match="Connection refused"):
            election(LeaseLock).try_acquire_or_renew()
        resilient = election(ResilientLeaseLock)
        assert resilient.try_acquire_or_renew() is False
        now = str(datetime.datetime.now())
        record = LeaderElectionRecord("me", "15", now, now)
        assert resilient.election_config.lock.create("pool-operator", "lab", record) is False
        assert resilient.election_config.lock.update("pool-operator", "lab", record) is False
