"""Time one scale_plan over pools of 10, 1,000 and 10,000 owned Exporters,
and deep_merge on realistic parameters. Prints the median of several runs.

Run: source scripts/common.sh && link_collection && $VENV_DIR/bin/python bench/bench_pool.py
"""

import gc
import statistics
import time

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.merge import (
    deep_merge,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import (
    scale_plan,
)

NOW = "2026-11-21T08:00:00Z"
RUNS = 15


def exporter(index):
    """A realistic mix: a quarter leased, a few provisioning, a few disabled."""
    name = f"pool-{index}"
    ready = index % 20 != 0
    leased = index % 4 == 0 and ready
    obj = {
        "metadata": {
            "name": name, "namespace": "lab",
            "creationTimestamp": f"2026-11-21T0{index % 7}:{index % 60:02d}:00Z",
            "labels": {"board": "rpi4", c.LABEL_EXPORTER_SET: "pool"},
            "annotations": {c.ANNOTATION_FIRST_READY: "2026-11-21T07:00:00Z"} if ready else {},
        },
        "spec": {"enabled": index % 50 != 7},
        "status": {
            "conditions": [
                {"type": "Registered", "status": "True" if ready else "False",
                 "lastTransitionTime": "2026-11-21T07:00:00Z"},
                {"type": "Online", "status": "True" if ready else "False",
                 "lastTransitionTime": "2026-11-21T07:00:00Z"},
            ],
        },
    }
    if leased:
        obj["status"]["leaseRef"] = {"name": f"lease-{index}"}
        obj["metadata"]["annotations"][c.ANNOTATION_LEASED_BY] = f"lease-{index}"
    return obj


def scenario(size, min_available):
    the_set = {
        "metadata": {"name": "pool", "namespace": "lab", "generation": 1,
                     "annotations": {c.ANNOTATION_SURPLUS_SINCE: "2026-11-21T07:00:00Z"}},
        "spec": {"minReplicas": 0, "maxReplicas": 0, "minAvailableReplicas": min_available,
                 "scaleDownCooldown": "5m", "virtualTargetClassName": "q",
                 "selector": {"matchLabels": {"board": "rpi4"}},
                 "template": {"metadata": {"labels": {"board": "rpi4"}}}},
    }
    klass = {"metadata": {"name": "q"},
             "spec": {"provisioner": c.PROVISIONER_QEMU,
                      "parameters": {"resources": {"cpu": 2, "memory": "2Gi"}}}}
    exporters = [exporter(i) for i in range(size)]
    instances = {e["metadata"]["name"]: {"phase": "Running"} for e in exporters}
    leases = [{"metadata": {"name": f"p{i}"}} for i in range(size // 100)]
    return the_set, klass, exporters, leases, instances


def median_seconds(function, runs=RUNS):
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main():
    # steady: the pool is at its target, the common reconcile.
    # scale-down: the warm buffer drops to a tenth, so most idle exporters are
    # disabled in one plan (the largest plan the rules can produce).
    for label, buffer_share in (("steady", None), ("scale-down", 10)):
        for size in (10, 1_000, 10_000):
            leased = sum(1 for i in range(size) if i % 4 == 0 and i % 20 != 0)
            warm = size // buffer_share if buffer_share else size - leased - size // 100
            the_set, klass, exporters, leases, instances = scenario(size, warm)
            plan = scale_plan(the_set, klass, exporters, leases, NOW, instances=instances)
            def run(the_set=the_set, klass=klass, exporters=exporters, leases=leases,
                    instances=instances):
                scale_plan(the_set, klass, exporters, leases, NOW, instances=instances)

            seconds = median_seconds(run)
            # A long-running operator freezes its warm informer cache out of the
            # cyclic collector (gc.freeze); this is the cost once it does.
            gc.freeze()
            frozen = median_seconds(run)
            gc.unfreeze()
            print(f"scale_plan {label:>10} {size:>6} exporters: {seconds * 1000:8.3f} ms, "
                  f"{frozen * 1000:8.3f} ms with gc.freeze() "
                  f"(target {plan['target']}, {len(plan['create'])} create, "
                  f"{len(plan['disable'])} disable)")
    class_parameters = {
        "arch": "aarch64", "machineType": "virt", "cpuModel": "max", "kvm": False,
        "firmware": {"url": "registry.example.com/firmware/rpi4:v1", "digest": "sha256:abc"},
        "resources": {"cpu": 4, "memory": "4Gi", "storage": "16Gi"},
        "hosts": [{"name": f"bench-{i:02d}.lab", "slots": 4, "arch": "aarch64"}
                  for i in range(8)],
        "board": {"soc": "sa8295", "peripherals": {"can": 2, "uart": [0, 1, 2]}},
    }
    set_parameters = {"resources": {"memory": "8Gi"}, "board": {"fidelity": "high"}}
    seconds = median_seconds(lambda: deep_merge(class_parameters, set_parameters), runs=2001)
    print(f"deep_merge realistic parameters: {seconds * 1e6:8.2f} us")


if __name__ == "__main__":
    main()
