"""A keyed work queue with the semantics of client-go's rate-limited queue.

* A key added while it waits is stored once (events coalesce).
* A key added while it is being processed is marked dirty and handed out
  again only after ``done()``; so at most one reconcile per key is in flight.
* ``add_after`` schedules a key for later; ``add_rate_limited`` does the same
  with a per-key exponential backoff (with jitter) that ``forget`` resets.

Two run on it: the pool loop's queue (controller.py) and the backend lane's
(backends.py), which passes the lock its own state shares with the queue.
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
            self._queue.append(key)
            self._cond.notify()

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
                if self._queue:
                    key = self._queue.popleft()
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
                self._queue.append(key)
                self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def depth(self) -> int:
        with self._cond:
            return len(self._queue)

    def delayed(self) -> int:
        with self._cond:
            return len(self._waiting_until)
