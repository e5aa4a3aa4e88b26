"""The pool pass's core (k8s/reconcile_pass.py) on what the caller already
has: a step whose copy says there is nothing to do makes no API call (the
client here is None, so any call fails the test), and a run told that the
operator records the outcome, the class's and the policies' status reads
and writes none of them. Who records is an option with its choices; any
other value is an error naming it."""

from datetime import UTC, datetime

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import exporterset_options
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import lifecycle, reconcile_pass
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import class_status, policy

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NO_API = None


def a_set(finalizers=(), deleting=False):
    meta = {"name": "pool", "namespace": "ns", "uid": "u1", "generation": 2, "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"virtualTargetClassName": "qemu-small"}}


def test_the_finalizer_the_copy_carries_is_not_read_again():
    assert not reconcile_pass.keep_finalizer(NO_API, a_set([lifecycle.FINALIZER]))
    assert not reconcile_pass.keep_finalizer(NO_API, a_set(), has_class=False)
    assert not reconcile_pass.keep_finalizer(NO_API, a_set(deleting=True))
    assert not reconcile_pass.keep_finalizer(NO_API, a_set(), finalizer="")


def test_a_class_whose_copy_is_what_its_sets_ask_for_is_not_written():
    vclass = {"metadata": {"name": "qemu-small", "namespace": "ns", "generation": 1},
              "spec": {"provisioner": "qemu.jumpstarter.dev", "parameters": {}}}
    wanted = class_status.desired(vclass, ["pool"], NOW)
    vclass = {**vclass, "metadata": {**vclass["metadata"], "finalizers": wanted["finalizers"]},
              "status": wanted["status"]}
    assert reconcile_pass.class_pass(NO_API, vclass, [a_set()], NOW) is None


def test_a_policy_whose_copy_carries_its_status_is_not_written():
    esp = {"metadata": {"name": "steady", "namespace": "ns", "generation": 1},
           "spec": {"exporterSetName": "pool"}}
    esp["status"] = policy.desired_status(esp, [esp], [a_set()], NOW)
    written = reconcile_pass.policy_pass(NO_API, esp, [esp], [a_set()], NOW)
    assert (written.exists, written.changed) == (True, False)
    assert reconcile_pass.sync_policies(NO_API, a_set(), [esp], [a_set()], NOW) == []


def test_a_run_the_operator_records_for_records_nothing():
    for error in (None, "a step failed"):
        result = reconcile_pass.finish(NO_API, a_set(), records=exporterset_options.RECORDED_BY_OPERATOR, error=error)
        assert result == {"changed": False, "outcome_changed": False, "events": 0, "class": None, "policies": []}


def test_who_records_is_one_option_with_its_default():
    assert exporterset_options.RECORDS["records"]["default"] == reconcile_pass.RECORDED_BY_RUN
    assert reconcile_pass.records_here(reconcile_pass.RECORDED_BY_RUN)
    assert not reconcile_pass.records_here(reconcile_pass.RECORDED_BY_OPERATOR)
    with pytest.raises(ValueError, match=r"records: 'nobody' is not one of \['run', 'operator'\]"):
        reconcile_pass.finish(NO_API, a_set(), records="nobody")


def test_the_outcome_is_due_once_settled_and_only_when_missing():
    successful = {"type": "Successful", "status": "True", "observedGeneration": 2}
    done = {**a_set(), "status": {"conditions": [successful]}}
    newer = {**done, "metadata": {**done["metadata"], "generation": 3}}
    assert reconcile_pass.outcome_due(a_set(), {}, settled=True)
    assert reconcile_pass.outcome_due(newer, {}, settled=True)
    assert not reconcile_pass.outcome_due(done, {}, settled=True)
    assert not reconcile_pass.outcome_due(a_set(), {}, settled=False)
    assert not reconcile_pass.outcome_due(a_set(), {}, settled=True, write_condition=False)
    # A paused set writes nothing once it says so, not even a newer generation's outcome.
    assert not reconcile_pass.outcome_due(newer, {"paused": True}, settled=True)


def test_the_finalizer_stays_while_a_teardown_holds_anything():
    assert not reconcile_pass.release_finalizer(NO_API, a_set([lifecycle.FINALIZER], deleting=True), left=["pool-0"])
    assert not reconcile_pass.release_finalizer(NO_API, a_set([lifecycle.FINALIZER], deleting=True), finalizer="")
