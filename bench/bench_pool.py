"""Time one scale_plan over pools of 10, 1,000 and 10,000 owned Exporters,
and deep_merge on realistic parameters. Prints the median of several runs.

Two pools (at target; scale-down, the largest plan the rules make) and
four figures for each (and steady again after gc.freeze()):

* cold: the first plan over a pool the planner has not seen (every object a
  new uid, its memory of pools emptied), so every Exporter is read and the
  pool surveyed;
* after one change: the same pool with one Exporter at a new
  resourceVersion, the reconcile that follows an event;
* steady: the same objects planned again, as a playbook run that read
  them from the API would (each object's version is read to know the pool
  is unchanged);
* steady, informer: the same objects as the operator hands them to the
  planner between events: its informer cache's snapshot of the namespace,
  whose revision says the pool is unchanged without a pass over it. Steady
  at target at 10,000 in this column is the issue's figure (the operator's
  steady reconcile).

Wall time and the thread's CPU time are both printed: on a shared machine
the CPU time is the steadier of the two.

Run: source scripts/common.sh && link_collection && $VENV_DIR/bin/python bench/bench_pool.py
"""

import copy
import gc
import itertools
import os
import statistics
import time

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import operator_state, pool_index
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.merge import (
    deep_merge,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import (
    scale_plan,
)
from exporterset_operator.controller import RESOURCES
from exporterset_operator.informer import Informer

NOW = "2026-11-21T08:00:00Z"
RUNS = 15
_uids = itertools.count()


def exporter(index):
    """A realistic mix: a quarter leased, a few provisioning, a few disabled."""
    name = f"pool-{index}"
    ready = index % 20 != 0
    leased = index % 4 == 0 and ready
    obj = {
        "metadata": {
            "name": name, "namespace": "lab",
            # As the API server returns it: a uid and a resourceVersion.
            "uid": f"uid-{next(_uids)}", "resourceVersion": str(1000 + index),
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
        "metadata": {"name": "pool", "namespace": "lab", "generation": 1},
        "spec": {"minReplicas": 0, "maxReplicas": 0, "minAvailableReplicas": min_available,
                 "scaleDownCooldown": "5m", "virtualTargetClassName": "q",
                 "selector": {"matchLabels": {"board": "rpi4"}},
                 "template": {"metadata": {"labels": {"board": "rpi4"}}}},
        "status": {operator_state.FIELD: {operator_state.SURPLUS_SINCE: "2026-11-21T07:00:00Z"}},
    }
    klass = {"metadata": {"name": "q"},
             "spec": {"provisioner": c.PROVISIONER_QEMU,
                      "parameters": {"resources": {"cpu": 2, "memory": "2Gi"}}}}
    exporters = [exporter(i) for i in range(size)]
    instances = {e["metadata"]["name"]: {"phase": "Running"} for e in exporters}
    leases = [{"metadata": {"name": f"p{i}", "namespace": "lab"}} for i in range(size // 100)]
    return the_set, klass, exporters, leases, instances


def informer_views(exporters, leases):
    """A function giving the pool as the operator's informer caches do:
    a fresh snapshot of the namespace's Exporters (all of the set here) and
    Leases at each call, with the caches' revisions."""
    caches = {}
    for kind, objects in (("Exporter", exporters), ("Lease", leases)):
        resource = next(r for r in RESOURCES if r.kind == kind)
        cache = caches[kind] = Informer(resource, api_client=None)
        for obj in objects:
            cache._apply("ADDED", obj)
    return lambda: (caches["Exporter"].list("lab").derived(lambda e: True, "pool"),
                    caches["Lease"].list("lab"))


def timed(function, runs=RUNS, prepare=None):
    """(median wall, median thread CPU, min wall, max wall) seconds of
    ``function(prepare())`` over ``runs`` calls (prepare untimed)."""
    walls, cpus = [], []
    for _ in range(runs):
        argument = prepare() if prepare else None
        start, start_cpu = time.perf_counter(), time.thread_time()
        function(argument)
        cpus.append(time.thread_time() - start_cpu)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls), statistics.median(cpus), min(walls), max(walls)


def median_seconds(function, runs=RUNS, prepare=None):
    return timed(function, runs, prepare)[0]


def shown(figures):
    wall, cpu, low, high = (x * 1000 for x in figures)
    return f"{wall:7.2f} ({cpu:6.2f}; {low:.2f}-{high:.2f})"


# The planner's memory of pools, owned here as the operator's reconciler owns its own.
SURVEYS = pool_index.SurveyCache()


def fresh_pool(exporters):
    """The same pool as new objects (new uids), the planner's memory of pools
    emptied as at the operator's start: it has seen none of them."""
    fresh = copy.deepcopy(exporters)
    for obj in fresh:
        obj["metadata"]["uid"] = f"uid-{next(_uids)}"
    SURVEYS.clear()
    # The copy's garbage is the benchmark's, not the plan's.
    gc.collect()
    return fresh


def one_changed(exporters):
    """The pool after one event: one Exporter (never the same) at a new resourceVersion."""
    index = next(_uids) % len(exporters)
    changed = copy.deepcopy(exporters[index])
    changed["metadata"]["resourceVersion"] = str(next(_uids) + 10**9)
    gc.collect()
    return exporters[:index] + [changed] + exporters[index + 1:]


def main():
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; ms per scale_plan: "
          f"median wall (median thread CPU; min-max wall) of {RUNS} plans")
    print(f"{'pool':<11}{'exporters':>9}  {'cold':<28}{'after one change':<28}"
          f"{'steady (same objects)':<28}{'steady, gc.freeze()':<28}{'steady, informer':<28}plan")
    # at target: the pool is at its target, the common reconcile.
    # scale-down: the warm buffer drops to a tenth, so most idle exporters are
    # disabled in one plan (the largest plan the rules can produce).
    for label, buffer_share in (("at target", None), ("scale-down", 10)):
        for size in (10, 1_000, 10_000):
            leased = sum(1 for i in range(size) if i % 4 == 0 and i % 20 != 0)
            warm = size // buffer_share if buffer_share else size - leased - size // 100
            the_set, klass, exporters, leases, instances = scenario(size, warm)
            plan = scale_plan(the_set, klass, exporters, leases, NOW, instances=instances, surveys=SURVEYS)

            def run(pool, the_set=the_set, klass=klass, exporters=exporters, leases=leases,
                    instances=instances):
                scale_plan(the_set, klass, pool if pool is not None else exporters, leases, NOW,
                           instances=instances, surveys=SURVEYS)

            cold = timed(run, prepare=lambda exporters=exporters: fresh_pool(exporters))
            changed = timed(run, prepare=lambda exporters=exporters: one_changed(exporters))
            run(None)
            steady = timed(run)
            views = informer_views(exporters, leases)

            def from_informer(view, the_set=the_set, klass=klass, leases=leases, instances=instances):
                owned, cached_leases = view
                scale_plan(the_set, klass, owned, leases, NOW, instances=instances, leases=cached_leases,
                           surveys=SURVEYS)

            from_informer(views())
            informer = timed(from_informer, prepare=views)
            # A long-running operator freezes its warm informer cache out of the
            # cyclic collector (gc.freeze); this is the cost once it does.
            gc.freeze()
            frozen = timed(run)
            gc.unfreeze()
            print(f"{label:<11}{size:>9}  {shown(cold):<28}{shown(changed):<28}"
                  f"{shown(steady):<28}{shown(frozen):<28}{shown(informer):<28}"
                  f"target {plan['target']}, {len(plan['create'])} create, "
                  f"{len(plan['disable'])} disable")
    print("The issue's figure (scale_plan at 10,000 <= 5 ms): steady, informer, pool at "
          "target, 10,000 Exporters: the operator's reconcile of a set between events.")
    class_parameters = {
        "arch": "aarch64", "machineType": "virt", "cpuModel": "max", "kvm": False,
        "firmware": {"url": "registry.example.com/firmware/rpi4:v1", "digest": "sha256:abc"},
        "resources": {"cpu": 4, "memory": "4Gi", "storage": "16Gi"},
        "hosts": [{"name": f"bench-{i:02d}.lab", "slots": 4, "arch": "aarch64"}
                  for i in range(8)],
        "board": {"soc": "sa8295", "peripherals": {"can": 2, "uart": [0, 1, 2]}},
    }
    set_parameters = {"resources": {"memory": "8Gi"}, "board": {"fidelity": "high"}}
    seconds = median_seconds(lambda _: deep_merge(class_parameters, set_parameters), runs=2001)
    print(f"deep_merge realistic parameters: {seconds * 1e6:8.2f} us")


if __name__ == "__main__":
    main()
