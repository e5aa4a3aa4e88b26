"""The in-place reset's exec (api/core.py ``CoreApi.exec``) keeps a bounded
end of what the command writes, however much and however fast it writes.

The API server's side of an exec is played by a WebSocket server on loopback
that speaks the channel protocol (v4.channel.k8s.io: one channel byte before
each frame's data, the exit Status on channel 3); the client is the
kubernetes client's own WebSocket, as the reset uses it."""

import base64
import hashlib
import json
import socket
import struct
import threading

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import core as k8s_core
from kubernetes import client

STDOUT, ERROR = 1, 3


def frame(channel, data):
    """A server's (unmasked) binary WebSocket frame of ``data`` on ``channel``."""
    payload = bytes([channel]) + data
    size = len(payload)
    if size < 126:
        length = bytes([size])
    elif size < 1 << 16:
        length = bytes([126]) + struct.pack("!H", size)
    else:
        length = bytes([127]) + struct.pack("!Q", size)
    return b"\x82" + length + payload


class ExecServer:
    """Answers one exec: the handshake, then ``write(connection)``."""

    def __init__(self, write):
        self.write = write
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.sent = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        connection, _ = self.listener.accept()
        with connection:
            head = b""
            while b"\r\n\r\n" not in head:
                head += connection.recv(4096)
            key = next(line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
                       if line.lower().startswith(b"sec-websocket-key:"))
            accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
            connection.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                               b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept
                               + b"\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n")
            try:
                self.write(self, connection)
            except OSError:  # the client went away
                pass

    def send(self, connection, channel, data):
        connection.sendall(frame(channel, data))
        self.sent += len(data) if channel == STDOUT else 0

    def exec(self, timeout):
        configuration = client.Configuration(host=f"http://127.0.0.1:{self.listener.getsockname()[1]}")
        core = k8s_core.CoreApi(client.ApiClient(configuration))
        try:
            return core.exec("ns", "pod", "runtime", ["reset"], timeout)
        finally:
            self.listener.close()


def test_a_command_that_writes_a_lot_and_ends_leaves_the_end_of_its_output():
    chunk = b"x" * 8191 + b"\n"

    def write(server, connection):
        for _ in range(256):  # 2 MiB
            server.send(connection, STDOUT, chunk)
        server.send(connection, STDOUT, b"the last line\n")
        server.send(connection, ERROR, json.dumps({"status": "Success"}).encode())
        connection.sendall(b"\x88\x00")  # close

    server = ExecServer(write)
    code, output = server.exec(30)
    assert code == 0
    assert output.endswith("x\nthe last line\n")
    dropped = server.sent - k8s_core.EXEC_OUTPUT_LIMIT
    assert output.startswith(f"[{dropped} characters of output left out]\n")
    assert len(output) - output.index("\n") - 1 == k8s_core.EXEC_OUTPUT_LIMIT


def test_a_command_that_never_stops_writing_ends_at_the_timeout_with_a_bounded_output():
    stop = threading.Event()

    def write(server, connection):
        while not stop.is_set():
            server.send(connection, STDOUT, b"y" * 65536)

    server = ExecServer(write)
    answered = {}
    caller = threading.Thread(target=lambda: answered.update(result=server.exec(1)), daemon=True)
    caller.start()
    caller.join(20)
    stop.set()
    assert not caller.is_alive(), "exec did not end at its timeout"
    code, output = answered["result"]
    assert code is None and output.endswith("(no end after 1 s)")
    assert len(output) < k8s_core.EXEC_OUTPUT_LIMIT + 100 < server.sent


@pytest.mark.parametrize("limit", [1, 10, 1000])
def test_the_bound_keeps_the_last_characters(limit):
    class Stream:
        """A stream of three writes, then its end."""

        def __init__(self):
            self.writes = ["abc", "defgh", "ij" * 600]

        def is_open(self):
            return bool(self.writes)

        def update(self, timeout):
            self.current = self.writes.pop(0)

        def read_channel(self, channel):
            text, self.current = (self.current, "") if channel == STDOUT else ("", self.current)
            return text

    everything = "abcdefgh" + "ij" * 600
    output = k8s_core.read_bounded(Stream(), 10, limit=limit)
    kept = everything[-limit:]
    assert output == f"[{len(everything) - limit} characters of output left out]\n{kept}"
