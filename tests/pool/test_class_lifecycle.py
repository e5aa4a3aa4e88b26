"""VirtualTargetClass lifecycle on the real API server: the in-use finalizer,
the class's status and printer columns, and what a set says about a class it
cannot use (missing, unknown provisioner, invalid parameters) or that is being
deleted. Every wait is a watch with a bound."""

from __future__ import annotations

import subprocess
import time

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from operator_process import ROOT
from pool_helpers import GROUP, SET_LABEL, make_class, make_set

pytestmark = pytest.mark.testbed

FINALIZER = "virtualtarget.jumpstarter.dev/in-use"
KNOWN = "corellium.jumpstarter.dev, qemu-baremetal.jumpstarter.dev, qemu.jumpstarter.dev"


def watch_until(list_call, predicate, *args, timeout=60.0, what="condition", **kwargs):
    """List, then watch from the list's resourceVersion, until ``predicate``
    returns something truthy for the objects (name -> dict) seen so far."""
    serialize = client.ApiClient().sanitize_for_serialization
    deadline = time.monotonic() + timeout
    listing = serialize(list_call(*args, **kwargs))
    objects = {o["metadata"]["name"]: o for o in listing["items"]}
    found = predicate(objects)
    version = listing["metadata"]["resourceVersion"]
    while not found:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; saw {objects!r}")
        stream = watch.Watch()
        for event in stream.stream(list_call, *args, resource_version=version,
                                   timeout_seconds=max(1, int(remaining)), **kwargs):
            obj = serialize(event["object"])
            version = obj["metadata"]["resourceVersion"]
            if event["type"] == "DELETED":
                objects.pop(obj["metadata"]["name"], None)
            else:
                objects[obj["metadata"]["name"]] = obj
            found = predicate(objects)
            if found:
                stream.stop()
                break
    return found


def condition(obj, kind):
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or []
                 if c["type"] == kind), None)


def until_class(custom, namespace, predicate, name="qemu-small", **kwargs):
    return watch_until(custom.list_namespaced_custom_object, lambda objs: predicate(objs.get(name)),
                       *GROUP, namespace, "virtualtargetclasses", **kwargs)


def until_set(custom, namespace, predicate, name="pool", **kwargs):
    return watch_until(custom.list_namespaced_custom_object, lambda objs: predicate(objs.get(name)),
                       *GROUP, namespace, "exportersets", **kwargs)


def until_condition(kind, status, reason):
    def check(obj):
        found = condition(obj, kind)
        return obj if found and (found["status"], found["reason"]) == (status, reason) else None
    return check


def until_event(core, namespace, reason, involved, **kwargs):
    def check(events):
        return [e for e in events.values()
                if e["reason"] == reason and e["involvedObject"]["name"] == involved]
    return watch_until(core.list_namespaced_event, check, namespace, what=f"{reason} Event", **kwargs)


def pool_exporters(custom, namespace, count, name="pool"):
    def enough(objs):
        live = [o for o in objs.values()
                if (o["metadata"].get("labels") or {}).get(SET_LABEL) == name
                and not o["metadata"].get("name", "").startswith(f"{name}-dormant")]
        return live if len(live) >= count else None
    return watch_until(custom.list_namespaced_custom_object, enough, "jumpstarter.dev", "v1alpha1",
                       namespace, "exporters", what=f"{count} Exporters of {name}")


