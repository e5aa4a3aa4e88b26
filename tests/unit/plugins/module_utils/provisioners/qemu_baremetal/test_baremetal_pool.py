"""The host report of qemu-baremetal sets and what the plan takes from it."""

import json

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    pool as baremetal_pool,
)

HOST = "virtualtarget.jumpstarter.dev/host"
NOW = "2030-01-01T00:10:00Z"
HOSTS = [{"name": "lab1", "address": "10.0.0.1", "slots": 2},
         {"name": "lab2", "address": "10.0.0.2", "slots": 2}]


def exporter(name, host=None, online=True, credential=True):
    labels = {"virtualtarget.jumpstarter.dev/exporterset": "pool"}
    if host:
        labels[HOST] = host
    status = {"conditions": [{"type": t, "status": "True" if online else "False",
                              "lastTransitionTime": "2030-01-01T00:00:00Z"}
                             for t in ("Registered", "Online")]}
    if credential:
        status["credential"] = {"name": f"{name}-exporter"}
    return {"metadata": {"name": name, "labels": labels, "creationTimestamp": "2030-01-01T00:00:00Z",
                         "annotations": {"virtualtarget.jumpstarter.dev/first-ready": "2030-01-01T00:00:00Z"},
                         "ownerReferences": [{"uid": "u1", "controller": True, "kind": "ExporterSet",
                                              "name": "pool"}]},
            "spec": {"enabled": True}, "status": status}


def objects(report, exporters, minimum=2, drained=None, annotations=None):
    exporter_set = {"metadata": {"name": "pool", "namespace": "lab", "uid": "u1", "generation": 1,
                                 "annotations": dict(annotations or {})},
                    "spec": {"virtualTargetClassName": "lab", "minAvailableReplicas": minimum,
                             "maxReplicas": 10}}
    if report:
        exporter_set["status"] = {"operatorState": {baremetal_pool.REPORT_KEY: json.dumps(report)}}
    vclass = {"metadata": {"name": "lab", "annotations": (
        {baremetal_pool.DRAINED_HOSTS_ANNOTATION: drained} if drained else {})},
        "spec": {"provisioner": "qemu-baremetal.jumpstarter.dev",
                 "parameters": {"hosts": HOSTS, "reconnectTimeout": "60s",
                                "resources": {"cpu": 1, "memory": "128Mi"}}}}
    namespace = {"VirtualTargetClass": [vclass], "ExporterSet": [exporter_set], "Exporter": exporters,
                 "Lease": [], "Pod": []}
    observed = k8s_observe.observe(exporter_set, namespace, NOW)
    # As a reconcile that makes backends has it: the controller CA was read.
    observed["controller_ca"] = {"available": True, "tls_ca": "Q0E="}
    return exporter_set, observed


def running(*names):
    return {name: {"phase": "Running", "reason": "", "message": ""} for name in names}


def test_report_keeps_last_entry_and_first_miss_of_a_lost_host():
    first = baremetal_pool.next_report({"hosts": {}}, {
        "lab1": {"unreachable": False, "instances": {"pool-0": {"phase": "Running", "vm": "running"}}},
        "lab2": {"unreachable": False, "instances": {}}}, "2030-01-01T00:00:00Z")
    assert first["hosts"]["lab1"]["instances"] == {
        "pool-0": {"phase": "Running", "reason": "", "message": "", "uid": ""}}
    second = baremetal_pool.next_report(first, {"lab1": {"unreachable": True}, "lab2": {"instances": {}}},
                                        "2030-01-01T00:00:30Z")
    third = baremetal_pool.next_report(second, {"lab1": {"unreachable": True}, "lab2": {"instances": {}}},
                                       "2030-01-01T00:01:00Z")
    assert third["hosts"]["lab1"]["unreachableSince"] == "2030-01-01T00:00:30Z"
    assert third["hosts"]["lab1"]["instances"] == first["hosts"]["lab1"]["instances"]
    assert third["hosts"]["lab2"]["seenAt"] == "2030-01-01T00:01:00Z"
    assert third["probedAt"] == "2030-01-01T00:01:00Z"


