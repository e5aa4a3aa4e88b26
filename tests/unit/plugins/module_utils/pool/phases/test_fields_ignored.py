"""What a set or its class writes that takes no effect is said on the set:
``FieldsIgnored`` names each field and why, and a Warning Event tells it
when it turns True and whenever what is ignored changes."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
from pool_builders import NOW, exporter_set, target_class

QEMU = "jumpstarter_driver_qemu.driver.Qemu"


def plan_of(the_set, vclass=None):
    return scale_plan(the_set, vclass or target_class(), [], 0, NOW)


def ignored(plan):
    return next(c for c in plan["status"]["conditions"] if c["type"] == "FieldsIgnored")


def events(plan):
    return [e for e in plan["events"] if e["reason"] == "FieldsIgnored"]


def test_nothing_ignored_is_false_and_quiet():
    plan = plan_of(exporter_set())
    assert (ignored(plan)["status"], ignored(plan)["reason"]) == ("False", "NoneIgnored")
    assert events(plan) == []


def test_each_ignored_field_is_named_on_the_set_and_told_once_per_change():
    the_set = exporter_set(parameters={"kvmm": True})
    the_set["spec"]["template"]["spec"]["drivers"] = [
        {"name": "qemu", "type": QEMU, "config": {"username": "me", "smp": 1}}]
    plan = plan_of(the_set)
    condition = ignored(plan)
    assert condition["status"] == "True"
    assert "parameters.kvmm: unknown key, ignored" in condition["message"]
    assert "spec.template.spec.drivers[0].config.username: ignored" in condition["message"]
    (event,) = events(plan)
    assert event["type"] == "Warning" and event["message"] == condition["message"]
    # Told already: the next pass over the same set says nothing new.
    the_set["status"] = plan["status"]
    assert events(plan_of(the_set)) == []
    # Another field ignored is told again.
    the_set["spec"]["parameters"]["other"] = 1
    assert "parameters.other: unknown key, ignored" in events(plan_of(the_set))[0]["message"]


def test_an_annotation_entry_the_class_cannot_mean_is_named_on_its_sets():
    vclass = target_class()
    vclass["metadata"]["annotations"] = {"virtualtarget.jumpstarter.dev/set-overridable": "max.nothing=1"}
    assert "'max.nothing=1' ignored" in ignored(plan_of(exporter_set(), vclass))["message"]
