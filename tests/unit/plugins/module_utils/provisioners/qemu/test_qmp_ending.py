"""What QMP control makes of a socket nobody serves, and of a QEMU on its way out.

A QEMU that was told to quit keeps its listening socket for a moment: a client
that connects then sees its connection taken and dropped during the handshake.
The listener here does exactly that, on a real Unix socket: before QEMU's
greeting, or after it (the client's first command then meets a closed socket).
"""

import json
import socket as sockets
import threading
import time

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import qmp

GREETING = {"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": ""},
                    "capabilities": []}}


class DroppingListener:
    """A Unix socket that takes every connection and closes it, greeting first or not."""

    def __init__(self, path, greets):
        self.path = str(path)
        self.greets = greets
        self.server = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(8)
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            if self.greets:
                connection.sendall(json.dumps(GREETING).encode() + b"\r\n")
            connection.close()

    def close(self):
        """Stop listening; the socket file stays, as a killed QEMU leaves it."""
        self.closed.set()
        self.server.shutdown(sockets.SHUT_RDWR)
        self.server.close()
        self.thread.join(5)


@pytest.fixture(params=[False, True], ids=["before-greeting", "after-greeting"])
def ending(request, tmp_path):
    listener = DroppingListener(tmp_path / "qmp.sock", greets=request.param)
    yield listener
    if not listener.closed.is_set():
        listener.close()


def test_quit_on_a_qemu_that_is_ending_changes_nothing(ending):
    assert qmp.control_vm(ending.path, "quit", timeout=5) == {
        "changed": False, "status": "absent", "running": False, "before": "absent",
    }


def test_other_commands_on_a_qemu_that_is_ending_say_it_is_ending(ending):
    with pytest.raises(qmp.QmpUnavailable) as raised:
        qmp.control_vm(ending.path, "stop", timeout=5)
    assert raised.value.ending
    assert ending.path in str(raised.value)
    assert qmp.vm_status(ending.path, timeout=5) is None


def test_a_socket_left_behind_or_missing_is_not_ending(ending, tmp_path):
    ending.close()
    for path in (ending.path, str(tmp_path / "missing" / "qmp.sock")):
        with pytest.raises(qmp.QmpUnavailable) as raised:
            qmp.control_vm(path, "status", timeout=5)
        assert not raised.value.ending, path


def test_the_wait_after_quit_lasts_until_nothing_listens(ending):
    closer = threading.Timer(0.5, ending.close)
    closer.start()
    try:
        qmp._wait_until_gone(ending.path, time.monotonic() + 10)
        assert ending.closed.is_set()
    finally:
        closer.cancel()


def test_the_wait_after_quit_names_the_socket_when_qemu_stays(ending):
    with pytest.raises(TimeoutError, match="still listens on .*qmp.sock"):
        qmp._wait_until_gone(ending.path, time.monotonic() + 0.3)
