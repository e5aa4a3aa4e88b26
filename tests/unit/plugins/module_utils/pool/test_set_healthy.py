"""SetHealthy, the health condition JEP-0014 gives an ExporterSet beside
ScalingLimited: True while the set is not Degraded and its policy is valid,
False with the reason and message of what makes it so, whichever step of the
plan found it (the planner, the backend's refusal, the policy)."""

import copy
import json

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import backend_refusal, operator_state
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import (
    make_condition,
    pool_status,
    set_healthy_condition,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import parse_time
from pool_builders import NOW, at, exporter, exporter_set, target_class


def condition(plan, kind):
    return next((x for x in plan["status"]["conditions"] if x["type"] == kind), None)


def healthy(plan):
    found = condition(plan, c.CONDITION_SET_HEALTHY)
    assert found is not None, "no SetHealthy condition"
    return found


def plan(the_set, exporters=(), klass="default", **kwargs):
    klass = target_class() if klass == "default" else klass
    return scale_plan(the_set, klass, list(exporters), [], NOW, options=kwargs or None)


def applied(the_set, result):
    done = copy.deepcopy(the_set)
    done["status"] = result["status"]
    return done


def observed(the_set, policies=()):
    objects = {"VirtualTargetClass": [target_class()], "ExporterSet": [the_set], "Exporter": [],
               "Lease": [], "Pod": [], "ExporterSetPolicy": list(policies)}
    return k8s_observe.observe(the_set, objects, NOW)


def test_a_set_serving_as_asked_is_healthy():
    the_set = exporter_set(min_available=1)
    result = plan(the_set, [exporter("rpi4-0")])
    cond = healthy(result)
    assert (cond["status"], cond["reason"]) == ("True", c.REASON_HEALTHY)
    assert cond["observedGeneration"] == 3 and cond["lastTransitionTime"] == NOW
    assert condition(result, c.CONDITION_DEGRADED)["status"] == "False"


def test_short_of_its_warm_buffer_or_capped_a_set_is_still_healthy():
    """The JEP's own example: SetHealthy True with fewer available than
    minAvailableReplicas; ScalingLimited and Available say the rest."""
    the_set = exporter_set(min_available=3, max_replicas=2)
    result = plan(the_set, [exporter("rpi4-0", ready=False, created=-10)])
    assert condition(result, c.CONDITION_AVAILABLE)["status"] == "False"
    assert condition(result, c.CONDITION_SCALING_LIMITED)["status"] == "True"
    assert healthy(result)["status"] == "True"


@pytest.mark.parametrize(("case", "reason"), [
    ("no-class", c.REASON_CLASS_NOT_FOUND),
    ("bad-parameters", c.REASON_INVALID_PARAMETERS),
    ("failing-instances", c.REASON_REPLICA_FAILURE),
])
def test_a_degraded_set_is_not_healthy_and_says_why(case, reason):
    the_set = exporter_set(min_available=1)
    kwargs = {}
    exporters = []
    klass = "default"
    if case == "no-class":
        klass = None
    elif case == "bad-parameters":
        the_set = exporter_set(min_available=1, parameters={"resources": {"memory": "8Gx"}})
    else:
        the_set = exporter_set(min_available=1, state={
            operator_state.CONSECUTIVE_FAILURES: 3,
            operator_state.LAST_FAILURE: json.dumps({"reason": "Failed", "message": "boom",
                                                   "time": at(-5), "unrecoverable": True})})
    result = plan(the_set, exporters, klass=klass, **kwargs)
    degraded = condition(result, c.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", reason)
    cond = healthy(result)
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", reason, degraded["message"])


def test_a_backend_refusing_the_credentials_makes_the_set_unhealthy():
    the_set = exporter_set(min_available=1)
    fragment = backend_refusal.record(the_set, backend_refusal.REASON_CREDENTIALS_REJECTED,
                                      "401: token rejected", parse_time(NOW))
    the_set = exporter_set(min_available=1, state=fragment["set_state"])
    result = k8s_observe.plan_for(the_set, observed(the_set))
    cond = healthy(result)
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", c.REASON_CREDENTIALS_REJECTED, "401: token rejected")


def test_an_invalid_policy_makes_the_set_unhealthy_until_it_is_fixed():
    the_set = exporter_set(min_available=1)
    bad = {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSetPolicy",
           "metadata": {"name": "rpi4-policy", "namespace": "lab", "generation": 1},
           "spec": {"exporterSetName": "rpi4", "scaleIn": {"order": "Random"}}}
    result = k8s_observe.plan_for(the_set, observed(the_set, [bad]))
    cond = healthy(result)
    assert (cond["status"], cond["reason"]) == ("False", c.REASON_INVALID_POLICY)
    assert "spec.scaleIn.order" in cond["message"]
    fixed = k8s_observe.plan_for(applied(the_set, result), observed(applied(the_set, result)))
    assert healthy(fixed)["status"] == "True"


def test_a_held_health_keeps_its_time_and_writes_nothing_more():
    the_set = exporter_set(min_available=1)
    exporters = [exporter("rpi4-0")]
    first = plan(the_set, exporters)
    earlier = copy.deepcopy(first["status"])
    for x in earlier["conditions"]:
        x["lastTransitionTime"] = at(-600)
    again = plan(exporter_set(min_available=1, status=earlier), exporters)
    assert healthy(again)["lastTransitionTime"] == at(-600)
    assert again["status"] == earlier and again["changed"] is False
    # Health lost: the time moves.
    broken = plan(exporter_set(min_available=1, status=earlier), exporters, klass=None)
    assert healthy(broken)["status"] == "False" and healthy(broken)["lastTransitionTime"] == NOW


def test_nothing_is_claimed_before_the_set_has_been_planned():
    assert set_healthy_condition([make_condition(c.CONDITION_AVAILABLE, True, "r", "")]) is None
    status = pool_status(exporter_set(), [], now=NOW,
                         conditions=[make_condition(c.CONDITION_AVAILABLE, True, "r", "")])
    assert [x["type"] for x in status["conditions"]] == [c.CONDITION_AVAILABLE]
