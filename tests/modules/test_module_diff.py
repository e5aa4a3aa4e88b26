"""``--check --diff`` of the modules that write: on the real API server
(one playbook run for all of them), the Corellium fake and a lab host's
instance directory on this machine, each returns the parts of the objects it
would write, before and after, and writes nothing; without ``--diff`` it
returns no diff, and once the writes are made a second run shows none."""

import json
from pathlib import Path

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    hosts as baremetal,
)
from ansible_play import run_tasks
from kubernetes import client
from pool_helpers import GROUP, get_set, give_credential, make_class, make_owned_exporter, make_set
from test_exporter_pods_in_process import CA, _exists

FQCN = "jumpstarter.virtual_exporters."
FINALIZER = "virtualtarget.jumpstarter.dev/in-use"
LAB_PARAMETERS = {"arch": "x86_64", "resources": {"cpu": 1, "memory": "128Mi", "storage": "64Mi"},
                  "kernel": {"path": "/srv/images/vmlinuz"}, "initrd": {"path": "/srv/images/initramfs.cpio.gz"},
                  "hosts": [{"name": "lab1", "address": "127.0.0.1", "slots": 1}]}
RESULTS = {"lab1": {"instances": {"pool-0": {"phase": "running"}}}}
EXPORTERS = ("jumpstarter.dev", "v1alpha1")
HOST_LABEL = constants.LABEL_HOST
SET_FINALIZER = "virtualtarget.jumpstarter.dev/teardown"


def test_check_diff_shows_what_would_be_written_and_writes_nothing(api, namespace, tmp_path):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_class(custom, namespace, name="lab", provisioner="qemu-baremetal.jumpstarter.dev",
               parameters=LAB_PARAMETERS)
    make_set(custom, namespace)

    def read(plural, name):
        return custom.get_namespaced_custom_object(*GROUP, namespace, plural, name)
    written = {(plural, name): read(plural, name)["metadata"]["resourceVersion"]
               for plural, name in (("virtualtargetclasses", "qemu-small"), ("virtualtargetclasses", "lab"),
                                    ("exportersets", "pool"))}

    sync = {FQCN + "virtualtargetclass_sync": {"name": "qemu-small", "namespace": namespace}}
    report = {FQCN + "baremetal_report": {"exporterset": "pool", "namespace": namespace, "results": RESULTS}}
    drain = {FQCN + "baremetal_drain": {"lab_host": "lab1", "namespace": namespace}}
    results = run_tasks(tmp_path, [sync, report, drain, {**sync, "diff": False}], "--check", "--diff")
    synced, reported, drained, quiet = results

    assert synced["changed"] is True
    assert synced["diff"]["before"]["VirtualTargetClass/qemu-small"]["metadata"]["finalizers"] == []
    after = synced["diff"]["after"]["VirtualTargetClass/qemu-small"]
    assert after["metadata"]["finalizers"] == [FINALIZER] and after["status"]["setCount"] == 1
    assert reported["diff"]["before"] == {"ExporterSet/pool": {"hostReport": {"hosts": {}, "probedAt": None}}}
    after = reported["diff"]["after"]["ExporterSet/pool"]["hostReport"]
    assert after["hosts"]["lab1"]["instances"]["pool-0"]["phase"] == "running" and after["probedAt"]
    assert drained["changed"] is True
    assert drained["diff"] == {"before": {"VirtualTargetClass/lab": {"drainedHosts": []}},
                               "after": {"VirtualTargetClass/lab": {"drainedHosts": ["lab1"]}}}
    assert "diff" not in quiet and quiet["changed"] is True
    assert {key: read(*key)["metadata"]["resourceVersion"] for key in written} == written


def test_check_diff_of_corellium_instances_shows_each_instance_and_changes_nothing(corellium_fake, tmp_path):
    def task(name, state):
        return {FQCN + "corellium_instances": {
            "api_host": corellium_fake.host, "api_token": corellium_fake.token, "ca_path": corellium_fake.ca_path,
            "project": corellium_fake.projects[0].id, "flavor": "kronos", "os": "1.1.1", "names": [name],
            "state": state, "wait": True, "wait_timeout": 30, "poll_interval": 0.05}}
    (made,) = run_tasks(tmp_path, [task("pool-0", "present")])
    assert made["created"] == ["pool-0"] and "diff" not in made
    before = {i["name"]: (i["id"], i["state"]) for i in corellium_fake.instances()}

    off, create = run_tasks(tmp_path, [task("pool-0", "off"), task("pool-1", "present")], "--check", "--diff")
    assert off["changed"] and off["diff"]["before"]["Instance/pool-0"]["state"] == "on"
    assert off["diff"]["after"]["Instance/pool-0"] == {**off["diff"]["before"]["Instance/pool-0"], "state": "off"}
    assert create["changed"] and create["diff"]["before"] == {"Instance/pool-1": {"state": "absent"}}
    assert create["diff"]["after"]["Instance/pool-1"]["flavor"] == "kronos"
    assert {i["name"]: (i["id"], i["state"]) for i in corellium_fake.instances()} == before


def _diff_keys(result):
    return sorted((result.get("diff") or {}).get("after") or {})


