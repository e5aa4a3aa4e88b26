"""The named processes of a bed or a real node (etcd, kube-apiserver,
containerd, the kubelet, ...): started in their own session with their output
in ``<state_dir>/logs/<name>.log``, their pids kept in the config saved in
``state_dir`` so that a later `up` or `down` in another process finds them,
told alive from a recycled pid, and stopped SIGTERM first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict
from pathlib import Path


class Components:
    """Mixed into a class that has ``state_dir``, ``config`` (a
    ``config_type`` dataclass whose ``pids`` maps names to pids), ``_children``
    (name to the Popen this process started) and ``_spawned(name, pid)``,
    which records a new process (tracks it, saves the config when the class
    does)."""

    state_dir: Path
    _children: dict[str, subprocess.Popen]
    config_type: type
    config_file_name: str
    # How long a component has after SIGTERM before SIGKILL.
    stop_timeout = 10.0
    # How many lines of a component's log an exit report shows.
    report_lines = 20

    def _spawned(self, name: str, pid: int) -> None:
        raise NotImplementedError

    def logs(self) -> dict[str, Path]:
        """Log file of each process, by component name."""
        return {p.stem: p for p in sorted((self.state_dir / "logs").glob("*.log"))}

    def _config_file(self) -> Path:
        return self.state_dir / self.config_file_name

    def _load_config(self):
        try:
            return self.config_type(**json.loads(self._config_file().read_text()))
        except FileNotFoundError:
            return None

    def _save_config(self) -> None:
        tmp = self._config_file().with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self.config), indent=2))
        tmp.replace(self._config_file())

    def _save_config_if_present(self) -> None:
        if self._config_file().exists():
            self._save_config()

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.state_dir / f"logs/{name}.log", "ab")  # noqa: SIM115 - handed to the child
        log.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
        log.flush()
        # Own session: a Ctrl-C in the terminal that ran `up` does not kill
        # the component, and `down` can stop each process by pid.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        self.config.pids[name] = proc.pid
        self._children[name] = proc
        self._spawned(name, proc.pid)

    def _alive(self, name: str) -> bool:
        pid = self.config.pids.get(name)
        if not pid:
            return False
        child = self._children.get(name)
        if child is not None and child.pid == pid:
            # Right after exec, /proc/<pid>/cmdline can still read empty;
            # our own children are asked directly.
            return child.poll() is None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return False
        # A recycled pid running something else is not ours; a zombie is dead.
        return Path(cmdline.decode()).name == name and ") Z " not in stat

    def _stop(self, name: str) -> None:
        if self._alive(name):
            pid = self.config.pids[name]
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + self.stop_timeout
            while self._alive(name) and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(0.05)
            if self._alive(name):
                os.kill(pid, signal.SIGKILL)
                time.sleep(0.1)
            _reap(pid)
        self.config.pids.pop(name, None)
        self._children.pop(name, None)

    def _exit_report(self, name: str) -> str:
        log = self.state_dir / "logs" / f"{name}.log"
        child = self._children.get(name)
        code = child.poll() if child else None
        lines = log.read_text(errors="replace").splitlines()[-self.report_lines:] if log.exists() else []
        return f"{name} exited (code {code}); last lines of {log}:\n" + "\n".join(lines)


def _reap(pid: int) -> None:
    """Collect a child we started in this process so it does not linger as a
    zombie; processes started by another `up` are not our children."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
