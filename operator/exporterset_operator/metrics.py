"""Prometheus metrics and the health endpoints, each on a bounded server.

The probes have an address of their own (``--health-probe-bind-address``),
so nothing done to the metrics port (a scrape, a flood) can fail the
kubelet's probes. Both servers are ``BoundedServer``: one thread reads every
connection's request head without blocking, a connection that has not sent
its head within ``HEAD_SECONDS`` is closed, the oldest connection is dropped
once ``MAX_CONNECTIONS`` are open, and a fixed pool of threads answers, so
idle or slow clients cost a file descriptor each and never a thread.
"""

from __future__ import annotations

import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import service_level, sizing
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

SET_LABELS = ("namespace", "exporterset")
# What lessees feel, per set and the provisioner that serves it (no lease or
# Exporter names: one series per set, whatever its traffic).
SERVICE_LABELS = (*SET_LABELS, "provisioner")
WAIT_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
READY_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)


PREFIX = "jumpstarter_exporterset_"


def _remove(metric, *labels) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass


class Metrics:
    def __init__(self, started: float | None = None) -> None:
        """``started``: seconds since the epoch from which lease waits and
        cold starts are observed (by default the first reconcile's)."""
        self.registry = CollectorRegistry()

        def new(kind, name: str, help_text: str, labels=(), **kwargs):
            """A metric ``jumpstarter_exporterset_<name>`` of this registry."""
            return kind(PREFIX + name, help_text, labels, registry=self.registry, **kwargs)

        self.reconcile_duration = new(
            Histogram, "reconcile_duration_seconds", "Time spent in one reconcile of an ExporterSet, by path taken.",
            ["path"], buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )
        self.reconciles = new(
            Counter, "reconciles_total", "Reconciles by outcome (fastpath, status, playbook, error, skipped).",
            ["outcome"],
        )
        self.playbook_runs = new(
            Counter, "playbook_runs_total", "ansible-runner runs of the reconcile playbook by result.", ["result"],
        )
        self.fast_path_hits = new(
            Counter, "fast_path_total", "Reconciles finished in process without running a playbook.",
        )
        self.queue_depth = new(Gauge, "workqueue_depth", "ExporterSets waiting in the work queue.")
        self.backend_runs = new(
            Gauge, "backend_runs", "ExporterSets whose backend run (the reconcile playbook) is queued or in flight.",
        )
        self.scale_ups = new(Counter, "scale_up_total", "Exporters created by scale-up.", SET_LABELS)
        self.scale_downs = new(Counter, "scale_down_total", "Exporters removed by scale-down.", SET_LABELS)
        self.failures = new(
            Counter, "instance_failures_total", "Instances replaced because they failed or never became ready.",
            SET_LABELS,
        )
        self.replicas = {
            field: new(Gauge, metric, help_text, SET_LABELS)
            for field, metric, help_text in (
                ("replicas", "replicas", "Exporters owned by the set."),
                ("readyReplicas", "ready_replicas", "Owned Exporters registered and online."),
                ("availableReplicas", "available_replicas", "Ready, enabled, unleased Exporters."),
                ("leasedReplicas", "leased_replicas", "Owned Exporters serving a lease."),
            )
        }
        self.leader = new(
            Gauge, "leader", "1 while this process leads (or runs without leader election) and reconciles, else 0.",
        )
        self.pending_demand = new(Gauge, "pending_demand", "Pending leases attributed to the set.", SET_LABELS)
        self.lease_wait = new(
            Histogram, "lease_wait_seconds",
            "Lease created (or its asked begin) to begun on an Exporter of the set; served warm or by a cold start.",
            [*SERVICE_LABELS, "served"], buckets=WAIT_BUCKETS,
        )
        self.leases_over_target = new(
            Counter, "leases_over_target_total", "Leases that waited longer than the set's leaseWait target.",
            SERVICE_LABELS,
        )
        self.time_to_ready = new(
            Histogram, "instance_time_to_ready_seconds", "Exporter created to first ready (registered and online).",
            SERVICE_LABELS, buckets=READY_BUCKETS,
        )
        self.idle_seconds = new(
            Counter, "idle_instance_seconds_total", "Instance-seconds of the set's Exporters without a lease.",
            SERVICE_LABELS,
        )
        self.warm_buffer = new(
            Gauge, "warm_buffer", "The warm buffer in force: minAvailableReplicas, or what the leaseWait target chose.",
            SET_LABELS,
        )
        self.wait_target = new(Gauge, "lease_wait_target_seconds", "The set's leaseWait target.", SET_LABELS)
        self.wait_percentile = new(
            Gauge, "lease_wait_target_percentile", "The percentile of the set's leaseWait target.", SET_LABELS,
        )
        # Per set: what has been observed (service_level.Observed) and the
        # provisioner label its series carry.
        self._service: dict[tuple[str, str], service_level.Observed] = {}
        # None: from this process's first look at a set, which a standby
        # makes only once it leads (the leader before it counted the rest).
        self.started = started

    def observe_set(self, namespace: str, name: str, status: dict, demand: int) -> None:
        for field, gauge in self.replicas.items():
            gauge.labels(namespace, name).set(status.get(field, 0))
        self.pending_demand.labels(namespace, name).set(demand)

    def observe_service(self, namespace: str, name: str, provisioner: str, observed: dict, status: dict,
                        now: float) -> None:
        """Observe what is new of the set's lease waits, cold starts and idle
        instances since the last look (service_level.Observed): only what
        happened while this process runs, so a restart neither counts a
        Lease twice nor makes a counter jump."""
        if self.started is None:
            self.started = now
        key = (namespace, name)
        seen = self._service.get(key)
        if seen is None or seen.provisioner != provisioner:
            if seen is not None:
                self._forget_service(key, seen)
            seen = self._service[key] = service_level.Observed(provisioner, self.started)
        labels = (namespace, name, provisioner or "")
        target = sizing.parse_target((observed.get("policy") or {}).get("leaseWait"))[0]
        step = seen.step(observed.get("owned") or (), observed.get("leases") or (), status, now)
        for wait in step.waits:
            self.lease_wait.labels(*labels, wait.served).observe(wait.seconds)
            if target is not None and wait.seconds > target.wait:
                self.leases_over_target.labels(*labels).inc()
        for start in step.cold_starts:
            self.time_to_ready.labels(*labels).observe(start.seconds)
        self.idle_seconds.labels(*labels).inc(step.idle_seconds)
        buffer = (status.get("sizing") or {}).get("buffer")
        self.warm_buffer.labels(namespace, name).set(
            buffer if buffer is not None else ((observed.get("set") or {}).get("spec") or {}).get(
                "minAvailableReplicas") or 0)
        for gauge, value in ((self.wait_target, target and target.wait),
                             (self.wait_percentile, target and target.percentile)):
            if value is None:
                _remove(gauge, namespace, name)
            else:
                gauge.labels(namespace, name).set(value)

    def _forget_service(self, key, seen) -> None:
        labels = (*key, seen.provisioner or "")
        for served in (service_level.WARM, service_level.COLD):
            _remove(self.lease_wait, *labels, served)
        for metric in (self.leases_over_target, self.time_to_ready, self.idle_seconds):
            _remove(metric, *labels)

    def forget_set(self, namespace: str, name: str) -> None:
        for metric in (*self.replicas.values(), self.pending_demand, self.warm_buffer, self.wait_target,
                       self.wait_percentile):
            _remove(metric, namespace, name)
        seen = self._service.pop((namespace, name), None)
        if seen is not None:
            self._forget_service((namespace, name), seen)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


