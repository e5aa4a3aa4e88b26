"""ExporterSetPolicy (pool/policy.py): defaults, validation naming the field,
one policy per set, and what a paused set's plan does (nothing)."""

import copy

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
from pool_builders import NOW, SET_NAME, exporter, exporter_set, lease, target_class


def esp(name="rpi4-policy", set_name=SET_NAME, namespace="lab", **spec):
    return {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSetPolicy",
            "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": {"exporterSetName": set_name, **spec}}


def condition(status, kind):
    return next((x for x in (status or {}).get("conditions") or () if x["type"] == kind), None)


# --- normalize -----------------------------------------------------------------------


def test_normalize_fills_every_default():
    assert policy.normalize(None) == policy.normalize({}) == {
        "paused": False,
        "rollout": {"strategy": "Opportunistic", "maxUnavailable": 1},
        "scaleIn": {"order": "Default", "preferSelector": None},
        "healing": {"startupFailureThreshold": None, "minFailingDuration": None,
                    "unschedulableBackoff": {"base": None, "max": None}},
        "leaseWait": None,
    }


def test_normalize_keeps_what_is_given_and_fills_the_rest():
    spec = {"exporterSetName": "rpi4", "paused": True, "rollout": {"strategy": "Proactive"},
            "scaleIn": {"preferSelector": {"matchLabels": {"zone": "a"}}},
            "healing": {"minFailingDuration": "2m", "unschedulableBackoff": {"max": "10m"}}}
    got = policy.normalize(spec)
    assert got["paused"] is True
    assert got["rollout"] == {"strategy": "Proactive", "maxUnavailable": 1}
    assert got["scaleIn"] == {"order": "Default", "preferSelector": {"matchLabels": {"zone": "a"}}}
    assert got["healing"] == {"startupFailureThreshold": None, "minFailingDuration": "2m",
                              "unschedulableBackoff": {"base": None, "max": "10m"}}
    assert "exporterSetName" not in got


# --- validate ------------------------------------------------------------------------


