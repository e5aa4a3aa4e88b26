"""Runs the reconcile playbook through ansible-runner.

Artifacts are bounded across all ExporterSets together (the newest
``max_artifacts`` runs are kept, whichever set they belong to), and a set's
artifacts go when the set goes, so disk use stays flat over a long run.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import ansible_runner

from .watches import Role, Runnable


@dataclass
class RunResult:
    ok: bool
    status: str
    rc: int
    message: str
    artifact_dir: str
    duration: float
    # What the run's exporterset_apply tasks wrote (``created``, ``deleted``,
    # ``blocked`` Exporter names), None when no such task ran.
    applied: dict | None = None


APPLY_MODULE = "exporterset_apply"
# Every play the operator runs is on localhost (lab hosts are added by the
# roles, with their own connection settings).
LOCALHOST_INVENTORY = f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"


def _applied(runner) -> dict | None:
    """The Exporters the run's exporterset_apply tasks created and deleted."""
    applied = None
    for event in runner.events:
        if event.get("event") != "runner_on_ok":
            continue
        data = event.get("event_data", {})
        if not str(data.get("task_action", "")).endswith(APPLY_MODULE):
            continue
        result = data.get("res") or {}
        applied = applied or {"created": [], "deleted": [], "blocked": []}
        for key in applied:
            applied[key].extend(result.get(key) or [])
    return applied


def _failure_message(runner) -> str:
    """The message of the first failed task, the way a user reads it."""
    for event in runner.events:
        if event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            data = event.get("event_data", {})
            result = data.get("res", {})
            message = result.get("msg") or result.get("message") or json.dumps(result)[:2000]
            return f"task {data.get('task', '?')!r} failed: {message}"
    return f"playbook ended with status {runner.status} (rc={runner.rc})"


class PlaybookRunner:
    def __init__(
        self,
        collection_root: str,
        artifacts_dir: str,
        max_artifacts: int = 20,
        verbosity: int = 0,
        env: dict[str, str] | None = None,
    ):
        self.collection_root = Path(collection_root)
        self.artifacts_dir = Path(artifacts_dir)
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        self.max_artifacts = max_artifacts
        self.verbosity = verbosity
        self.env = dict(env or {})
        self._lock = threading.Lock()

    def run(self, playbook: Runnable, key: tuple[str, str], extravars: dict) -> RunResult:
        """Run ``playbook`` (a path, relative to the collection root or
        absolute) or a ``Role``, which runs from a playbook generated for the
        run, the way the Ansible Operator SDK runs a ``role:`` entry."""
        namespace, name = key
        # "_" cannot occur in Kubernetes names, so the prefix of one set never
        # matches another set's runs.
        ident = f"{namespace}_{name}_{os.getpid()}_{os.urandom(4).hex()}"
        # The extra vars go to a file in here (0700, removed after the run):
        # a pool's objects do not fit on a command line.
        private_data_dir = tempfile.mkdtemp(prefix="jve-run-")
        # The floor of a run, cut: no facts gathered, no interpreter
        # discovered for localhost (it is this very Python), modules piped
        # rather than copied.
        envvars = {
            "ANSIBLE_STDOUT_CALLBACK": "default",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
            "ANSIBLE_GATHERING": "explicit",
            "ANSIBLE_PIPELINING": "1",
            **self.env,
        }
        try:
            if isinstance(playbook, Role):
                generated = Path(private_data_dir) / "role.yml"
                generated.write_text(playbook.playbook())
                playbook_path = generated
            else:
                playbook_path = self.collection_root / playbook
            started = time.monotonic()
            runner = ansible_runner.run(
                private_data_dir=private_data_dir,
                artifact_dir=str(self.artifacts_dir),
                ident=ident,
                playbook=str(playbook_path),
                project_dir=str(self.collection_root),
                extravars=extravars,
                envvars=envvars,
                inventory=LOCALHOST_INVENTORY,
                quiet=True,
                verbosity=self.verbosity,
                rotate_artifacts=0,
            )
            ok = runner.status == "successful"
            message = "" if ok else _failure_message(runner)
            duration = time.monotonic() - started
            return RunResult(ok, runner.status, runner.rc, message, str(self.artifacts_dir / ident), duration,
                             applied=_applied(runner))
        finally:
            shutil.rmtree(private_data_dir, ignore_errors=True)
            self._prune()

    def _prune(self) -> None:
        with self._lock:
            runs = sorted(
                (p for p in self.artifacts_dir.iterdir() if p.is_dir()),
                key=lambda p: p.stat().st_mtime,
            )
            for stale in runs[: max(0, len(runs) - self.max_artifacts)]:
                shutil.rmtree(stale, ignore_errors=True)

    def forget(self, key: tuple[str, str]) -> None:
        """Remove every artifact of a set that no longer exists."""
        prefix = f"{key[0]}_{key[1]}_"
        with self._lock:
            for path in self.artifacts_dir.iterdir():
                if path.name.startswith(prefix):
                    shutil.rmtree(path, ignore_errors=True)

    def artifact_count(self) -> int:
        return sum(1 for p in self.artifacts_dir.iterdir() if p.is_dir())
