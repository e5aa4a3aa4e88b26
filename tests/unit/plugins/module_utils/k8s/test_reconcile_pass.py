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


def _settled_copies():
    """A set with its outcome, its class and its policy as a recording run leaves them."""
    the_set = a_set()
    the_set["status"] = {"conditions": [{"type": "Successful", "status": "True", "observedGeneration": 2}]}
    vclass = {"metadata": {"name": "qemu-small", "namespace": "ns", "generation": 1},
              "spec": {"provisioner": "qemu.jumpstarter.dev", "parameters": {}}}
    wanted = class_status.desired(vclass, ["pool"], NOW, False)
    vclass = {**vclass, "metadata": {**vclass["metadata"], "finalizers": wanted["finalizers"]},
              "status": wanted["status"]}
    esp = {"metadata": {"name": "steady", "namespace": "ns", "generation": 1}, "spec": {"exporterSetName": "pool"}}
    esp["status"] = policy.desired_status(esp, [esp], [the_set], NOW)
    return the_set, {"ExporterSet": [the_set], "VirtualTargetClass": [vclass], "ExporterSetPolicy": [esp]}


def test_a_run_that_records_finishes_only_when_its_copies_lack_what_it_records():
    """exporterset_pass makes its second call after the backends only when
    there is something to finish: here, what a recording run writes."""
    the_set, objects = _settled_copies()
    assert not reconcile_pass.records_due(the_set, objects, now=NOW)
    # Each one stale makes the call due: the outcome, the class, the policy.
    unsettled = {**the_set, "status": {}}
    assert reconcile_pass.records_due(unsettled, {**objects, "ExporterSet": [unsettled]}, now=NOW)
    assert not reconcile_pass.records_due(unsettled, {**objects, "ExporterSet": [unsettled]}, write_outcome=False,
                                          now=NOW)
    stale_class = {**objects["VirtualTargetClass"][0], "status": {}}
    assert reconcile_pass.records_due(the_set, {**objects, "VirtualTargetClass": [stale_class]}, now=NOW)
    stale_policy = {**objects["ExporterSetPolicy"][0], "status": {}}
    assert reconcile_pass.records_due(the_set, {**objects, "ExporterSetPolicy": [stale_policy]}, now=NOW)
    # Nothing read: due.
    assert reconcile_pass.records_due(the_set, None, now=NOW)


def test_a_pass_state_finishes_the_same_pass_and_its_report_adds_up():
    """The first call's state, as data, makes the writer of the second call:
    the same set, backends' part, teardown, recorder and report."""
    report = reconcile_pass.Report(created=["pool-1"], events=1)
    writer = reconcile_pass.RunWriter(NO_API, a_set(), "qemu.jumpstarter.dev", records="run",
                                      backend_plan={"delete": [{"name": "pool-0", "uid": "u0"}]},
                                      teardown="delete", release=["pool-0"], owned=[{"metadata": {"name": "pool-0"}}],
                                      report=report, finalizer=lifecycle.FINALIZER)
    again = reconcile_pass.RunWriter.from_state(NO_API, writer.state())
    assert again.state() == writer.state()
    assert again.decided().records and again.decided().teardown == "delete"
    again.report.add({"created": ["pool-1", "pool-2"], "deleted": ["pool-0"], "events": 2, "conflicts": 1})
    assert again.report.to_dict() | {} == {**reconcile_pass.Report().to_dict(), "created": ["pool-1", "pool-2"],
                                           "deleted": ["pool-0"], "events": 3, "conflicts": 1}
    operator = reconcile_pass.RunWriter(NO_API, a_set(), "", records="operator", finalizer=None)
    assert not reconcile_pass.RunWriter.from_state(NO_API, operator.state()).decided().records
    assert not operator.finish_due() and writer.finish_due()
