"""The backend lane: coalesced per set, bounded across sets, never blocking
the one who asks, and handing the set back when a run ends; a failed run
retried by the lane after the set's own backoff (grown by each failure in a
row, reset by a success), a requeue after its delay, a terminal error kept
and not retried; a run waiting for its set's Exporters woken by their
changes."""

import threading
import time
from contextlib import contextmanager

from exporterset_operator.backends import BackendRuns
from exporterset_operator.results import ReconcileError, RequeueAfter, TerminalError
from exporterset_operator.workqueue import ExponentialBackoff

BOUND = 10.0


class Runs:
    """Records every run; each run blocks until the test releases its key."""

    def __init__(self):
        self.lock = threading.Lock()
        self.started = []
        self.concurrent = 0
        self.max_concurrent = 0
        self.release = {}
        self.done = []
        self.done_event = threading.Event()

    def gate(self, key):
        with self.lock:
            return self.release.setdefault(key, threading.Event())

    def run(self, key):
        with self.lock:
            self.started.append(key)
            self.concurrent += 1
            self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            assert self.gate(key).wait(BOUND)
        finally:
            with self.lock:
                self.concurrent -= 1

    def on_done(self, key):
        with self.lock:
            self.done.append(key)
        self.done_event.set()


@contextmanager
def running_lane(run, on_done, workers, backoff=None):
    """A started lane, shut down when the test ends."""
    lane = BackendRuns(run, on_done, workers=workers, backoff=backoff)
    lane.start()
    try:
        yield lane
    finally:
        lane.shutdown()


def wait_for(predicate, what):
    deadline = time.monotonic() + BOUND
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_a_set_asked_for_many_times_runs_once_at_a_time():
    runs = Runs()
    with running_lane(runs.run, runs.on_done, 3) as lane:
        key = ("ns", "a")
        assert lane.submit(key)
        wait_for(lambda: runs.started == [key], "the run starts")
        # Asked again while running: joins the run in flight.
        assert not any(lane.submit(key) for _ in range(20))
        assert lane.busy(key)
        runs.gate(key).set()
        wait_for(lambda: runs.done == [key], "the set is handed back once")
        wait_for(lambda: not lane.busy(key), "the lane is idle")
        assert runs.started == [key] and runs.max_concurrent == 1


def test_a_set_asked_for_while_queued_is_queued_once():
    runs = Runs()
    with running_lane(runs.run, runs.on_done, 1) as lane:
        first, second = ("ns", "a"), ("ns", "b")
        lane.submit(first)
        wait_for(lambda: runs.started == [first], "the first run starts")
        assert lane.submit(second)
        assert not lane.submit(second)
        assert lane.depth() == 1
        runs.gate(first).set()
        runs.gate(second).set()
        wait_for(lambda: sorted(runs.done) == [first, second], "both runs end")
        assert runs.started == [first, second]


def test_runs_across_sets_are_bounded_and_submit_never_blocks():
    runs = Runs()
    with running_lane(runs.run, runs.on_done, 2) as lane:
        keys = [("ns", f"set-{i}") for i in range(5)]
        started = time.monotonic()
        for key in keys:
            assert lane.submit(key)
        # Every run blocks until released: the asker did not wait for any.
        assert time.monotonic() - started < BOUND / 2
        wait_for(lambda: len(runs.started) == 2, "two runs start")
        assert runs.max_concurrent == 2 and lane.depth() == 3
        for key in keys:
            runs.gate(key).set()
        wait_for(lambda: sorted(runs.done) == sorted(keys), "every run ends")
        assert runs.max_concurrent == 2


def test_a_run_that_raises_still_hands_the_set_back():
    done = []

    def run(key):
        raise RuntimeError("boom")

    # The lane runs it again itself once its backoff (here 10 ms) ends.
    with running_lane(run, done.append, 1, ExponentialBackoff(base=0.01)) as lane:
        lane.submit(("ns", "a"))
        # Each retry hands it back again: the first may be followed by more
        # before the test looks.
        wait_for(lambda: done[:1] == [("ns", "a")], "the set is handed back")
        wait_for(lambda: all(t.is_alive() for t in lane.threads), "the lane lives on")
        lane.submit(("ns", "a"))
        wait_for(lambda: len(done) >= 2 and set(done) == {("ns", "a")}, "the lane takes the next run")


def test_shutdown_takes_no_more_runs_and_waits_for_the_one_in_flight():
    runs = Runs()
    lane = BackendRuns(runs.run, runs.on_done, workers=1)
    lane.start()
    key = ("ns", "a")
    lane.submit(key)
    wait_for(lambda: runs.started == [key], "the run starts")
    lane.submit(("ns", "b"))
    lane.shutdown()
    assert not lane.submit(("ns", "c"))
    assert not lane.wait_idle(0.05)
    runs.gate(key).set()
    assert lane.wait_idle(BOUND)
    assert runs.started == [key]


