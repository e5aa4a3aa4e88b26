import json
import random

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import operator_state
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import (
    scale_plan,
)
from pool_builders import NOW, SET_NAME, at, exporter, exporter_set, lease, target_class


def plan(the_set, exporters=(), pending=0, now=NOW, klass="default", instances=None,
         leases=None, **options):
    if klass == "default":
        klass = target_class()
    pending_leases = [lease(f"pending-{i}") for i in range(pending)]
    return scale_plan(the_set, klass, list(exporters), pending_leases, now, instances=instances,
                      options=options or None, leases=leases)


def after(result, exporter_obj):
    """``exporter_obj`` once ``result``'s disable, re-enable and annotations are applied."""
    name = exporter_obj["metadata"]["name"]
    obj = json.loads(json.dumps(exporter_obj))
    if name in result["disable"]:
        obj["spec"]["enabled"] = False
    if name in result["enable"] or name in [r["name"] for r in result["recycle"]]:
        obj["spec"]["enabled"] = True
    notes = obj["metadata"].setdefault("annotations", {})
    for key, value in (result["exporter_annotations"].get(name) or {}).items():
        if value is None:
            notes.pop(key, None)
        else:
            notes[key] = value
    return obj


def condition(result, kind):
    return next(x for x in result["status"]["conditions"] if x["type"] == kind)


def created(result):
    return [e["name"] for e in result["create"]]


def deleted(result):
    return {d["name"]: d["reason"] for d in result["delete"]}


def ready_pool(count, leased=0, prefix=SET_NAME):
    return [exporter(f"{prefix}-{i}", lease=f"lease-{i}" if i < leased else None,
                     created=-3600 + i) for i in range(count)]


# --- target and scale-up -------------------------------------------------------------


@pytest.mark.parametrize(
    ("leased", "pending", "min_available", "min_replicas", "max_replicas", "binding", "target"),
    [
        (0, 0, 2, 0, 20, "Immediate", 2),          # warm buffer only
        (2, 1, 2, 0, 0, "Immediate", 5),           # leased + pending + warm, no ceiling
        (0, 0, 0, 0, 10, "Immediate", 0),          # fully on demand, idle
        (0, 0, 0, 3, 3, "Immediate", 3),           # min == max
        (4, 3, 2, 0, 6, "Immediate", 6),           # clamped to maxReplicas
        (0, 0, 0, 2, 0, "Immediate", 2),           # minReplicas floor
        (0, 1, 2, 0, 10, "WaitForFirstConsumer", 1),  # no warm buffer
        (1, 0, 3, 0, 10, "WaitForFirstConsumer", 1),
    ],
)
def test_target(leased, pending, min_available, min_replicas, max_replicas, binding, target):
    the_set = exporter_set(min_replicas=min_replicas, max_replicas=max_replicas,
                           min_available=min_available)
    result = plan(the_set, ready_pool(leased, leased=leased), pending=pending,
                  klass=target_class(binding=binding))
    assert result["target"] == target
    assert len(result["create"]) == target - leased


def test_creates_carry_template_labels_and_bookkeeping():
    result = plan(exporter_set(min_available=2))
    assert created(result) == ["rpi4-0", "rpi4-1"]
    first = result["create"][0]
    assert first["labels"] == {"board": "rpi4", "virtual": "true", c.LABEL_EXPORTER_SET: "rpi4"}
    assert first["annotations"][c.ANNOTATION_PROVISIONER] == c.PROVISIONER_QEMU
    assert first["annotations"][c.ANNOTATION_SET_GENERATION] == "3"
    assert result["events"][0]["reason"] == "ScaledUp"
    assert condition(result, c.CONDITION_PROGRESSING)["reason"] == "ScalingUp"


def test_names_skip_taken_owned_and_terminating():
    owned = [exporter("rpi4-0"), exporter("rpi4-2"), exporter("rpi4-3", terminating=True)]
    result = plan(exporter_set(min_available=4), owned, taken_names=["rpi4-1", "other-0"])
    assert created(result) == ["rpi4-4", "rpi4-5"]


@pytest.mark.parametrize(("burst", "expected"), [(20, 20), (5, 5), (50, 30)])
def test_burst_limit(burst, expected):
    result = plan(exporter_set(min_available=30), burst=burst)
    assert len(result["create"]) == expected
    assert condition(result, c.CONDITION_SCALING_LIMITED)["status"] == "False"


