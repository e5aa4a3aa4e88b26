"""Prometheus metrics and the health endpoints, served on one port."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

SET_LABELS = ("namespace", "exporterset")


PREFIX = "jumpstarter_exporterset_"


class Metrics:
    def __init__(self) -> None:
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

    def observe_set(self, namespace: str, name: str, status: dict, demand: int) -> None:
        for field, gauge in self.replicas.items():
            gauge.labels(namespace, name).set(status.get(field, 0))
        self.pending_demand.labels(namespace, name).set(demand)

    def forget_set(self, namespace: str, name: str) -> None:
        for metric in (*self.replicas.values(), self.pending_demand):
            try:
                metric.remove(namespace, name)
            except KeyError:
                pass

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def serve(
    address: str,
    port: int,
    metrics: Metrics,
    healthy: Callable[[], list[str]],
    ready: Callable[[], list[str]],
) -> ThreadingHTTPServer:
    """``healthy`` and ``ready`` return what is wrong; nothing means 200 "ok",
    anything means 503 with one problem a line."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path == "/metrics":
                self._send(200, metrics.exposition(), CONTENT_TYPE_LATEST)
            elif self.path in ("/healthz", "/readyz"):
                problems = (healthy if self.path == "/healthz" else ready)()
                if problems:
                    self._send(503, "\n".join(problems).encode() + b"\n")
                else:
                    self._send(200, b"ok")
            else:
                self._send(404, b"not found")

        def _send(self, code: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer((address, port), Handler)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
