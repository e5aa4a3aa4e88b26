"""The operator's two servers (metrics.py): their addresses as upstream's
controller takes them, and what idle, slow and oversize clients cost. Real
sockets on loopback; every wait is on a socket, none is a sleep."""

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from exporterset_operator.__main__ import parse_args
from exporterset_operator.metrics import MAX_HEAD_BYTES, bind_address, serve
from hypothesis import given, settings
from hypothesis import strategies as st

# Within what a kubelet gives a probe (timeoutSeconds: 1).
PROBE_SECONDS = 1.0


def get(port, path, timeout=PROBE_SECONDS):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def probes():
    """A probes server; ``threads_then``: the threads once it has started."""
    server = serve("127.0.0.1", 0, None, healthy=lambda: [], ready=lambda: [], name="probes", head_seconds=0.5)
    server.threads_then = set(threading.enumerate())
    yield server
    server.shutdown()


def test_the_addresses_as_upstreams_controller_writes_them():
    assert bind_address(":8081") == ("0.0.0.0", 8081)
    assert bind_address("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert bind_address("[::1]:8443") == ("::1", 8443)
    assert bind_address("0") is None
    for bad in ("8080", "host:", ":0", ":65536", "host:http"):
        with pytest.raises(ValueError, match="host:port"):
            bind_address(bad)


def test_the_flags_default_to_metrics_on_8080_and_probes_on_8081_and_0_turns_either_off():
    args = parse_args([])
    assert (args.metrics_bind_address, args.health_probe_bind_address) == (("0.0.0.0", 8080), ("0.0.0.0", 8081))
    # What the Jumpstarter operator's slot passes.
    args = parse_args(["--health-probe-bind-address=:8081", "--metrics-bind-address=0"])
    assert (args.metrics_bind_address, args.health_probe_bind_address) == (None, ("0.0.0.0", 8081))
    with pytest.raises(SystemExit):
        parse_args(["--metrics-bind-address=8080"])


def test_the_env_names_both_addresses(monkeypatch):
    monkeypatch.setenv("METRICS_BIND_ADDRESS", "127.0.0.1:9090")
    monkeypatch.setenv("HEALTH_PROBE_BIND_ADDRESS", "0")
    args = parse_args([])
    assert (args.metrics_bind_address, args.health_probe_bind_address) == (("127.0.0.1", 9090), None)


def test_the_probes_server_answers_only_the_probes(probes):
    port = probes.server_address[1]
    assert get(port, "/readyz") == (200, "ok")
    assert get(port, "/metrics") == (404, "not found")


def test_idle_and_slow_clients_take_no_thread_and_the_probes_still_answer(probes):
    """Three hundred connections that never finish their request head (half
    send nothing, half a line at a time): the server keeps its own threads,
    and a probe made among them answers within a kubelet's timeout."""
    port = probes.server_address[1]
    clients = []
    try:
        for index in range(300):
            client = socket.create_connection(("127.0.0.1", port))
            if index % 2:
                client.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n")
            clients.append(client)
            if index % 50 == 49:
                started = time.monotonic()
                assert get(port, "/readyz") == (200, "ok")
                assert time.monotonic() - started < PROBE_SECONDS
        assert set(threading.enumerate()) == probes.threads_then
    finally:
        for client in clients:
            client.close()


def test_a_client_that_sends_no_whole_head_is_closed_after_the_head_timeout(probes):
    with socket.create_connection(probes.server_address) as client:
        client.sendall(b"GET /readyz HTTP/1.1\r\n")
        client.settimeout(5)
        assert client.recv(100) == b""  # closed by the server, 0.5 s on


def test_an_oversize_head_is_refused():
    server = serve("127.0.0.1", 0, None, healthy=lambda: [], ready=lambda: [])
    try:
        with socket.create_connection(server.server_address) as client:
            client.settimeout(5)
            client.sendall(b"GET /readyz HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n")
            assert client.recv(100).startswith(b"HTTP/1.1 431 ")
    finally:
        server.shutdown()


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_get_an_answer_or_a_close_and_the_server_keeps_serving(data):
    server = serve("127.0.0.1", 0, None, healthy=lambda: [], ready=lambda: ["not yet"], head_seconds=0.2)
    try:
        with socket.create_connection(server.server_address) as client:
            client.settimeout(5)
            client.sendall(data + b"\r\n\r\n")
            reply = client.recv(4096)
            assert reply == b"" or reply.startswith(b"HTTP/1.1 ")
        assert get(server.server_address[1], "/readyz") == (503, "not yet\n")
    finally:
        server.shutdown()


def test_connections_closed_to_make_room_while_they_send_do_not_stop_the_server():
    """Past its bound the server closes the oldest connection, maybe in the
    very batch of events where that one also sent bytes: it keeps serving."""
    server = serve("127.0.0.1", 0, None, healthy=lambda: [], ready=lambda: [], max_connections=4)
    clients = []
    try:
        for _ in range(200):
            clients.append(socket.create_connection(server.server_address, timeout=2))
            for client in clients[-5:]:
                try:
                    client.sendall(b"G")
                except OSError:  # closed by the server already
                    pass
        assert get(server.server_address[1], "/readyz") == (200, "ok")
    finally:
        for client in clients:
            client.close()
        server.shutdown()
