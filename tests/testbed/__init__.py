"""The real Kubernetes test bed (see docs/testbed.md) and its pytest support.

One bed serves a whole pytest run: every xdist worker of the run attaches to
the same bed under a file lock; the last worker to leave stops it. Extra
beds (a private one for fault injection, one with other CRDs) come from
`BedFactory` and stop when the test or fixture that made them ends.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from . import processes
from .bed import (
    BIN_DIR,
    CACHE_DIR,
    STARTUPS,
    TestBed,
    TestBedError,
    answers_ok,
    default_crd_files,
    issue_certificate,
    upstream_core_crd_files,
    upstream_crd_files,
)

__all__ = [
    "BIN_DIR",
    "STARTUPS",
    "BedFactory",
    "TestBed",
    "TestBedError",
    "answers_ok",
    "default_crd_files",
    "failure_report",
    "issue_certificate",
    "mark_failed",
    "namespace_name",
    "processes",
    "shared_bed",
    "upstream_core_crd_files",
    "upstream_crd_files",
]

RUNS_DIR = CACHE_DIR / "testbeds"
# A run directory left by a killed pytest is removed after this long; until
# then its logs stay for a post-mortem.
STALE_RUN_SECONDS = 24 * 3600
FAILED_MARKER = "failed"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_users(run_dir: Path) -> list[int]:
    try:
        return [pid for pid in json.loads((run_dir / "users.json").read_text()) if _pid_alive(pid)]
    except FileNotFoundError:
        return []


def _write_users(run_dir: Path, users: list[int]) -> None:
    (run_dir / "users.json").write_text(json.dumps(users))


def _sweep_orphans(current: Path) -> None:
    """Stop beds whose pytest processes all died (killed runs), and delete
    their directories once they are old."""
    if not RUNS_DIR.is_dir():
        return
    for run_dir in RUNS_DIR.iterdir():
        if run_dir == current or not run_dir.is_dir():
            continue
        try:
            with _locked(run_dir / "lock"):
                if _read_users(run_dir):
                    continue
                for state in run_dir.iterdir():
                    if (state / "bed.json").exists():
                        TestBed(state).stop_processes()
                if time.time() - (run_dir / "lock").stat().st_mtime > STALE_RUN_SECONDS:
                    shutil.rmtree(run_dir, ignore_errors=True)
        except FileNotFoundError:
            # Another run finished and removed its directory meanwhile.
            continue


# What the run's bed audits besides (tests/testbed/bed.py's audit_policy):
# the account of upstream's exporter-set slot and its namespace
# (tests/controller/test_upstream_slot.py).
SHARED_AUDIT_NAMESPACES = ("jumpstarter-lab",)
SHARED_AUDIT_USERS = ("system:serviceaccount:jumpstarter-lab:jumpstarter-exporterset-qemu-jumpstarter-dev",)


@contextmanager
def shared_bed(run_id: str) -> Iterator[TestBed]:
    """The run's bed: started by the first process that asks, reused by the
    others, stopped by the last one. Its directory is deleted afterwards
    unless some process marked the run failed (`mark_failed`)."""
    run_dir = RUNS_DIR / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    _sweep_orphans(run_dir)
    # JVE_TESTBED_AUDIT=1 makes the run's bed write an API audit log, for
    # benchmarks that count requests by verb.
    bed = TestBed(run_dir / "shared", audit=os.environ.get("JVE_TESTBED_AUDIT") == "1",
                  audit_users=SHARED_AUDIT_USERS, audit_namespaces=SHARED_AUDIT_NAMESPACES)
    bed.session_wide = True
    with _locked(run_dir / "lock"):
        bed.up()
        _write_users(run_dir, [*_read_users(run_dir), os.getpid()])
    try:
        yield bed
    finally:
        with _locked(run_dir / "lock"):
            users = [pid for pid in _read_users(run_dir) if pid != os.getpid()]
            _write_users(run_dir, users)
            if not users:
                _finish_run(run_dir)


def mark_failed(run_id: str) -> None:
    (RUNS_DIR / run_id / FAILED_MARKER).touch()


def _finish_run(run_dir: Path) -> None:
    for state in run_dir.iterdir():
        if (state / "bed.json").exists():
            TestBed(state).stop_processes()
    if not (run_dir / FAILED_MARKER).exists():
        shutil.rmtree(run_dir, ignore_errors=True)


class BedFactory:
    """Extra beds for one process of a run, each in its own directory next to
    the shared bed.

    A bed stops when the test or fixture that asked for it ends: a
    module-scoped fixture's bed at the end of the module, a bed made in a
    test's body at the end of that test's teardown (see `processes`).
    `close()` stops whatever is left (beds made outside every test)."""

    def __init__(self, run_id: str):
        self.run_dir = RUNS_DIR / run_id
        self._beds: list[TestBed] = []

    def __call__(self, name: str, **options) -> TestBed:
        state_dir = self.run_dir / f"{name}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        bed = TestBed(state_dir, **options)
        self._beds.append(bed)
        processes.at_owner_end(bed.stop_processes)
        return bed.up()

    def close(self) -> None:
        for bed in self._beds:
            bed.stop_processes()


def namespace_name(test_name: str) -> str:
    """A unique, valid namespace name that still says which test made it."""
    stem = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].rstrip("-")
    return f"{stem or 't'}-{uuid.uuid4().hex[:6]}"


def failure_report(bed: TestBed) -> str:
    """What a failed test prints so its bed's logs can be found."""
    lines = [f"state directory: {bed.state_dir} (kept because the run failed)"]
    lines += [f"{name}: {path}" for name, path in bed.logs().items()]
    return "\n".join(lines)
