"""A keyed work queue with the semantics of client-go's rate-limited queue.

* A key added while it waits is stored once (events coalesce).
* A key added while it is being processed is marked dirty and handed out
  again only after ``done()``; so at most one reconcile per key is in flight.
* ``add_after`` schedules a key for later; ``add_rate_limited`` does the same
  with a per-key exponential backoff (with jitter) that ``forget`` resets.

Two run on it: the pool loop's queue (controller.py) and the backend lane's
(backends.py), which passes the lock its own state shares with the queue and
is a ``FairWorkQueue``: keys are handed out fairly between their groups (the
sets' namespaces), not in the order they came.
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import backoff_delay


class ExponentialBackoff:
    """Per-key exponential backoff with full jitter on the upper half."""

    def __init__(self, base: float = 0.5, cap: float = 300.0, rng: random.Random | None = None):
        self.base = base
        self.cap = cap
        self._failures: dict[Hashable, int] = {}
        self._rng = rng or random.Random()
        self._lock = threading.Lock()

    def when(self, key: Hashable) -> float:
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        return backoff_delay(failures + 1, self.base, self.cap, jitter=self._rng.uniform(0, 1), floor=0.5)

    def failures(self, key: Hashable) -> int:
        with self._lock:
            return self._failures.get(key, 0)

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._failures.pop(key, None)


class WorkQueue:
    def __init__(
        self,
        backoff: ExponentialBackoff | None = None,
        clock: Callable[[], float] = time.monotonic,
        lock: threading.RLock | None = None,
    ):
        self._queue: deque[Hashable] = deque()
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._waiting: list[tuple[float, int, Hashable]] = []
        self._waiting_until: dict[Hashable, float] = {}
        self._sequence = 0
        # ``lock``: a caller's own lock, when its state must change together
        # with the queue's.
        self._cond = threading.Condition(lock)
        self._shutdown = False
        self._clock = clock
        self.backoff = backoff or ExponentialBackoff()

    def add(self, key: Hashable) -> None:
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: Hashable) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._push_locked(key)
            self._cond.notify()

    def _push_locked(self, key: Hashable) -> None:
        self._queue.append(key)

    def _pop_locked(self) -> Hashable:
        return self._queue.popleft()

    def _queued_locked(self) -> int:
        return len(self._queue)

    def add_after(self, key: Hashable, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            due = self._clock() + delay
            # Keep only the earliest schedule for a key: a later one is implied.
            current = self._waiting_until.get(key)
            if current is not None and current <= due:
                return
            self._waiting_until[key] = due
            self._sequence += 1
            heapq.heappush(self._waiting, (due, self._sequence, key))
            self._cond.notify()

    def add_rate_limited(self, key: Hashable) -> float:
        delay = self.backoff.when(key)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        self.backoff.forget(key)

    def pending(self, key: Hashable) -> bool:
        """Whether ``key`` waits in the queue or is being processed."""
        with self._cond:
            return key in self._dirty or key in self._processing

    def scheduled_in(self, key: Hashable) -> float | None:
        """Seconds until ``key``'s delayed add (<= 0: due), None when none is scheduled."""
        with self._cond:
            due = self._waiting_until.get(key)
            return None if due is None else due - self._clock()

    def unschedule(self, key: Hashable) -> None:
        """Drop ``key``'s delayed add, if any."""
        with self._cond:
            self._waiting_until.pop(key, None)

    def _promote_due_locked(self) -> float | None:
        """Move due delayed keys into the queue; return seconds to the next one."""
        now = self._clock()
        while self._waiting:
            due, _, key = self._waiting[0]
            if self._waiting_until.get(key) != due:
                heapq.heappop(self._waiting)
                continue
            if due > now:
                return due - now
            heapq.heappop(self._waiting)
            del self._waiting_until[key]
            self._add_locked(key)
        return None

    def get(self, timeout: float | None = None) -> Hashable | None:
        """Block until a key is ready; None on shutdown or timeout."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                next_due = self._promote_due_locked()
                if self._queued_locked():
                    key = self._pop_locked()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                if self._shutdown:
                    return None
                wait = next_due
                if deadline is not None:
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._cond.wait(wait)

    def done(self, key: Hashable) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._push_locked(key)
                self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def depth(self) -> int:
        with self._cond:
            return self._queued_locked()

    def delayed(self) -> int:
        with self._cond:
            return len(self._waiting_until)


class FairWorkQueue(WorkQueue):
    """A ``WorkQueue`` whose next key is of the group (``group(key)``) with the
    fewest keys being processed, and among those of the group served longest
    ago (a group that comes anew queues behind those waiting); in its group,
    keys come in order. So a namespace with a hundred sets
    queued takes the next free worker only when no other namespace waits with
    fewer runs going, and two namespaces that wait take turns."""

    def __init__(self, group: Callable[[Hashable], Hashable], *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._group = group
        self._groups: dict[Hashable, deque[Hashable]] = {}
        self._in_flight: dict[Hashable, int] = {}
        self._served: dict[Hashable, int] = {}
        self._turns = 0

    def _push_locked(self, key: Hashable) -> None:
        group = self._group(key)
        if group not in self._served:
            # A group new (or back after being idle) waits behind the ones
            # that already wait: it counts as served just now.
            self._turns += 1
            self._served[group] = self._turns
        self._groups.setdefault(group, deque()).append(key)

    def _pop_locked(self) -> Hashable:
        group = min(self._groups, key=lambda g: (self._in_flight.get(g, 0), self._served[g]))
        keys = self._groups[group]
        key = keys.popleft()
        if not keys:
            del self._groups[group]
        self._turns += 1
        self._served[group] = self._turns
        self._in_flight[group] = self._in_flight.get(group, 0) + 1
        return key

    def _queued_locked(self) -> int:
        return sum(len(keys) for keys in self._groups.values())

    def done(self, key: Hashable) -> None:
        with self._cond:
            if key in self._processing:
                group = self._group(key)
                left = self._in_flight.get(group, 0) - 1
                if left > 0:
                    self._in_flight[group] = left
                else:
                    self._in_flight.pop(group, None)
                    if group not in self._groups and key not in self._dirty:
                        self._served.pop(group, None)  # forgotten once idle: no growth with namespaces
            super().done(key)