def test_a_full_valid_spec_has_no_errors():
    spec = esp(paused=False, rollout={"strategy": "None", "maxUnavailable": 3},
               scaleIn={"order": "OldestFirst",
                        "preferSelector": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
               healing={"startupFailureThreshold": 5, "minFailingDuration": "1h30m",
                        "unschedulableBackoff": {"base": "10s", "max": "5m"}})["spec"]
    assert policy.validate(spec) == []


@pytest.mark.parametrize(("spec", "error"), [
    ({"rollout": {"maxUnavailable": 0}}, "spec.rollout.maxUnavailable: must be >= 1"),
    ({"rollout": {"maxUnavailable": "2"}}, "spec.rollout.maxUnavailable: must be an integer"),
    ({"rollout": {"strategy": "Eager"}}, "spec.rollout.strategy: must be one of Opportunistic, Proactive, None"),
    ({"scaleIn": {"order": "Random"}}, "spec.scaleIn.order: must be one of Default, OldestFirst, NewestFirst"),
    ({"scaleIn": {"preferSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}},
     "spec.scaleIn.preferSelector.matchExpressions[0].values: must not be empty"),
    ({"scaleIn": {"preferSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}},
     "spec.scaleIn.preferSelector.matchExpressions[0].operator: must be one of"),
    ({"healing": {"startupFailureThreshold": 0}}, "spec.healing.startupFailureThreshold: must be >= 1"),
    ({"healing": {"minFailingDuration": "soon"}}, "spec.healing.minFailingDuration: 'soon' is not"),
    ({"healing": {"unschedulableBackoff": {"base": "0s"}}},
     "spec.healing.unschedulableBackoff.base: must be longer than 0"),
    ({"healing": {"unschedulableBackoff": {"base": "5m", "max": "1m"}}},
     "spec.healing.unschedulableBackoff.max: must not be shorter than base"),
    ({"paused": "yes"}, "spec.paused: must be true or false"),
    ({"pause": True}, "spec.pause: unknown field"),
    ({"rollout": {"maxSurge": 1}}, "spec.rollout.maxSurge: unknown field"),
])
def test_validate_names_the_field(spec, error):
    errors = policy.validate({"exporterSetName": "rpi4", **spec})
    assert len(errors) == 1 and errors[0].startswith(error), errors


def test_validate_requires_the_set_name():
    assert policy.validate({}) == [
        "spec.exporterSetName: required, the name of an ExporterSet in the same namespace"]
    assert policy.validate(None) == ["spec: must be an object"]


# --- policy_for ----------------------------------------------------------------------


def test_no_policy_is_the_defaults():
    assert policy.policy_for(exporter_set(), []) == (policy.normalize(None), None)
    # Another set's policy, another namespace's, one being deleted: not this set's.
    deleting = esp(paused=True)
    deleting["metadata"]["deletionTimestamp"] = NOW
    others = [esp(set_name="other", paused=True), esp(namespace="elsewhere", paused=True), deleting]
    assert policy.policy_for(exporter_set(), others) == (policy.normalize(None), None)


def test_the_sets_policy_is_in_force():
    got, cond = policy.policy_for(exporter_set(), [esp(paused=True, rollout={"strategy": "Proactive"})])
    assert cond is None
    assert got["paused"] is True and got["rollout"]["strategy"] == "Proactive"


def test_an_invalid_policy_leaves_the_defaults_and_names_the_field():
    got, cond = policy.policy_for(exporter_set(), [esp(paused=True, rollout={"maxUnavailable": 0})])
    assert got == policy.normalize(None)
    assert (cond["type"], cond["status"], cond["reason"]) == ("PolicyValid", "False", "InvalidPolicy")
    assert "ExporterSetPolicy rpi4-policy: spec.rollout.maxUnavailable: must be >= 1" in cond["message"]


def test_two_policies_for_one_set_conflict():
    got, cond = policy.policy_for(exporter_set(), [esp("b", paused=True), esp("a")])
    assert got == policy.normalize(None)
    assert (cond["status"], cond["reason"]) == ("False", "ConflictingPolicies")
    assert "ExporterSetPolicies a, b all name this set" in cond["message"]


# --- through observe and the plan ---------------------------------------------------------


def observed(the_set, exporters, policies, pending=()):
    for item in exporters:
        item["metadata"]["uid"] = item["metadata"]["name"] + "-uid"
        item["metadata"]["ownerReferences"] = [{"uid": the_set["metadata"]["uid"], "controller": True}]
    objects = {"VirtualTargetClass": [target_class()], "ExporterSet": [the_set], "Exporter": exporters,
               "Lease": list(pending), "Pod": [], "ExporterSetPolicy": policies}
    return k8s_observe.observe(the_set, objects, NOW)


def applied(the_set, plan):
    done = copy.deepcopy(the_set)
    done["status"] = plan["status"]
    return done


def test_invalid_policy_condition_and_event_once_then_valid_again():
    the_set = exporter_set(min_available=1)
    bad = [esp(scaleIn={"order": "Random"})]
    plan = k8s_observe.plan_for(the_set, observed(the_set, [], bad))
    cond = condition(plan["status"], c.CONDITION_POLICY_VALID)
    assert (cond["status"], cond["reason"]) == ("False", c.REASON_INVALID_POLICY)
    assert "spec.scaleIn.order" in cond["message"]
    assert [e["reason"] for e in plan["events"]].count(c.REASON_INVALID_POLICY) == 1
    assert plan["create"], "an invalid policy leaves the set on the defaults, still acting"
    # Seen again: no second Event.
    the_set = applied(the_set, plan)
    again = k8s_observe.plan_for(the_set, observed(the_set, [], bad))
    assert c.REASON_INVALID_POLICY not in [e["reason"] for e in again["events"]]
    # Fixed: PolicyValid=True.
    fixed = k8s_observe.plan_for(the_set, observed(the_set, [], [esp()]))
    assert condition(fixed["status"], c.CONDITION_POLICY_VALID)["status"] == "True"


def test_a_set_without_a_policy_gets_no_policy_condition():
    the_set = exporter_set(min_available=1)
    plan = k8s_observe.plan_for(the_set, observed(the_set, [], []))
    assert condition(plan["status"], c.CONDITION_POLICY_VALID) is None
    assert condition(plan["status"], c.CONDITION_PAUSED) is None


def pool(the_set):
    """A pool with work in every direction: a failed instance, a surplus,
    an ended lease to recycle, a pending lease asking for more."""
    return [exporter("rpi4-0"), exporter("rpi4-1"), exporter("rpi4-2", ready=False, created=-7200),
            exporter("rpi4-3", lease="gone")]


def test_a_paused_set_plans_nothing_and_says_so_once():
    status = {"replicas": 4, "conditions": []}
    the_set = exporter_set(min_available=0, status=status)
    exporters = pool(the_set)
    leases = [lease("gone", assigned="rpi4-3", ended=True)]
    active = k8s_observe.plan_for(the_set, observed(the_set, copy.deepcopy(exporters), []))
    assert active["disable"] or active["delete"], "the same pool unpaused has work to do"

    seen = observed(the_set, copy.deepcopy(exporters), [esp(paused=True)], pending=leases)
    plan = k8s_observe.plan_for(the_set, seen, read_controller_ca=lambda: pytest.fail("no CA read when paused"))
    for key in ("create", "enable", "disable", "delete", "recycle", "create_dormant", "delete_dormant",
                "exporter_annotations", "set_state"):
        assert not plan[key], key
    assert plan["status"]["replicas"] == 4, "counters stay as they were"
    paused = condition(plan["status"], c.CONDITION_PAUSED)
    assert (paused["status"], paused["reason"]) == ("True", c.REASON_PAUSED)
    assert [e["reason"] for e in plan["events"]] == [c.REASON_PAUSED]
    assert plan["changed"]
    assert k8s_observe.unprovisioned(seen) == [] and k8s_observe.probe_playbook(seen) is None
    # Once the condition is written: no change, no Event, nothing to write.
    the_set = applied(the_set, plan)
    later = k8s_observe.plan_for(the_set, observed(the_set, copy.deepcopy(exporters), [esp(paused=True)]),
                                 read_controller_ca=lambda: pytest.fail("no CA read when paused"))
    assert not later["changed"] and later["events"] == [] and later["status"] == the_set["status"]
    # A changed spec (scale) changes nothing either.
    the_set["spec"]["minAvailableReplicas"] = 6
    the_set["metadata"]["generation"] += 1
    scaled = k8s_observe.plan_for(the_set, observed(the_set, copy.deepcopy(exporters), [esp(paused=True)]))
    assert not scaled["changed"] and not scaled["create"]
    # Unpaused: it acts again and says so.
    resumed = k8s_observe.plan_for(the_set, observed(the_set, copy.deepcopy(exporters), [esp(paused=False)]))
    assert resumed["create"] or resumed["disable"] or resumed["delete"]
    back = condition(resumed["status"], c.CONDITION_PAUSED)
    assert (back["status"], back["reason"]) == ("False", c.REASON_RESUMED)
    assert c.REASON_RESUMED in [e["reason"] for e in resumed["events"]]


def test_the_planner_itself_honours_pause():
    the_set = exporter_set(min_available=3)
    plan = scale_plan(the_set, target_class(), [], [], NOW, options={"policy": policy.normalize({"paused": True})})
    assert plan["paused"] and not plan["create"] and not plan["create_dormant"]
    unpaused = scale_plan(the_set, target_class(), [], [], NOW, options={"policy": policy.normalize({})})
    assert unpaused["create"]


def test_an_invalid_pause_is_not_a_pause():
    the_set = exporter_set(min_available=2)
    plan = k8s_observe.plan_for(the_set, observed(the_set, [], [esp(paused=True, rollout={"maxUnavailable": -1})]))
    assert plan["create"] and not plan.get("paused")
    assert condition(plan["status"], c.CONDITION_POLICY_VALID)["reason"] == c.REASON_INVALID_POLICY


class _Cache:
    def __init__(self, items):
        self.items = items

    def list(self, namespace=None):
        return [i for i in self.items if namespace is None or i["metadata"]["namespace"] == namespace]


def _controller(policies):
    from exporterset_operator.controller import Controller

    controller = Controller.__new__(Controller)
    controller.caches = {"ExporterSetPolicy": _Cache(policies), "ExporterSet": _Cache([])}
    return controller


def test_the_operator_looks_at_the_set_a_policy_names_before_and_after_a_rename():
    from exporterset_operator.controller import POLICY_KEY, RESOURCES

    assert "ExporterSetPolicy" in [r.kind for r in RESOURCES]
    rival = esp("rival", set_name="old")
    controller = _controller([esp(set_name="new"), rival, esp("elsewhere", set_name="third")])
    renamed = list(controller._map_policy(esp(set_name="new"), esp(set_name="old")))
    assert renamed == [("lab", "new"), ("lab", "old"), ("lab", "rpi4-policy", POLICY_KEY),
                       ("lab", "rival", POLICY_KEY)]
    assert list(_controller([esp()])._map_policy(esp(), None)) == [("lab", SET_NAME),
                                                                    ("lab", "rpi4-policy", POLICY_KEY)]


def test_a_set_that_comes_or_goes_looks_at_its_policies():
    from exporterset_operator.controller import POLICY_KEY

    controller = _controller([esp()])
    the_set = exporter_set()
    assert ("lab", "rpi4-policy", POLICY_KEY) in list(controller._map_set(the_set, None))
    assert ("lab", "rpi4-policy", POLICY_KEY) not in list(controller._map_set(the_set, the_set))
    going = copy.deepcopy(the_set)
    going["metadata"]["deletionTimestamp"] = NOW
    assert ("lab", "rpi4-policy", POLICY_KEY) in list(controller._map_set(going, the_set))


# --- the policy's own status -----------------------------------------------------------


def test_policy_status_in_force_invalid_conflicting_or_waiting_for_its_set():
    mine = esp()
    status = policy.desired_status(mine, [mine], [exporter_set()], NOW)
    assert status["exporterSet"] == SET_NAME and status["observedGeneration"] == 1
    (valid,) = status["conditions"]
    assert (valid["type"], valid["status"], valid["reason"]) == ("Valid", "True", "Valid")
    # Written, it is current: nothing to write again.
    mine["status"] = status
    assert not policy.status_differs(mine["status"], policy.desired_status(mine, [mine], [exporter_set()], NOW))

    no_set = policy.desired_status(esp(), [esp()], [], NOW)
    assert no_set["exporterSet"] == "" and "does not exist" in no_set["conditions"][0]["message"]

    rival = esp("rival")
    conflict = policy.desired_status(esp(), [esp(), rival], [exporter_set()], NOW)
    assert conflict["exporterSet"] == ""
    assert (conflict["conditions"][0]["status"], conflict["conditions"][0]["reason"]) == (
        "False", c.REASON_CONFLICTING_POLICIES)
    assert "rival also name ExporterSet rpi4" in conflict["conditions"][0]["message"]

    bad = esp(rollout={"maxUnavailable": 0})
    invalid = policy.desired_status(bad, [bad], [exporter_set()], NOW)
    assert invalid["exporterSet"] == ""
    assert invalid["conditions"][0]["message"] == "spec.rollout.maxUnavailable: must be >= 1"
