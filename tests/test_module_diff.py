"""``--check --diff`` of the modules that write: on the real API server
(one playbook run for all of them) and the Corellium fake, each returns the
parts of the objects it would write, before and after, and writes nothing;
without ``--diff`` it returns no diff."""

from ansible_play import run_tasks
from kubernetes import client
from pool_helpers import GROUP, make_class, make_set

FQCN = "jumpstarter.virtual_exporters."
FINALIZER = "virtualtarget.jumpstarter.dev/in-use"
LAB_PARAMETERS = {"arch": "x86_64", "resources": {"cpu": 1, "memory": "128Mi", "storage": "64Mi"},
                  "kernel": {"path": "/srv/images/vmlinuz"}, "initrd": {"path": "/srv/images/initramfs.cpio.gz"},
                  "hosts": [{"name": "lab1", "address": "127.0.0.1", "slots": 1}]}
RESULTS = {"lab1": {"instances": {"pool-0": {"phase": "running"}}}}


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