def test_burst_continues_on_next_reconcile():
    first = plan(exporter_set(min_available=30), burst=20)
    provisioning = [exporter(e["name"], ready=False, created=-5) for e in first["create"]]
    second = plan(exporter_set(min_available=30), provisioning, burst=20)
    assert len(second["create"]) == 10
    assert not set(created(second)) & set(created(first))


def test_max_replicas_reached():
    result = plan(exporter_set(max_replicas=3), ready_pool(3, leased=3), pending=2)
    assert result["create"] == []
    limited = condition(result, c.CONDITION_SCALING_LIMITED)
    assert (limited["status"], limited["reason"]) == ("True", c.REASON_MAX_REPLICAS_REACHED)
    assert "need 5 replicas, maxReplicas is 3" in limited["message"]
    assert any(e["type"] == "Warning" and e["reason"] == c.REASON_MAX_REPLICAS_REACHED
               for e in result["events"])


def test_capacity_clamps_creates():
    capacity = {"limit": 1, "reason": "NoFreeSlots", "message": "no free slot on hosts a, b"}
    result = plan(exporter_set(min_available=3), capacity=capacity)
    assert len(result["create"]) == 1
    limited = condition(result, c.CONDITION_SCALING_LIMITED)
    assert (limited["status"], limited["reason"]) == ("True", "NoFreeSlots")
    assert limited["message"].startswith("no free slot on hosts a, b")


def test_pending_leases_drive_scale_up():
    result = plan(exporter_set(min_available=1), ready_pool(1), pending=3)
    assert result["target"] == 4
    assert created(result) == ["rpi4-1", "rpi4-2", "rpi4-3"]


# --- scale-down ----------------------------------------------------------------------


def test_surplus_starts_the_cooldown_clock():
    result = plan(exporter_set(min_available=1), ready_pool(3))
    assert result["disable"] == []
    assert result["set_state"] == {operator_state.SURPLUS_SINCE: NOW}
    assert result["requeue_after"] == 300
    assert condition(result, c.CONDITION_PROGRESSING)["reason"] == "WaitingForCooldown"


@pytest.mark.parametrize(
    ("since", "cooldown", "disabled", "requeue"),
    [
        (-100, "5m", [], 200),
        (-299, "5m", [], 1),
        (-300, "5m", ["rpi4-1", "rpi4-2"], None),
        (-5, "0s", ["rpi4-1", "rpi4-2"], None),
        (-3599, "1h", [], 1),
    ],
)
def test_cooldown(since, cooldown, disabled, requeue):
    the_set = exporter_set(min_available=1, cooldown=cooldown,
                           state={operator_state.SURPLUS_SINCE: at(since)})
    result = plan(the_set, ready_pool(3))
    assert result["disable"] == disabled
    assert result["requeue_after"] == requeue
    for name in disabled:
        assert result["exporter_annotations"][name] == {c.ANNOTATION_SCALE_DOWN: NOW}


def test_surplus_gone_clears_the_clock():
    the_set = exporter_set(min_available=3, state={operator_state.SURPLUS_SINCE: at(-100)})
    result = plan(the_set, ready_pool(3))
    assert result["set_state"] == {operator_state.SURPLUS_SINCE: None}
    assert result["disable"] == [] and result["create"] == []


def test_scale_down_removes_least_useful_first():
    owned = [
        exporter("idle-old", created=-7200),
        exporter("idle-new", created=-600),
        exporter("offline", ready=False, annotations={c.ANNOTATION_FIRST_READY: at(-3000)},
                 online_since=-10),
        exporter("provisioning", ready=False, created=-30),
        exporter("lost", created=-5000),
    ]
    the_set = exporter_set(cooldown="0s", state={operator_state.SURPLUS_SINCE: at(-1)})
    instances = {"lost": {"phase": "Unknown"}}
    expectations = ["lost", "provisioning", "offline", "idle-new", "idle-old"]
    for keep in range(len(owned)):
        the_set["spec"]["minReplicas"] = keep
        result = plan(the_set, owned, instances=instances)
        assert result["disable"] == sorted(expectations[: len(owned) - keep])


