"""Runs the real operator as a separate process against the test bed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OperatorProcess:
    """One ``python -m exporterset_operator`` limited to one namespace."""

    def __init__(self, kubeconfig: str, namespace: str, workdir: Path, *extra_args: str,
                 provisioners=("qemu.jumpstarter.dev",), env: dict | None = None):
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.workdir = workdir
        self.extra_args = list(extra_args)
        self.provisioners = provisioners
        self.env = dict(env or {})
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / f"operator-{self.port}.log"

    def start(self) -> OperatorProcess:
        args = [
            sys.executable, "-m", "exporterset_operator",
            "--kubeconfig", self.kubeconfig,
            "--namespace", self.namespace,
            "--metrics-bind-address", f"127.0.0.1:{self.port}",
            "--artifacts-dir", str(self.workdir / "artifacts"),
            "--log-level", "DEBUG",
            *[arg for p in self.provisioners for arg in ("--provisioner", p)],
            *self.extra_args,
        ]
        env = {**os.environ, **self.env}
        log = open(self.log_path, "a")  # noqa: SIM115 (closed with the process)
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        self.starts += 1
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"operator exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"operator not ready after {timeout}s:\n{self.log_tail()}")

    def probe(self, path: str) -> tuple[int, str] | None:
        """``(status, body)`` of ``/healthz`` or ``/readyz``; None while nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def metric(self, name: str, labels: str = "") -> float:
        prefix = f"{name}{{{labels}}}" if labels else name
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(prefix + " ") or (not labels and line.startswith(name + "{")):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def leads(self) -> bool:
        """What the process says of itself: ``jumpstarter_exporterset_leader``."""
        try:
            return self.metric("jumpstarter_exporterset_leader") == 1
        except OSError:
            return False

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"
