"""Property tests: a set sized to a lease-wait target, planned over random
pools and lease histories, keeps the planner's invariants. The buffer stays
between the floor (minAvailableReplicas) and the cost ceiling, the plan
stays inside min/max replicas, no leased Exporter is disabled, deleted or
reset, and the same objects give the same decision (a restarted operator
decides the same)."""

import copy
import random

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy, sizing
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pool_builders import NOW, exporter, exporter_set, lease, target_class


@st.composite
def sized_pools(draw):
    floor = draw(st.integers(0, 3))
    min_replicas = draw(st.integers(0, 3))
    max_replicas = draw(st.sampled_from([0, max(floor, min_replicas), max(floor, min_replicas) + 2, 8]))
    ceiling = draw(st.one_of(st.none(), st.integers(0, 6)))
    exporters, leases = [], []
    for i in range(draw(st.integers(0, 8))):
        leased = draw(st.booleans())
        ready = leased or draw(st.booleans())
        name = f"rpi4-{i}"
        exporters.append(exporter(name, ready=ready, lease=f"l{i}" if leased else None,
                                  enabled=leased or draw(st.booleans()),
                                  created=-draw(st.integers(60, 20000)),
                                  first_ready=draw(st.booleans())))
        if leased:
            leases.append(lease(f"l{i}", assigned=name, created=-draw(st.integers(1, 3000))))
    # A history: ended leases over the last days, in bursts or a trickle.
    rng = random.Random(draw(st.integers(0, 2 ** 16)))
    span = draw(st.sampled_from([sizing.HOUR, 3 * sizing.DAY]))
    for j in range(draw(st.integers(0, 200))):
        leases.append(lease(f"h{j}", created=-rng.uniform(0, span), ended=True))
    target = {"target": draw(st.sampled_from(["1s", "5s", "30s"]))}
    if ceiling is not None:
        target["maxBuffer"] = ceiling
    the_set = exporter_set(min_replicas=min_replicas, max_replicas=max_replicas, min_available=floor,
                           recycle=draw(st.sampled_from([c.RECYCLE_EXIT_AND_REPLACE, c.RECYCLE_IN_PLACE_REUSE])))
    the_set["metadata"]["creationTimestamp"] = "2026-11-10T00:00:00Z"
    return the_set, exporters, leases, {"exporterSetName": "rpi4", "leaseWait": target}


def plan_of(the_set, exporters, leases, spec):
    return scale_plan(the_set, target_class(), exporters, [], NOW, leases=leases,
                      options={"policy": policy.normalize(spec)})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sized_pools())
def test_a_sized_set_keeps_floor_ceiling_limits_and_its_leased_exporters(pool):
    the_set, exporters, leases, spec = pool
    plan = plan_of(the_set, exporters, leases, spec)
    sized = plan["status"]["sizing"]
    floor = the_set["spec"]["minAvailableReplicas"]
    ceiling = spec["leaseWait"].get("maxBuffer")
    assert sized["buffer"] >= floor
    if ceiling is not None:
        assert sized["buffer"] <= max(ceiling, floor)
    # The replica ceiling (what /scale writes) leaves room for so much
    # buffer beside the leased; the floor is kept whatever it says.
    leased_count = sum(1 for e in exporters if e["status"].get("leaseRef"))
    max_replicas = the_set["spec"]["maxReplicas"]
    if max_replicas:
        assert sized["buffer"] <= max(max_replicas - leased_count, floor)
    # Inside min/max: never more Exporters than maxReplicas after the plan.
    live = [e for e in exporters if not e["metadata"].get("deletionTimestamp")]
    after = len(live) + len(plan["create"]) - len(plan["delete"])
    if max_replicas:
        assert after <= max(max_replicas, len(live))
    # No leased target touched.
    leased = {e["metadata"]["name"] for e in exporters if e["status"].get("leaseRef")}
    touched = set(plan["disable"]) | {d["name"] for d in plan["delete"]} | {r["name"] for r in plan["recycle"]}
    assert not leased & touched, (leased, touched)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sized_pools(), st.randoms(use_true_random=False))
def test_the_same_objects_in_any_order_give_the_same_decision(pool, rng):
    the_set, exporters, leases, spec = pool
    first = plan_of(copy.deepcopy(the_set), copy.deepcopy(exporters), copy.deepcopy(leases), spec)
    shuffled_exporters, shuffled_leases = list(exporters), list(leases)
    rng.shuffle(shuffled_exporters)
    rng.shuffle(shuffled_leases)
    again = plan_of(copy.deepcopy(the_set), shuffled_exporters, shuffled_leases, spec)
    assert again["status"]["sizing"] == first["status"]["sizing"]
    assert sorted(again["disable"]) == sorted(first["disable"])
    assert len(again["create"]) == len(first["create"])