def test_never_below_min_replicas():
    the_set = exporter_set(min_replicas=2, cooldown="0s",
                           state={operator_state.SURPLUS_SINCE: at(-1)})
    result = plan(the_set, ready_pool(5))
    assert len(result["disable"]) == 3


def test_leased_exporters_are_never_scaled_down():
    the_set = exporter_set(cooldown="0s", state={operator_state.SURPLUS_SINCE: at(-1)})
    result = plan(the_set, ready_pool(4, leased=4))
    assert result["disable"] == [] and result["delete"] == []


def test_disabled_exporter_is_deleted_once_seen_disabled_and_unleased():
    parked = exporter("rpi4-1", enabled=False, annotations={c.ANNOTATION_SCALE_DOWN: at(-5)})
    result = plan(exporter_set(min_available=1), [exporter("rpi4-0"), parked])
    assert result["delete"] == [{"name": "rpi4-1", "reason": c.DELETE_SCALE_DOWN}]
    assert result["create"] == []


def test_lease_assigned_between_disable_and_delete_is_left_alone():
    parked = exporter("rpi4-1", enabled=False, lease="late-lease",
                      annotations={c.ANNOTATION_SCALE_DOWN: at(-5)})
    result = plan(exporter_set(min_available=1), [exporter("rpi4-0"), parked])
    assert result["delete"] == [] and result["enable"] == [] and result["disable"] == []
    assert result["status"]["leasedReplicas"] == 1


def test_needed_again_is_re_enabled_not_created():
    parked = exporter("rpi4-1", enabled=False, annotations={c.ANNOTATION_SCALE_DOWN: at(-5)})
    result = plan(exporter_set(min_available=1), [exporter("rpi4-0"), parked], pending=1)
    assert result["enable"] == ["rpi4-1"]
    assert result["create"] == [] and result["delete"] == []
    assert result["exporter_annotations"]["rpi4-1"] == {c.ANNOTATION_SCALE_DOWN: None}


def test_exporters_disabled_by_someone_else_are_never_touched():
    held = exporter("rpi4-1", enabled=False)
    the_set = exporter_set(cooldown="0s", state={operator_state.SURPLUS_SINCE: at(-1)})
    result = plan(the_set, [held], instances={"rpi4-1": {"phase": "Failed"}})
    assert result["delete"] == [] and result["enable"] == [] and result["disable"] == []
    assert result["status"]["exportersDisabled"] == 1


# --- lease end and recycling ---------------------------------------------------------


def test_leased_exporter_gets_leased_by_annotation():
    owned = [exporter("rpi4-0", lease="l1", annotations={c.ANNOTATION_LEASED_BY: "old"})]
    result = plan(exporter_set(), owned)
    assert result["exporter_annotations"] == {"rpi4-0": {c.ANNOTATION_LEASED_BY: "l1"}}


def test_lease_end_exit_and_replace():
    # Never seen leased by the pool (no leased-by annotation): the ended
    # Lease that names it is enough.
    used = exporter("rpi4-0")
    ended = [lease("l1", assigned="rpi4-0", ended=True)]
    the_set = exporter_set(min_available=1, max_replicas=1)
    first = plan(the_set, [used], leases=ended)
    # Disabled first (never deleted while enabled); its slot is still taken.
    assert first["disable"] == ["rpi4-0"] and first["delete"] == [] and first["create"] == []
    assert first["exporter_annotations"]["rpi4-0"][c.ANNOTATION_RETIRING] == c.DELETE_RECYCLE
    assert any(e["reason"] == "Recycling" and "l1" in e["message"] for e in first["events"])
    second = plan(the_set, [after(first, used)], leases=ended)
    assert second["delete"] == [{"name": "rpi4-0", "reason": c.DELETE_RECYCLE}]
    # The freed slot is refilled in the same plan: deletes are applied first.
    assert created(second) == ["rpi4-1"]
    assert operator_state.CONSECUTIVE_FAILURES not in second["set_state"]


