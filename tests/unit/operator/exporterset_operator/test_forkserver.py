"""The fork server and its client, with real ansible-playbook runs: a run
forks from the server, keeps its own environment and artifacts, ends
with its client, and falls back to ``ansible-playbook`` (saying why) when
the server cannot serve it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from exporterset_operator.runner import ForkServer, PlaybookRunner

PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Say which run this is
      ansible.builtin.debug:
        msg: "run {{ lookup('ansible.builtin.env', 'JVE_TEST_RUN') }}"
"""

# The teardown's pause, in a run whose output is the client's terminal.
PAUSE_PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Wait a moment
      ansible.builtin.pause:
        seconds: 1
"""

SLOW_PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Wait
      ansible.builtin.command: sleep 300
"""


def children_cpu(pid: int) -> float:
    """The CPU seconds of the children ``pid`` has reaped (its runs)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def until(check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:  # gone before or while we read (ENOENT, ESRCH)
        return False
    return state != "Z"


@pytest.fixture
def server():
    fork_server = ForkServer()
    fork_server.ensure()
    yield fork_server
    fork_server.close()


def client(server, tmp_path, playbook=PLAYBOOK, **env):
    (tmp_path / "play.yml").write_text(playbook)
    full_env = {**os.environ, **server.env, **env}
    return subprocess.Popen([server.binary, str(tmp_path / "play.yml")], cwd=tmp_path, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_runs_fork_from_the_server_each_with_its_own_environment_and_events(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    with PlaybookRunner(str(tmp_path), str(tmp_path / "artifacts"), env={"JVE_TEST_RUN": "one"}) as runner:
        first = runner.run("play.yml", ("ns", "pool"), {})
        server = runner.fork_server.pid
        before = children_cpu(server)
        runner.env["JVE_TEST_RUN"] = "two"
        second = runner.run("play.yml", ("ns", "pool"), {})
        # The second run was the server's child: it reaped it.
        assert children_cpu(server) > before
        assert runner.fork_server.pid == server and runner.fork_server.starts == 1
    for result, which in ((first, "one"), (second, "two")):
        assert result.ok, result.message
        stdout = Path(result.artifact_dir, "stdout").read_text()
        assert f"run {which}" in stdout
        assert "fork server:" not in stdout
        # ansible-runner's events went to this run's own artifacts.
        events = [path.name for path in Path(result.artifact_dir, "job_events").iterdir()]
        assert any(name.endswith(".json") for name in events)


def test_a_pause_waits_in_a_run_forked_from_the_server(tmp_path):
    (tmp_path / "pause.yml").write_text(PAUSE_PLAYBOOK)
    with PlaybookRunner(str(tmp_path), str(tmp_path / "artifacts")) as runner:
        result = runner.run("pause.yml", ("ns", "pool"), {})
        assert result.ok, result.message
        assert runner.fork_server.pid is not None
    assert "fork server:" not in Path(result.artifact_dir, "stdout").read_text()


# The signals a task worker ignores, read by the worker itself (a pipe
# lookup runs in the worker; the shell's parent is the worker).
SIGNALS_PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Read the worker's ignored signals
      ansible.builtin.debug:
        msg: "ignored {{ lookup('ansible.builtin.pipe', 'grep SigIgn /proc/$PPID/status') }} ignored"
"""


def ignored_signals(runner, tmp_path):
    result = runner.run("signals.yml", ("ns", "pool"), {})
    assert result.ok, result.message
    mask = re.search(r"ignored SigIgn:\D*?([0-9a-f]{16}) ignored", Path(result.artifact_dir, "stdout").read_text())
    assert mask, Path(result.artifact_dir, "stdout").read_text()
    return {signum for signum in signal.Signals if int(mask.group(1), 16) >> (signum - 1) & 1}


def test_a_task_worker_ignores_the_signals_it_ignores_under_a_fresh_ansible_playbook(tmp_path):
    (tmp_path / "signals.yml").write_text(SIGNALS_PLAYBOOK)
    with PlaybookRunner(str(tmp_path), str(tmp_path / "cold"), fork_server=False) as cold:
        fresh = ignored_signals(cold, tmp_path)
    with PlaybookRunner(str(tmp_path), str(tmp_path / "warm")) as warm:
        forked = ignored_signals(warm, tmp_path)
        assert warm.fork_server.pid is not None
    # A write to a closed pipe (an ssh that died) must raise, not kill the worker.
    assert signal.SIGPIPE in fresh
    assert forked == fresh


