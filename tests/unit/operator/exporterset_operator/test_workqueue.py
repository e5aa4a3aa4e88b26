"""The operator's work queue: keys coalesce, a key is never reconciled by
two workers at once, delayed and rate-limited adds come due on time, and
shutdown releases every waiting worker.

Time-driven behaviour runs on a clock the test moves; concurrency runs on
real threads, every wait bounded."""

from __future__ import annotations

import random
import threading

import pytest
from exporterset_operator.workqueue import ExponentialBackoff, FairWorkQueue, WorkQueue
from hypothesis import given
from hypothesis import strategies as st

WAIT = 10.0  # bound of every wait on another thread


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TopRng(random.Random):
    """Jitter always at the top of its range."""

    def uniform(self, a, b):
        return b


class BottomRng(random.Random):
    """Jitter always at the bottom of its range."""

    def uniform(self, a, b):
        return a


def drain(queue: WorkQueue) -> list:
    """Every key ready now, each marked done; does not block."""
    keys = []
    while (key := queue.get(timeout=0)) is not None:
        keys.append(key)
        queue.done(key)
    return keys


def in_thread(target, *args) -> tuple[threading.Thread, list]:
    result: list = []
    thread = threading.Thread(target=lambda: result.append(target(*args)), daemon=True)
    thread.start()
    return thread, result


# -- coalescing ----------------------------------------------------------------


def test_a_key_added_many_times_while_it_waits_is_handed_out_once():
    queue = WorkQueue()
    for _ in range(5):
        queue.add("a")
    queue.add("b")
    queue.add("a")
    assert queue.depth() == 2
    assert drain(queue) == ["a", "b"]


def test_a_key_added_while_processed_waits_for_done_and_then_comes_once_more():
    queue = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    # Events for "a" arrive while its reconcile runs, then one for "b".
    queue.add("a")
    queue.add("a")
    queue.add("b")
    # "a" was added first, yet it is not handed out while in flight.
    assert queue.get(timeout=0) == "b"
    queue.done("b")
    assert queue.get(timeout=0) is None
    queue.done("a")
    # Once more for the events seen during the run, and only once.
    assert drain(queue) == ["a"]


def test_a_key_not_added_again_is_not_handed_out_again_after_done():
    queue = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    assert queue.get(timeout=0) is None


def test_a_second_worker_never_gets_a_key_in_flight():
    """Two real workers: the second one takes the next key, not the one the
    first is reconciling, and takes that key only once the first is done."""
    queue = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=WAIT) == "a"  # worker 1 holds "a"
    queue.add("a")
    second, got = in_thread(queue.get, WAIT)  # worker 2 waits
    queue.add("b")
    second.join(WAIT)
    assert got == ["b"]
    third, got = in_thread(queue.get, WAIT)  # worker 2 again: blocks on "a"
    queue.done("a")  # worker 1 finishes
    third.join(WAIT)
    assert got == ["a"]


def test_many_workers_and_producers_never_overlap_on_a_key_and_lose_no_add():
    """Producers add keys from several threads while workers reconcile them.
    No key is ever processed by two workers at once, and every key is
    processed after its last add (a late event is never lost)."""
    queue = WorkQueue()
    keys = [f"k{i}" for i in range(6)]
    lock = threading.Lock()
    sequence = [0]
    last_add: dict[str, int] = {}
    last_start: dict[str, int] = {}
    active: dict[str, int] = dict.fromkeys(keys, 0)
    overlaps: list[str] = []

    def tick() -> int:
        sequence[0] += 1
        return sequence[0]

    def produce(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(400):
            key = rng.choice(keys)
            with lock:
                last_add[key] = tick()  # before the add: a start after it sees it
            queue.add(key)

    def work() -> None:
        while (key := queue.get(timeout=WAIT)) is not None:
            with lock:
                active[key] += 1
                if active[key] > 1:
                    overlaps.append(key)
                last_start[key] = tick()
            # Let other threads run while this key is in flight.
            threading.Event().wait(0.0005)
            with lock:
                active[key] -= 1
            queue.done(key)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(4)]
    producers = [threading.Thread(target=produce, args=(seed,), daemon=True) for seed in range(3)]
    for thread in workers + producers:
        thread.start()
    for thread in producers:
        thread.join(WAIT)
    # Wait (bounded) until every key's last add has been picked up.
    pause = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        with lock:
            if all(last_start.get(key, 0) > last_add[key] for key in last_add):
                break
        pause.wait(0.01)
    queue.shutdown()
    for thread in workers:
        thread.join(WAIT)
    assert not overlaps
    unseen = sorted(key for key, added in last_add.items() if last_start.get(key, 0) < added)
    assert not unseen, f"added again but not processed after: {unseen}"


