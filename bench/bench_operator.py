"""Operator benchmark on a private test bed; prints its figures and writes JSON.

    source scripts/common.sh && link_collection && export PATH=$VENV_DIR/bin:$PATH
    python bench/bench_operator.py [--events 30] [--fill 50] [--rss-sets 100] [--rss-per-set 10]
        [--json bench/results/operator.json]

Every namespace it makes is served by the Jumpstarter controller stand-in
(``serve_namespace`` of ``tests/jumpstarter_standin/``), as a test's is: its
reconcile loops issue credentials and assign leases on their own, and the
exporter process of every running Pod registers with it over gRPC with the
config the operator wrote. It talks to the API server as its own user, so
the audit log tells its requests from the operator's.

Figures:
- event → first create: a lease takes the last warm exporter; time until the
  replacement Exporter is seen through a watch (p50/p95 over --events); the
  controller then assigns the lease before the next event;
- fill: an empty set asks for --fill warm exporters; time until all exist and
  until all are available (credentials from the controller, Online once the
  Pods' exporter processes register);
- burst: 20 pending leases with nothing available; time until 20 new Exporters exist;
- shrink: 20 idle → 2 with a 5 s cooldown; time until 2 remain;
- no-op reconcile: CPU time of a reconcile that has nothing to do, measured
  in process on the operator's own code over a pool of 10;
- RSS of the operator with 100 sets × 10 Exporters, all available;
- API writes per steady-state reconcile, from the API server's audit log.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from jumpstarter_standin import wait_for  # noqa: E402
from jumpstarter_standin.pytest_plugin import serve_namespace  # noqa: E402
from kubernetes import client  # noqa: E402
from operator_process import OperatorProcess  # noqa: E402
from pool_helpers import GROUP, SET_LABEL, make_class, make_set, settle_pool  # noqa: E402
from testbed import TestBed, issue_certificate  # noqa: E402

# The user the controller stand-in authenticates as (see controller_kubeconfig).
CONTROLLER_USER = "jumpstarter-controller"
# The set's dormant Exporter (no backend, never Online) exists only while the
# set has no other enabled Exporter, so that the controller keeps a lease for
# the set pending instead of ending it: not a member of the pool.
DORMANT = "virtualtarget.jumpstarter.dev/dormant"


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def pool_members(standin, name="pool"):
    """The set's Exporters, its dormant one left out."""
    return [e for e in standin.exporters(f"{SET_LABEL}={name}")
            if DORMANT not in (e["metadata"].get("annotations") or {})]


def controller_kubeconfig(bed, workdir):
    """A kubeconfig for the controller stand-in, with its own client
    certificate: its requests carry its own user in the audit log, as a
    deployed controller's carry its service account."""
    certificate, key = issue_certificate(bed.pki_dir, workdir, CONTROLLER_USER,
                                         f"/O=system:masters/CN={CONTROLLER_USER}", "client.ext", days=2)
    path = workdir / f"{CONTROLLER_USER}.kubeconfig"
    bed.write_kubeconfig(path, CONTROLLER_USER, certificate, key)
    return path


class ExporterWatch:
    """Times when Exporters of a namespace are first seen, through the
    operator's own informer (list, watch, reconnect)."""

    def __init__(self, api, namespace):
        from exporterset_operator.controller import RESOURCES
        from exporterset_operator.informer import Informer

        self.seen: dict[str, float] = {}
        resource = next(r for r in RESOURCES if r.kind == "Exporter")
        self._informer = Informer(resource, api, namespace=namespace, handlers=[self._on_event])
        self._informer.start()
        self._informer.synced.wait(30)

    def _on_event(self, event_type, obj, previous):
        if event_type == "ADDED":
            self.seen.setdefault(obj["metadata"]["name"], time.monotonic())

    def stop(self):
        self._informer.stop()


def plan_now(api, namespace, name="pool"):
    """What the operator would plan right now, read from the API (for a failure report)."""
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s.reconcile_pass import read_namespace

    objects = read_namespace(api, namespace)
    exporter_set = next(s for s in objects["ExporterSet"] if s["metadata"]["name"] == name)
    observed = k8s_observe.observe(exporter_set, objects, datetime.now(UTC))
    plan = k8s_observe.plan_for(exporter_set, observed)
    return {"pending": [lease["metadata"]["name"] for lease in observed["pending"]],
            "annotations": exporter_set["metadata"].get("annotations"),
            "plan": {k: v for k, v in plan.items() if k not in ("parameters", "images")}}


