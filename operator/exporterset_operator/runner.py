"""Runs the reconcile playbook through ansible-runner.

Every value a run is given comes from the API (a set, its class, its
Exporters, Leases and Pods: tenant data, docs/security.md) and reaches
Ansible as data, never as a template: ansible-core trusts the strings of an
extra vars file as templates, so each one is written marked unsafe
(``write_extravars``). The artifacts keep what a run did, not the operator's
environment: ansible-runner's ``command`` file is written without it.

Artifacts are bounded across all ExporterSets together (the newest
``max_artifacts`` runs are kept, whichever set they belong to), and a set's
artifacts go when the set goes, so disk use stays flat over a long run.
"""

from __future__ import annotations

import gc
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import ansible_runner

from . import forkclient, forkserver
from .watches import Role, Runnable


@dataclass
class RunResult:
    ok: bool
    status: str
    rc: int
    message: str
    artifact_dir: str
    duration: float
    # What the run's pass wrote (the exporterset_pass module's report:
    # ``created``, ``deleted``, ``blocked``, ``held`` Exporter names, ...),
    # None when the playbook reported none.
    report: dict | None = None


# The key of the pass's report among the run's set_stats data
# (roles/reconcile/tasks/pass.yml).
REPORT_KEY = "exporterset_pass"
# The JSON key that marks a string as never to be templated when ansible-core
# loads an extra vars file; ``__ansible_vault`` and ``__ansible_type`` are the
# loader's other special keys. A value from the API with a key of that prefix
# is refused: it would be read as one of them, and a file ansible-core cannot
# decode as JSON it parses again as YAML, every string a trusted template.
UNSAFE_KEY = "__ansible_unsafe"
RESERVED_KEY_PREFIX = "__ansible"


class ExtraVarsError(ValueError):
    """A value that cannot be handed to Ansible as data; names the field."""