# -- add_after -----------------------------------------------------------------


def test_add_after_hands_the_key_out_when_due_and_not_before():
    clock = Clock()
    queue = WorkQueue(clock=clock)
    queue.add_after("a", 5.0)
    assert queue.delayed() == 1
    assert queue.get(timeout=0) is None
    clock.now += 4.9
    assert queue.get(timeout=0) is None
    clock.now += 0.2
    assert drain(queue) == ["a"]
    assert queue.delayed() == 0


def test_an_earlier_add_after_wins_and_the_later_one_adds_nothing():
    clock = Clock()
    queue = WorkQueue(clock=clock)
    queue.add_after("a", 10.0)
    queue.add_after("a", 2.0)
    queue.add_after("a", 6.0)
    assert queue.delayed() == 1
    clock.now += 2.0
    assert drain(queue) == ["a"]
    clock.now += 10.0
    assert drain(queue) == []
    assert queue.delayed() == 0


def test_add_after_of_a_key_already_queued_coalesces_with_it():
    clock = Clock()
    queue = WorkQueue(clock=clock)
    queue.add("a")
    queue.add_after("a", 1.0)
    clock.now += 1.0
    assert drain(queue) == ["a"]


def test_add_after_with_no_delay_is_an_add():
    queue = WorkQueue(clock=Clock())
    queue.add_after("a", 0)
    assert queue.delayed() == 0
    assert drain(queue) == ["a"]


def test_a_worker_waiting_with_nothing_queued_wakes_for_a_key_added_later():
    """A real worker blocked in get() with no deadline of its own must be
    woken by add_after and sleep only until the key is due."""
    queue = WorkQueue()
    worker, got = in_thread(queue.get)
    queue.add_after("a", 0.05)
    worker.join(WAIT)
    assert got == ["a"]


# -- rate-limited retry ----------------------------------------------------------


def test_the_backoff_of_a_key_doubles_up_to_the_cap_and_forget_resets_it():
    backoff = ExponentialBackoff(base=0.5, cap=4.0, rng=TopRng())
    assert [backoff.when("a") for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff.failures("a") == 6
    # Each key counts its own failures.
    assert backoff.when("b") == 0.5
    backoff.forget("a")
    assert backoff.failures("a") == 0
    assert backoff.when("a") == 0.5
    assert backoff.failures("b") == 1


def test_the_jitter_stays_in_the_upper_half_of_each_step():
    low = ExponentialBackoff(base=0.5, cap=4.0, rng=BottomRng())
    assert [low.when("a") for _ in range(5)] == [0.25, 0.5, 1.0, 2.0, 2.0]
    seeded = ExponentialBackoff(base=0.5, cap=4.0, rng=random.Random(7))
    for step in range(8):
        ceiling = min(4.0, 0.5 * 2**step)
        assert ceiling / 2 <= seeded.when("a") <= ceiling


def test_a_rate_limited_key_comes_back_after_its_growing_delay_until_forgotten():
    clock = Clock()
    queue = WorkQueue(backoff=ExponentialBackoff(base=1.0, cap=8.0, rng=TopRng()), clock=clock)
    delays = []
    for _ in range(5):
        delay = queue.add_rate_limited("a")
        delays.append(delay)
        clock.now += delay - 0.01
        assert queue.get(timeout=0) is None
        clock.now += 0.01
        assert drain(queue) == ["a"]
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0]
    queue.forget("a")
    assert queue.add_rate_limited("a") == 1.0