def bench_event_to_create(bed, api, workdir, controller, events):
    namespace = "bench-latency"
    custom = client.CustomObjectsApi(api)
    with serve_namespace(controller, namespace) as standin:
        make_class(custom, namespace)
        make_set(custom, namespace, minAvailableReplicas=1, maxReplicas=0)
        proc = OperatorProcess(str(bed.kubeconfig), namespace, workdir).start()
        proc.wait_ready()
        exporters = ExporterWatch(api, namespace)
        latencies = []
        try:
            for index in range(events):
                settle_pool(standin, 1, custom, namespace, leasedReplicas=index, timeout=120)
                known = set(exporters.seen)
                lease = f"lease-{index}"
                # The pending lease is the event: it is demand for the set
                # before the controller even assigns it.
                started = time.monotonic()
                standin.create_lease(lease, {"board": "qemu-x86"})
                new = wait_for(lambda known=known: set(exporters.seen) - known, timeout=60, interval=0.005,
                               message=f"replacement exporter for lease {index}")
                latencies.append(exporters.seen[min(new)] - started)
                # The controller gives the lease the warm exporter on its own.
                standin.wait_assigned(lease, timeout=120)
        except AssertionError:
            print(proc.log_tail(40), file=sys.stderr)
            print(json.dumps(plan_now(api, namespace), indent=1, default=str)[:6000], file=sys.stderr)
            raise
        finally:
            exporters.stop()
            proc.stop()
    return {"events": len(latencies), "p50_s": percentile(latencies, 0.5), "p95_s": percentile(latencies, 0.95),
            "max_s": max(latencies)}


def bench_fill_burst_shrink(bed, api, workdir, controller, fill):
    results = {}
    namespace = "bench-fill"
    custom = client.CustomObjectsApi(api)
    with serve_namespace(controller, namespace) as standin:
        make_class(custom, namespace)
        proc = OperatorProcess(str(bed.kubeconfig), namespace, workdir).start()
        proc.wait_ready()
        try:
            started = time.monotonic()
            make_set(custom, namespace, minAvailableReplicas=fill, maxReplicas=0, scaleDownCooldown="5s")
            wait_for(lambda: len(pool_members(standin)) >= fill, timeout=600, interval=0.05,
                     message=f"{fill} exporters")
            results["fill_exist_s"] = time.monotonic() - started
            settle_pool(standin, fill, custom, namespace, timeout=900)
            results["fill_available_s"] = time.monotonic() - started

            # Empty the pool first (not timed), then the burst.
            custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                                  {"spec": {"minAvailableReplicas": 0, "minReplicas": 0}})
            wait_for(lambda: not pool_members(standin), timeout=600, message="empty pool")
            before = {e["metadata"]["name"] for e in standin.exporters()}
            started = time.monotonic()
            burst = [f"burst-{index}" for index in range(20)]
            for lease in burst:
                standin.create_lease(lease, {"board": "qemu-x86"})
            wait_for(lambda: len({e["metadata"]["name"] for e in pool_members(standin)} - before) >= 20,
                     timeout=300, interval=0.05, message="20 exporters for the burst")
            results["burst_20_created_s"] = time.monotonic() - started

            # The controller gives every burst lease an exporter as it comes
            # online (not timed); their end drops the demand, and the used
            # exporters are replaced.
            for lease in burst:
                standin.wait_assigned(lease, timeout=600)
            for lease in burst:
                standin.release(lease)
            # 20 idle → 2 after the 5 s cooldown.
            custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                                  {"spec": {"minAvailableReplicas": 20}})
            settle_pool(standin, 20, custom, namespace, timeout=600, replicas=20, leasedReplicas=0)
            started = time.monotonic()
            custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                                  {"spec": {"minAvailableReplicas": 2}})
            wait_for(lambda: len(pool_members(standin)) == 2, timeout=300, interval=0.05,
                     message="2 remaining")
            results["shrink_20_to_2_s_including_5s_cooldown"] = time.monotonic() - started
        except AssertionError:
            print(proc.log_tail(40), file=sys.stderr)
            raise
        finally:
            proc.stop()
    return results