def test_a_different_configuration_runs_cold_and_says_which_variable(server, tmp_path):
    warm = client(server, tmp_path, JVE_TEST_RUN="warm")
    out, err = warm.communicate(timeout=120)
    assert warm.returncode == 0, err
    assert "run warm" in out and "fork server:" not in err
    cold = client(server, tmp_path, JVE_TEST_RUN="cold", ANSIBLE_FORKS="3")
    out, err = cold.communicate(timeout=120)
    assert cold.returncode == 0, err
    assert "run cold" in out
    assert "fork server: ANSIBLE_FORKS differs" in err


def test_an_unreachable_server_runs_cold_and_says_where(server, tmp_path):
    missing = str(tmp_path / "no-socket")
    run = client(server, tmp_path, JVE_FORK_SERVER=missing, JVE_TEST_RUN="anyway")
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert "run anyway" in out
    assert f"fork server: cannot reach {missing}" in err


def marked(run: int) -> list[int]:
    """The live processes of the run ``run``, by the mark the server gives
    it (the task workers leave the run's process group)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"JVE_FORK_RUN={run}".encode() in (entry / "environ").read_bytes().split(b"\0") \
                        and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def sleeping_run(server, tmp_path):
    """A run whose command module is sleeping, and the run's pid."""
    run = client(server, tmp_path, playbook=SLOW_PLAYBOOK)

    def sleeping():
        return [pid for pid in (int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit())
                if _ppid(pid) == server.pid
                and any(_cmdline(p) == b"sleep\x00300\x00" for p in marked(pid))]
    assert until(sleeping), "the run's module did not start"
    return run, sleeping()[0]


def _cmdline(pid: int) -> bytes | None:
    """The command line of ``pid``, or None once it has ended: a process
    seen in /proc may be gone by the time it is read (ESRCH)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None


def test_a_killed_client_takes_its_run_with_it(server, tmp_path):
    run, forked = sleeping_run(server, tmp_path)
    run.kill()
    run.wait()
    assert until(lambda: not marked(forked)), "the run outlived its client"


def test_a_stop_signal_reaches_the_run_and_its_code_comes_back(server, tmp_path):
    run, forked = sleeping_run(server, tmp_path)
    run.send_signal(signal.SIGTERM)
    run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM
    assert until(lambda: not marked(forked)), "the run's workers outlived it"


def test_a_server_that_ended_is_started_again_and_closing_ends_it(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    runner = PlaybookRunner(str(tmp_path), str(tmp_path / "artifacts"), env={"JVE_TEST_RUN": "x"})
    try:
        assert runner.run("play.yml", ("ns", "pool"), {}).ok
        first = runner.fork_server.pid
        os.kill(first, signal.SIGKILL)
        assert until(lambda: runner.fork_server.pid is None)
        result = runner.run("play.yml", ("ns", "pool"), {})
        assert result.ok, result.message
        assert runner.fork_server.starts == 2 and runner.fork_server.pid not in (None, first)
        second = runner.fork_server.pid
    finally:
        runner.close()
    assert not alive(second)
    assert not Path(runner.fork_server.directory).exists()


# A censored failure the play ignores, then the failure the play reports
# (roles/qemu_baremetal/tasks/hosts.yml's pattern).
IGNORED_THEN_FAILED_PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Fail with a secret in the result
      ansible.builtin.fail:
        msg: "the token is s3cret"
      register: censored
      no_log: true
      ignore_errors: true
    - name: Say what failed
      ansible.builtin.fail:
        msg: "host lab9: {{ censored.msg | replace('s3cret', '********') }}"
"""


def test_the_failure_message_is_the_first_failure_the_play_does_not_ignore(tmp_path):
    (tmp_path / "play.yml").write_text(IGNORED_THEN_FAILED_PLAYBOOK)
    with PlaybookRunner(str(tmp_path), str(tmp_path / "artifacts")) as runner:
        result = runner.run("play.yml", ("ns", "pool"), {})
    assert not result.ok
    assert result.message == "task 'Say what failed' failed: host lab9: the token is ********", result.message