def test_check_diff_of_a_pass_shows_its_writes_and_a_second_run_none(api, namespace, tmp_path):
    """exporterset_apply on exporterset_info's plan, exporter_pods (in the
    task's process) making an instance, baremetal_targets placing an Exporter
    on a host and baremetal_instances retaining an instance on this machine:
    ``--check --diff`` shows their writes and writes nothing, the run writes
    them, and the same tasks again change nothing and show no diff."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    vclass = make_class(custom, namespace)
    lab_class = make_class(custom, namespace, name="lab", provisioner="qemu-baremetal.jumpstarter.dev",
                           parameters=LAB_PARAMETERS, credentialsSecretRef={"name": "lab-ssh"})
    core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="lab-ssh"), string_data={"ssh-privatekey": "key", "known_hosts": "h"}))
    the_set = make_set(custom, namespace, minAvailableReplicas=2)
    lab_set = make_set(custom, namespace, name="lab", board="lab", virtualTargetClassName="lab")
    exporter = give_credential(api, namespace, make_owned_exporter(custom, namespace, the_set))
    lab_exporter = make_owned_exporter(custom, namespace, lab_set, name="lab-0", board="lab")
    work_dir = tmp_path / "lab"
    instance = Path(baremetal.instance_dir(str(work_dir), namespace, "lab-0"))
    instance.mkdir(parents=True)
    (instance / "instance.json").write_text(json.dumps(
        {"namespace": namespace, "exporterset": "lab", "exporter": "lab-0", "uid": ""}))

    info = {FQCN + "exporterset_info": {"name": "pool", "namespace": namespace}, "register": "info"}
    apply = {FQCN + "exporterset_apply": {
        "exporterset": "{{ info.variables._virtualtarget_jumpstarter_dev_exporterset }}",
        "plan": "{{ info.variables.exporterset_plan }}", "provisioner": "qemu.jumpstarter.dev",
        "owned_exporters": "{{ info.variables.owned_exporters }}", "finalizer": "{{ info.finalizer }}",
        "write_outcome": False}}
    pods = {FQCN + "exporter_pods": {
        "exporterset": the_set, "virtual_target_class": vclass, "owned_exporters": [exporter],
        "exporters": ["pool-0"], "parameters": vclass["spec"]["parameters"], "controller_tls_ca": CA}}
    targets = {FQCN + "baremetal_targets": {
        "exporterset": lab_set, "virtual_target_class": lab_class, "owned_exporters": [lab_exporter],
        "exporters": [], "parameters": LAB_PARAMETERS, "action": "provision", "ssh_dir": str(tmp_path / "ssh")}}
    instances = {FQCN + "baremetal_instances": {
        "namespace": namespace, "exporterset": "lab", "retain": ["lab-0"], "work_dir": str(work_dir)}}
    tasks = [info, apply, pods, targets, instances]

    _, applied, made, placed, retained = run_tasks(tmp_path, tasks, "--check", "--diff")
    assert _diff_keys(applied) == ["Exporter/" + applied["created"][0], "ExporterSet/pool"], applied
    created = applied["diff"]["after"]["Exporter/" + applied["created"][0]]
    assert applied["diff"]["before"]["Exporter/" + applied["created"][0]] is None
    assert created["metadata"]["labels"]["board"] == "qemu-x86" and created["spec"]["enabled"] is True
    assert applied["diff"]["before"]["ExporterSet/pool"]["metadata"]["finalizers"] == []
    assert applied["diff"]["after"]["ExporterSet/pool"]["metadata"]["finalizers"] == [SET_FINALIZER]
    assert applied["diff"]["after"]["ExporterSet/pool"]["status"]["replicas"] == 1
    assert _diff_keys(made) == ["Pod/pool-0", "Secret/pool-0-config"], made
    assert made["diff"]["before"] == {"Pod/pool-0": None, "Secret/pool-0-config": None}
    assert made["diff"]["after"]["Pod/pool-0"]["metadata"]["name"] == "pool-0"
    assert "a-token" not in json.dumps(made)
    assert placed["diff"] == {"before": {"Exporter/lab-0": {"metadata": {"labels": {HOST_LABEL: None}}}},
                              "after": {"Exporter/lab-0": {"metadata": {"labels": {HOST_LABEL: "lab1"}}}}}
    assert retained["diff"] == {"before": {"Instance/lab-0": {"state": "present"}},
                                "after": {"Instance/lab-0": {"state": "retained"}}}
    assert not _exists(core.read_namespaced_pod, "pool-0", namespace)
    assert not get_set(custom, namespace)["metadata"].get("finalizers")
    assert HOST_LABEL not in custom.get_namespaced_custom_object(
        *EXPORTERS, namespace, "exporters", "lab-0")["metadata"]["labels"]
    assert not (instance / "retained").exists()

    # The writes made; the status counts the Exporter created on the next
    # pass; then the same tasks again (the lab Exporter as read now) in check
    # mode with a diff: no change, no diff.
    lab_info = {FQCN + "exporterset_info": {"name": "lab", "namespace": namespace}, "register": "lab_info"}
    targets_now = {FQCN + "baremetal_targets": {
        **targets[FQCN + "baremetal_targets"], "owned_exporters": "{{ lab_info.variables.owned_exporters }}"}}
    checked = [{**task, "check_mode": True, "diff": True} for task in (apply, pods, targets_now, instances)]
    results = run_tasks(tmp_path, [*tasks, info, apply, info, lab_info, *checked])
    ran, counted, again = results[1:5], results[6], results[9:]
    assert all(result["changed"] and "diff" not in result for result in ran), ran
    assert counted["status_changed"] and not counted["created"], counted
    for result in again:
        assert not result["changed"] and not _diff_keys(result), result
