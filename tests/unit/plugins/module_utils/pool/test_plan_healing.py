"""Scale-in policy and autohealing knobs of a set's ExporterSetPolicy, as the
scale plan reads them (``options["policy"]``, pool/policy.normalize's form)."""

import json

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import operator_state
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import (
    scale_plan,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pool_builders import NOW, at, exporter, exporter_set, target_class


def plan(the_set, exporters=(), instances=None, policy=None, **options):
    if policy is not None:
        options["policy"] = policy
    return scale_plan(the_set, target_class(), list(exporters), [], NOW, instances=instances,
                      options=options or None)


def surplus_set(keep=0):
    return exporter_set(min_replicas=keep, cooldown="0s",
                        state={operator_state.SURPLUS_SINCE: at(-1)})


def condition(result, kind):
    return next(x for x in result["status"]["conditions"] if x["type"] == kind)


# --- scale-in order ------------------------------------------------------------------


def idle_pool():
    """Four idle Exporters, created oldest (a) to newest (d); b and d are labelled spare."""
    return [exporter(name, created=created, labels={"tier": tier})
            for name, created, tier in (("a", -4000, "main"), ("b", -3000, "spare"),
                                        ("c", -2000, "main"), ("d", -1000, "spare"))]


@pytest.mark.parametrize(
    ("scale_in", "first_two"),
    [
        (None, ["c", "d"]),  # no policy: newest first
        ({"order": "Default"}, ["c", "d"]),
        ({"order": "NewestFirst"}, ["c", "d"]),
        ({"order": "OldestFirst"}, ["a", "b"]),
        ({"order": "Default", "preferSelector": {"matchLabels": {"tier": "spare"}}}, ["b", "d"]),
        ({"order": "OldestFirst",
          "preferSelector": {"matchExpressions": [{"key": "tier", "operator": "In",
                                                   "values": ["main"]}]}}, ["a", "c"]),
    ],
)
def test_scale_in_order(scale_in, first_two):
    policy = None if scale_in is None else {"scaleIn": scale_in}
    result = plan(surplus_set(keep=2), idle_pool(), policy=policy)
    assert result["disable"] == first_two


@pytest.mark.parametrize(("scale_in", "first"), [
    (None, ["pool-11"]),
    ({"order": "NewestFirst"}, ["pool-11"]),
    ({"order": "OldestFirst"}, ["pool-2"]),
])
def test_members_made_in_the_same_second_go_in_the_order_they_were_made(scale_in, first):
    """creationTimestamp has whole seconds: Exporters one plan made share it or
    not as the second's boundary falls. Their names (a counter, compared as a
    number) decide the same way as their age would."""
    pool = [exporter(name, created=-3000) for name in ("pool-2", "pool-9", "pool-10", "pool-11")]
    policy = None if scale_in is None else {"scaleIn": scale_in}
    assert plan(surplus_set(keep=3), pool, policy=policy)["disable"] == first


def test_scale_in_order_within_the_preference():
    prefer = {"matchLabels": {"tier": "spare"}}
    pool = idle_pool()
    oldest = plan(surplus_set(keep=3), pool, policy={"scaleIn": {"order": "OldestFirst",
                                                                 "preferSelector": prefer}})
    newest = plan(surplus_set(keep=3), pool, policy={"scaleIn": {"order": "NewestFirst",
                                                                 "preferSelector": prefer}})
    assert (oldest["disable"], newest["disable"]) == (["b"], ["d"])


@pytest.mark.parametrize("order", ["Default", "OldestFirst", "NewestFirst"])
def test_less_useful_go_before_idle_in_every_order(order):
    pool = [
        exporter("idle-spare", created=-9000, labels={"tier": "spare"}),
        exporter("offline", ready=False, annotations={c.ANNOTATION_FIRST_READY: at(-3000)},
                 online_since=-10, created=-100),
        exporter("provisioning", ready=False, created=-30),
        exporter("lost", created=-50),
    ]
    policy = {"scaleIn": {"order": order, "preferSelector": {"matchLabels": {"tier": "spare"}}}}
    expected = ["lost", "provisioning", "offline", "idle-spare"]
    for keep in range(len(pool)):
        result = plan(surplus_set(keep=keep), pool, instances={"lost": {"phase": "Unknown"}},
                      policy=policy)
        assert result["disable"] == sorted(expected[: len(pool) - keep])


@settings(max_examples=150, deadline=None)
@given(
    leased=st.lists(st.booleans(), min_size=1, max_size=8),
    keep=st.integers(min_value=0, max_value=8),
    order=st.sampled_from(["Default", "OldestFirst", "NewestFirst"]),
    prefer_leased=st.booleans(),
)
def test_scale_in_never_picks_a_leased_exporter(leased, keep, order, prefer_leased):
    # The preference points at the leased ones, and the oldest are the leased ones.
    pool = [exporter(f"x-{i}", created=-5000 + i, lease=f"lease-{i}" if is_leased else None,
                     labels={"held": "yes" if is_leased else "no"})
            for i, is_leased in enumerate(leased)]
    prefer = {"matchLabels": {"held": "yes" if prefer_leased else "no"}}
    result = plan(surplus_set(keep=keep), pool,
                  policy={"scaleIn": {"order": order, "preferSelector": prefer}})
    held = {f"x-{i}" for i, is_leased in enumerate(leased) if is_leased}
    assert not held & (set(result["disable"]) | {d["name"] for d in result["delete"]})
    assert len(result["disable"]) == max(0, len(leased) - max(keep, len(held)))


# --- failure threshold and minimum failing duration -----------------------------------


def failing_set(count, since, last=-5, start=False):
    last_failure = {"time": at(last), "since": at(since), "reason": "Failed", "message": "boom",
                    "exporters": ["gone-0"]}
    if start:
        last_failure["start"] = True
    return exporter_set(min_available=1, state={
        operator_state.CONSECUTIVE_FAILURES: count,
        operator_state.LAST_FAILURE: json.dumps(last_failure)})


def test_startup_failure_threshold_from_the_policy():
    the_set = failing_set(1, since=-5)
    assert condition(plan(the_set), c.CONDITION_DEGRADED)["status"] == "False"
    degraded = condition(plan(the_set, policy={"healing": {"startupFailureThreshold": 1}}),
                         c.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", c.REASON_REPLICA_FAILURE)
    # The plan option is the default a policy overrides; a knob left out keeps it.
    assert condition(plan(the_set, failure_threshold=1), c.CONDITION_DEGRADED)["status"] == "True"
    kept = plan(the_set, failure_threshold=1,
                policy={"healing": {"startupFailureThreshold": None}})
    assert condition(kept, c.CONDITION_DEGRADED)["status"] == "True"
    higher = plan(failing_set(3, since=-5), policy={"healing": {"startupFailureThreshold": 5}})
    assert condition(higher, c.CONDITION_DEGRADED)["status"] == "False"


def test_min_failing_duration_holds_replica_failure_back():
    policy = {"healing": {"minFailingDuration": "10m"}}
    young = plan(failing_set(3, since=-120), policy=policy)
    assert condition(young, c.CONDITION_DEGRADED)["status"] == "False"
    # Asked back when the streak is 10 minutes old (the max backoff's 295 s come first).
    assert young["requeue_after"] == 295
    assert plan(failing_set(3, since=-120, last=-300), policy=policy)["requeue_after"] == 480
    old = plan(failing_set(3, since=-600), policy=policy)
    degraded = condition(old, c.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", c.REASON_REPLICA_FAILURE)
    # The plan option, in seconds, does the same for sets without the knob.
    assert condition(plan(failing_set(3, since=-120), min_failing_duration=600),
                     c.CONDITION_DEGRADED)["status"] == "False"
    assert condition(plan(failing_set(3, since=-120)), c.CONDITION_DEGRADED)["status"] == "True"


def test_streak_start_is_kept_across_failures():
    the_set = failing_set(1, since=-400, last=-100)
    stuck = exporter("stuck-0", ready=False, created=-301)
    result = plan(the_set, [stuck])
    last = json.loads(result["set_state"][operator_state.LAST_FAILURE])
    assert (last["since"], last["time"]) == (at(-400), NOW)
    fresh = plan(exporter_set(min_available=1), [stuck])
    assert json.loads(fresh["set_state"][operator_state.LAST_FAILURE])["since"] == NOW


# --- backoff of instances that never became ready -------------------------------------


@pytest.mark.parametrize(
    ("attempts", "policy", "options", "delay"),
    [
        (1, None, {}, 30),
        (2, None, {}, 60),
        (3, None, {}, 120),   # at the threshold: still growing, not flattened
        (5, None, {}, 480),
        (6, None, {}, 600),   # capped at 10m
        (9, None, {}, 600),
        (3, {"healing": {"unschedulableBackoff": {"base": "2s", "max": "5s"}}}, {}, 5),
        (2, {"healing": {"unschedulableBackoff": {"base": "2s"}}}, {}, 4),
        (2, None, {"unschedulable_backoff_base": 7}, 14),
    ],
)
def test_unschedulable_backoff_grows(attempts, policy, options, delay):
    the_set = failing_set(attempts, since=-1, last=-1, start=True)
    result = plan(the_set, policy=policy, **options)
    assert result["create"] == []
    assert result["requeue_after"] == delay - 1
    assert result["status"]["backoff"] == {"attempts": attempts, "delaySeconds": delay,
                                           "nextAttemptTime": at(delay - 1)}
    progressing = condition(result, c.CONDITION_PROGRESSING)
    assert progressing["reason"] == "BackOff"
    assert f"{attempts} failure(s) in a row, next attempt at {at(delay - 1)}" in progressing["message"]
    # Once the wait is over: one attempt, with an Event that says so, and no backoff in status.
    later = scale_plan(the_set, target_class(), [], [], at(delay - 1), options={
        **options, **({"policy": policy} if policy else {})})
    assert len(later["create"]) == 1 and "backoff" not in later["status"]
    retry = [e for e in later["events"] if e["reason"] == "Retrying"]
    assert len(retry) == 1 and f"attempt {attempts + 1} after {attempts} failure(s)" in \
        retry[0]["message"] and f"waited {delay}s" in retry[0]["message"]


def test_failures_of_ready_instances_keep_their_backoff():
    # An instance that was ready and failed is not a start failure.
    result = plan(failing_set(3, since=-1, last=-1))
    assert result["requeue_after"] == 299 and result["status"]["backoff"]["delaySeconds"] == 300
    gone = exporter("gone-0", ready=False, annotations={c.ANNOTATION_FIRST_READY: at(-900)},
                    online_since=-301)
    first = plan(exporter_set(min_available=1), [gone])
    assert "start" not in json.loads(first["set_state"][operator_state.LAST_FAILURE])
    assert first["requeue_after"] == 10


def test_backoff_status_is_stable_while_waiting():
    the_set = failing_set(2, since=-10, last=-10, start=True)
    the_set["spec"]["minAvailableReplicas"] = 2
    pool = [exporter("rpi4-0")]
    first = plan(the_set, pool)
    assert first["status"]["backoff"]["attempts"] == 2
    the_set["status"] = first["status"]
    again = scale_plan(the_set, target_class(), pool, [], at(5))
    assert again["status"] == first["status"] and not again["changed"]