def test_lost_host_is_offline_then_failed_and_replaced_elsewhere():
    pool = [exporter("pool-0", "lab1"), exporter("pool-1", "lab2")]
    report = {"probedAt": NOW, "hosts": {
        "lab1": {"seenAt": "2030-01-01T00:09:00Z", "unreachableSince": "2030-01-01T00:09:30Z",
                 "instances": running("pool-0")},
        "lab2": {"seenAt": NOW, "unreachableSince": None, "instances": running("pool-1")}}}
    exporter_set, observed = objects(report, pool)
    assert observed["lab"].instances()["pool-0"]["phase"] == "Unknown"
    plan = k8s_observe.plan_for(exporter_set, observed)
    assert plan["delete"] == [] and plan["create"] == []

    report["hosts"]["lab1"]["unreachableSince"] = "2030-01-01T00:08:30Z"
    exporter_set, observed = objects(report, pool)
    plan = k8s_observe.plan_for(exporter_set, observed)
    # Lease safety: the lost instance's Exporter is disabled first (retiring) ...
    assert plan["delete"] == [] and plan["disable"] == ["pool-0"]
    assert plan["exporter_annotations"]["pool-0"]["virtualtarget.jumpstarter.dev/retiring"] == "Failed"
    assert any("host lab1 unreachable since" in e["message"] for e in plan["events"])
    # ... and deleted by the plan that sees it disabled and unleased.
    pool[0]["spec"]["enabled"] = False
    pool[0]["metadata"]["annotations"].update(plan["exporter_annotations"]["pool-0"])
    exporter_set, observed = objects(report, pool)
    plan = k8s_observe.plan_for(exporter_set, observed)
    assert [d["name"] for d in plan["delete"]] == ["pool-0"] and plan["disable"] == []
    # The replacement waits for the failure backoff; its slot is on the host that answers.
    assert observed["lab"].place(["pool-2", "pool-3"]) == {"pool-2": "lab2"}


def test_capacity_names_full_hosts_and_placement_spreads():
    pool = [exporter(f"pool-{i}", host) for i, host in enumerate(["lab1", "lab2", "lab1", "lab2"])]
    report = {"probedAt": NOW, "hosts": {
        "lab1": {"seenAt": NOW, "instances": running("pool-0", "pool-2")},
        "lab2": {"seenAt": NOW, "instances": running("pool-1", "pool-3")}}}
    exporter_set, observed = objects(report, pool, minimum=5)
    plan = k8s_observe.plan_for(exporter_set, observed)
    limited = next(c for c in plan["status"]["conditions"] if c["type"] == "ScalingLimited")
    assert plan["create"] == []
    assert limited["status"] == "True" and limited["reason"] == "NoFreeSlots"
    assert "lab1, lab2" in limited["message"]

    exporter_set, observed = objects({}, [], minimum=3)
    plan = k8s_observe.plan_for(exporter_set, observed)
    assert sorted(c["labels"][HOST] for c in plan["create"]) == ["lab1", "lab1", "lab2"]


def test_drained_host_gets_nothing():
    exporter_set, observed = objects({}, [exporter("pool-0", "lab1", credential=False)], minimum=3, drained="lab1")
    plan = k8s_observe.plan_for(exporter_set, observed)
    assert [c["labels"][HOST] for c in plan["create"]] == ["lab2", "lab2"]
    assert observed["lab"].unprovisioned() == []


def test_an_instance_made_for_an_earlier_exporter_of_the_name_is_not_its_backend():
    """An Exporter deleted by someone else and made again under the same name does not
    adopt the old instance (still running the old token): it is provisioned afresh."""
    again = exporter("pool-0", "lab1")
    again["metadata"]["uid"] = "new-uid"
    report = {"probedAt": NOW, "hosts": {
        "lab1": {"seenAt": NOW, "instances": {"pool-0": {"phase": "Running", "uid": "old-uid"}}},
        "lab2": {"seenAt": NOW, "instances": {}}}}
    _, observed = objects(report, [again])
    assert observed["lab"].instances() == {}
    assert k8s_observe.unprovisioned(observed) == ["pool-0"]
    # Made for this Exporter (or before UIDs were recorded): it is the backend.
    for uid in ("new-uid", ""):
        report["hosts"]["lab1"]["instances"]["pool-0"]["uid"] = uid
        _, observed = objects(report, [again])
        assert observed["lab"].instances()["pool-0"]["phase"] == "Running"
        assert k8s_observe.unprovisioned(observed) == []


