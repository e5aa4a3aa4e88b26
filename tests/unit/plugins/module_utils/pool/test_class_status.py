"""A VirtualTargetClass's finalizer and status (class_status.py), and what a
set says about a class it cannot use or that is being deleted (plan.py)."""

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import class_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
from pool_builders import NOW, at, exporter, exporter_set, target_class

KNOWN = "corellium.jumpstarter.dev, qemu-baremetal.jumpstarter.dev, qemu.jumpstarter.dev"


def a_set(name, class_name="qemu-small", namespace="lab", deleting=False):
    obj = exporter_set(name=name)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["virtualTargetClassName"] = class_name
    if deleting:
        obj["metadata"]["deletionTimestamp"] = at(-1)
    return obj


def a_class(finalizers=None, deleting=False, status=None, generation=4, **kwargs):
    vclass = target_class(**kwargs)
    vclass["metadata"].update(generation=generation, finalizers=list(finalizers or []))
    if deleting:
        vclass["metadata"]["deletionTimestamp"] = at(-30)
    if status is not None:
        vclass["status"] = status
    return vclass


def test_sets_using_counts_the_namespace_sets_that_name_the_class_terminating_ones_too():
    sets = [a_set("b"), a_set("a", deleting=True), a_set("other", class_name="qemu-big"),
            a_set("elsewhere", namespace="lab2")]
    assert class_status.sets_using(a_class(), sets) == ["a", "b"]


def test_a_class_in_use_gets_the_finalizer_and_its_sets_in_status():
    wanted = class_status.desired(a_class(finalizers=["x/other"]), ["a", "b"], NOW)
    assert wanted["finalizers"] == ["x/other", class_status.FINALIZER]
    status = wanted["status"]
    assert (status["sets"], status["setCount"], status["observedGeneration"]) == (["a", "b"], 2, 4)
    valid = status["conditions"][0]
    assert (valid["type"], valid["status"], valid["reason"]) == ("Valid", "True", "Valid")
    assert valid["observedGeneration"] == 4
    assert wanted["events"] == []


def test_an_unused_class_loses_the_finalizer():
    wanted = class_status.desired(a_class(finalizers=[class_status.FINALIZER, "x/other"]), [], NOW)
    assert wanted["finalizers"] == ["x/other"]
    assert wanted["status"]["setCount"] == 0


def test_a_deleted_class_in_use_keeps_the_finalizer_and_one_unused_lets_go():
    deleting = a_class(finalizers=[class_status.FINALIZER], deleting=True)
    assert class_status.desired(deleting, ["a"], NOW)["finalizers"] == [class_status.FINALIZER]
    going = class_status.desired(deleting, [], NOW)
    assert going == {"finalizers": [], "status": None, "events": []}


def test_without_add_finalizer_it_is_kept_or_removed_but_never_added():
    assert class_status.desired(a_class(), ["a"], NOW, add_finalizer=False)["finalizers"] == []
    held = a_class(finalizers=[class_status.FINALIZER])
    assert class_status.desired(held, ["a"], NOW, add_finalizer=False)["finalizers"] == [
        class_status.FINALIZER]
    assert class_status.desired(held, [], NOW, add_finalizer=False)["finalizers"] == []


def test_no_finalizer_is_added_to_a_class_already_being_deleted():
    # The API server refuses new finalizers on an object being deleted.
    assert class_status.desired(a_class(deleting=True), ["a"], NOW)["finalizers"] == []


@pytest.mark.parametrize(("kwargs", "reason", "message"), [
    ({"provisioner": "qemu.jumpstater.dev"}, "UnknownProvisioner",
     f'spec.provisioner: unknown provisioner "qemu.jumpstater.dev"; known: {KNOWN}'),
    ({"parameters": {"resources": {"memory": "lots"}}}, "InvalidParameters",
     'spec.parameters.resources.memory: "lots" is not a quantity'),
    ({"parameters": {"arch": "x86_64", "machineType": "virt", "kvm": "yes"}}, "InvalidParameters",
     "spec.parameters.kvm: 'yes' is not a boolean; "
     "spec.parameters.machineType: 'virt' does not fit arch x86_64 (use q35, pc)"),
])
def test_an_invalid_class_says_which_field_once(kwargs, reason, message):
    wanted = class_status.desired(a_class(**kwargs), ["a"], NOW)
    valid = wanted["status"]["conditions"][0]
    assert (valid["status"], valid["reason"], valid["message"]) == ("False", reason, message)
    assert wanted["events"] == [{"type": "Warning", "reason": reason, "message": message}]
    # Written once, the same condition raises no second Event.
    again = class_status.desired(a_class(status=wanted["status"], **kwargs), ["a"], NOW)
    assert again["events"] == []
    assert not class_status.status_differs(wanted["status"], again["status"])


def test_status_keeps_conditions_of_other_writers():
    other = {"type": "Ready", "status": "True", "reason": "X", "message": "",
             "lastTransitionTime": at(-5)}
    wanted = class_status.desired(a_class(status={"conditions": [other]}), [], NOW)
    assert other in wanted["status"]["conditions"]


# --- what the set says ------------------------------------------------------------------


def condition(result, kind):
    return next(x for x in result["status"]["conditions"] if x["type"] == kind)


def test_a_set_of_an_unknown_provisioner_is_degraded_naming_the_field_and_creates_nothing():
    klass = target_class(provisioner="qemu.jumpstater.dev")
    result = scale_plan(exporter_set(min_available=2), klass, [], [], NOW)
    assert result["create"] == [] and result["create_dormant"] == []
    degraded = condition(result, c.CONDITION_DEGRADED)
    message = (f"VirtualTargetClass 'qemu-small' spec.provisioner: unknown provisioner "
               f'"qemu.jumpstater.dev"; known: {KNOWN}')
    assert (degraded["status"], degraded["reason"], degraded["message"]) == (
        "True", c.REASON_UNKNOWN_PROVISIONER, message)
    assert {"type": "Warning", "reason": c.REASON_UNKNOWN_PROVISIONER, "message": message} in [
        {k: e[k] for k in ("type", "reason", "message")} for e in result["events"]]


def test_a_set_keeps_working_while_its_class_is_deleted_and_says_so():
    klass = a_class(finalizers=[class_status.FINALIZER], deleting=True)
    result = scale_plan(exporter_set(min_available=2), klass, [exporter("rpi4-0")], [], NOW)
    assert len(result["create"]) == 1
    terminating = condition(result, c.CONDITION_CLASS_TERMINATING)
    assert (terminating["status"], terminating["reason"]) == ("True", c.REASON_CLASS_TERMINATING)
    assert "'qemu-small' is being deleted" in terminating["message"]
    assert c.REASON_CLASS_TERMINATING in [e["reason"] for e in result["events"]]
    live = scale_plan(exporter_set(min_available=2), a_class(), [exporter("rpi4-0")], [], NOW)
    assert condition(live, c.CONDITION_CLASS_TERMINATING)["status"] == "False"
