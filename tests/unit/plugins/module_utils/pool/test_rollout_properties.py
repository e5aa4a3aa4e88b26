"""Property tests of rollouts: random pools, random events and a template
change at a random moment, through test_plan_properties' simulator.

Whatever happens, no plan disables, deletes or resets a leased Exporter,
a rollout never takes the pool's available Exporters below the warm buffer
(or below what there was, when there was less), and at most
``maxUnavailable`` Exporters are out for the rollout at any time.
"""

from datetime import timedelta

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    is_available,
    is_ready,
)
from hypothesis import given
from hypothesis import strategies as st
from pool_builders import SET_NAME, exporter, exporter_set, target_class
from test_plan_properties import (
    PROPERTY_SETTINGS,
    World,
    applied,
    check_invariants,
    is_dormant,
    settle,
)

OLD = "0000000000000000"


class RolloutWorld(World):
    def event(self, kind, index):
        if kind == "change":
            # The class's memory changes: every Exporter made so far is outdated.
            resources = self.klass["spec"]["parameters"]["resources"]
            resources["memory"] = f"{512 + 256 * (index % 4 + 1)}Mi"
        else:
            super().event(kind, index)


@st.composite
def rollout_scenarios(draw):
    max_replicas = draw(st.sampled_from([0, 3, 6]))
    top = max_replicas or 6
    the_set = exporter_set(
        min_available=draw(st.integers(0, min(top, 3))), max_replicas=max_replicas,
        cooldown=draw(st.sampled_from(["0s", "5m"])),
        recycle=draw(st.sampled_from(["ExitAndReplace", "InPlaceReuse"])))
    pool = []
    for index in range(draw(st.integers(0, top))):
        ready = draw(st.booleans())
        pool.append(exporter(
            f"{SET_NAME}-{index}", ready=ready,
            lease=f"old-{index}" if ready and draw(st.booleans()) else None,
            created=-draw(st.integers(0, 1000)),
            annotations={c.ANNOTATION_TEMPLATE_HASH: OLD} if draw(st.booleans()) else None))
    policy = {"rollout": {"strategy": draw(st.sampled_from(["Proactive", "Opportunistic"])),
                          "maxUnavailable": draw(st.integers(1, 3))}}
    return the_set, target_class(), pool, {"burst": draw(st.integers(1, 5)), "policy": policy}


ROLLOUT_EVENTS = st.lists(
    st.tuples(st.sampled_from(["ready", "ready", "offline", "fail", "request", "assign", "sync",
                               "release", "flash", "advance", "change"]), st.integers(0, 20)),
    max_size=30,
)


def check_rollout(world, plan):
    """The rollout's own limits, on top of check_invariants' lease safety."""
    policy = world.options["policy"]["rollout"]
    rolled = {n for n in plan["disable"]
              if (plan["exporter_annotations"].get(n) or {}).get(c.ANNOTATION_RETIRING)
              == c.DELETE_ROLLOUT}
    if policy["strategy"] != "Proactive":
        assert not rolled, "an Opportunistic rollout disabled an idle exporter"
    assert not rolled & world.held(), "a rollout disabled a leased exporter"
    after = applied(world, plan)
    out = [e for e in after.exporters.values()
           if (e["metadata"].get("annotations") or {}).get(c.ANNOTATION_RETIRING) == c.DELETE_ROLLOUT]
    assert len(out) <= policy["maxUnavailable"], "more than maxUnavailable out for the rollout"
    if not rolled:
        return
    # Only what retires for another reason (a failure, an ended lease) leaves the count.
    other = {n for n in plan["disable"] if n not in rolled}
    warm = 0 if world.klass["spec"]["bindingMode"] == c.BINDING_WAIT_FOR_FIRST_CONSUMER \
        else world.set["spec"]["minAvailableReplicas"]
    before = sum(1 for n, e in world.exporters.items()
                 if is_available(e) and not is_dormant(e) and n not in other)
    now = sum(1 for e in after.exporters.values() if is_available(e) and not is_dormant(e))
    assert now >= min(warm, before), "the rollout took the pool below its warm buffer"


@PROPERTY_SETTINGS
@given(rollout_scenarios(), ROLLOUT_EVENTS)
def test_rollout_keeps_leases_and_the_warm_buffer(scenario, events):
    world = RolloutWorld(*scenario)
    world.run(events, check_invariants, check_rollout)
    settle(world)


@PROPERTY_SETTINGS
@given(rollout_scenarios(), ROLLOUT_EVENTS)
def test_proactive_rollout_completes_once_leases_end(scenario, events):
    """Once every lease has ended and instances come up, a Proactive rollout
    leaves no outdated Exporter: updatedReplicas reaches replicas."""
    the_set, klass, pool, options = scenario
    options["policy"]["rollout"]["strategy"] = "Proactive"
    world = RolloutWorld(the_set, klass, pool, options)
    world.run(events, check_rollout)
    world.event("change", 1)
    for held in [x for x in world.leases if not x["status"].get("ended")]:
        world.end(held)
    world.sync()
    for _ in range(60):
        plan = world.plan()
        check_invariants(world, plan)
        check_rollout(world, plan)
        world.apply(plan)
        for name, candidate in world.exporters.items():
            if not is_dormant(candidate) and not is_ready(candidate):
                world.set_ready(name, True)
        world.now += timedelta(seconds=301)  # past any backoff and cooldown
        status = world.plan()["status"]
        rolling = next(x for x in status["conditions"] if x["type"] == c.CONDITION_ROLLING_OUT)
        if status["updatedReplicas"] == status["replicas"] and rolling["status"] == "False":
            break
    else:
        spec = world.set["spec"]
        # No room above the warm buffer for a replacement: the rollout waits
        # (idle ones go when a lease has used them) and says why.
        assert 0 < spec["maxReplicas"] <= spec["minAvailableReplicas"], \
            f"the rollout did not complete: {status}"
        assert "no replacement can be made" in rolling["message"], rolling