def test_a_class_in_use_stays_until_its_last_set_is_gone(api, namespace, operator):
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    make_set(custom, namespace, name="pool2", board="other", minAvailableReplicas=0)
    operator()

    vclass = until_class(custom, namespace, lambda c: c and FINALIZER in (c["metadata"].get("finalizers") or [])
                         and (c.get("status") or {}).get("setCount") == 2 and c, what="class in use by 2")
    status = vclass["status"]
    assert status["sets"] == ["pool", "pool2"]
    assert status["observedGeneration"] == vclass["metadata"]["generation"]
    valid = condition(vclass, "Valid")
    assert (valid["status"], valid["reason"]) == ("True", "Valid")
    pool_exporters(custom, namespace, 1)

    # Deleted while in use: it stays, Terminating, and its sets say so.
    custom.delete_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small")
    assert custom.get_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses",
                                               "qemu-small")["metadata"]["deletionTimestamp"]
    the_set = until_set(custom, namespace, until_condition("ClassTerminating", "True", "ClassDeleting"),
                        what="ClassTerminating on pool")
    assert "'qemu-small' is being deleted" in condition(the_set, "ClassTerminating")["message"]
    events = until_event(core, namespace, "ClassDeleting", "pool")
    assert events[0]["type"] == "Warning"

    # The set keeps working: a bigger buffer gets another Exporter.
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                          {"spec": {"minAvailableReplicas": 2}})
    pool_exporters(custom, namespace, 2)

    # One set goes: the class stays for the other.
    custom.delete_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool2")
    vclass = until_class(custom, namespace, lambda c: c and c["status"]["sets"] == ["pool"] and c,
                         what="class used by pool only")
    assert FINALIZER in vclass["metadata"]["finalizers"]

    # The last set goes (its teardown still reads the class): the class goes.
    custom.delete_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool")
    until_class(custom, namespace, lambda c: c is None, timeout=120, what="class gone")
    with pytest.raises(ApiException) as gone:
        custom.get_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool")
    assert gone.value.status == 404


def test_an_unused_class_is_deleted_at_once(api, namespace, operator):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=0)
    operator()
    until_class(custom, namespace, lambda c: c and FINALIZER in (c["metadata"].get("finalizers") or []),
                what="finalizer while pool names the class")
    # The set now names another class: the first one is released.
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                          {"spec": {"virtualTargetClassName": "qemu-other"}})
    until_class(custom, namespace, lambda c: c and (c.get("status") or {}).get("setCount") == 0
                and FINALIZER not in (c["metadata"].get("finalizers") or []), what="class released")
    custom.delete_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small")
    with pytest.raises(ApiException) as gone:
        custom.get_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small")
    assert gone.value.status == 404


def test_unknown_provisioner_is_reported_by_every_operator_once(api, namespace, operator):
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    make_class(custom, namespace, provisioner="qemu.jumpstater.dev")
    make_set(custom, namespace)
    operator()
    operator(provisioners=("corellium.jumpstarter.dev",))

    message = (f"VirtualTargetClass 'qemu-small' spec.provisioner: unknown provisioner "
               f'"qemu.jumpstater.dev"; known: {KNOWN}')
    the_set = until_set(custom, namespace, until_condition("Degraded", "True", "UnknownProvisioner"),
                        what="Degraded/UnknownProvisioner")
    assert condition(the_set, "Degraded")["message"] == message
    events = until_event(core, namespace, "UnknownProvisioner", "pool")
    assert [(e["type"], e["message"]) for e in events] == [("Warning", message)]
    # Nothing was made: the reconcile that wrote the status creates first.
    assert custom.list_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace,
                                                "exporters")["items"] == []
    assert not the_set["metadata"].get("finalizers")

    vclass = until_class(custom, namespace, until_condition("Valid", "False", "UnknownProvisioner"),
                         what="class Valid=False")
    assert condition(vclass, "Valid")["message"] == (
        f'spec.provisioner: unknown provisioner "qemu.jumpstater.dev"; known: {KNOWN}')
    until_event(core, namespace, "UnknownProvisioner", "qemu-small")

    # Fixed: the qemu operator takes the set.
    custom.patch_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small",
                                          {"spec": {"provisioner": "qemu.jumpstarter.dev"}})
    until_set(custom, namespace, lambda s: (c := condition(s, "Degraded")) and c["status"] == "False",
              what="Degraded cleared")
    pool_exporters(custom, namespace, 2)


