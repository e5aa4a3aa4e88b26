"""Which test or fixture owns each process the tests start, so that nothing
outlives the test that needs it, and a run can tell when something did.

An *owner* is the test or fixture running when a process starts: the pytest
hooks in tests/conftest.py push one while a fixture sets up and while a test
runs its setup, body and teardown. `at_owner_end` hands the owner a way to
stop what was started (a fixture's finalizer, or the end of the test's
teardown); `track` records a process with its owner. When an owner ends,
after what it was handed has run, `Owner.close` finds its tracked processes
that are still alive: they outlived their test, are recorded in `outlived`
and killed. `leftovers` lists, at the end of a run, tracked processes still
alive. Standard library only: `scripts/testbed` imports the bed without
pytest, and then nothing owns anything.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(eq=False)
class Owner:
    """A running test or fixture. ``add_finalizer`` is how it stops things at
    its end (a fixture's own finalizers); without it, ``finish`` does."""

    label: str
    add_finalizer: Callable[[Callable[[], object]], None] | None = None
    _finalizers: list[Callable[[], object]] = field(default_factory=list)
    ended: bool = False

    def at_end(self, callback: Callable[[], object]) -> None:
        if self.add_finalizer is not None:
            self.add_finalizer(callback)
        else:
            self._finalizers.append(callback)

    def finish(self) -> None:
        """Runs what was handed to ``at_end``, last first; raises the first
        error once all have run."""
        errors = []
        while self._finalizers:
            try:
                self._finalizers.pop()()
            except Exception as exc:  # noqa: BLE001 - every finalizer runs, the first error is raised
                errors.append(exc)
        if errors:
            raise errors[0]

    def close(self) -> None:
        """The owner has ended: its tracked processes still alive outlived it."""
        self.ended = True
        left = [p for p in _tracked.values() if p.owner is self and not p.session_wide and alive(p)]
        for process in left:
            outlived.append(f"pid {process.pid}: {process.what}\n    still running when its owner ended: {self.label}")
        kill([process.pid for process in left])


@dataclass(frozen=True, eq=False)
class Tracked:
    pid: int
    start_ticks: int  # /proc/<pid>/stat's start time: a recycled pid is another process
    what: str
    owner: Owner | None
    session_wide: bool = False
    # Who started it, for processes without an owner object (seen after a test).
    label: str = ""

    @property
    def owner_label(self) -> str:
        if self.owner is not None:
            return self.owner.label
        return self.label or "no test (started outside every test and fixture)"


_owners: list[Owner] = []
_tracked: dict[tuple[int, int], Tracked] = {}
# What `Owner.close` found still running, one description each.
outlived: list[str] = []


@contextmanager
def owning(owner: Owner) -> Iterator[Owner]:
    """``owner`` is the current owner for the block."""
    _owners.append(owner)
    try:
        yield owner
    finally:
        _owners.remove(owner)


def current_owner() -> Owner | None:
    return _owners[-1] if _owners else None


def at_owner_end(callback: Callable[[], object]) -> bool:
    """Has the current test or fixture run ``callback`` when it ends; False
    when nothing owns the caller (outside pytest)."""
    owner = current_owner()
    if owner is None:
        return False
    owner.at_end(callback)
    return True


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) of a process; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[19])


_CURRENT = object()


def track(pid: int, what: str, *, session_wide: bool = False, owner: Owner | None | object = _CURRENT,
          label: str = "") -> None:
    """Records a process the tests started, owned by ``owner`` (by default
    the current one). ``session_wide`` ones (the run's shared bed) may
    outlive every test of this process."""
    stat = _stat(pid)
    if stat is None:
        return
    if owner is _CURRENT:
        owner = current_owner()
    _tracked.setdefault((pid, stat[1]), Tracked(pid, stat[1], what, owner, session_wide, label))


def is_tracked(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and (pid, stat[1]) in _tracked


def alive(process: Tracked) -> bool:
    stat = _stat(process.pid)
    # A zombie has ended; only its parent's wait is missing.
    return stat is not None and stat[1] == process.start_ticks and stat[0] != "Z"


def leftovers() -> list[Tracked]:
    """Tracked processes still alive, other than session-wide ones."""
    return [p for p in _tracked.values() if not p.session_wide and alive(p)]


def command_line(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    return " ".join(part.decode(errors="replace") for part in argv if part)[:200]


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from every one of its threads)."""
    found = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def descendants(pid: int | None = None) -> list[int]:
    """Every live process below ``pid`` (this one by default), zombies left out."""
    found, queue = [], children(os.getpid() if pid is None else pid)
    while queue:
        child = queue.pop()
        if child in found:
            continue
        stat = _stat(child)
        if stat is None or stat[0] == "Z":
            continue
        found.append(child)
        queue += children(child)
    return found


def note_descendants(owner: str) -> None:
    """Tracks live descendants not tracked yet, as seen at the end of ``owner``
    (a test): whatever outlives the run among them is reported with it."""
    for pid in descendants():
        if not is_tracked(pid):
            track(pid, command_line(pid), owner=None, label=f"{owner} (first seen alive after its teardown)")


def kill(pids: list[int], timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL for what is still there after ``timeout``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = [pid for pid in pids if (stat := _stat(pid)) and stat[0] != "Z"]
            if not pids:
                return
            for pid in pids:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            time.sleep(0.05)
