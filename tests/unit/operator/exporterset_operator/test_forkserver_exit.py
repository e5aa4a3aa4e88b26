"""The fork server ends with the operator, SIGKILL included, whatever its
clients do: an operator process (its ``ForkServer`` forked from it, as
``exporterset_operator`` starts it) is killed while a client holds the
server with a request it never sends, beside a run that is going."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from exporterset_operator import forkserver
from test_forkserver import alive, marked, sleeping_run, until

OPERATOR_DIR = Path(forkserver.__file__).parents[1]
# The operator's part: a fork server forked from it before any thread, as
# the operator's start does; then it waits to be killed.
OPERATOR = """
import sys, time
from exporterset_operator.runner import ForkServer
server = ForkServer()
server.start()
print(server.pid, server.socket, server.binary, flush=True)
time.sleep(600)
"""


class Served:
    """What ``sleeping_run`` needs of a ``ForkServer``: the operator's."""

    def __init__(self, pid, path, binary):
        self.pid, self.socket, self.binary = pid, path, binary
        self.env = {"JVE_FORK_SERVER": path}


def _waiting_in_read(pid):
    """Whether the server sleeps elsewhere than in its loop's epoll: in the
    client's read (a poll with a timeout, or the read itself)."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False
    return wchan not in ("", "0", "do_epoll_wait", "ep_poll")


def test_a_sigkilled_operator_takes_its_fork_server_and_runs_with_it_whatever_a_client_holds(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(OPERATOR_DIR), os.environ.get("PYTHONPATH", "")])}
    operator = subprocess.Popen([sys.executable, "-c", OPERATOR], stdout=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid, path, binary = operator.stdout.readline().split()
        server = Served(int(pid), path, binary)
        run, forked = sleeping_run(server, tmp_path)
        # A client that connected and sends nothing: the server is reading it.
        silent.connect(path)
        assert until(lambda: _waiting_in_read(server.pid), timeout=10), "the server did not read the client"
        operator.kill()
        operator.wait()
        assert until(lambda: not alive(server.pid), timeout=forkserver.REQUEST_TIMEOUT + 10), \
            "the fork server outlived the operator"
        assert until(lambda: not marked(forked), timeout=10), "a run outlived the operator"
        run.wait(timeout=30)
    finally:
        silent.close()
        if operator.poll() is None:
            os.killpg(operator.pid, signal.SIGKILL)