def test_lease_end_in_place_reuse():
    used = exporter("rpi4-0")
    ended = [lease("l1", assigned="rpi4-0", ended=True)]
    the_set = exporter_set(min_available=1, recycle="InPlaceReuse")
    first = plan(the_set, [used], leases=ended)
    assert first["disable"] == ["rpi4-0"] and first["recycle"] == []
    assert first["exporter_annotations"]["rpi4-0"][c.ANNOTATION_RETIRING] == c.RECYCLE_IN_PLACE_REUSE
    disabled = after(first, used)
    second = plan(the_set, [disabled], leases=ended)
    assert second["recycle"] == [{"name": "rpi4-0", "strategy": "InPlaceReuse"}]
    assert second["delete"] == [] and second["create"] == [] and second["disable"] == []
    notes = second["exporter_annotations"]["rpi4-0"]
    assert notes[c.ANNOTATION_RETIRING] is None and "l1" in notes[c.ANNOTATION_REUSED_AFTER]
    # Reset and enabled again: that lease is done with; a later one is not.
    reused = after(second, disabled)
    assert reused["spec"]["enabled"] is True
    third = plan(the_set, [reused], leases=ended)
    assert third["disable"] == [] and third["recycle"] == []
    later = [*ended, lease("l2", assigned="rpi4-0", ended=True, created=-10)]
    later[1]["status"]["endTime"] = at(-1)
    assert plan(the_set, [reused], leases=later)["disable"] == ["rpi4-0"]


@pytest.mark.parametrize("state", ["leaseRef", "lease-side"])
def test_an_exporter_leased_from_either_side_is_never_touched(state):
    held = exporter("rpi4-0", lease="l1" if state == "leaseRef" else None, created=-10,
                    ready=False, first_ready=False)
    # Failed, surplus and after an ended lease: still left alone while leased.
    leases = [lease("l0", assigned="rpi4-0", ended=True)]
    if state == "lease-side":
        leases.append(lease("l1", assigned="rpi4-0"))
    the_set = exporter_set(min_available=0, cooldown="0s",
                           state={operator_state.SURPLUS_SINCE: at(-600)})
    result = plan(the_set, [held], leases=leases, instances={"rpi4-0": {"phase": "Failed"}})
    assert result["disable"] == [] and result["delete"] == [] and result["recycle"] == []
    assert result["status"]["leasedReplicas"] == 1


@pytest.mark.parametrize(("owner_uid", "began"), [
    ("uid-of-an-older-namesake", -60),  # the Lease's owner is another Exporter of that name
    (None, -7200),                      # orphaned, and it began before this Exporter existed
])
def test_a_namesakes_ended_lease_does_not_recycle(owner_uid, began):
    fresh = exporter("rpi4-0")
    fresh["metadata"]["uid"] = "uid-now"
    old = lease("l1", assigned="rpi4-0", ended=True, created=began)
    if owner_uid:
        old["metadata"]["ownerReferences"] = [
            {"kind": "Exporter", "name": "rpi4-0", "uid": owner_uid, "controller": True}]
    result = plan(exporter_set(min_available=1), [fresh], leases=[old])
    assert result["disable"] == [] and result["delete"] == []
    old["metadata"]["ownerReferences"] = [{"kind": "Exporter", "name": "rpi4-0", "uid": "uid-now", "controller": True}]
    assert plan(exporter_set(min_available=1), [fresh], leases=[old])["disable"] == ["rpi4-0"]


@pytest.mark.parametrize("ended_by", ["label", "Released", "Expired"])
def test_lease_end_is_read_from_the_lease(ended_by):
    used = exporter("rpi4-0")
    done = lease("l1", assigned="rpi4-0")
    if ended_by == "label":
        done["metadata"]["labels"] = {"jumpstarter.dev/lease-ended": "true"}
    else:
        done["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": ended_by}]
    assert plan(exporter_set(min_available=1), [used], leases=[done])["disable"] == ["rpi4-0"]


# --- failures ------------------------------------------------------------------------


