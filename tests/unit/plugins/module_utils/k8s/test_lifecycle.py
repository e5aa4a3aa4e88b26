"""The lifecycle decisions every runner of a set shares (k8s/lifecycle.py):
finalizer, teardown, reclaim, plan options and outcome."""

import re

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import lifecycle
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import plan as pool_plan

CLASS = {"metadata": {"name": "qemu-small"}, "spec": {"provisioner": "qemu.jumpstarter.dev"}}


def a_set(finalizers=(), deleting=False, generation=4):
    meta = {"name": "pool", "namespace": "ns", "uid": "u1", "generation": generation,
            "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


def test_finalizer_is_the_operators():
    assert lifecycle.FINALIZER == "virtualtarget.jumpstarter.dev/teardown"


@pytest.mark.parametrize(("the_set", "vclass", "needed"), [
    (a_set(), CLASS, True),
    (a_set([lifecycle.FINALIZER]), CLASS, False),
    (a_set(), None, False),  # no class yet: nothing to tear down
    (a_set(deleting=True), CLASS, False),  # the API server refuses a new finalizer then
])
def test_needs_finalizer(the_set, vclass, needed):
    assert lifecycle.needs_finalizer(the_set, vclass) is needed


@pytest.mark.parametrize(("the_set", "teardown"), [
    (a_set([lifecycle.FINALIZER], deleting=True), True),
    (a_set(["other.example/hold"], deleting=True), False),  # not ours to tear down
    (a_set([lifecycle.FINALIZER]), False),
])
def test_tears_down_only_a_deleted_set_carrying_the_finalizer(the_set, teardown):
    assert lifecycle.tears_down(the_set) is teardown


@pytest.mark.parametrize(("policy", "backends", "exporters"), [
    (None, "remove", "delete"), ("Delete", "remove", "delete"), ("Retain", "retain", "detach")])
def test_reclaim_follows_the_class(policy, backends, exporters):
    vclass = {"spec": {"reclaimPolicy": policy}} if policy else {"spec": {}}
    reclaim = lifecycle.reclaim(vclass)
    assert (reclaim["backends"], reclaim["exporters"]) == (backends, exporters)


def test_teardown_remaining_skips_exporters_already_going():
    going = {"metadata": {"name": "pool-0", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    live = {"metadata": {"name": "pool-1"}}
    pod = {"metadata": {"name": "pool-0"}}
    assert lifecycle.teardown_remaining({"owned": [going, live], "pods": []}) == ["pool-1"]
    assert lifecycle.teardown_remaining({"owned": [going], "pods": [pod]}) == ["pool-0"]
    assert lifecycle.teardown_remaining({"owned": [going], "pods": []}) == []


def test_plan_options_are_the_pool_defaults_with_overrides():
    options = lifecycle.plan_options({"burst": 5})
    assert options["burst"] == 5
    assert options["startup_timeout"] == pool_plan.DEFAULT_OPTIONS["startup_timeout"]
    assert set(options) == set(lifecycle.PLAN_OPTION_NAMES)
    assert lifecycle.plan_options(None) == lifecycle.plan_options({})


@pytest.mark.parametrize(("given", "named"), [
    ({"brust": 5}, "unknown option(s) ['brust']"),
    ({"burst": -1}, "reconcile_plan_options.burst: -1"),
    ({"burst": "20"}, "reconcile_plan_options.burst: '20'"),
    ({"burst": True}, "reconcile_plan_options.burst: True"),
])
def test_plan_options_name_what_is_wrong(given, named):
    with pytest.raises(lifecycle.LifecycleError, match=re.escape(named)):
        lifecycle.plan_options(given)


def test_outcome_success_and_failure():
    ok = lifecycle.outcome(a_set(generation=7))
    assert (ok["type"], ok["status"], ok["reason"], ok["observedGeneration"]) == (
        "Successful", "True", "LastReconcileSucceeded", 7)
    failed = lifecycle.outcome(a_set(), lifecycle.failure_message("Make the backends", "403 Forbidden"))
    assert (failed["type"], failed["reason"], failed["message"]) == (
        "Failure", "ReconcileFailed", "Make the backends: 403 Forbidden")


def test_failure_event_of_a_teardown():
    assert lifecycle.failure_event(a_set(), "x")["reason"] == "ReconcileFailed"
    assert lifecycle.failure_event(a_set(deleting=True), "x")["reason"] == "TeardownFailed"