def test_missing_class_is_reported_and_a_new_class_is_taken(api, namespace, operator):
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    make_set(custom, namespace)
    operator()
    the_set = until_set(custom, namespace, until_condition("Degraded", "True", "ClassNotFound"),
                        what="Degraded/ClassNotFound")
    assert condition(the_set, "Degraded")["message"].startswith(
        "spec.virtualTargetClassName: VirtualTargetClass 'qemu-small' not found")
    events = until_event(core, namespace, "ClassNotFound", "pool")
    assert "spec.virtualTargetClassName" in events[0]["message"]

    make_class(custom, namespace)
    until_class(custom, namespace, lambda c: c and (c.get("status") or {}).get("sets") == ["pool"]
                and FINALIZER in c["metadata"]["finalizers"], what="class in use")
    pool_exporters(custom, namespace, 2)


def test_invalid_class_parameters_name_the_field_on_class_and_set(api, namespace, operator):
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    make_class(custom, namespace, parameters={"machineType": "virt", "arch": "x86_64",
                                              "resources": {"memory": "8Gx"}})
    make_set(custom, namespace)
    operator()
    vclass = until_class(custom, namespace, until_condition("Valid", "False", "InvalidParameters"),
                         what="class Valid=False")
    message = condition(vclass, "Valid")["message"]
    assert 'spec.parameters.resources.memory: "8Gx" is not a quantity' in message
    assert "spec.parameters.machineType: 'virt' does not fit arch x86_64" in message
    events = until_event(core, namespace, "InvalidParameters", "qemu-small")
    assert events[0]["message"] == message and events[0]["type"] == "Warning"
    until_set(custom, namespace, until_condition("Degraded", "True", "InvalidParameters"),
              what="set Degraded/InvalidParameters")

    # machineType virt alone says aarch64: valid once arch and memory go.
    custom.patch_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small",
                                          {"spec": {"parameters": {"arch": None, "resources": None}}})
    vclass = until_class(custom, namespace, until_condition("Valid", "True", "Valid"), what="class valid")
    assert vclass["status"]["observedGeneration"] == vclass["metadata"]["generation"]


def test_printer_columns(api, namespace, operator):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=0)
    operator()
    until_class(custom, namespace, lambda c: c and (c.get("status") or {}).get("setCount") == 1,
                what="class status")
    table = subprocess.run(["kubectl", "get", "virtualtargetclasses", "-n", namespace],
                           capture_output=True, text=True, timeout=60, check=True).stdout.split("\n")
    assert table[0].split() == ["NAME", "PROVISIONER", "SETS", "VALID", "AGE"]
    assert table[1].split()[:4] == ["qemu-small", "qemu.jumpstarter.dev", "1", "True"]


def test_reconcile_by_hand_keeps_the_class_as_the_operator_does(api, namespace):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=0)

    def by_hand(*extra):
        result = subprocess.run(
            ["ansible-playbook", "playbooks/reconcile.yml",
             "-e", "exporterset_name=pool", "-e", f"exporterset_namespace={namespace}", *extra],
            cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    def read_class():
        return custom.get_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small")

    # The status as the operator writes it; no finalizer unless asked for, as
    # nothing would remove it after the last set when no operator runs.
    by_hand()
    vclass = read_class()
    assert (vclass["status"]["sets"], vclass["status"]["setCount"]) == (["pool"], 1)
    assert condition(vclass, "Valid")["status"] == "True"
    assert not vclass["metadata"].get("finalizers")

    by_hand("-e", "reconcile_class_finalizer=true")
    vclass = read_class()
    assert vclass["metadata"]["finalizers"] == [FINALIZER]
    # A second run does not write the class again.
    by_hand("-e", "reconcile_class_finalizer=true")
    assert read_class()["metadata"]["resourceVersion"] == vclass["metadata"]["resourceVersion"]

    # Once no set names the class, the module run for it releases it (a
    # reconcile by hand only looks at the class of its own set).
    make_class(custom, namespace, name="qemu-other")
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                          {"spec": {"virtualTargetClassName": "qemu-other"}})
    released = subprocess.run(
        ["ansible", "localhost", "-m", "jumpstarter.virtual_exporters.virtualtargetclass_sync",
         "-a", f"name=qemu-small namespace={namespace}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert released.returncode == 0 and "CHANGED" in released.stdout, released.stdout + released.stderr
    vclass = read_class()
    assert not vclass["metadata"].get("finalizers") and vclass["status"]["setCount"] == 0
