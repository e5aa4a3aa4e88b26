"""Which running instances get their config re-synced, and when the operator
runs the re-sync on its own (k8s/observe.py). The writes on a bed are in
tests/test_config_resync.py."""

import copy

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from pool_builders import NOW, at, exporter, exporter_set, target_class


def pod_of(owned):
    meta = owned["metadata"]
    return {"metadata": {"name": meta["name"], "namespace": "lab",
                         "labels": {c.LABEL_EXPORTER_SET: "rpi4", c.LABEL_EXPORTER: meta["name"]},
                         "ownerReferences": [{"kind": "Exporter", "name": meta["name"], "uid": meta["uid"],
                                              "controller": True}]},
            "status": {"phase": "Running"}}


def observed_for(the_set, exporters, pods, provisioner=c.PROVISIONER_QEMU):
    objects = {"VirtualTargetClass": [target_class(provisioner=provisioner)], "ExporterSet": [the_set],
               "Exporter": exporters, "Lease": [], "Pod": pods, "ExporterSetPolicy": []}
    return k8s_observe.observe(the_set, objects, NOW)


def members():
    running, waiting, disabled = (copy.deepcopy(exporter(n)) for n in ("rpi4-0", "rpi4-1", "rpi4-2"))
    for obj in (running, waiting, disabled):
        obj["metadata"]["uid"] = "uid-" + obj["metadata"]["name"]
    disabled["spec"]["enabled"] = False
    return [running, waiting, disabled], [pod_of(running), pod_of(disabled)]


def test_running_instances_are_the_enabled_ones_with_their_own_pod():
    exporters, pods = members()
    observed = observed_for(exporter_set(), exporters, pods)
    assert k8s_observe.running_exporters(observed) == ["rpi4-0"]
    # A Pod another Exporter of that name left is not its own.
    pods[0]["metadata"]["ownerReferences"][0]["uid"] = "uid-earlier"
    assert k8s_observe.running_exporters(observed_for(exporter_set(), exporters, pods)) == []
    # Lab hosts have no config Secret.
    assert k8s_observe.running_exporters(
        observed_for(exporter_set(), exporters, members()[1], provisioner=c.PROVISIONER_QEMU_BAREMETAL)) == []


def test_a_sync_is_due_on_a_run_by_hand_and_every_interval_otherwise():
    exporters, pods = members()
    young = exporter_set()
    young["metadata"]["creationTimestamp"] = at(-60)
    observed = observed_for(young, exporters, pods)
    assert not k8s_observe.config_sync_due(observed)
    assert k8s_observe.probe_playbook(observed) is None
    observed["sync_config"] = True
    assert k8s_observe.config_sync_due(observed)
    old = exporter_set(annotations={k8s_observe.ANNOTATION_CONFIG_SYNCED: at(-k8s_observe.CONFIG_SYNC_SECONDS)})
    old["metadata"]["creationTimestamp"] = at(-86400)
    observed = observed_for(old, exporters, pods)
    assert k8s_observe.config_sync_due(observed)
    assert k8s_observe.probe_playbook(observed) == k8s_observe.CONFIG_SYNC_PLAYBOOK
    # Due, it reads the controller CA (the re-sync needs it) ...
    reads = []
    k8s_observe.plan_for(old, observed, read_controller_ca=lambda: reads.append(1) or {"available": True,
                                                                                      "tls_ca": "Q0E="})
    assert reads == [1]
    variables = k8s_observe.playbook_variables(old, observed, {})
    assert variables["running_exporters"] == ["rpi4-0"] and variables["controller_tls_ca"] == "Q0E="
    # ... and not while nothing runs.
    assert not k8s_observe.config_sync_due(observed_for(old, exporters, []))