# -- the lane's own retries: a fake clock, no threads ---------------------------------

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Scripted:
    """A run body that raises (or returns) what it is given, one outcome a run."""

    def __init__(self, *outcomes):
        self.outcomes = list(outcomes)
        self.runs = 0

    def __call__(self, key):
        self.runs += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome


def fake_lane(*outcomes):
    clock = Clock()
    return BackendRuns(Scripted(*outcomes), workers=1, clock=clock), clock


KEY = ("ns", "a")


def due(lane):
    """The key the lane would take next, without waiting (None: none is due)."""
    return lane.queue.get(timeout=0)


def test_a_failed_runs_backoff_grows_with_each_failure_in_a_row_and_a_success_resets_it():
    lane, clock = fake_lane(*[ReconcileError(f"rc {n}", path="playbook") for n in range(4)], None,
                            ReconcileError("rc 9", path="playbook"))
    waits = []
    for failures in range(1, 5):
        lane.run_now(KEY)
        assert lane.backoff.failures(KEY) == failures and lane.failures() == {KEY: f"rc {failures - 1}"}
        waits.append(lane.retry_in(KEY))
    # 1 s doubled with each failure, jittered over the upper half of each step.
    for failures, wait in enumerate(waits, 1):
        assert 2 ** (failures - 1) / 2 <= wait <= 2 ** (failures - 1), waits
    assert waits == sorted(waits) and waits[-1] > 2 * waits[0], waits
    lane.run_now(KEY)
    assert lane.backoff.failures(KEY) == 0 and lane.failures() == {} and lane.retry_in(KEY) is None
    lane.run_now(KEY)
    assert lane.backoff.failures(KEY) == 1 and lane.retry_in(KEY) <= 1.0, "a success starts the backoff anew"


def test_a_set_held_by_its_backoff_is_run_again_by_the_lane_once_due():
    lane, clock = fake_lane(ReconcileError("rc 2", path="playbook"), None)
    lane.run_now(KEY)
    wait = lane.retry_in(KEY)
    assert not lane.submit(KEY), "asked again during its backoff: held"
    assert due(lane) is None and not lane.busy(KEY)
    clock.now += wait
    assert due(lane) == KEY, "the lane takes it itself, nobody asking"
    assert lane.busy(KEY) and not lane.submit(KEY)


def test_requeue_after_runs_the_set_again_after_its_delay_without_growing_its_backoff():
    lane, clock = fake_lane(ReconcileError("rc 2", path="playbook"), RequeueAfter(7.0, path="waiting"))
    lane.run_now(KEY)
    lane.run_now(KEY)
    assert lane.backoff.failures(KEY) == 1 and lane.retry_in(KEY) == 7.0
    assert lane.failures() == {KEY: "rc 2"}, "a requeue is no failure: the last one stays until a success"
    clock.now += 6.9
    assert due(lane) is None
    clock.now += 0.1
    assert due(lane) == KEY


def test_a_terminal_error_is_kept_and_not_retried_until_asked_again():
    lane, clock = fake_lane(ReconcileError("rc 2", path="playbook"), TerminalError("not a set", path="backends"))
    lane.run_now(KEY)
    lane.run_now(KEY)
    assert lane.failures() == {KEY: "not a set"}
    assert lane.retry_in(KEY) is None and lane.backoff.failures(KEY) == 0
    clock.now += 10 ** 6
    assert due(lane) is None, "never run again by itself"
    assert lane.submit(KEY) and due(lane) == KEY, "asked again, it runs"


def test_a_run_waiting_for_a_change_wakes_on_its_own_sets_change_only():
    lane = BackendRuns(lambda key: None)
    seen = lane.changes(KEY)
    lane.changed(("ns", "b"))
    assert not lane.wait_change(KEY, seen, 0.05)
    threading.Timer(0.05, lane.changed, (KEY,)).start()
    started = time.monotonic()
    assert lane.wait_change(KEY, seen, BOUND)
    assert time.monotonic() - started < BOUND / 2
    assert lane.changes(KEY) == seen + 1


def test_a_namespace_with_many_sets_does_not_keep_another_namespaces_set_waiting():
    """Two workers, taken by two of namespace a's six sets; b's one set,
    asked for after all of a's, takes the first worker that frees up."""
    runs = Runs()
    with running_lane(runs.run, runs.on_done, 2) as lane:
        crowd = [("a", f"set-{i}") for i in range(6)]
        for key in crowd:
            assert lane.submit(key)
        wait_for(lambda: len(runs.started) == 2, "two of a's runs start")
        assert lane.submit(("b", "set-0"))
        runs.gate(crowd[0]).set()
        wait_for(lambda: len(runs.started) == 3, "a third run starts")
        assert runs.started[2] == ("b", "set-0")
        for key in (*crowd, ("b", "set-0")):
            runs.gate(key).set()
        wait_for(lambda: len(runs.done) == 7, "every run ends")
