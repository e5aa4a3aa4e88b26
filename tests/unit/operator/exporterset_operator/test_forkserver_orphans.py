"""No process of a run outlives it, nor the fork server, however they end:
real ``ansible-playbook`` runs forked from a real server, whose task worker
runs ``sleep`` through a real module (worker → sh → module → sleep). The
server (alone or with its reaper) or a task worker is SIGKILLed, and every
process carrying the run's mark is gone, the exec'd ones included; and the
kernel's part (a process
forked without an exec dies with its parent) alone. An SSH ControlMaster
a run leaves for the next runs is the one process that outlives a run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import test_forkserver
from exporterset_operator import forkserver
from test_forkserver import _cmdline, _ppid, alive, client, marked, sleeping_run, until

SLEEP = b"sleep\x00300\x00"
server = test_forkserver.server  # the fixture: a fork server of its own per test


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and _ppid(int(e.name)) == pid]


def _reaper(server_pid: int) -> int:
    (reaper,) = [pid for pid in _children(server_pid) if _comm(pid) == "jve-reaper"]
    return reaper


def _sleep_and_worker(run: int) -> tuple[int, int]:
    """The module's ``sleep`` of the run ``run`` and the task worker it
    runs under (the sleep's ancestor whose parent is the run)."""
    (sleep,) = [pid for pid in marked(run) if _cmdline(pid) == SLEEP]
    worker = sleep
    while _ppid(worker) != run:
        worker = _ppid(worker)
        assert worker not in (None, 0, 1), "the sleep is not under the run"
    return sleep, worker


def test_a_sigkilled_fork_server_leaves_no_process_of_its_runs(server, tmp_path):
    run, forked = sleeping_run(server, tmp_path)
    sleep, worker = _sleep_and_worker(forked)
    reaper = _reaper(server.pid)
    os.kill(server.pid, signal.SIGKILL)
    assert until(lambda: not marked(forked), timeout=30), \
        f"processes of the run outlived the server: {[(p, _cmdline(p)) for p in marked(forked)]}"
    # The run and its worker die by their parent-death signals, which the
    # kernel delivers when it gets to them: waited for, not read at once.
    assert until(lambda: not (alive(sleep) or alive(worker) or alive(forked)), timeout=30), \
        [(pid, alive(pid)) for pid in (sleep, worker, forked)]
    assert until(lambda: not alive(reaper), timeout=10), "the reaper outlived its work"
    run.wait(timeout=60)
    assert run.returncode != 0


def test_a_fork_server_sigkilled_with_its_reaper_leaves_no_process_of_its_runs(server, tmp_path):
    """Without its reaper the exec'd part of a run (sh, the module, its
    sleep) would run on under process 1: the operator sweeps the server's
    mark once the server has ended."""
    run, forked = sleeping_run(server, tmp_path)
    sleep, worker = _sleep_and_worker(forked)
    reaper = _reaper(server.pid)
    # Stopped, the server cannot start another reaper before its own end.
    os.kill(server.pid, signal.SIGSTOP)
    os.kill(reaper, signal.SIGKILL)
    os.kill(server.pid, signal.SIGKILL)
    assert until(lambda: not marked(forked), timeout=30), \
        f"processes of the run outlived the server and its reaper: {[(p, _cmdline(p)) for p in marked(forked)]}"
    # The run and its worker die by their parent-death signals, which the
    # kernel delivers when it gets to them: waited for, not read at once.
    assert until(lambda: not (alive(sleep) or alive(worker) or alive(forked)), timeout=30), \
        [(pid, alive(pid)) for pid in (sleep, worker, forked)]
    run.wait(timeout=60)
    assert run.returncode != 0
    # The next run gets a server of its own, marked apart.
    server.ensure()
    again = client(server, tmp_path, JVE_TEST_RUN="again")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and "run again" in out, err


# A process that registers the fork server's setting, its child and its
# grandchild, each forked without an exec, as a run and its task workers are.
FORKS = """
import os, sys, time
from exporterset_operator import forkserver
forkserver.die_with_forking_parent()
if os.fork() == 0:
    grandchild = os.fork()
    if grandchild == 0:
        time.sleep(300)
        os._exit(0)
    print(os.getpid(), grandchild, flush=True)
    time.sleep(300)
    os._exit(0)
time.sleep(300)
"""


def test_what_is_forked_without_an_exec_dies_with_the_process_that_forked_it():
    """The kernel's part, alone: what the reaper cannot see by its mark
    (a forked process shows the environment of the exec it came from)."""
    top = subprocess.Popen([sys.executable, "-c", FORKS], stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": str(Path(forkserver.__file__).parents[1])},
                           start_new_session=True)
    try:
        child, grandchild = map(int, top.stdout.readline().split())
        assert alive(child) and alive(grandchild)
        os.kill(child, signal.SIGKILL)
        assert until(lambda: not alive(grandchild), timeout=10), "the grandchild outlived its parent"
        top.kill()
        top.wait()
    finally:
        os.killpg(top.pid, signal.SIGKILL)


def test_a_killed_task_worker_leaves_nothing_once_its_run_ends(server, tmp_path):
    run, forked = sleeping_run(server, tmp_path)
    sleep, worker = _sleep_and_worker(forked)
    os.kill(worker, signal.SIGKILL)
    out, err = run.communicate(timeout=120)
    assert run.returncode != 0, out
    assert until(lambda: not alive(sleep), timeout=10), "the module of a killed worker outlived its run"
    assert not marked(forked)
    # The server serves on.
    again = client(server, tmp_path, JVE_TEST_RUN="again")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and "run again" in out, err


# A run leaves two processes behind: an SSH ControlMaster (ssh's own name
# and title, kept for the next runs to the host: here a ``cat`` named ssh
# reading a FIFO no one writes) and any other; it ends once the test has
# seen both.
LEAVING_PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Leave processes behind
      ansible.builtin.shell: |
        (exec -a "ssh: {directory}/cp [mux]" {directory}/ssh 0<>{directory}/fifo >/dev/null 2>&1) &
        (exec -a left-behind sleep 300) >/dev/null 2>&1 &
        until [ -e {directory}/seen ]; do sleep 0.1; done
      args:
        executable: /bin/bash
"""


def test_a_run_that_ended_leaves_no_process_but_an_ssh_master(server, tmp_path):
    shutil.copy(shutil.which("cat"), tmp_path / "ssh")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "play.yml").write_text(LEAVING_PLAYBOOK.format(directory=tmp_path))
    # Started by the run's module, they carry the run's mark; one left
    # once the run has ended would outlive it.
    started = []

    def ours():
        found = [pid for pid in (int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit())
                 if alive(pid) and (_cmdline(pid) or b"").startswith((b"left-behind", f"ssh: {tmp_path}".encode()))]
        started.extend(pid for pid in found if pid not in started)
        return found
    run = client(server, tmp_path, playbook=LEAVING_PLAYBOOK.format(directory=tmp_path))
    assert until(lambda: len(ours()) == 2 or run.poll() is not None, timeout=60), "the run left nothing behind"
    (tmp_path / "seen").touch()
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, out + err
    try:
        assert len(started) == 2, "the run did not start both"
        assert until(lambda: [_cmdline(p) for p in ours()] == [f"ssh: {tmp_path}/cp [mux]".encode() + b"\0"],
                     timeout=10), f"{[_cmdline(p) for p in ours()]}: not the master alone outlived the run"
        (master,) = ours()
        assert _comm(master) == "ssh" and forkserver._ssh_master(str(master))
    finally:
        for pid in started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
