"""Property tests: random pools and random event sequences through a small simulator.

The simulator plays the roles around the plan: the provisioner applies the
plan's actions, the Jumpstarter controller assigns and releases leases (the
Lease's ``status.exporterRef`` first, the Exporter's ``status.leaseRef`` in a
later write, ended Leases kept as history), the backends become ready or
fail, and time passes.
"""

import copy
from datetime import timedelta

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import operator_state
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.demand import (
    attribute_lease_demand,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    is_available,
    is_ready,
    read_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.lease_safety import (
    LEASE_ENDED_LABEL,
    LeaseView,
    assigned_exporter,
    ended_key,
    lease_ended,
    parse_ended_key,
    served_by,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import (
    scale_plan,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    format_time,
    parse_time,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pool_builders import NOW, SET_NAME, apply_annotation_patches, exporter, exporter_set, lease, target_class


def lease_name(exporter):
    return read_exporter(exporter)[4]


def is_enabled(exporter):
    return read_exporter(exporter)[3]


def is_dormant(exporter):
    return c.ANNOTATION_DORMANT in (exporter["metadata"].get("annotations") or {})


class World:
    def __init__(self, the_set, klass, exporters, options):
        """A world of one set, its class, the Exporters it owns and the plan's
        options: the scenario the strategies draw."""
        self.set = the_set
        self.klass = klass
        self.exporters = {e["metadata"]["name"]: e for e in exporters}
        self.instances = {}
        self.leases = []
        self.now = parse_time(NOW)
        self.options = options
        self.lease_counter = 0

    # -- the plan ----------------------------------------------------------------
    def pending_for_set(self):
        demand = attribute_lease_demand([self.set], self.leases, list(self.exporters.values()),
                                        self.now)
        wanted = set(demand[SET_NAME])
        return [x for x in self.leases if x["metadata"]["name"] in wanted]

    def run(self, events, *checks):
        """Plan, check the plan (``check(world, plan)``), apply it, then let
        the next event happen: once per event."""
        for kind, index in events:
            plan = self.plan()
            for check in checks:
                check(self, plan)
            self.apply(plan)
            self.event(kind, index)

    def plan(self):
        return scale_plan(self.set, self.klass, self.sorted_exporters(), self.pending_for_set(),
                          format_time(self.now), instances=self.instances,
                          options=self.options, leases=self.leases)

    def held(self):
        """Exporters leased from either side."""
        view = LeaseView(self.leases)
        return {n for n, e in self.exporters.items() if view.holders(e)}

    def sorted_exporters(self):
        return [self.exporters[name] for name in sorted(self.exporters)]

    def add(self, entry):
        assert entry["name"] not in self.exporters
        # Made as k8s_objects.exporter_manifest makes it: owned by the set.
        new = exporter(entry["name"], ready=False, created=0, labels=entry["labels"],
                       owner=entry["labels"][c.LABEL_EXPORTER_SET], annotations=entry["annotations"])
        new["metadata"]["creationTimestamp"] = format_time(self.now)
        self.exporters[entry["name"]] = new

    def apply_removals(self, plan):
        """In k8s_apply's order: the dormant Exporter the plan creates and the
        Exporters it re-enables, then what it deletes and disables."""
        for entry in plan["create_dormant"]:
            self.add(entry)
        for name in plan["enable"]:
            self.exporters[name]["spec"]["enabled"] = True
        for entry in plan["recycle"]:
            # Reset in place, then enabled again (with its annotations).
            self.exporters[entry["name"]]["spec"]["enabled"] = True
            self.instances[entry["name"]] = {"phase": "Running"}
        for entry in plan["delete"]:
            self.exporters.pop(entry["name"], None)
            self.instances.pop(entry["name"], None)
        for name in plan["disable"]:
            self.exporters[name]["spec"]["enabled"] = False

    def apply(self, plan):
        self.apply_removals(plan)
        for entry in plan["create"]:
            self.add(entry)
            self.instances[entry["name"]] = {"phase": "Pending"}
        for entry in plan["delete_dormant"]:
            self.exporters.pop(entry["name"])
        apply_annotation_patches(self.exporters, plan["exporter_annotations"])
        # The plan's status carries the operator state with its patch applied.
        self.set["status"] = plan["status"]

    # -- the world ---------------------------------------------------------------
    def pick(self, index, predicate):
        names = [n for n in sorted(self.exporters) if predicate(self.exporters[n])]
        return names[index % len(names)] if names else None

    def set_ready(self, name, ready):
        stamp = format_time(self.now)
        for condition in self.exporters[name]["status"]["conditions"]:
            condition["status"] = "True" if ready else "False"
            condition["lastTransitionTime"] = stamp
        self.instances[name] = {"phase": "Running"}

    def event(self, kind, index):
        if kind == "ready":
            name = self.pick(index, lambda e: not is_ready(e) and not is_dormant(e))
            if name:
                self.set_ready(name, True)
        elif kind == "offline":
            name = self.pick(index, is_ready)
            if name:
                self.set_ready(name, False)
        elif kind == "fail":
            name = self.pick(index, lambda e: not is_dormant(e))
            if name:
                self.instances[name] = {"phase": "Failed", "message": "crashed"}
        elif kind == "request":
            self.lease_counter += 1
            self.leases.append(lease(f"l{self.lease_counter}", created=0))
        elif kind == "assign":
            # The controller writes the Lease first; the Exporter's leaseRef
            # follows in the same step or at a later "sync".
            pending = [x for x in self.leases if not assigned_exporter(x) and not lease_ended(x)]
            name = self.pick(index, self.free)
            if pending and name:
                self.now += timedelta(seconds=1)
                pending[0]["status"]["exporterRef"] = {"name": name}
                pending[0]["status"]["beginTime"] = format_time(self.now)
                if index % 2:
                    self.sync()
        elif kind == "sync":
            self.sync()
        elif kind == "release":
            active = [x for x in self.leases if assigned_exporter(x) and not lease_ended(x)]
            if active:
                self.end(active[index % len(active)])
                if index % 2:
                    self.sync()
            else:
                # An Exporter that says it is leased by a Lease no longer there.
                name = self.pick(index, lambda e: lease_name(e) is not None)
                if name:
                    self.exporters[name]["status"].pop("leaseRef")
        elif kind == "flash":
            # A short lease, assigned and ended between two plans: no plan
            # ever sees the Exporter leased.
            name = self.pick(index, self.free)
            if name:
                self.now += timedelta(seconds=1)
                self.lease_counter += 1
                short = lease(f"l{self.lease_counter}", created=0, assigned=name)
                short["metadata"]["creationTimestamp"] = format_time(self.now)
                short["status"]["beginTime"] = format_time(self.now)
                self.leases.append(short)
                self.end(short)
        elif kind == "advance":
            self.now += timedelta(seconds=[5, 60, 400][index % 3])


    def free(self, exporter):
        """What the controller may assign: enabled, online, held by no active Lease."""
        return is_available(exporter) and not LeaseView(self.leases).holders(exporter)

    def end(self, the_lease):
        the_lease["status"]["ended"] = True
        the_lease["status"]["endTime"] = format_time(self.now)
        the_lease["metadata"].setdefault("labels", {})[LEASE_ENDED_LABEL] = "true"

    def sync(self):
        """The controller's Exporter reconcile: leaseRef follows the active Leases."""
        active = {assigned_exporter(x): x["metadata"]["name"] for x in self.leases
                  if assigned_exporter(x) and not lease_ended(x)}
        for name, obj in self.exporters.items():
            if name in active:
                obj["status"]["leaseRef"] = {"name": active[name]}
            else:
                obj["status"].pop("leaseRef", None)


def spec_and_pool():
    @st.composite
    def build(draw):
        max_replicas = draw(st.sampled_from([0, 1, 2, 3, 5, 8]))
        top = max_replicas if max_replicas else 6
        min_replicas = draw(st.integers(0, min(top, 3)))
        min_available = draw(st.integers(0, min(top, 4)))
        the_set = exporter_set(
            min_replicas=min_replicas, max_replicas=max_replicas, min_available=min_available,
            cooldown=draw(st.sampled_from(["0s", "30s", "5m"])),
            recycle=draw(st.sampled_from(["ExitAndReplace", "InPlaceReuse"])),
        )
        klass = target_class(binding=draw(st.sampled_from(["Immediate", "WaitForFirstConsumer"])))
        size = draw(st.integers(0, top))
        pool = []
        for index in range(size):
            ready = draw(st.booleans())
            parked = draw(st.booleans()) and draw(st.booleans())
            pool.append(exporter(
                f"{SET_NAME}-{index}", ready=ready, enabled=not parked,
                lease=f"old-{index}" if ready and draw(st.booleans()) else None,
                created=-draw(st.integers(0, 1000)),
                annotations={c.ANNOTATION_SCALE_DOWN: NOW} if parked else None,
            ))
        options = {"burst": draw(st.integers(1, 5))}
        return the_set, klass, pool, options

    return build()


EVENTS = st.lists(
    st.tuples(st.sampled_from(["ready", "offline", "fail", "request", "assign", "sync", "release",
                               "flash", "advance"]), st.integers(0, 20)),
    max_size=25,
)
PROPERTY_SETTINGS = settings(max_examples=150, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


def leased_names(world):
    return {n for n, e in world.exporters.items() if lease_name(e)}


def applied(world, plan):
    after = copy.deepcopy(world)
    after.apply(plan)
    return after


def check_deterministic(world, plan):
    assert plan == world.plan(), "the plan is not deterministic"


def check_invariants(world, plan):
    the_spec = world.set["spec"]
    max_replicas = the_spec["maxReplicas"]
    before = world.exporters
    # Lease safety: leased from either side (leaseRef, or a Lease naming it
    # that has not ended) means never disabled, deleted or reset.
    leased = world.held()
    touched = (set(plan["disable"]) | {d["name"] for d in plan["delete"]}
               | {d["name"] for d in plan["delete_dormant"]} | {r["name"] for r in plan["recycle"]})
    assert not touched & leased, "a leased exporter was disabled, deleted or reset"
    # Deleted or reset only once seen disabled (the dormant Exporter has no instance).
    acted = {d["name"] for d in plan["delete"]} | {r["name"] for r in plan["recycle"]}
    assert not {n for n in acted if is_enabled(before[n])}, "an enabled exporter was deleted or reset"
    midway = copy.deepcopy(world)
    midway.apply_removals(plan)
    if any(is_enabled(e) for e in before.values()):
        assert any(is_enabled(e) for e in midway.exporters.values()), \
            "the last enabled exporter was disabled or deleted before another was there"
    after_world = applied(world, plan)
    assert any(is_enabled(e) for e in after_world.exporters.values()), \
        "the selector is left with no enabled exporter"
    assert all(not is_dormant(e) or lease_name(e) is None for e in after_world.exporters.values())
    if not any(is_enabled(e) and not is_dormant(e) for e in after_world.exporters.values()):
        assert any(is_dormant(e) for e in after_world.exporters.values())
    after = {n: e for n, e in after_world.exporters.items() if not is_dormant(e)}
    before = {n: e for n, e in before.items() if not is_dormant(e)}
    if max_replicas > 0:
        assert len(after) <= max(max_replicas, len(before) - len(plan["delete"]))
    # Disables for scale-down (not those before a recycle or a replacement).
    scale_down_disables = [n for n in plan["disable"]
                           if (plan["exporter_annotations"].get(n) or {}).get(c.ANNOTATION_SCALE_DOWN)]
    scaling_down = scale_down_disables or any(d["reason"] == c.DELETE_SCALE_DOWN
                                              for d in plan["delete"])
    if scaling_down:
        assert not plan["create"]
        assert not (scale_down_disables and plan["enable"])
        useful = [e for e in after.values() if is_enabled(e) or lease_name(e)]
        assert len(useful) >= plan["target"]
        assert len(after) >= min(the_spec["minReplicas"], len(before))
        warm = 0 if world.klass["spec"]["bindingMode"] == c.BINDING_WAIT_FOR_FIRST_CONSUMER \
            else the_spec["minAvailableReplicas"]
        # One that served an ended lease and is disabled to be recycled was
        # never available to the next user.
        retiring = {n for n in plan["disable"]
                    if (plan["exporter_annotations"].get(n) or {}).get(c.ANNOTATION_RETIRING)}
        available_before = sum(1 for n, e in before.items() if is_available(e) and n not in retiring)
        available_after = sum(1 for e in after.values() if is_available(e))
        assert available_after >= min(warm, available_before)


def check_dormant_at_rest(world):
    """At a fixed point, one dormant Exporter exists exactly when no other is enabled."""
    dormant = [e for e in world.exporters.values() if is_dormant(e)]
    others_enabled = any(is_enabled(e) and not is_dormant(e) for e in world.exporters.values())
    assert len(dormant) == (0 if others_enabled else 1)


def settle(world, limit=40):
    """Apply plans with no world event until one changes nothing."""
    for _ in range(limit):
        plan = world.plan()
        if not plan["changed"]:
            check_dormant_at_rest(world)
            return plan
        check_invariants(world, plan)
        # A name is free again once its Exporter is gone (k8s_apply still waits
        # for its credential Secret to go); a name still in use never is.
        kept = set(world.exporters) - {d["name"] for d in plan["delete"] + plan["delete_dormant"]}
        world.apply(plan)
        again = world.plan()
        assert not {e["name"] for e in again["create"] + again["create_dormant"]} & kept
        assert not set(again["disable"]) & set(plan["disable"])
    raise AssertionError("no fixed point without world events")


@PROPERTY_SETTINGS
@given(spec_and_pool(), EVENTS)
def test_invariants_hold_under_random_events(scenario, events):
    world = World(*scenario)
    world.run(events, check_deterministic, check_invariants)
    settle(world)


@PROPERTY_SETTINGS
@given(spec_and_pool(), EVENTS)
def test_converges_to_target_when_exporters_become_ready(scenario, events):
    world = World(*scenario)
    world.run(events)
    for _ in range(30):
        plan = world.plan()
        world.apply(plan)
        for name, candidate in world.exporters.items():
            if is_dormant(candidate):
                continue
            world.instances[name] = {"phase": "Running"}
            if not is_ready(candidate):
                world.set_ready(name, True)
        world.now += timedelta(seconds=301)
        final = settle(world)
        pool = [e for e in world.exporters.values() if not is_dormant(e)]
        unleased = [e for e in pool if not lease_name(e)]
        if len(pool) == final["target"] and all(map(is_available, unleased)):
            break
    else:
        raise AssertionError("pool did not converge")
    assert not any(final[k] for k in ("create", "enable", "disable", "delete", "recycle"))
    assert final["status"]["replicas"] == final["target"]


@PROPERTY_SETTINGS
@given(spec_and_pool(), EVENTS)
def test_every_exporter_that_served_an_ended_lease_is_recycled(scenario, events):
    """Seen leased or not (``flash`` leases begin and end between two plans),
    an Exporter that served a Lease that has since ended is replaced
    (ExitAndReplace) or reset (InPlaceReuse) once nothing else happens."""
    world = World(*scenario)
    world.run(events)
    world.sync()
    settle(world)
    reuse = world.set["spec"]["recycleStrategy"] == c.RECYCLE_IN_PLACE_REUSE
    view = LeaseView(world.leases)
    for name, obj in world.exporters.items():
        if is_dormant(obj) or view.holders(obj):
            continue
        served = [x for x in world.leases if lease_ended(x) and served_by(x, obj)]
        if not served:
            continue
        assert reuse, f"{name} served {served[-1]['metadata']['name']} and was not replaced"
        handled = parse_ended_key(obj["metadata"]["annotations"].get(c.ANNOTATION_REUSED_AFTER))
        assert handled is not None and max(map(ended_key, served)) <= handled, \
            f"{name} served an ended lease and was not reset"


@st.composite
def held_pools(draw):
    """A pool where any Exporter may be leased from one side, the other, both or
    neither, and may also be failed, surplus, retiring, parked or used before."""
    the_set = exporter_set(
        min_available=draw(st.integers(0, 3)), max_replicas=draw(st.sampled_from([0, 2, 6])),
        cooldown="0s", state={operator_state.SURPLUS_SINCE: "2026-11-21T07:00:00Z"},
        recycle=draw(st.sampled_from(["ExitAndReplace", "InPlaceReuse"])))
    pool, leases, instances = [], [], {}
    for index in range(draw(st.integers(1, 6))):
        name = f"{SET_NAME}-{index}"
        side = draw(st.sampled_from(["none", "leaseRef", "lease", "both"]))
        state = draw(st.sampled_from(["enabled", "parked", "retiring", "reusing", "held-by-others"]))
        notes = {"parked": {c.ANNOTATION_SCALE_DOWN: NOW},
                 "retiring": {c.ANNOTATION_RETIRING: c.DELETE_RECYCLE},
                 "reusing": {c.ANNOTATION_RETIRING: c.RECYCLE_IN_PLACE_REUSE}}.get(state)
        pool.append(exporter(name, ready=draw(st.booleans()), enabled=state == "enabled",
                             lease=f"l-{index}" if side in ("leaseRef", "both") else None,
                             created=-draw(st.integers(0, 1000)), annotations=notes))
        if side in ("lease", "both"):
            leases.append(lease(f"l-{index}", assigned=name))
        if draw(st.booleans()):
            leases.append(lease(f"old-{index}", assigned=name, ended=True))
        if draw(st.booleans()):
            instances[name] = {"phase": "Failed", "message": "crashed"}
    return the_set, pool, leases, instances


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(held_pools())
def test_no_plan_touches_an_exporter_leased_from_either_side(scenario):
    the_set, pool, leases, instances = scenario
    plan = scale_plan(the_set, target_class(), pool, [], NOW, instances=instances, leases=leases)
    view = LeaseView(leases)
    leased = {e["metadata"]["name"] for e in pool if view.holders(e)}
    touched = (set(plan["disable"]) | {d["name"] for d in plan["delete"]}
               | {r["name"] for r in plan["recycle"]})
    assert not touched & leased, f"leased from either side and touched: {sorted(touched & leased)}"
    enabled = {e["metadata"]["name"] for e in pool if is_enabled(e)}
    acted = {d["name"] for d in plan["delete"]} | {r["name"] for r in plan["recycle"]}
    assert not acted & enabled, f"deleted or reset while enabled: {sorted(acted & enabled)}"