def _field(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def unsafe_data(value, path: str = ""):
    """``value`` as ansible-core's JSON loader reads data that is never a
    template: every string as ``{"__ansible_unsafe": string}``; numbers,
    booleans and null as they are. Mapping keys stay plain (ansible-core
    does not template keys).

    Each string is marked, not the whole document with a YAML ``!unsafe``
    tag: ansible-core resolves a tagged scalar again as if it were plain (the
    label value ``"123"`` would arrive as the number 123), and its YAML loader
    is several times slower than its JSON loader on a large pool.
    """
    if isinstance(value, str):
        return {UNSAFE_KEY: value}
    if isinstance(value, dict):
        marked = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ExtraVarsError(f"{_field(path, key)}: a key that is not a string")
            if key.startswith(RESERVED_KEY_PREFIX):
                raise ExtraVarsError(
                    f"{_field(path, key)}: a key starting with {RESERVED_KEY_PREFIX!r} is reserved by Ansible's loader")
            marked[key] = unsafe_data(item, _field(path, key))
        return marked
    if isinstance(value, (list, tuple)):
        return [unsafe_data(item, f"{path}[{index}]") for index, item in enumerate(value)]
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ExtraVarsError(f"{path}: {value} is not a JSON number")
        return value
    raise ExtraVarsError(f"{path}: a {type(value).__name__}, not JSON data")


def write_extravars(private_data_dir: str | Path, extravars: dict) -> Path:
    """The run's extra vars, every string marked unsafe, at the path
    ansible-runner passes to ``ansible-playbook -e @...`` (``env/extravars``,
    which it does not rewrite when it exists)."""
    path = Path(private_data_dir) / "env" / "extravars"
    path.parent.mkdir(mode=0o700, exist_ok=True)
    text = json.dumps(unsafe_data(extravars), allow_nan=False)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(text)
    return path


def _drop_environment(artifact_dir: str | Path) -> None:
    """ansible-runner's ``command`` file without the ``env`` it records (the
    whole environment of the operator, merged with the run's): the command
    and its working directory stay."""
    path = Path(artifact_dir) / "command"
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if isinstance(recorded, dict) and "env" in recorded:
        recorded.pop("env")
        # Replaced whole: a reader of the artifacts never sees it half written.
        scratch = path.with_name(".command")
        with open(os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            out.write(json.dumps(recorded))
        os.replace(scratch, path)
    (Path(artifact_dir) / "env.list").unlink(missing_ok=True)


def _on_status(status: dict, runner_config=None) -> None:
    # "running" comes right after ansible-runner wrote the command file and
    # before it starts ansible-playbook.
    if status.get("status") == "running" and runner_config is not None:
        _drop_environment(runner_config.artifact_dir)


# Every play the operator runs is on localhost (lab hosts are added by the
# roles, with their own connection settings).
LOCALHOST_INVENTORY = f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"


def _report(runner) -> dict | None:
    """The report of the run's pass: the playbook's ``set_stats`` data,
    which ansible-runner's callback puts in the stats event at its end."""
    for event in runner.events:
        if event.get("event") == "playbook_on_stats":
            report = ((event.get("event_data") or {}).get("artifact_data") or {}).get(REPORT_KEY)
            return report if isinstance(report, dict) else None
    return None


def _failure_message(runner) -> str:
    """The message of the first failed task, the way a user reads it (a
    failure the play ignores is not the run's)."""
    for event in runner.events:
        if event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            data = event.get("event_data", {})
            if data.get("ignore_errors"):
                continue
            result = data.get("res", {})
            message = result.get("msg") or result.get("message") or json.dumps(result)[:2000]
            return f"task {data.get('task', '?')!r} failed: {message}"
    return f"playbook ended with status {runner.status} (rc={runner.rc})"


class _Forked:
    """A fork server forked from this process (``ForkServer.start``), with
    the few parts of ``subprocess.Popen`` the runner uses: ``stdin`` is our
    end of its pipe."""

    def __init__(self, pid: int, pipe: int):
        self.pid = pid
        self.stdin = os.fdopen(pipe, "wb")
        self._code: int | None = None

    def poll(self) -> int | None:
        if self._code is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._code = os.waitstatus_to_exitcode(status)
        return self._code

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.01)

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def _sweep_when_ended(pidfd: int, mark: str) -> None:
    """Once the server behind ``pidfd`` has ended, however it ended, kill
    every process carrying its ``mark``: what its reaper does, unless the
    reaper was killed with it (a SIGKILL of both leaves the modules and
    commands of its runs going, reparented to process 1)."""
    try:
        select.select([pidfd], [], [])
    finally:
        os.close(pidfd)
    forkserver.kill_marked(forkserver.SERVER_MARK, mark)


class ForkServer:
    """The operator's fork server (forkserver.py): started by ``start``
    (forked from this process, which the operator calls before it starts
    any thread) or else on the first run, started again (a fresh Python) on
    the run after it ended, stopped with the runner or
    when this process ends (it reads our end of a pipe). Once a server has
    ended, what carries its mark is killed (``_sweep_when_ended``).

    ``binary`` is what ansible-runner runs in place of ``ansible-playbook``
    (forkclient.py, a file in a private directory of ours), ``env`` what
    the run's environment needs to reach the server."""

    def __init__(self):
        self._lock = threading.Lock()
        self._process: subprocess.Popen | _Forked | None = None
        self.directory = tempfile.mkdtemp(prefix="jve-forkserver-")
        self.socket = os.path.join(self.directory, "socket")
        self.binary = os.path.join(self.directory, "ansible-playbook")
        source = Path(forkclient.__file__).read_text()
        with open(os.open(self.binary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700), "w") as out:
            out.write(f"#!{sys.executable} -IS\n{source}")
        playbook = Path(sys.executable).with_name("ansible-playbook")
        self.env = {forkclient.SERVER_ENV: self.socket,
                    forkclient.PLAYBOOK_ENV: str(playbook) if playbook.exists() else "ansible-playbook"}
        self.starts = 0

    def start(self) -> None:
        """Start the server now, forked from this process when it runs no
        other thread (its pages are then shared with ours: the kubernetes
        client, the interpreter), else as a fresh Python."""
        with self._lock:
            self._start(fork=threading.active_count() == 1)
        self._wait_listening()

    def ensure(self) -> None:
        """A server for the next run: the one running, or a fresh Python."""
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                return
            self._start(fork=False)
        self._wait_listening()

    def _start(self, fork: bool) -> None:
        if self._process is not None:
            self._process.stdin.close()
        try:
            os.unlink(self.socket)
        except FileNotFoundError:
            pass
        self.starts += 1
        mark = forkserver.new_mark()
        if fork:
            read, write = os.pipe()
            # What is imported now stays out of the collector's passes, so
            # that neither side copies the pages they share by collecting.
            gc.freeze()
            pid = os.fork()
            if pid == 0:
                os.close(write)
                forkserver.serve_forked(self.socket, read, mark)
            os.close(read)
            self._process = _Forked(pid, write)
        else:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "exporterset_operator.forkserver", "--socket", self.socket,
                 "--mark", mark], stdin=subprocess.PIPE, cwd=self.directory, start_new_session=True)
        # Opened before anything here can reap it, so never another process's.
        pidfd = os.pidfd_open(self._process.pid)
        threading.Thread(target=_sweep_when_ended, args=(pidfd, mark), name="fork-server-sweep",
                         daemon=True).start()

    def _wait_listening(self) -> None:
        # The client runs ansible-playbook itself until the socket is there.
        deadline = time.monotonic() + 5
        while not os.path.exists(self.socket) and time.monotonic() < deadline and self._process.poll() is None:
            time.sleep(0.01)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def close(self) -> None:
        with self._lock:
            if self._process is not None:
                self._process.stdin.close()
                try:
                    self._process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait(timeout=30)
                self._process = None
        shutil.rmtree(self.directory, ignore_errors=True)


