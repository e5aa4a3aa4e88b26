"""The backend lane: coalesced per set, bounded across sets, never blocking
the one who asks, and handing the set back when a run ends."""

import threading
import time
from contextlib import contextmanager

from exporterset_operator.backends import BackendRuns

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
def running_lane(run, on_done, workers):
    """A started lane, shut down when the test ends."""
    lane = BackendRuns(run, on_done, workers=workers)
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

    with running_lane(run, done.append, 1) as lane:
        lane.submit(("ns", "a"))
        wait_for(lambda: done == [("ns", "a")], "the set is handed back")
        wait_for(lambda: all(t.is_alive() for t in lane.threads), "the lane lives on")
        lane.submit(("ns", "a"))
        wait_for(lambda: len(done) == 2, "the lane takes the next run")


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