def bench_noop_reconcile(rounds=2000):
    """CPU per no-op reconcile, on the operator's own code with an in-memory cache."""
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
    from exporterset_operator.metrics import Metrics
    from exporterset_operator.reconciler import Reconciler

    now = datetime.now(UTC)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    exporter_set = {
        "metadata": {"name": "pool", "namespace": "ns", "uid": "uid-set", "generation": 1,
                     "finalizers": ["virtualtarget.jumpstarter.dev/teardown"], "annotations": {}},
        "spec": {"virtualTargetClassName": "c", "minAvailableReplicas": 10, "maxReplicas": 20,
                 "selector": {"matchLabels": {"board": "x"}},
                 "template": {"metadata": {"labels": {"board": "x"}}, "spec": {"drivers": []}}},
    }
    vclass = {"metadata": {"name": "c", "namespace": "ns"},
              "spec": {"provisioner": "qemu.jumpstarter.dev", "parameters": {"resources": {"memory": "1Gi"}}}}
    ready = [{"type": t, "status": "True", "reason": "R", "message": "", "lastTransitionTime": stamp}
             for t in ("Registered", "Online")]
    exporters = [
        {"metadata": {"name": f"pool-{i}", "namespace": "ns", "uid": f"uid-{i}", "creationTimestamp": stamp,
                      "labels": {"board": "x", SET_LABEL: "pool"},
                      "annotations": {"virtualtarget.jumpstarter.dev/first-ready": stamp},
                      "ownerReferences": [{"uid": "uid-set", "controller": True, "kind": "ExporterSet",
                                           "name": "pool"}]},
         "spec": {"enabled": True}, "status": {"conditions": ready, "credential": {"name": "c"}}}
        for i in range(10)
    ]
    pods = [{"metadata": {"name": f"pool-{i}", "namespace": "ns", "creationTimestamp": stamp,
                          "labels": {SET_LABEL: "pool", "virtualtarget.jumpstarter.dev/exporter": f"pool-{i}"},
                          "ownerReferences": [{"uid": f"uid-{i}", "controller": True, "kind": "Exporter",
                                               "name": f"pool-{i}"}]},
             "status": {"phase": "Running"}} for i in range(10)]

    class Cache:
        def __init__(self, items):
            self.items = items

        def list(self, namespace=None):
            return self.items

        def get(self, namespace, name):
            return next((o for o in self.items if o["metadata"]["name"] == name), None)

    caches = {"ExporterSet": Cache([exporter_set]), "VirtualTargetClass": Cache([vclass]),
              "Exporter": Cache(exporters), "Lease": Cache([]), "Pod": Cache(pods)}
    # Settle the set's annotations and status as the operator would have written them.
    for _ in range(3):
        plan = scale_plan(exporter_set, vclass, exporters, [], now,
                          instances={p["metadata"]["name"]: {"phase": "Running"} for p in pods})
        exporter_set["status"] = plan["status"]
        exporter_set["metadata"]["annotations"].update(
            {k: v for k, v in plan["set_annotations"].items() if v is not None})
        for name, patch in plan["exporter_annotations"].items():
            target = next(e for e in exporters if e["metadata"]["name"] == name)
            target["metadata"]["annotations"].update({k: v for k, v in patch.items() if v is not None})
    reconciler = Reconciler(caches, None, None, Metrics(), {"qemu.jumpstarter.dev"}, clock=lambda: now)
    result = reconciler.reconcile(("ns", "pool"))
    assert result.path == "fastpath", result
    started = time.process_time()
    for _ in range(rounds):
        reconciler.reconcile(("ns", "pool"))
    return {"noop_reconcile_cpu_ms": (time.process_time() - started) / rounds * 1000}


def bench_rss_and_writes(bed, api, workdir, controller, sets=100, per_set=10):
    namespace = "bench-rss"
    with serve_namespace(controller, namespace) as standin:
        return _rss_and_writes(bed, api, workdir, standin, namespace, sets, per_set)