@pytest.mark.parametrize("pending", ["queued", "delayed"])
def test_a_rate_limited_retry_of_a_key_that_is_already_pending_does_not_duplicate(pending):
    clock = Clock()
    queue = WorkQueue(backoff=ExponentialBackoff(base=1.0, cap=8.0, rng=TopRng()), clock=clock)
    if pending == "queued":
        queue.add("a")
    else:
        queue.add_after("a", 0.5)
    queue.add_rate_limited("a")
    clock.now += 1.0
    assert drain(queue) == ["a"]
    clock.now += 10.0
    assert drain(queue) == []


# -- shutdown ----------------------------------------------------------------------


def test_shutdown_releases_every_waiting_worker():
    queue = WorkQueue()
    waiting = [in_thread(queue.get) for _ in range(3)]
    queue.shutdown()
    for thread, got in waiting:
        thread.join(WAIT)
        assert not thread.is_alive()
        assert got == [None]


def test_after_shutdown_adds_are_ignored_and_what_was_queued_drains():
    clock = Clock()
    queue = WorkQueue(clock=clock)
    queue.add("a")
    queue.shutdown()
    queue.add("b")
    queue.add_after("c", 1.0)
    clock.now += 1.0
    assert drain(queue) == ["a"]
    # Nothing left and shut down: get() returns instead of waiting.
    worker, got = in_thread(queue.get)
    worker.join(WAIT)
    assert got == [None]


def _namespace(key):
    return key[0]


@given(st.lists(st.sampled_from("abcd"), min_size=1, max_size=40))
def test_the_fair_queue_hands_out_namespaces_in_turn_one_worker(namespaces):
    """All keys queued at once, one worker: whatever the order they came in,
    the namespaces take turns, each namespace's keys in their order."""
    queue = FairWorkQueue(_namespace)
    keys = [(namespace, index) for index, namespace in enumerate(namespaces)]
    for key in keys:
        queue.add(key)
    served = []
    while queue.depth():
        key = queue.get(timeout=0)
        served.append(key)
        queue.done(key)
    # Round robin, written the plain way: rounds over the namespaces in the
    # order they first came, each taking its next key.
    queues = {}
    for key in keys:
        queues.setdefault(key[0], []).append(key)
    rounds = []
    while any(queues.values()):
        rounds += [pending.pop(0) for pending in queues.values() if pending]
    assert served == rounds


def test_the_fair_queue_gives_a_free_worker_to_the_namespace_with_fewest_in_flight():
    queue = FairWorkQueue(_namespace)
    for index in range(5):
        queue.add(("a", index))
    first, second = queue.get(timeout=0), queue.get(timeout=0)
    assert (first, second) == (("a", 0), ("a", 1))
    queue.add(("b", 0))
    queue.done(first)
    # a has one in flight, b none: b goes first though a came first.
    assert queue.get(timeout=0) == ("b", 0)
    # A namespace that comes back with one key right after its run does not
    # cut ahead of one that waits with as few in flight.
    queue.add(("c", 0))
    queue.done(("b", 0))
    queue.add(("b", 1))
    assert [queue.get(timeout=0), queue.get(timeout=0), queue.get(timeout=0)] == [("c", 0), ("b", 1), ("a", 2)]


def test_a_namespace_that_comes_anew_queues_behind_the_ones_waiting():
    queue = FairWorkQueue(_namespace)
    queue.add(("a", 0))
    queue.add(("a", 1))
    queue.done(queue.get(timeout=0))
    # a waits with a1 since before b came: a goes first, then b.
    queue.add(("b", 0))
    assert [queue.get(timeout=0), queue.get(timeout=0)] == [("a", 1), ("b", 0)]
