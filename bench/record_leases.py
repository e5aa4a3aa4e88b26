"""Records days of lease history on a private test bed, compressed in time.

    source scripts/common.sh && link_collection && export PATH=$VENV_DIR/bin:$PATH
    python bench/record_leases.py [--days 2] [--compression 60] [--seed 7] [--out bench/traces/bed-day.json]

A private bed (etcd, kube-apiserver, kwok), the Jumpstarter controller
stand-in serving its namespace (``serve_namespace``: it assigns and ends the
Leases, and plays the exporter process of each running Pod) and the
operator keeping one ExporterSet, reset in place (``InPlaceReuse``, so the
controller keeps the ended Leases). A lessee thread creates the day's
Leases at their times, each with its ``duration``; the controller assigns
them and ends them when they expire. A watch on Leases records, for every
Lease, the moment it was first seen, began (``status.beginTime`` set) and
ended (``status.ended``), on the recorder's clock, and the API server's own
stamps (whole seconds).

Time is compressed: one second of the run is ``--compression`` seconds of
the day (60 by default: a day in 24 minutes, a 10-minute lease in 10 s),
and the set's cooldown is compressed with it. The trace written keeps the
run's seconds; ``bench_sizing.py --traces bed-day`` multiplies them back.
Cold starts and waits on kwok are not those of QEMU: the bench replays the
arrivals and the lease durations (begin to end) and draws cold starts of
its own; the bed's waits are kept in the file for reference.

Each day's workload (trace time, each day drawn anew): an office day, 0.25 leases a minute from
8:00 to 18:00 (0.08 over lunch), 0.4 an hour at night, a nightly job of
6 leases at 2:00 and a CI fan-out of 4 at the top of every hour 9:00-17:00;
durations lognormal, median 10 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_operator import controller_kubeconfig  # noqa: E402
from jumpstarter_standin import JS  # noqa: E402
from jumpstarter_standin.pytest_plugin import serve_namespace  # noqa: E402
from kubernetes import client, watch  # noqa: E402
from operator_process import OperatorProcess  # noqa: E402
from pool_helpers import make_class, make_set  # noqa: E402
from testbed import TestBed  # noqa: E402

HOUR = 3600.0
DAY = 24 * HOUR
BOARD = {"board": "qemu-x86"}


def day_rate(t):
    """Leases per second at ``t`` seconds into the day (trace time)."""
    hour = t / HOUR
    if 8 <= hour < 18:
        return (0.08 if 12 <= hour < 13 else 0.25) / 60.0
    return 0.4 / HOUR


def workload(rng):
    """``(created, duration)`` pairs of the day, trace seconds, sorted."""
    peak = max(day_rate(t) for t in range(0, int(DAY), 300))
    arrivals, t = [], 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= DAY:
            break
        if rng.random() * peak < day_rate(t):
            arrivals.append(t)
    arrivals += [2 * HOUR + rng.uniform(0, 60) for _ in range(6)]
    arrivals += [hour * HOUR + rng.uniform(0, 20) for hour in range(9, 18) for _ in range(4)]
    return sorted((a, rng.lognormvariate(math.log(600.0), 0.5)) for a in arrivals)


class LeaseLog:
    """Every Lease of the namespace: first seen, begun, ended, on this
    process's clock (seconds since ``origin``), with the API's stamps."""

    def __init__(self, api, namespace, origin):
        self.custom = client.CustomObjectsApi(api)
        self.namespace, self.origin = namespace, origin
        self.leases: dict[str, dict] = {}
        self.error = None
        self.stopped = False
        self.restarts = 0
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        version = self.custom.list_namespaced_custom_object(*JS, self.namespace, "leases")["metadata"][
            "resourceVersion"]
        while not self.stopped:
            try:
                for event in self._watch.stream(self.custom.list_namespaced_custom_object, *JS, self.namespace,
                                                "leases", resource_version=version, timeout_seconds=60):
                    version = event["object"]["metadata"]["resourceVersion"]
                    self._seen(event["object"])
            except Exception as exc:  # noqa: BLE001 - a watch that ends (410 included) is listed again
                if self.stopped:
                    return
                self.error, self.restarts = repr(exc), self.restarts + 1
                version = self.custom.list_namespaced_custom_object(*JS, self.namespace, "leases")[
                    "metadata"]["resourceVersion"]

    def _seen(self, obj):
        at = time.time() - self.origin
        meta, status = obj["metadata"], obj.get("status") or {}
        entry = self.leases.setdefault(meta["name"], {"seen": round(at, 3),
                                                      "created": meta.get("creationTimestamp")})
        if status.get("beginTime") and "begun" not in entry:
            entry["begun"], entry["beginTime"] = round(at, 3), status["beginTime"]
            entry["exporter"] = (status.get("exporterRef") or {}).get("name")
        if status.get("ended") and "ended" not in entry:
            entry["ended"], entry["endTime"] = round(at, 3), status.get("endTime")

    def stop(self):
        self.stopped = True
        self._watch.stop()


def drive(standin, plan, compression, origin, planned):
    """Creates each Lease of ``plan`` at its compressed time; ``planned``:
    name -> the time it was meant for and its requested duration."""
    for index, (created, duration) in enumerate(plan):
        delay = origin + created / compression - time.time()
        if delay > 0:
            time.sleep(delay)
        name = f"day-{index:04d}"
        standin.create_lease(name, BOARD, duration=f"{duration / compression:.3f}s")
        planned[name] = {"planned": round(created / compression, 3), "duration": round(duration / compression, 3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compression", type=float, default=60.0, help="trace seconds per second of the run")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--days", type=int, default=1, help="days of the workload, each drawn anew")
    parser.add_argument("--hours", type=float, help="how much of the days to drive (trace hours; all by default)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "traces" / "bed-day.json"))
    args = parser.parse_args()

    rng = random.Random(args.seed)
    args.hours = 24.0 * args.days if args.hours is None else args.hours
    plan = [(day * DAY + a, d) for day in range(args.days) for a, d in workload(rng)
            if day * DAY + a < args.hours * HOUR]
    namespace = "record-day"
    cooldown = f"{300.0 / args.compression:.0f}s"
    print(f"{len(plan)} leases over {args.hours} h, compressed {args.compression}x: "
          f"{args.hours * HOUR / args.compression / 60:.1f} min", flush=True)
    with tempfile.TemporaryDirectory(prefix="jve-record-") as tmp:
        bed = TestBed(Path(tmp) / "bed")
        bed.up()
        try:
            controller = controller_kubeconfig(bed, Path(tmp))
            with bed.api_client() as api, serve_namespace(controller, namespace) as standin:
                custom = client.CustomObjectsApi(api)
                make_class(custom, namespace)
                make_set(custom, namespace, minAvailableReplicas=2, maxReplicas=30,
                         scaleDownCooldown=cooldown, recycleStrategy="InPlaceReuse")
                proc = OperatorProcess(str(bed.kubeconfig), namespace, Path(tmp)).start()
                proc.wait_ready(timeout=600)
                origin = time.time()
                log, planned = LeaseLog(api, namespace, origin), {}
                try:
                    drive(standin, plan, args.compression, origin, planned)
                    # Until the last Lease has ended (they expire on their own).
                    deadline = time.time() + 2 * max(d for _, d in plan) / args.compression + 120
                    while time.time() < deadline and not all("ended" in e for e in list(log.leases.values())):
                        time.sleep(1.0)
                finally:
                    log.stop()
                    proc.stop()
        finally:
            bed.down(remove=True)
    leases = [dict(name=name, **planned.get(name, {}), **entry)
              for name, entry in sorted(dict(log.leases).items())]
    out = {
        "what": "lease history recorded on the bed (kwok, the Jumpstarter stand-in, the operator), "
                "times in seconds of the run since its start; one second of the run is `compression` "
                "seconds of the day",
        "command": "python bench/record_leases.py " + " ".join(sys.argv[1:]),
        "recorded_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "compression": args.compression, "seed": args.seed, "days": args.days, "hours": args.hours,
        "set": {"minAvailableReplicas": 2, "recycleStrategy": "InPlaceReuse", "scaleDownCooldown": cooldown},
        "watch_restarts": log.restarts, "watch_error": log.error,
        "leases": leases,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=0) + "\n")
    begun = [e for e in leases if "begun" in e]
    print(f"{len(leases)} leases recorded, {len(begun)} begun, "
          f"{sum('ended' in e for e in leases)} ended -> {args.out}", flush=True)


if __name__ == "__main__":
    main()
