"""What a reconcile ends with, as controller-runtime has it.

A reconcile that did its work returns a ``Result`` (``requeue_after``: look
again after that many seconds). One that could not raises:

- ``ReconcileError``: it may succeed later (the API server refused a write,
  a conflict); the key is retried with the queue's per-key backoff. Any
  other exception is treated the same way.
- ``RequeueAfter``: it cannot go on yet and knows when to look again (a
  failed backend run's backoff); the key comes back after ``delay``, without
  growing the queue's backoff.
- ``TerminalError``: retrying cannot help; it is recorded (logged, counted
  by its path) and the key is not retried until its object, or one mapped
  to it, changes.

``path`` names how the reconcile went, for the metrics and the log.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Result:
    requeue_after: float | None = None
    # Always None from the reconcilers, which raise instead; kept so that a
    # Result still reads as it did.
    error: str | None = None
    path: str = "fastpath"


class ReconcileError(Exception):
    """Retry with backoff."""

    def __init__(self, message: str, path: str = "error"):
        super().__init__(message)
        self.path = path


class RequeueAfter(Exception):
    """Look again after ``delay`` seconds."""

    def __init__(self, delay: float, path: str = "requeue", message: str = ""):
        super().__init__(message or f"requeue after {delay:.2f}s")
        self.delay = delay
        self.path = path


class TerminalError(Exception):
    """Recorded, not retried until the object changes."""

    def __init__(self, message: str, path: str = "terminal"):
        super().__init__(message)
        self.path = path