def _rss_and_writes(bed, api, workdir, standin, namespace, sets, per_set):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    for index in range(sets):
        make_set(custom, namespace, name=f"set-{index:03d}", board=f"b{index}",
                 minAvailableReplicas=per_set, maxReplicas=per_set)
    proc = OperatorProcess(str(bed.kubeconfig), namespace, workdir).start()
    try:
        proc.wait_ready()
        wait_for(lambda: sum(DORMANT not in (e["metadata"].get("annotations") or {}) for e in standin.exporters())
                 >= sets * per_set, timeout=900, interval=1, message=f"{sets * per_set} exporters")

        # Every set full of available exporters: nothing left to change.
        def settled():
            items = custom.list_namespaced_custom_object(*GROUP, namespace, "exportersets")["items"]
            return sum((i.get("status") or {}).get("availableReplicas", 0) for i in items) == sets * per_set

        wait_for(settled, timeout=1800, interval=1, message=f"{sets * per_set} available exporters")
        # Let the queue drain and the status writes settle.
        wait_for(lambda: proc.metric("jumpstarter_exporterset_workqueue_depth") == 0, timeout=300,
                 message="idle queue")
        time.sleep(5)
        rss_kib = int(Path(f"/proc/{proc.proc.pid}/status").read_text().split("VmRSS:")[1].split()[0])
        audit = bed.audit_log
        before = sum(1 for _ in open(audit)) if audit.exists() else 0
        reconciles_before = proc.metric("jumpstarter_exporterset_reconciles_total")
        # A resync's worth of reconciles: touch every set's labels (no spec change).
        for index in range(sets):
            custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", f"set-{index:03d}",
                                                  {"metadata": {"labels": {"resync": "1"}}})
        wait_for(lambda: proc.metric("jumpstarter_exporterset_reconciles_total") - reconciles_before >= sets,
                 timeout=120, message="steady reconciles")
        time.sleep(2)
        writes = 0
        if audit.exists():
            for line in list(open(audit))[before:]:
                entry = json.loads(line)
                if entry.get("stage") != "ResponseComplete" or entry.get("verb") not in (
                        "create", "update", "patch", "delete"):
                    continue
                agent = entry.get("userAgent", "")
                if "kubectl" in agent or "OpenAPI-Generator" not in agent:
                    continue
                if entry.get("user", {}).get("username") == CONTROLLER_USER:
                    continue  # the Jumpstarter controller's (lastSeen heartbeats and the like)
                if entry.get("objectRef", {}).get("resource") == "exportersets" and \
                        entry.get("objectRef", {}).get("subresource") is None and entry.get("verb") == "patch":
                    continue  # the benchmark's own label patches
                writes += 1
        reconciles = proc.metric("jumpstarter_exporterset_reconciles_total") - reconciles_before
        return {f"rss_mib_{sets}_sets_x_{per_set}": rss_kib / 1024, "steady_reconciles": reconciles,
                "api_writes_per_steady_reconcile": writes / max(reconciles, 1),
                "audit_log": audit.exists()}
    finally:
        proc.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--fill", type=int, default=50)
    parser.add_argument("--rss-sets", type=int, default=100, help="sets for the RSS and steady-writes figures")
    parser.add_argument("--rss-per-set", type=int, default=10, help="exporters per set for those figures")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "operator.json"))
    args = parser.parse_args()

    figures = {"noop": bench_noop_reconcile()}
    print(f"no-op reconcile CPU: {figures['noop']['noop_reconcile_cpu_ms']:.3f} ms", flush=True)
    with tempfile.TemporaryDirectory(prefix="jve-bench-") as tmp:
        bed = TestBed(Path(tmp) / "bed", audit=True)
        bed.up()
        try:
            controller = controller_kubeconfig(bed, Path(tmp))
            with bed.api_client() as api:
                figures["event_to_create"] = bench_event_to_create(bed, api, Path(tmp), controller, args.events)
                print(f"event → create: {figures['event_to_create']}", flush=True)
                figures["pool"] = bench_fill_burst_shrink(bed, api, Path(tmp), controller, args.fill)
                print(f"fill/burst/shrink: {figures['pool']}", flush=True)
                figures["scale"] = bench_rss_and_writes(bed, api, Path(tmp), controller, args.rss_sets,
                                                        args.rss_per_set)
                print(f"RSS and steady writes: {figures['scale']}", flush=True)
        finally:
            bed.down(remove=True)
    figures["bench_process_max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
    print(json.dumps(figures, indent=2, default=str))
    print(f"median of event→create: {statistics.median([figures['event_to_create']['p50_s']]):.3f} s")


if __name__ == "__main__":
    main()