class PlaybookRunner:
    def __init__(
        self,
        collection_root: str,
        artifacts_dir: str,
        max_artifacts: int = 20,
        verbosity: int = 0,
        env: dict[str, str] | None = None,
        fork_server: bool | ForkServer = True,
    ):
        self.collection_root = Path(collection_root)
        self.artifacts_dir = Path(artifacts_dir)
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        self.max_artifacts = max_artifacts
        self.verbosity = verbosity
        self.env = dict(env or {})
        self._lock = threading.Lock()
        if fork_server is True:
            fork_server = ForkServer()
        self.fork_server = fork_server or None

    def close(self) -> None:
        """Stop the fork server; a later run starts it again."""
        if self.fork_server is not None:
            self.fork_server.close()

    def __enter__(self) -> PlaybookRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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
        try:
            write_extravars(private_data_dir, extravars)
        except ExtraVarsError as exc:
            shutil.rmtree(private_data_dir, ignore_errors=True)
            return RunResult(False, "refused", -1, f"not handed to Ansible: {exc}", "", 0.0)
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
        binary = None
        if self.fork_server is not None:
            self.fork_server.ensure()
            envvars.update(self.fork_server.env)
            binary = self.fork_server.binary
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
                binary=binary,
                # ansible-runner names the playbook only when it runs
                # ansible-playbook itself; the fork server's client gets it here.
                cmdline=shlex.quote(str(playbook_path)) if binary else None,
                envvars=envvars,
                # envvars stay off disk; the extra vars file is ours.
                suppress_env_files=True,
                status_handler=_on_status,
                inventory=LOCALHOST_INVENTORY,
                quiet=True,
                verbosity=self.verbosity,
                rotate_artifacts=0,
            )
            ok = runner.status == "successful"
            message = "" if ok else _failure_message(runner)
            duration = time.monotonic() - started
            return RunResult(ok, runner.status, runner.rc, message, str(self.artifacts_dir / ident), duration,
                             report=_report(runner))
        finally:
            _drop_environment(self.artifacts_dir / ident)
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
