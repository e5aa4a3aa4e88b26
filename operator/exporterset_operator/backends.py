"""The slow lane: backend work (Pods, lab hosts, Corellium) off the pool loop.

The pool loop decides and writes Exporters, their enablement and the set's
status at once; whatever needs a provisioner's backends runs here, as the
reconcile playbook, on threads of its own, so no pool decision ever waits
for ansible-runner. The lane is a work queue of its own (workqueue.py, a
second instance beside the pool loop's):

- **Coalesced per set**: one run at a time per set. A set asked for again
  while queued, running or waiting out its backoff is not queued again:
  when its run ends, ``on_done(key)`` hands it back to the pool loop, which
  looks at it afresh and asks once more if backends are still missing.
- **Batched**: a run plans at its start, from the caches, and so takes every
  backend the set lacks at that moment, however many requests led to it; a
  run waiting for a burst's credentials is woken by the Exporter events the
  informer hands ``changed`` (no polling).
- **Bounded**: at most ``workers`` runs at once, across all sets.
- **Fair between namespaces**: a free worker takes a set of the namespace
  with the fewest runs going, namespaces with as many taking turns
  (``FairWorkQueue``); so one namespace's hundred sets do not keep another
  namespace's one set waiting behind all of them.
- **Retried by the lane**: a run's body raises as a reconcile does
  (results.py). ``ReconcileError`` (or any other exception): the failure is
  kept and the set runs again after its own backoff, which grows with each
  failure in a row and is reset by a success. ``RequeueAfter``: the set runs
  again after the delay, its backoff unchanged. ``TerminalError``: the
  failure is kept and the set is not run again until it is asked for.

What the pool loop and the lane's threads share (the queue, the runs in
flight, each set's last failure and the Exporters a run is at work on) sits
under one lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from contextlib import contextmanager

from .results import ReconcileError, RequeueAfter, TerminalError
from .workqueue import ExponentialBackoff, FairWorkQueue

log = logging.getLogger(__name__)


def _extra(key, **fields) -> dict:
    return {"namespace": key[0], "exporterset": key[1], **fields}


class BackendRuns:
    def __init__(self, run: Callable[[Hashable], None], on_done: Callable[[Hashable], None] | None = None,
                 workers: int = 2, clock=time.monotonic, backoff: ExponentialBackoff | None = None):
        self._run = run
        self._on_done = on_done
        self.workers = max(1, int(workers))
        self.clock = clock
        self._lock = threading.RLock()
        self.queue = FairWorkQueue(lambda key: key[0], backoff or ExponentialBackoff(base=1.0, cap=300.0),
                                   clock=clock, lock=self._lock)
        self.backoff = self.queue.backoff
        # Signalled by ``changed``: a run waiting for a set's Exporters wakes.
        self._changes = threading.Condition(self._lock)
        self._changed: dict[Hashable, int] = {}
        # key -> (thread name, when its run started)
        self._running: dict = {}
        self._failure: dict[Hashable, str] = {}
        self._acting: dict[Hashable, set[str]] = {}
        self._shutdown = False
        self.threads: list[threading.Thread] = []

    # -- asking ----------------------------------------------------------------
    def submit(self, key: Hashable) -> bool:
        """Ask for a run of ``key``'s backends. False when one is already
        queued or running (this request joins it), or when a failed run's
        backoff holds the set (the lane runs it when that ends)."""
        with self._lock:
            if self._shutdown or self.busy(key) or (self.retry_in(key) or 0) > 0:
                return False
            self.queue.add(key)
            return True

    def busy(self, key: Hashable) -> bool:
        """Whether a run of ``key`` is queued or in flight."""
        with self._lock:
            return key in self._running or self.queue.pending(key)

    def retry_in(self, key: Hashable) -> float | None:
        """Seconds until the lane runs ``key`` again after a failure or a
        requeue (<= 0: due), None when it is not to run again by itself."""
        return self.queue.scheduled_in(key)

    def depth(self) -> int:
        return self.queue.depth()

    def in_flight(self) -> dict:
        """key -> (thread name, start time on ``clock``) of the runs going on."""
        with self._lock:
            return dict(self._running)

    # -- what the pool loop reads of a set's runs ---------------------------------
    def failed(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._failure

    def failures(self) -> dict:
        """The message of each set's last failed run (a copy)."""
        with self._lock:
            return dict(self._failure)

    def clear_failure(self, key: Hashable) -> None:
        with self._lock:
            self._failure.pop(key, None)

    def acting(self, key: Hashable) -> set[str]:
        """The Exporters ``key``'s run is at work on (the pool part leaves them be)."""
        with self._lock:
            return set(self._acting.get(key, ()))

    @contextmanager
    def acting_on(self, key: Hashable, names: Iterable[str]):
        with self._lock:
            self._acting[key] = set(names)
        try:
            yield
        finally:
            with self._lock:
                self._acting.pop(key, None)

    # -- a run waiting for the set's Exporters -------------------------------------
    def changed(self, key: Hashable) -> None:
        """An Exporter of ``key`` changed (the informer's event)."""
        with self._changes:
            self._changed[key] = self._changed.get(key, 0) + 1
            self._changes.notify_all()

    def changes(self, key: Hashable) -> int:
        """How many changes of ``key`` were heard so far (for ``wait_change``)."""
        with self._lock:
            return self._changed.get(key, 0)

    def wait_change(self, key: Hashable, seen: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a change of ``key`` after the
        ``seen``-th; True when one came."""
        with self._changes:
            return self._changes.wait_for(lambda: self._changed.get(key, 0) != seen, max(0.0, timeout))

    # -- running ---------------------------------------------------------------
    def start(self) -> list[threading.Thread]:
        for index in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"backend-{index}", daemon=True)
            thread.start()
            self.threads.append(thread)
        return list(self.threads)

    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            with self._lock:
                if self._shutdown:  # what was still queued is not run
                    self.queue.done(key)
                    return
            try:
                self.run_now(key)
            finally:
                # Not busy any more before the pool loop looks again.
                self.queue.done(key)
                if self._on_done is not None:
                    self._on_done(key)

    def run_now(self, key: Hashable) -> None:
        """One run of ``key`` in the calling thread, its outcome kept as a
        lane thread keeps it; it never raises (a run must never take the lane
        down)."""
        with self._lock:
            # A run that starts takes the place of a retry the set waited for.
            self.queue.unschedule(key)
            self._running[key] = (threading.current_thread().name, self.clock())
        try:
            self._run(key)
        except RequeueAfter as exc:
            self.queue.add_after(key, exc.delay)
            log.info("backend run requeued", extra=_extra(key, path=exc.path, retry_in=round(exc.delay, 2)))
        except TerminalError as exc:
            with self._lock:
                self._failure[key] = str(exc)
                self.queue.forget(key)
            log.warning("backend run failed terminally", extra=_extra(key, path=exc.path, error=str(exc)[:500]))
        except Exception as exc:  # noqa: BLE001 - retried with backoff, as the pool loop retries an error
            with self._lock:
                self._failure[key] = str(exc)
                delay = self.queue.add_rate_limited(key)
            extra = _extra(key, error=str(exc)[:500], retry_in=round(delay, 2))
            if isinstance(exc, ReconcileError):  # what failed is known
                log.warning("backend run failed", extra={**extra, "path": exc.path})
            else:
                log.exception("backend run raised", extra=extra)
        else:
            with self._lock:
                self._failure.pop(key, None)
                self.queue.forget(key)
        finally:
            with self._lock:
                self._running.pop(key, None)
                self._changes.notify_all()

    def shutdown(self) -> None:
        """Take no more runs; the ones in flight finish."""
        with self._lock:
            self._shutdown = True
            self.queue.shutdown()
            self._changes.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the runs in flight to end."""
        with self._changes:
            return self._changes.wait_for(lambda: not self._running, timeout)
