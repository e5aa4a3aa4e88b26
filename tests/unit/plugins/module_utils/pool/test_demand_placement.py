import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.demand import (
    attribute_lease_demand,
    attribute_leases,
    is_pending_lease,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.selectors import (
    selector_matches,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    placement,
)
from hypothesis import given, settings
from hypothesis import strategies as st
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
        # One available exporter absorbs one lease only; the older lease takes
        # it, and the other waits for that board too: nobody's demand.
        (_two_sets(), [lease("l2", created=-10), lease("l1", created=-20)],
         [exporter("phys-1", owner=None)], {"a-set": [], "b-set": []}),
        # One available set Exporter absorbs one lease only; the older lease
        # takes it, the other is demand.
        (_two_sets(), [lease("l2", created=-10), lease("l1", created=-20)],
         [exporter("b-set-0", owner="b-set")], {"a-set": ["l2"], "b-set": ["l1"]}),
        # Not ready, leased or disabled exporters claim no lease (b-set's: the
        # lease is demand, a-set has the more headroom).
        (_two_sets(), [lease("l1")],
         [exporter("x", ready=False, owner="b-set"), exporter("y", lease="other", owner="b-set"),
          exporter("z", enabled=False, owner="b-set")],
         {"a-set": ["l1"], "b-set": []}),
        # An Exporter no set controls that satisfies the lease, in any state
        # (a leased, offline or disabled physical board): nobody's demand.
        (_two_sets(), [lease("l1")], [exporter("phys-1", owner=None, lease="other")],
         {"a-set": [], "b-set": []}),
        (_two_sets(), [lease("l1")], [exporter("phys-1", owner=None, ready=False)],
         {"a-set": [], "b-set": []}),
        (_two_sets(), [lease("l1")], [exporter("phys-1", owner=None, enabled=False)],
         {"a-set": [], "b-set": []}),
        # One being deleted serves nothing: the lease is demand again.
        (_two_sets(), [lease("l1")], [exporter("phys-1", owner=None, lease="other", terminating=True)],
         {"a-set": ["l1"], "b-set": []}),
        # A physical board the lease does not select leaves it to the sets.
        (_two_sets(), [lease("l1", selector={"matchLabels": {"fidelity": "high"}})],
         [exporter("phys-1", owner=None, lease="other")], {"a-set": [], "b-set": ["l1"]}),
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


def test_a_lease_for_a_physical_board_is_withheld_from_the_set_that_copied_its_labels():
    """Demand capture: a tenant's template copies a lab board's labels; the
    other users' lease for it, waiting while the board is leased, is not the
    tenant's demand, and the set is told which lease and which board."""
    tenant = exporter_set("tenant", labels={"board": "x", "lab": "bench"})
    board = exporter("bench-x", owner=None, lease="someone", labels={"board": "x", "lab": "bench"})
    waiting = lease("theirs", selector={"matchLabels": {"board": "x"}})
    demand, withheld = attribute_leases([tenant], [waiting], [board], NOW)
    assert demand == {"tenant": []}
    assert withheld == {"tenant": [
        "Lease theirs (board=x): Exporter bench-x, which no set controls, satisfies it"]}
    # Without the board, the same lease is the set's demand.
    assert attribute_leases([tenant], [waiting], [], NOW) == ({"tenant": ["theirs"]}, {})


_LABELS = st.dictionaries(st.sampled_from(["board", "virtual", "lab"]), st.sampled_from(["a", "b"]),
                          max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.lists(_LABELS, min_size=1, max_size=3),
       st.lists(_LABELS.filter(bool), max_size=5),
       st.lists(st.tuples(_LABELS.filter(bool), st.booleans(), st.booleans()), max_size=3))
def test_no_lease_an_unowned_exporter_satisfies_is_any_sets_demand(set_labels, selectors, boards):
    sets = [exporter_set(f"s{i}", labels=labels) for i, labels in enumerate(set_labels)]
    leases = [lease(f"l{i}", selector={"matchLabels": sel}, created=-i) for i, sel in enumerate(selectors)]
    unowned = [exporter(f"board-{i}", owner=None, labels=labels, ready=ready, lease=None if free else "x")
               for i, (labels, ready, free) in enumerate(boards)]
    demand, withheld = attribute_leases(sets, leases, unowned, NOW)
    served = {name for names in demand.values() for name in names}
    for the_lease in leases:
        selector = the_lease["spec"]["selector"]
        theirs = any(selector_matches(selector, b["metadata"]["labels"]) for b in unowned)
        assert not (theirs and the_lease["metadata"]["name"] in served)
    # A withheld lease is nobody's demand and one the set's labels satisfy.
    without = attribute_lease_demand(sets, leases, [], NOW)
    for the_set in sets:
        name = the_set["metadata"]["name"]
        for message in withheld.get(name, []):
            lease_name = message.split()[1]
            assert lease_name not in served
            assert selector_matches(leases[int(lease_name[1:])]["spec"]["selector"],
                                    the_set["spec"]["template"]["metadata"]["labels"])
    # What no board satisfies is attributed as if there were no boards.
    free = {the_lease["metadata"]["name"] for the_lease in leases
            if not any(selector_matches(the_lease["spec"]["selector"], b["metadata"]["labels"]) for b in unowned)}
    assert {n for names in without.values() for n in names} & free == served & free


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
    result = placement.place_instances(HOSTS, exporters, count, unreachable)
    assert [p["host"] for p in result["placements"]] == hosts
    assert result["free"] == free
    assert result["limited"] is limited
    assert bool(result["message"]) is limited


def test_place_instances_names_the_exporters():
    result = placement.place_instances(HOSTS, [], 2, names=["rpi4-0", "rpi4-1"])
    assert result["placements"] == [{"host": "bench-a", "exporter": "rpi4-0"},
                                    {"host": "bench-b", "exporter": "rpi4-1"}]


def test_capacity_for_full_hosts():
    full = [_on("bench-a", "1"), _on("bench-a", "2"), _on("bench-b", "3"), _on("bench-b", "4")]
    capacity = placement.capacity_for(HOSTS, full, unreachable=("bench-c",))
    assert capacity == {"limit": 0, "reason": "NoFreeSlots",
                        "message": "no free slot on hosts bench-a, bench-b; "
                                   "unreachable hosts bench-c"}
    assert placement.capacity_for(HOSTS, [])["limit"] == 5