def test_startup_timeout_replaces_with_backoff():
    stuck = exporter("rpi4-0", ready=False, created=-301)
    result = plan(exporter_set(min_available=1), [stuck])
    # Disabled first, deleted by the next plan that sees it disabled.
    assert result["disable"] == ["rpi4-0"] and result["delete"] == []
    assert result["exporter_annotations"]["rpi4-0"][c.ANNOTATION_RETIRING] == c.DELETE_STARTUP_TIMEOUT
    then = plan(exporter_set(min_available=1, state=result["set_state"]),
                [after(result, stuck)])
    assert deleted(then) == {"rpi4-0": c.DELETE_STARTUP_TIMEOUT}
    assert then["set_state"] == {}  # counted once
    assert result["create"] == []
    assert result["set_state"][operator_state.CONSECUTIVE_FAILURES] == 1
    last = json.loads(result["set_state"][operator_state.LAST_FAILURE])
    assert last == {"time": NOW, "since": NOW, "reason": c.DELETE_STARTUP_TIMEOUT,
                    "exporters": ["rpi4-0"], "message": "rpi4-0: not ready 300s after creation",
                    "start": True}
    # Never ready: the unschedulable backoff (30s first) spaces the attempts.
    assert result["requeue_after"] == 30
    assert result["status"]["backoff"] == {"attempts": 1, "delaySeconds": 30,
                                           "nextAttemptTime": at(30)}
    assert condition(result, c.CONDITION_DEGRADED)["status"] == "False"
    assert any(e["reason"] == c.DELETE_STARTUP_TIMEOUT and e["exporter"] == "rpi4-0"
               for e in result["events"])


def test_pending_instance_requeues_at_its_startup_timeout():
    result = plan(exporter_set(min_available=1), [exporter("rpi4-0", ready=False, created=-100)])
    assert result["delete"] == [] and result["requeue_after"] == 200
    assert condition(result, c.CONDITION_PROGRESSING)["reason"] == "Provisioning"


def test_failed_instance_is_replaced():
    result = plan(exporter_set(min_available=1), [exporter("rpi4-0")],
                  instances={"rpi4-0": {"phase": "Failed", "reason": "Error",
                                        "message": "qemu exited with 1"}})
    assert result["disable"] == ["rpi4-0"] and result["delete"] == []
    disabled = after(result, exporter("rpi4-0"))
    assert deleted(plan(exporter_set(min_available=1), [disabled])) == {"rpi4-0": c.DELETE_FAILED}
    assert "qemu exited with 1" in result["set_state"][operator_state.LAST_FAILURE]


def test_offline_exporter_is_replaced_after_offline_timeout():
    gone = exporter("rpi4-0", ready=False, annotations={c.ANNOTATION_FIRST_READY: at(-900)},
                    online_since=-301)
    first = plan(exporter_set(min_available=1), [gone])
    assert first["disable"] == ["rpi4-0"]
    assert first["exporter_annotations"]["rpi4-0"][c.ANNOTATION_RETIRING] == "Failed"
    recent = exporter("rpi4-0", ready=False, annotations={c.ANNOTATION_FIRST_READY: at(-900)},
                      online_since=-60)
    result = plan(exporter_set(min_available=1), [recent])
    assert result["delete"] == [] and result["requeue_after"] == 240


@pytest.mark.parametrize(
    ("failures_before", "since_last", "allowed", "requeue"),
    [
        (1, 5, 0, 5),      # backoff 10s, 5s left
        (1, 10, 3, None),  # backoff over: the whole need at once
        (2, 15, 0, 5),     # backoff 20s
        (3, 200, 0, 100),  # threshold: max backoff 300s
        (3, 300, 1, None),  # threshold: one probe create after max backoff
        (5, 400, 1, None),
    ],
)
def test_backoff(failures_before, since_last, allowed, requeue):
    last = json.dumps({"time": at(-since_last), "reason": "Failed", "message": "boom",
                       "exporters": ["gone-0"]})
    the_set = exporter_set(min_available=3, state={
        operator_state.CONSECUTIVE_FAILURES: failures_before, operator_state.LAST_FAILURE: last})
    result = plan(the_set)
    assert len(result["create"]) == allowed
    assert result["requeue_after"] == requeue