# Per server: connections open at once, the seconds a client has to send its
# request head, the bytes that head may have, the threads that answer and
# the seconds an answer may take to be sent.
MAX_CONNECTIONS = 64
HEAD_SECONDS = 5.0
MAX_HEAD_BYTES = 8192
ANSWER_THREADS = 2
SEND_SECONDS = 5.0

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           431: "Request Header Fields Too Large", 503: "Service Unavailable"}


def bind_address(value: str) -> tuple[str, int] | None:
    """``(host, port)`` of a bind address as controller-runtime writes it
    (``:8081``, ``127.0.0.1:8080``, ``[::1]:8080``); None for ``0``, which
    turns the server off. An empty host is every IPv4 address."""
    value = value.strip()
    if value == "0":
        return None
    host, colon, port = value.rpartition(":")
    if not colon or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not host:port with a port from 1 to 65535 (or 0: off)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", int(port)


def answer(code: int, body: bytes, content_type: str = "text/plain", head_only: bool = False) -> bytes:
    """A whole HTTP/1.1 response that closes its connection."""
    head = (f"HTTP/1.1 {code} {REASONS.get(code, 'Unknown')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return head if head_only else head + body


def response_to(head: bytes, routes: dict[str, Callable[[], tuple[int, bytes, str]]]) -> bytes:
    """The response to a request ``head`` (its bytes up to the blank line)."""
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return answer(400, b"bad request\n")
    method, target = parts[0], parts[1].decode("latin-1").split("?", 1)[0]
    if method not in (b"GET", b"HEAD"):
        return answer(405, b"method not allowed\n")
    route = routes.get(target)
    code, body, content_type = route() if route else (404, b"not found", "text/plain")
    return answer(code, body, content_type, head_only=method == b"HEAD")


class BoundedServer:
    """An HTTP server of GET routes whose threads and connections are bounded
    (the module's docstring); ``server_address`` is where it listens."""

    def __init__(self, host: str, port: int, routes: dict, *, name: str = "http",
                 max_connections: int = MAX_CONNECTIONS, head_seconds: float = HEAD_SECONDS,
                 threads: int = ANSWER_THREADS, clock: Callable[[], float] = time.monotonic):
        self.routes = routes
        self.max_connections = max_connections
        self.head_seconds = head_seconds
        self.clock = clock
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind((host, port))
            self._listener.listen(128)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)
        self.server_address = self._listener.getsockname()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._wake_read, self._wake_write = socket.socketpair()
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        # socket -> (bytes of its head so far, when it was accepted); in the
        # order accepted, so the oldest is first.
        self._open: dict[socket.socket, tuple[bytearray, float]] = {}
        self._answers: queue.Queue = queue.Queue(maxsize=max_connections)
        self._stopped = threading.Event()
        self.threads = [threading.Thread(target=self._read_heads, name=f"{name}-heads", daemon=True)]
        self.threads += [threading.Thread(target=self._answer, name=f"{name}-{index}", daemon=True)
                         for index in range(threads)]
        for thread in self.threads:
            thread.start()

    # -- the one thread that reads request heads -----------------------------
    def _read_heads(self) -> None:
        while not self._stopped.is_set():
            oldest = next(iter(self._open.values()), None)
            wait = None if oldest is None else max(0.0, oldest[1] + self.head_seconds - self.clock())
            for key, _ in self._selector.select(wait):
                if key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj is self._wake_read:
                    return
                elif key.fileobj in self._open:  # not closed by an accept of this same batch
                    self._read(key.fileobj)
            self._expire()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of file descriptors: the backlog waits
                return
            if len(self._open) >= self.max_connections:
                self._close(next(iter(self._open)))
            connection.setblocking(False)
            self._open[connection] = (bytearray(), self.clock())
            self._selector.register(connection, selectors.EVENT_READ)

    def _read(self, connection: socket.socket) -> None:
        head = self._open[connection][0]
        try:
            data = connection.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(connection)
            return
        head += data
        end = head.find(b"\r\n\r\n")
        if end < 0 and len(head) <= MAX_HEAD_BYTES:
            return
        self._selector.unregister(connection)
        del self._open[connection]
        request = bytes(head[:end]) if 0 <= end <= MAX_HEAD_BYTES else None
        try:
            self._answers.put_nowait((connection, request))
        except queue.Full:
            connection.close()

    def _expire(self) -> None:
        now = self.clock()
        while self._open:
            connection, (_, accepted) = next(iter(self._open.items()))
            if now - accepted < self.head_seconds:
                return
            self._close(connection)

    def _close(self, connection: socket.socket) -> None:
        self._selector.unregister(connection)
        del self._open[connection]
        connection.close()

    # -- the threads that answer ---------------------------------------------
    def _answer(self) -> None:
        while True:
            item = self._answers.get()
            if item is None:
                return
            connection, request = item
            try:
                reply = (answer(431, b"request head too large\n") if request is None
                         else response_to(request, self.routes))
                connection.settimeout(SEND_SECONDS)  # the whole sendall, not each send
                connection.sendall(reply)
            except Exception:  # noqa: BLE001 - a client's or a route's failure ends its connection only
                log.debug("answer failed", exc_info=True)
            finally:
                connection.close()

    def shutdown(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._wake_write.send(b"x")
        self.threads[0].join(5)
        for connection in list(self._open):
            self._close(connection)
        for _ in self.threads[1:]:
            self._answers.put(None)
        for thread in self.threads[1:]:
            thread.join(SEND_SECONDS + 1)
        self._selector.close()
        for sock in (self._listener, self._wake_read, self._wake_write):
            sock.close()

    def server_close(self) -> None:
        """What ``http.server``'s servers call after ``shutdown``: all done there."""
        self.shutdown()


def probe_routes(healthy: Callable[[], list[str]], ready: Callable[[], list[str]]) -> dict:
    """``/healthz`` and ``/readyz``: ``healthy`` and ``ready`` return what is
    wrong; nothing means 200 "ok", anything means 503 with one problem a line."""

    def route(check):
        def probe():
            problems = check()
            return (503, "\n".join(problems).encode() + b"\n", "text/plain") if problems else (200, b"ok", "text/plain")
        return probe

    return {"/healthz": route(healthy), "/readyz": route(ready)}


def serve(
    address: str,
    port: int,
    metrics: Metrics | None,
    healthy: Callable[[], list[str]] | None = None,
    ready: Callable[[], list[str]] | None = None,
    name: str = "http",
    **bounds,
) -> BoundedServer:
    """A ``BoundedServer`` of ``/metrics`` (with ``metrics``) and the probes
    (with ``healthy`` and ``ready``)."""
    routes = {}
    if metrics is not None:
        routes["/metrics"] = lambda: (200, metrics.exposition(), CONTENT_TYPE_LATEST)
    if healthy is not None and ready is not None:
        routes.update(probe_routes(healthy, ready))
    return BoundedServer(address, port, routes, name=name, **bounds)
