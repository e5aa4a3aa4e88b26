"""The ``ansible-playbook`` that ansible-runner starts for the operator: it
asks the operator's fork server (forkserver.py) to run the playbook in a
process forked from one that has imported Ansible already, and ends as
that run ends, with its exit code.

It runs as ``python -IS`` (the standard library only, started in
milliseconds) and hands the server its command line, environment, working
directory and its standard input, output and error themselves, so that
the run writes to ansible-runner's terminal as ``ansible-playbook`` would.
The run ignores the signals this process was started with ignored, as
``ansible-playbook`` started here would; the others of those ansible-runner
sends to stop a run (HUP, INT, TERM) are passed on to the run's process
group; should this process be killed, the server
sees the connection close and kills the run.

Without a server (``JVE_FORK_SERVER`` unset), or when it cannot be
reached or cannot serve this environment, it runs ``ansible-playbook``
itself, and says why on standard error.
"""

import array
import json
import os
import signal
import socket
import struct
import sys

SERVER_ENV = "JVE_FORK_SERVER"
PLAYBOOK_ENV = "JVE_ANSIBLE_PLAYBOOK"
# A reply line is one JSON object: {"pid": N} once the run started,
# {"rc": N} when it ended, {"cold": reason} when the server cannot run it.
MAX_REPLY = 65536


def cold(reason):
    """Run ``ansible-playbook`` in this process instead."""
    playbook = os.environ.get(PLAYBOOK_ENV) or "ansible-playbook"
    if reason:
        sys.stderr.write(f"fork server: {reason}; running {playbook} itself\n")
        sys.stderr.flush()
    try:
        os.execvp(playbook, [playbook] + sys.argv[1:])
    except OSError as exc:
        sys.stderr.write(f"fork server: cannot run {playbook}: {exc.strerror}\n")
        sys.exit(127)


def ignored_signals():
    """The signals this process was started with ignored (ansible-runner's
    terminal leaves SIGHUP so): ``ansible-playbook`` started here would
    ignore them too."""
    return [int(signum) for signum in signal.valid_signals()
            if signum not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(signum) == signal.SIG_IGN]


def request(conn, ignored):
    """Send the command line, environment, directory and the signals to
    ignore, with fds 0, 1, 2."""
    body = json.dumps({"argv": ["ansible-playbook"] + sys.argv[1:], "env": dict(os.environ),
                       "cwd": os.getcwd(), "ignored_signals": ignored}).encode()
    fds = array.array("i", [0, 1, 2])
    conn.sendmsg([struct.pack("!I", len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    conn.sendall(body)


def replies(conn):
    """The server's reply lines, as they come."""
    pending = b""
    while True:
        chunk = conn.recv(4096)
        if not chunk:
            return
        pending += chunk
        if len(pending) > MAX_REPLY:
            return
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            yield json.loads(line)


def main():
    path = os.environ.get(SERVER_ENV)
    if not path:
        cold(None)
    ignored = ignored_signals()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        request(conn, ignored)
    except OSError as exc:
        cold(f"cannot reach {path}: {exc.strerror or exc}")
    run = {}

    def forward(signum, frame):
        if "pid" in run:
            try:
                os.killpg(run["pid"], signum)
            except ProcessLookupError:
                pass
        else:
            sys.exit(128 + signum)

    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        if signum not in ignored:  # the run ignores it too
            signal.signal(signum, forward)
    try:
        for reply in replies(conn):
            if "cold" in reply:
                conn.close()
                cold(reply["cold"])
            if "pid" in reply:
                run["pid"] = reply["pid"]
            if "rc" in reply:
                sys.exit(reply["rc"])
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"fork server: lost the run: {exc}\n")
        sys.exit(1)
    sys.stderr.write("fork server: the server ended before the run did\n")
    sys.exit(1)


if __name__ == "__main__":
    main()