def test_threshold_reports_replica_failure():
    last = json.dumps({"time": at(-60), "reason": "Failed", "message": "old",
                       "exporters": ["rpi4-9"]})
    the_set = exporter_set(min_available=1, state={
        operator_state.CONSECUTIVE_FAILURES: 2, operator_state.LAST_FAILURE: last})
    result = plan(the_set, [exporter("rpi4-0")],
                  instances={"rpi4-0": {"phase": "Failed", "message": "disk full"}})
    assert result["set_state"][operator_state.CONSECUTIVE_FAILURES] == 3
    degraded = condition(result, c.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", c.REASON_REPLICA_FAILURE)
    assert "rpi4-0: disk full" in degraded["message"]
    assert {"type": "Warning", "reason": c.REASON_REPLICA_FAILURE,
            "message": degraded["message"]} in result["events"]
    assert result["create"] == [] and result["requeue_after"] == 300


def test_failure_seen_twice_is_counted_once():
    last = json.dumps({"time": at(-1), "reason": "Failed", "message": "x",
                       "exporters": ["rpi4-0"]})
    the_set = exporter_set(state={operator_state.CONSECUTIVE_FAILURES: 1,
                                        operator_state.LAST_FAILURE: last})
    result = plan(the_set, [exporter("rpi4-0")], instances={"rpi4-0": {"phase": "Failed"}})
    assert result["disable"] == ["rpi4-0"]
    assert result["set_state"] == {}


def test_ready_exporter_resets_failures():
    the_set = exporter_set(min_available=1, state={
        operator_state.CONSECUTIVE_FAILURES: 4,
        operator_state.LAST_FAILURE: json.dumps({"time": at(-1), "message": "x"})})
    fresh = exporter("rpi4-3", first_ready=False)
    result = plan(the_set, [fresh])
    assert result["set_state"] == {operator_state.CONSECUTIVE_FAILURES: None,
                                         operator_state.LAST_FAILURE: None}
    assert result["exporter_annotations"] == {"rpi4-3": {c.ANNOTATION_FIRST_READY: NOW}}
    assert condition(result, c.CONDITION_DEGRADED)["status"] == "False"


# --- class and parameters ------------------------------------------------------------


def test_class_not_found():
    result = plan(exporter_set(min_available=2), [exporter("rpi4-0", ready=False,
                                                           created=-9999)], klass=None)
    for action in ("create", "enable", "disable", "delete", "recycle"):
        assert result[action] == []
    assert result["exporter_annotations"] == {} and result["set_state"] == {}
    degraded = condition(result, c.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", c.REASON_CLASS_NOT_FOUND)
    assert "qemu-small" in degraded["message"]
    assert result["events"][0]["reason"] == c.REASON_CLASS_NOT_FOUND
    assert result["changed"] is True


def test_invalid_parameters_block_creates_and_list_every_error():
    the_set = exporter_set(min_available=2, parameters={"resources": {"memory": "8Gx"},
                                                        "machineType": "virt", "kvm": "yes"})
    result = plan(the_set)
    assert result["create"] == []
    degraded = condition(result, c.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", c.REASON_INVALID_PARAMETERS)
    for fragment in ('parameters.resources.memory: "8Gx" is not a quantity',
                     "parameters.machineType", "parameters.kvm"):
        assert fragment in degraded["message"]
    warning = [e for e in result["events"] if e["reason"] == c.REASON_INVALID_PARAMETERS]
    assert warning and warning[0]["type"] == "Warning"


def test_set_parameters_are_merged_over_the_class():
    the_set = exporter_set(min_available=1, parameters={"resources": {"memory": "2Gi"}})
    result = plan(the_set)
    assert result["parameters"] == {"arch": "x86_64",
                                    "resources": {"cpu": 1, "memory": "2Gi"}}
    assert len(result["create"]) == 1


# --- status, conditions, determinism -------------------------------------------------


def test_status_counters():
    owned = [
        exporter("a"), exporter("b", lease="l1"), exporter("c", ready=False, created=-10),
        exporter("d", enabled=False), exporter("e", terminating=True),
    ]
    instances = {"a": {"phase": "Running"}, "b": {"phase": "Running"},
                 "c": {"phase": "Pending"}, "d": {"phase": "Succeeded"}}
    status = plan(exporter_set(), owned, instances=instances)["status"]
    counters = {k: v for k, v in status.items() if isinstance(v, int)}
    assert counters == {
        "replicas": 4, "readyReplicas": 3, "availableReplicas": 1, "unavailableReplicas": 1,
        "leasedReplicas": 1, "exportersActive": 1, "exportersIdle": 1, "exportersOffline": 1,
        "exportersDisabled": 1, "podsRunning": 2, "podsPending": 1, "podsFailed": 0,
        "podsUnknown": 1, "observedGeneration": 3,
        # None carries a template hash: made before rollouts, up to date (rollout.py).
        "updatedReplicas": 4}
    assert status["selector"] == "board=rpi4"


def _apply_status(the_set, result):
    the_set = json.loads(json.dumps(the_set))
    # The plan's status carries the operator state with its patch applied.
    the_set["status"] = result["status"]
    return the_set


def test_last_transition_time_kept_while_status_unchanged():
    owned = ready_pool(1)
    first = plan(exporter_set(min_available=2), owned)
    later_set = _apply_status(exporter_set(min_available=2), first)
    second = plan(later_set, owned + [exporter("rpi4-1", ready=False, created=-5)],
                  now=at(30))
    before = {x["type"]: x for x in first["status"]["conditions"]}
    after = {x["type"]: x for x in second["status"]["conditions"]}
    assert after["Available"]["lastTransitionTime"] == NOW  # still False
    assert after["Degraded"]["lastTransitionTime"] == NOW
    assert after["Progressing"]["reason"] == "Provisioning"
    assert after["Progressing"]["lastTransitionTime"] == NOW  # True -> True
    third = plan(_apply_status(later_set, second), owned + [exporter("rpi4-1")], now=at(60))
    final = {x["type"]: x for x in third["status"]["conditions"]}
    assert final["Available"]["status"] == "True"
    assert final["Available"]["lastTransitionTime"] == at(60)
    assert before["Available"]["status"] == "False"


def test_fixed_point_is_unchanged():
    owned = ready_pool(2)
    the_set = exporter_set(min_available=2)
    first = plan(the_set, owned)
    assert first["changed"] is True  # status was empty
    second = plan(_apply_status(the_set, first), owned, now=at(600))
    assert second["changed"] is False
    assert second["events"] == [] and second["requeue_after"] is None


def test_plan_is_deterministic_and_order_independent():
    owned = ready_pool(6, leased=2) + [exporter("rpi4-9", ready=False, created=-400)]
    the_set = exporter_set(min_available=5, state={operator_state.SURPLUS_SINCE: at(-900)})
    reference = plan(the_set, owned, pending=2)
    shuffled = list(owned)
    random.Random(7).shuffle(shuffled)
    assert plan(the_set, shuffled, pending=2) == reference
    json.dumps(reference)  # JSON-serialisable


def test_now_accepts_datetime():
    from datetime import UTC, datetime

    result = plan(exporter_set(min_available=1), now=datetime(2026, 11, 21, 8, tzinfo=UTC))
    assert result == plan(exporter_set(min_available=1))


def test_inputs_are_not_mutated():
    owned = ready_pool(3, leased=1)
    the_set = exporter_set(min_available=0, state={operator_state.SURPLUS_SINCE: at(-900)})
    snapshot = json.dumps([the_set, owned], sort_keys=True)
    plan(the_set, owned)
    assert json.dumps([the_set, owned], sort_keys=True) == snapshot


def test_conditions_of_other_writers_are_kept_and_a_steady_plan_is_unchanged():
    the_set = exporter_set(min_available=1)
    first = plan(the_set, [exporter("pool-0")])
    successful = {"type": "Successful", "status": "True", "reason": "LastReconcileSucceeded",
                  "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    the_set["status"] = dict(first["status"], conditions=first["status"]["conditions"] + [successful])
    again = plan(the_set, [exporter("pool-0")])
    assert successful in again["status"]["conditions"]
    assert again["changed"] is False


def test_a_reset_exporter_still_booting_does_not_make_the_ready_one_surplus():
    """Being reset in place, an Exporter counts as useful but is not available:
    scale-down keeps the ready one that is the warm buffer."""
    ready = exporter("rpi4-0")
    resetting = exporter("rpi4-1", ready=False, enabled=False,
                         annotations={c.ANNOTATION_RETIRING: c.RECYCLE_IN_PLACE_REUSE})
    ended = [lease("l1", assigned="rpi4-1", ended=True)]
    the_set = exporter_set(min_available=1, recycle="InPlaceReuse", cooldown="0s")
    result = plan(the_set, [ready, resetting], leases=ended)
    assert [r["name"] for r in result["recycle"]] == ["rpi4-1"]
    assert result["disable"] == [], "the only available exporter was scaled down"
    # Once the reset one is ready, the surplus goes.
    back = exporter("rpi4-1", annotations=dict(after(result, resetting)["metadata"]["annotations"]))
    settled = plan(the_set, [ready, back], leases=ended)
    assert len(settled["disable"]) == 1