def test_unprovisioned_and_probe_timing():
    pool = [exporter("pool-0", "lab1"), exporter("pool-1", "lab2"), exporter("pool-2", "lab2", credential=False)]
    report = {"probedAt": "2030-01-01T00:09:55Z", "hosts": {
        "lab1": {"seenAt": NOW, "instances": running("pool-0")}, "lab2": {"seenAt": NOW, "instances": {}}}}
    _, observed = objects(report, pool)
    assert k8s_observe.unprovisioned(observed) == ["pool-1"]
    # reconnectTimeout 60s: probed every 20 s.
    assert observed["lab"].probe_wait() == 15
    assert k8s_observe.probe_playbook(observed) is None
    _, observed = objects({**report, "probedAt": "2030-01-01T00:09:40Z"}, pool)
    assert k8s_observe.probe_playbook(observed) == "playbooks/baremetal_probe.yml"
    _, observed = objects({}, pool)
    assert k8s_observe.probe_playbook(observed) and k8s_observe.unprovisioned(observed) == ["pool-0", "pool-1"]


def test_a_host_report_in_the_sets_annotations_is_never_read():
    """The report lives in the set's status, which its author cannot write: a
    report forged into the former annotation (a probe long ago, a host lost,
    its instance failed) neither forces a probe nor fails an instance, and
    deleting it forgets nothing."""
    pool = [exporter("pool-0", "lab1"), exporter("pool-1", "lab2")]
    report = {"probedAt": "2030-01-01T00:09:55Z", "hosts": {
        "lab1": {"seenAt": NOW, "instances": running("pool-0")},
        "lab2": {"seenAt": NOW, "instances": running("pool-1")}}}
    forged = {"probedAt": "2000-01-01T00:00:00Z", "hosts": {
        "lab1": {"seenAt": None, "unreachableSince": "2000-01-01T00:00:00Z",
                 "instances": {"pool-0": {"phase": "Failed", "reason": "Error", "message": "forged"}}}}}
    exporter_set, observed = objects(report, pool)
    plan = k8s_observe.plan_for(exporter_set, observed)
    for annotations in ({"virtualtarget.jumpstarter.dev/host-report": json.dumps(forged)}, {}):
        again_set, again = objects(report, pool, annotations=annotations)
        assert again["lab"].instances() == observed["lab"].instances()
        assert k8s_observe.probe_playbook(again) is None
        assert k8s_observe.plan_for(again_set, again) == plan
    assert plan["disable"] == [] and plan["delete"] == []
    # Without the report in the status the hosts are probed.
    _, unreported = objects({}, pool, annotations={"virtualtarget.jumpstarter.dev/host-report": json.dumps(report)})
    assert k8s_observe.probe_playbook(unreported) == "playbooks/baremetal_probe.yml"


def test_a_probe_that_only_sees_the_same_hosts_again_is_no_change():
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
        pool as baremetal_pool,
    )

    results = {"lab1": {"instances": {"pool-0": {"phase": "Running"}}}}
    first = baremetal_pool.next_report({}, results, "2026-11-21T08:00:00Z")
    again = baremetal_pool.next_report(first, results, "2026-11-21T08:05:00Z")
    assert not baremetal_pool.report_changed(first, again)
    lost = baremetal_pool.next_report(again, {"lab1": {"unreachable": True}}, "2026-11-21T08:06:00Z")
    assert baremetal_pool.report_changed(again, lost)
    failed = baremetal_pool.next_report(first, {"lab1": {"instances": {"pool-0": {"phase": "Failed"}}}},
                                        "2026-11-21T08:07:00Z")
    assert baremetal_pool.report_changed(first, failed)
