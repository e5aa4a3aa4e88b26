"""Rollout of changes (pool/rollout.py) through the scale plan."""

import json

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import rollout
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import (
    scale_plan,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.set_overrides import (
    resolve,
)
from pool_builders import NOW, exporter, exporter_set, lease, target_class

OLD = "0123456789abcdef"
PROACTIVE = {"rollout": {"strategy": "Proactive", "maxUnavailable": 1}}


def current_hash(the_set, klass):
    resolved = resolve(klass, the_set)
    return rollout.template_hash(klass, the_set, resolved["parameters"], resolved["images"])


def made_from(template, **kwargs):
    notes = dict(kwargs.pop("annotations", None) or {})
    notes[c.ANNOTATION_TEMPLATE_HASH] = template
    return exporter(annotations=notes, **kwargs)


def plan(the_set, exporters, klass=None, leases=None, policy=None, pending=0):
    options = {"policy": policy} if policy is not None else None
    return scale_plan(the_set, klass or target_class(), list(exporters),
                      [lease(f"pending-{i}") for i in range(pending)], NOW,
                      options=options, leases=leases)


def after(result, obj):
    """``obj`` once the plan's disables, enables and annotations are applied."""
    obj = json.loads(json.dumps(obj))
    name = obj["metadata"]["name"]
    if name in result["disable"]:
        obj["spec"]["enabled"] = False
    if name in result["enable"]:
        obj["spec"]["enabled"] = True
    for key, value in (result["exporter_annotations"].get(name) or {}).items():
        if value is None:
            obj["metadata"]["annotations"].pop(key, None)
        else:
            obj["metadata"]["annotations"][key] = value
    return obj


def rolling_out(result):
    return next(x for x in result["status"]["conditions"] if x["type"] == c.CONDITION_ROLLING_OUT)


# --- the hash ------------------------------------------------------------------------


def test_hash_is_stable_and_short():
    the_set, klass = exporter_set(), target_class()
    first = current_hash(the_set, klass)
    assert len(first) == rollout.HASH_LENGTH and int(first, 16) >= 0
    # Same content, keys in another order: same hash.
    reordered = target_class(parameters={"resources": {"memory": "512Mi", "cpu": 1},
                                         "arch": "x86_64"})
    assert current_hash(exporter_set(), reordered) == first
    # A value moved from the class to the set merges to the same: same hash.
    moved = exporter_set(parameters={"resources": {"memory": "512Mi"}})
    slim = target_class(parameters={"arch": "x86_64", "resources": {"cpu": 1}})
    assert current_hash(moved, slim) == first


@pytest.mark.parametrize("change", ["class-memory", "set-memory", "template-label", "image",
                                    "scheduling", "drivers"])
def test_hash_changes_with_what_an_instance_is_made_from(change):
    the_set, klass = exporter_set(), target_class()
    before = current_hash(the_set, klass)
    if change == "class-memory":
        klass["spec"]["parameters"]["resources"]["memory"] = "1Gi"
    elif change == "set-memory":
        the_set["spec"]["parameters"] = {"resources": {"memory": "1Gi"}}
    elif change == "template-label":
        the_set["spec"]["template"]["metadata"]["labels"]["rev"] = "2"
    elif change == "image":
        the_set["spec"]["images"] = {"exporter": {"image": "quay.io/example/jumpstarter:2"}}
    elif change == "scheduling":
        klass["spec"]["scheduling"] = {"resources": {"limits": {"memory": "2Gi"}}}
    else:
        the_set["spec"]["template"]["spec"]["drivers"] = [{"name": "power", "type": "x.Power"}]
    assert current_hash(the_set, klass) != before


def test_hash_ignores_pool_sizes_and_recycle_strategy():
    klass = target_class()
    before = current_hash(exporter_set(), klass)
    assert current_hash(exporter_set(min_available=5, max_replicas=9, cooldown="1m",
                                     recycle="InPlaceReuse"), klass) == before


def test_creates_carry_the_current_hash():
    the_set, klass = exporter_set(min_available=2), target_class()
    result = plan(the_set, [], klass=klass)
    assert [e["annotations"][c.ANNOTATION_TEMPLATE_HASH] for e in result["create"]] \
        == [current_hash(the_set, klass)] * 2
    # The dormant Exporter has no instance: nothing to roll.
    dormant = plan(exporter_set(), [], klass=klass)["create_dormant"]
    assert dormant and c.ANNOTATION_TEMPLATE_HASH not in dormant[0]["annotations"]


# --- status --------------------------------------------------------------------------


def test_updated_replicas_and_rolling_out_condition():
    the_set, klass = exporter_set(min_available=1), target_class()
    now_hash = current_hash(the_set, klass)
    pool = [made_from(now_hash, name="rpi4-0"), made_from(OLD, name="rpi4-1", lease="l1"),
            exporter("rpi4-2")]  # no annotation: made before rollouts, up to date
    result = plan(the_set, pool, klass=klass)
    assert result["status"]["updatedReplicas"] == 2 and result["status"]["replicas"] == 3
    condition = rolling_out(result)
    assert (condition["status"], condition["reason"]) == ("True", "Opportunistic")
    assert "2 of 3" in condition["message"] and "1 outdated, 1 of them leased" in condition["message"]
    done = plan(the_set, [made_from(now_hash, name="rpi4-0"), exporter("rpi4-2")], klass=klass)
    assert done["status"]["updatedReplicas"] == 2
    assert (rolling_out(done)["status"], rolling_out(done)["reason"]) == ("False", "UpToDate")


def test_strategy_none_keeps_outdated_exporters():
    the_set = exporter_set(min_available=2, recycle="InPlaceReuse")
    pool = [made_from(OLD, name="rpi4-0"), made_from(OLD, name="rpi4-1")]
    policy = {"rollout": {"strategy": "None", "maxUnavailable": 2}}
    result = plan(the_set, pool, policy=policy)
    assert not (result["disable"] or result["create"] or result["delete"])
    assert (rolling_out(result)["status"], rolling_out(result)["reason"]) == ("False", "RolloutOff")
    # Under None, a lease's end resets an outdated InPlaceReuse Exporter in place, as before.
    ended = [lease("l1", assigned="rpi4-0", ended=True)]
    first = plan(the_set, pool, leases=ended, policy=policy)
    assert first["exporter_annotations"]["rpi4-0"][c.ANNOTATION_RETIRING] == c.RECYCLE_IN_PLACE_REUSE


# --- Opportunistic -------------------------------------------------------------------


def test_opportunistic_replaces_outdated_at_lease_end_even_with_in_place_reuse():
    the_set, klass = exporter_set(min_available=2, recycle="InPlaceReuse"), target_class()
    now_hash = current_hash(the_set, klass)
    old, fresh = made_from(OLD, name="rpi4-0"), made_from(now_hash, name="rpi4-1")
    ended = [lease("l0", assigned="rpi4-0", ended=True), lease("l1", assigned="rpi4-1", ended=True)]
    first = plan(the_set, [old, fresh], klass=klass, leases=ended)
    assert first["disable"] == ["rpi4-0", "rpi4-1"]
    notes = first["exporter_annotations"]
    assert notes["rpi4-0"][c.ANNOTATION_RETIRING] == c.DELETE_RECYCLE
    assert notes["rpi4-1"][c.ANNOTATION_RETIRING] == c.RECYCLE_IN_PLACE_REUSE
    assert any(e["reason"] == "Recycling" and "earlier template" in e["message"]
               and e["exporter"] == "rpi4-0" for e in first["events"])
    second = plan(the_set, [after(first, old), after(first, fresh)], klass=klass, leases=ended)
    # The outdated one goes and a new one is made; the up-to-date one is reset in place.
    assert second["delete"] == [{"name": "rpi4-0", "reason": c.DELETE_RECYCLE}]
    assert second["recycle"] == [{"name": "rpi4-1", "strategy": "InPlaceReuse"}]
    assert [e["annotations"][c.ANNOTATION_TEMPLATE_HASH] for e in second["create"]] == [now_hash]


def test_outdated_exporter_already_disabled_for_in_place_reuse_is_replaced():
    """Disabled for a reset before the change was seen: deleted, not reset."""
    the_set = exporter_set(min_available=1, recycle="InPlaceReuse")
    disabled = made_from(OLD, name="rpi4-0", enabled=False,
                         annotations={c.ANNOTATION_RETIRING: c.RECYCLE_IN_PLACE_REUSE})
    result = plan(the_set, [disabled], leases=[lease("l0", assigned="rpi4-0", ended=True)])
    assert result["recycle"] == []
    assert result["delete"] == [{"name": "rpi4-0", "reason": c.DELETE_RECYCLE}]


def test_opportunistic_leaves_idle_outdated_exporters():
    the_set = exporter_set(min_available=2)
    result = plan(the_set, [made_from(OLD, name="rpi4-0"), made_from(OLD, name="rpi4-1")])
    assert not (result["disable"] or result["create"] or result["delete"])
    assert rolling_out(result)["status"] == "True"


# --- Proactive -----------------------------------------------------------------------


def step(the_set, pool, klass, policy, leases=None):
    """One plan, applied: deletes, disables, annotations, creates (made ready at once
    when ``ready_new``)."""
    result = plan(the_set, pool, klass=klass, leases=leases, policy=policy)
    gone = {d["name"] for d in result["delete"]}
    pool = [after(result, e) for e in pool if e["metadata"]["name"] not in gone]
    for entry in result["create"]:
        pool.append(exporter(entry["name"], ready=False, created=0,
                             annotations=entry["annotations"]))
    return result, pool


def test_proactive_makes_the_replacement_first_when_the_buffer_is_tight():
    the_set, klass = exporter_set(min_available=2), target_class()
    now_hash = current_hash(the_set, klass)
    pool = [made_from(OLD, name="rpi4-0"), made_from(OLD, name="rpi4-1")]
    first, pool = step(the_set, pool, klass, PROACTIVE)
    # Two available, warm buffer two: nothing is disabled, one replacement is made.
    assert first["disable"] == [] and len(first["create"]) == 1
    # While it is not ready the plan is stable: no second replacement, no disable.
    waiting, pool = step(the_set, pool, klass, PROACTIVE)
    assert not (waiting["create"] or waiting["disable"] or waiting["delete"])
    # Ready: one outdated Exporter goes (oldest first), the buffer still met.
    new = pool[-1]["metadata"]["name"]
    pool[-1] = made_from(now_hash, name=new)
    third, pool = step(the_set, pool, klass, PROACTIVE)
    assert third["disable"] == ["rpi4-0"] and third["create"] == []
    assert third["exporter_annotations"]["rpi4-0"][c.ANNOTATION_RETIRING] == c.DELETE_ROLLOUT
    assert any(e["reason"] == "RollingOut" for e in third["events"])
    # maxUnavailable 1: while rpi4-0 is still there (disabled), rpi4-1 stays.
    fourth, pool = step(the_set, pool, klass, PROACTIVE)
    assert fourth["delete"] == [{"name": "rpi4-0", "reason": c.DELETE_ROLLOUT}]
    assert fourth["disable"] == []


@pytest.mark.parametrize("max_unavailable", [1, 2, 3])
def test_proactive_respects_max_unavailable_and_the_warm_buffer(max_unavailable):
    the_set, klass = exporter_set(min_available=2), target_class()
    now_hash = current_hash(the_set, klass)
    # Two up to date and four outdated idle Exporters: four available above the buffer.
    pool = ([made_from(now_hash, name=f"new-{i}") for i in range(2)]
            + [made_from(OLD, name=f"rpi4-{i}", created=-3600 + i) for i in range(4)])
    policy = {"rollout": {"strategy": "Proactive", "maxUnavailable": max_unavailable}}
    result = plan(the_set, pool, klass=klass, policy=policy)
    assert result["disable"] == [f"rpi4-{i}" for i in range(max_unavailable)]
    available = 6 - len(result["disable"])
    assert available >= 2
    # With that many still in flight, no more go.
    pool = [after(result, e) for e in pool]
    assert plan(the_set, pool, klass=klass, policy=policy)["disable"] == []


def test_proactive_never_touches_a_leased_exporter():
    the_set, klass = exporter_set(min_available=1), target_class()
    now_hash = current_hash(the_set, klass)
    pool = [made_from(OLD, name="rpi4-0", lease="l0"), made_from(OLD, name="rpi4-1"),
            made_from(now_hash, name="rpi4-2"), made_from(now_hash, name="rpi4-3")]
    # rpi4-1 is leased from the Lease's side only.
    held = [lease("l0", assigned="rpi4-0"), lease("l1", assigned="rpi4-1")]
    policy = {"rollout": {"strategy": "Proactive", "maxUnavailable": 4}}
    result = plan(the_set, pool, klass=klass, leases=held, policy=policy)
    assert not ({"rpi4-0", "rpi4-1"} & set(result["disable"]))
    assert not result["delete"] and not result["recycle"]
    assert rolling_out(result)["status"] == "True"


def test_proactive_replaces_unready_outdated_ones_without_waiting():
    """One that is not ready serves nobody: it goes at once, its replacement made with it."""
    the_set, klass = exporter_set(min_available=2), target_class()
    now_hash = current_hash(the_set, klass)
    pool = [made_from(now_hash, name="rpi4-0"),
            made_from(OLD, name="rpi4-1", ready=False, created=-10)]
    result = plan(the_set, pool, klass=klass, policy=PROACTIVE)
    assert result["disable"] == ["rpi4-1"] and len(result["create"]) == 1


def test_proactive_is_held_while_the_set_is_invalid():
    the_set = exporter_set(min_available=1, parameters={"resources": {"memory": "lots"}})
    pool = [made_from(OLD, name="rpi4-0", ready=False, created=-10), made_from(OLD, name="rpi4-1")]
    result = plan(the_set, pool, policy=PROACTIVE)
    assert result["disable"] == [] and result["create"] == []
    assert "held" in rolling_out(result)["message"]


def test_settings_defaults():
    assert rollout.settings(None) == ("Opportunistic", 1)
    assert rollout.settings({"rollout": {"strategy": "Proactive", "maxUnavailable": 3}}) \
        == ("Proactive", 3)


def test_parked_exporters_of_the_current_template_are_re_enabled_first():
    the_set, klass = exporter_set(min_available=1), target_class()
    now_hash = current_hash(the_set, klass)
    parked = {c.ANNOTATION_SCALE_DOWN: NOW}
    # Without a rollout the parked order (then the name) picks rpi4-0.
    pool = [made_from(OLD, name="rpi4-0", enabled=False, annotations=parked),
            made_from(now_hash, name="rpi4-1", enabled=False, annotations=parked)]
    assert plan(the_set, pool, klass=klass, policy={"rollout": {"strategy": "None"}})["enable"] \
        == ["rpi4-0"]
    result = plan(the_set, pool, klass=klass)
    assert result["enable"] == ["rpi4-1"]
    assert result["delete"] == [{"name": "rpi4-0", "reason": c.DELETE_SCALE_DOWN}]
