import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.baremetal.placement import (
    capacity_for,
    place_instances,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.demand import (
    attribute_lease_demand,
    is_pending_lease,
)
from pool_builders import NOW, at, exporter, exporter_set, lease


@pytest.mark.parametrize(
    ("the_lease", "pending"),
    [
        (lease("l"), True),
        (lease("l", assigned="rpi4-0"), False),
        (lease("l", ended=True), False),
        (lease("l", begin=600), False),
        (lease("l", begin=-600), True),
        (lease("l", pinned="bench-3"), False),
    ],
)
def test_is_pending_lease(the_lease, pending):
    assert is_pending_lease(the_lease, NOW) is pending


def test_pending_lease_with_past_end_time_is_not_pending():
    the_lease = lease("l")
    the_lease["spec"]["endTime"] = at(-1)
    assert not is_pending_lease(the_lease, NOW)


def _two_sets(max_a=10, max_b=10):
    return [
        exporter_set("a-set", max_replicas=max_a, labels={"board": "rpi4", "virtual": "true"}),
        exporter_set("b-set", max_replicas=max_b, labels={"board": "rpi4", "virtual": "true",
                                                          "fidelity": "high"}),
    ]


@pytest.mark.parametrize(
    ("sets", "leases", "exporters", "expected"),
    [
        # Both sets match; equal headroom -> name decides.
        (_two_sets(), [lease("l1")], [], {"a-set": ["l1"], "b-set": []}),
        # More headroom wins.
        (_two_sets(max_a=2), [lease("l1")], [], {"a-set": [], "b-set": ["l1"]}),
        # No ceiling is unlimited headroom.
        (_two_sets(max_a=0, max_b=50), [lease("l1")], [], {"a-set": ["l1"], "b-set": []}),
        # Headroom is consumed as leases are attributed: two leases spread.
        (_two_sets(max_a=5, max_b=5), [lease("l1", created=-20), lease("l2", created=-10)],
         [], {"a-set": ["l1"], "b-set": ["l2"]}),
        # Only b's template satisfies the selector.
        (_two_sets(), [lease("l1", selector={"matchLabels": {"fidelity": "high"}})], [],
         {"a-set": [], "b-set": ["l1"]}),
        # An available physical exporter serves the lease: no demand.
        (_two_sets(), [lease("l1")], [exporter("phys-1", owner=None)],
         {"a-set": [], "b-set": []}),
        # One available exporter absorbs one lease only; the older lease takes it.
        (_two_sets(), [lease("l2", created=-10), lease("l1", created=-20)],
         [exporter("phys-1", owner=None)], {"a-set": ["l2"], "b-set": []}),
        # Not ready, leased or disabled exporters serve nobody.
        (_two_sets(), [lease("l1")],
         [exporter("x", ready=False, owner=None), exporter("y", lease="other", owner=None),
          exporter("z", enabled=False, owner=None)],
         {"a-set": ["l1"], "b-set": []}),
        # Nothing matches: the lease is nobody's demand.
        (_two_sets(), [lease("l1", selector={"matchLabels": {"board": "imx8"}})], [],
         {"a-set": [], "b-set": []}),
        # Assigned and future leases are not demand.
        (_two_sets(), [lease("l1", assigned="q"), lease("l2", begin=60)], [],
         {"a-set": [], "b-set": []}),
    ],
)
def test_attribute_lease_demand(sets, leases, exporters, expected):
    assert attribute_lease_demand(sets, leases, exporters, NOW) == expected


def test_lease_claimed_by_an_available_set_exporter_stays_with_that_set():
    sets = _two_sets()
    owned = [exporter("b-set-0", owner="b-set")]
    assert attribute_lease_demand(sets, [lease("l1")], owned, NOW) == {
        "a-set": [], "b-set": ["l1"]}


def test_a_lease_an_exporter_already_holds_is_not_demand():
    # The controller wrote leaseRef on the Exporter but not yet exporterRef
    # on the Lease: the lease is served, not pending.
    sets = _two_sets()
    owned = [exporter("a-set-0", owner="a-set", lease="l1")]
    assert attribute_lease_demand(sets, [lease("l1")], owned, NOW) == {"a-set": [], "b-set": []}


def test_owned_replicas_reduce_headroom():
    sets = _two_sets(max_a=3, max_b=3)
    owned = [exporter(f"a-set-{i}", owner="a-set", lease=f"busy-{i}") for i in range(2)]
    assert attribute_lease_demand(sets, [lease("l1")], owned, NOW) == {
        "a-set": [], "b-set": ["l1"]}


def test_every_pending_lease_is_counted_once():
    sets = _two_sets()
    leases = [lease(f"l{i}", created=-i) for i in range(7)]
    demand = attribute_lease_demand(sets, leases, [], NOW)
    attributed = demand["a-set"] + demand["b-set"]
    assert sorted(attributed) == sorted(f"l{i}" for i in range(7))


HOSTS = [{"name": "bench-b", "slots": 2}, {"name": "bench-a", "slots": 2},
         {"name": "bench-c", "slots": 1}]


def _on(host, name, terminating=False):
    return exporter(name, labels={c.LABEL_HOST: host}, terminating=terminating)


@pytest.mark.parametrize(
    ("exporters", "count", "unreachable", "hosts", "free", "limited"),
    [
        ([], 3, (), ["bench-a", "bench-b", "bench-a"], {"bench-a": 2, "bench-b": 2, "bench-c": 1},
         False),
        ([_on("bench-a", "x")], 2, (), ["bench-b", "bench-a"],
         {"bench-a": 1, "bench-b": 2, "bench-c": 1}, False),
        ([_on("bench-a", "x", terminating=True)], 1, (), ["bench-a"],
         {"bench-a": 2, "bench-b": 2, "bench-c": 1}, False),
        ([], 4, ("bench-a",), ["bench-b", "bench-b", "bench-c"], {"bench-b": 2, "bench-c": 1},
         True),
        ([_on("bench-a", "1"), _on("bench-a", "2"), _on("bench-b", "3"), _on("bench-b", "4"),
          _on("bench-c", "5")], 1, (), [], {"bench-a": 0, "bench-b": 0, "bench-c": 0}, True),
    ],
)
def test_place_instances(exporters, count, unreachable, hosts, free, limited):
    result = place_instances(HOSTS, exporters, count, unreachable)
    assert [p["host"] for p in result["placements"]] == hosts
    assert result["free"] == free
    assert result["limited"] is limited
    assert bool(result["message"]) is limited


def test_place_instances_names_the_exporters():
    result = place_instances(HOSTS, [], 2, names=["rpi4-0", "rpi4-1"])
    assert result["placements"] == [{"host": "bench-a", "exporter": "rpi4-0"},
                                    {"host": "bench-b", "exporter": "rpi4-1"}]


def test_capacity_for_full_hosts():
    full = [_on("bench-a", "1"), _on("bench-a", "2"), _on("bench-b", "3"), _on("bench-b", "4")]
    capacity = capacity_for(HOSTS, full, unreachable=("bench-c",))
    assert capacity == {"limit": 0, "reason": "NoFreeSlots",
                        "message": "no free slot on hosts bench-a, bench-b; "
                                   "unreachable hosts bench-c"}
    assert capacity_for(HOSTS, [])["limit"] == 5
