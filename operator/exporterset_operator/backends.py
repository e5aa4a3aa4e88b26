"""The slow lane: backend work (Pods, lab hosts, Corellium) off the pool loop.

The pool loop decides and writes Exporters, their enablement and the set's
status at once; whatever needs a provisioner's backends runs here, as the
reconcile playbook, on threads of its own, so no pool decision ever waits
for ansible-runner:

- **Coalesced per set**: one run at a time per set. A set asked for again
  while queued or running is not queued again: when its run ends, the pool
  loop looks at the set afresh and asks again if backends are still missing.
- **Batched**: the run plans at its start, from the caches, and so takes
  every backend the set lacks at that moment, however many requests led to it.
- **Bounded**: at most ``workers`` runs at once, across all sets.

When a run ends, ``on_done(key)`` hands the set back to the pool loop, which
looks again with the run's writes in its caches.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

log = logging.getLogger(__name__)


class BackendRuns:
    def __init__(self, run: Callable[[Hashable], None], on_done: Callable[[Hashable], None],
                 workers: int, clock=time.monotonic):
        self._run = run
        self._on_done = on_done
        self.workers = max(1, int(workers))
        self.clock = clock
        self._cond = threading.Condition()
        self._queue: deque = deque()
        self._queued: set = set()
        # key -> (thread name, when its run started)
        self._running: dict = {}
        self._shutdown = False
        self.threads: list[threading.Thread] = []

    # -- asking ----------------------------------------------------------------
    def submit(self, key: Hashable) -> bool:
        """Ask for a run of ``key``'s backends. False when one is already
        queued or running (this request joins it)."""
        with self._cond:
            if self._shutdown or key in self._running or key in self._queued:
                return False
            self._queued.add(key)
            self._queue.append(key)
            self._cond.notify()
            return True

    def busy(self, key: Hashable) -> bool:
        """Whether a run of ``key`` is queued or in flight."""
        with self._cond:
            return key in self._queued or key in self._running

    def depth(self) -> int:
        with self._cond:
            return len(self._queue)

    def in_flight(self) -> dict:
        """key -> (thread name, start time on ``clock``) of the runs going on."""
        with self._cond:
            return dict(self._running)

    # -- running ---------------------------------------------------------------
    def start(self) -> list[threading.Thread]:
        for index in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"backend-{index}", daemon=True)
            thread.start()
            self.threads.append(thread)
        return list(self.threads)

    def _next(self):
        with self._cond:
            while not self._queue and not self._shutdown:
                self._cond.wait()
            if self._shutdown:
                return None
            key = self._queue.popleft()
            self._queued.discard(key)
            self._running[key] = (threading.current_thread().name, self.clock())
            return key

    def _work(self) -> None:
        while True:
            key = self._next()
            if key is None:
                return
            try:
                self._run(key)
            except Exception:  # a run must never take the lane down
                log.exception("backend run raised", extra={"namespace": key[0], "exporterset": key[1]})
            finally:
                with self._cond:
                    self._running.pop(key, None)
                    self._cond.notify_all()
                self._on_done(key)

    def shutdown(self) -> None:
        """Take no more runs; the ones in flight finish."""
        with self._cond:
            self._shutdown = True
            self._queue.clear()
            self._queued.clear()
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the runs in flight to end."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._running:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True
