"""Hostile tenants, identity: what one set may find, reset and delete.

Two namespaces hold sets with the same names and the same Exporter names;
they share one Corellium project, one lab host, one operator. Each test puts
the other tenant's object where the guard must keep it apart, and shows it
untouched: a Corellium instance neither adopted, recreated nor deleted; a
lab-host instance directory neither removed, reset nor retained; a Pod that
copies the pool's labels neither counted nor deleted; an SSH master never
shared by two credentials.
"""

import base64
import grp
import json
import os
import pwd
import shutil

import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import objects as k8s_objects
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    hosts as baremetal,
)
from ansible_play import run_tasks
from kubernetes import client
from operator_process import ROOT

HELPER = ROOT / "roles" / "lab_bootstrap" / "files" / "jumpstarter-instance"

FQCN = "jumpstarter.virtual_exporters"
NOW = "2026-01-01T00:00:00Z"


def exporter(namespace, name, uid, set_name="pool", **extra):
    meta = {"name": name, "namespace": namespace, "uid": uid,
            "labels": {constants.LABEL_EXPORTER_SET: set_name},
            "ownerReferences": [{"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSet",
                                 "name": set_name, "uid": f"set-{namespace}", "controller": True}]}
    meta.update(extra)
    return {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter", "metadata": meta,
            "spec": {"enabled": True}}


# -- Corellium: one project, two namespaces ----------------------------------

def corellium_task(fake, owned, state, **options):
    return {f"{FQCN}.corellium_instances": {
        "api_host": fake.host, "api_token": fake.token, "ca_path": fake.ca_path,
        "project": fake.projects[0].id, "flavor": "kronos", "os": "1.1.1",
        "names": [e["metadata"]["name"] for e in owned], "owned_exporters": owned,
        "state": state, "wait": True, "wait_timeout": 30, "poll_interval": 0.05, **options},
        "ignore_errors": True}


def test_sets_in_two_namespaces_share_a_corellium_project_without_touching_each_other(
        corellium_fake, tmp_path):
    tenant_a = [exporter("tenant-a", "pool-0", "uid-a0")]
    tenant_b = [exporter("tenant-b", "pool-0", "uid-b0")]
    made_a, made_b = run_tasks(tmp_path, [corellium_task(corellium_fake, tenant_a, "present"),
                                          corellium_task(corellium_fake, tenant_b, "present")])
    assert made_a["created"] == ["pool-0"] and made_b["created"] == ["pool-0"], (made_a, made_b)
    # Two instances: B's set did not adopt A's device of the same Exporter name.
    devices = {i["name"]: i["id"] for i in corellium_fake.instances()}
    assert len(devices) == 2
    a_device, b_device = made_a["devices"]["pool-0"], made_b["devices"]["pool-0"]
    assert sorted(devices) == sorted([a_device, b_device])
    b_id = devices[b_device]

    # A recreates and then deletes its pool-0: B's instance is neither reset nor deleted.
    recreated, removed = run_tasks(tmp_path, [corellium_task(corellium_fake, tenant_a, "recreated"),
                                              corellium_task(corellium_fake, tenant_a, "absent")])
    assert recreated["deleted"] == ["pool-0"] and removed["deleted"] == ["pool-0"]
    left = {i["name"]: i for i in corellium_fake.instances()}
    assert list(left) == [b_device] and left[b_device]["id"] == b_id and left[b_device]["state"] == "on"
    touched = {r.path for r in corellium_fake.requests if r.method in ("DELETE", "PUT", "POST")
               and r.path.startswith(f"/v1/instances/{b_id}")}
    assert touched == set()

    # An Exporter the set does not own names no instance: refused, naming the field.
    task = corellium_task(corellium_fake, tenant_a, "absent")
    task[f"{FQCN}.corellium_instances"]["names"] = ["pool-0", "pool-9"]
    foreign, = run_tasks(tmp_path, [task])
    assert foreign["failed"] and foreign["msg"].startswith("names: pool-9 not among owned_exporters")
    assert [i["name"] for i in corellium_fake.instances()] == [b_device]


def test_an_earlier_exporter_of_the_same_name_keeps_its_own_instance(corellium_fake, tmp_path):
    earlier = [exporter("tenant-a", "pool-0", "uid-old")]
    later = [exporter("tenant-a", "pool-0", "uid-new")]
    run_tasks(tmp_path, [corellium_task(corellium_fake, earlier, "present")])
    old = corellium_fake.instances()[0]
    removed, = run_tasks(tmp_path, [corellium_task(corellium_fake, later, "absent")])
    # The namesake's device is not this Exporter's: nothing to delete.
    assert removed["deleted"] == [] and [i["id"] for i in corellium_fake.instances()] == [old["id"]]


def test_each_exporter_pod_powers_its_own_namespaces_instance():
    the_set = {"metadata": {"name": "pool"}, "spec": {"template": {"spec": {"drivers": [
        {"name": "corellium", "type": "jumpstarter_driver_corellium.driver.Corellium"}]}}}}
    parameters = {"api": {"host": "corellium.example", "projectId": "p"}, "device": {"flavor": "kronos"}}

    def device_name(owned):
        secret = k8s_pod.config_secret(the_set, owned, constants.PROVISIONER_CORELLIUM, parameters, "t", "")
        config = json.loads(secret["stringData"]["pool-0.yaml"])
        return config["export"]["corellium"]["config"]["device_name"]

    a = device_name(exporter("tenant-a", "pool-0", "uid-a0"))
    b = device_name(exporter("tenant-b", "pool-0", "uid-b0"))
    later = device_name(exporter("tenant-a", "pool-0", "uid-a1"))
    assert len({a, b, later}) == 3 and all(n.startswith("pool-0-") for n in (a, b, later))


# -- Lab host: one work dir, two namespaces -------------------------------------

def seed_instance(work_dir, namespace, name, uid, set_name="pool"):
    """An instance directory as the module leaves it: its record, config and disk."""
    directory = baremetal.instance_dir(str(work_dir), namespace, name)
    os.makedirs(os.path.join(directory, "vm"), exist_ok=True)
    with open(os.path.join(directory, "instance.json"), "w") as handle:
        json.dump({"namespace": namespace, "exporterset": set_name, "exporter": name, "uid": uid}, handle)
    for file_name in ("exporter.yaml", "disk.qcow2"):
        with open(os.path.join(directory, file_name), "w") as handle:
            handle.write(f"{namespace} {name}\n")
    return directory


def install_helper(work_dir):
    """lab_bootstrap's identity helper in the prefix the tasks name, set up for
    instance directories of this user (the service user here) that no identity
    has claimed."""
    prefix = work_dir / "prefix"
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    (prefix / "etc").mkdir(exist_ok=True)
    shutil.copy(HELPER, prefix / "bin" / "jumpstarter-instance")
    os.chmod(prefix / "bin" / "jumpstarter-instance", 0o755)
    user, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    (prefix / "etc" / "jumpstarter-instance.json").write_text(json.dumps(
        {"work_dir": str(work_dir), "service_user": user, "slot_users": [], "instances_group": group}))


def baremetal_task(work_dir, namespace, uids, **actions):
    return {f"{FQCN}.baremetal_instances": {
        "namespace": namespace, "exporterset": "pool", "work_dir": str(work_dir),
        "prefix": str(work_dir / "prefix"), "uids": uids, **actions}}


def test_sets_in_two_namespaces_on_one_lab_host_keep_their_own_instances(tmp_path):
    work_dir = tmp_path / "work"
    mine = seed_instance(work_dir, "tenant-a", "pool-0", "uid-a0")
    theirs = seed_instance(work_dir, "tenant-b", "pool-0", "uid-b0")
    install_helper(work_dir)
    assert mine != theirs
    files = {name: open(os.path.join(theirs, name)).read() for name in ("instance.json", "exporter.yaml")}

    # A retains its pool-0, then removes it and prunes (keep) every instance
    # of its set it no longer has: B's pool-0 is none of them.
    retained, removed = run_tasks(tmp_path, [
        baremetal_task(work_dir, "tenant-a", {"pool-0": "uid-a0"}, retain=["pool-0"]),
        baremetal_task(work_dir, "tenant-a", {"pool-0": "uid-a0"}, remove=["pool-0"], keep=[]),
    ])
    assert retained["changed_instances"] == ["pool-0"]
    assert removed["changed_instances"] == ["pool-0"] and not os.path.exists(mine)
    assert removed["instances"] == {}
    # B's instance: directory, record and files as they were, not retained.
    assert {name: open(os.path.join(theirs, name)).read() for name in files} == files
    assert not os.path.exists(os.path.join(theirs, "retained"))


def test_an_instance_recorded_for_another_exporter_is_not_reset_removed_or_retained(tmp_path):
    work_dir = tmp_path / "work"
    # What an earlier Exporter pool-0 (another UID) left at this Exporter's path.
    directory = seed_instance(work_dir, "tenant-a", "pool-0", "uid-earlier", set_name="other")
    results = run_tasks(tmp_path, [
        baremetal_task(work_dir, "tenant-a", {"pool-0": "uid-now"}, reset=["pool-0"]),
        baremetal_task(work_dir, "tenant-a", {"pool-0": "uid-now"}, retain=["pool-0"]),
        baremetal_task(work_dir, "tenant-a", {"pool-0": "uid-now"}, remove=["pool-0"]),
    ])
    assert [r["changed_instances"] for r in results] == [[], [], []]
    assert os.path.exists(os.path.join(directory, "disk.qcow2"))
    assert not os.path.exists(os.path.join(directory, "retained"))


# -- SSH multiplexing ----------------------------------------------------------------

def test_the_ssh_control_path_is_keyed_by_the_credential():
    host = {"name": "lab1", "address": "10.0.0.1", "port": 22, "user": "jumpstarter"}
    key_a, key_b = b"-----BEGIN KEY A-----\n", b"-----BEGIN KEY B-----\n"
    known = b"10.0.0.1 ssh-ed25519 AAAA\n"
    paths = {
        "class a": baremetal.host_connection(host, baremetal.credential_digest(key_a, known))["control_path"],
        "class b": baremetal.host_connection(host, baremetal.credential_digest(key_b, known))["control_path"],
        "class a, other known_hosts": baremetal.host_connection(
            host, baremetal.credential_digest(key_a, known + b"10.0.0.2 ssh-ed25519 BBBB\n"))["control_path"],
        "class a, other user": baremetal.host_connection(
            {**host, "user": "other"}, baremetal.credential_digest(key_a, known))["control_path"],
    }
    assert len(set(paths.values())) == len(paths), paths
    # The same credential and host share one master; the path fits a socket name.
    again = baremetal.host_connection(host, baremetal.credential_digest(key_a, known))["control_path"]
    assert again == paths["class a"]
    assert all(p.startswith("%(directory)s/") and len(p) - len("%(directory)s/") == 40 for p in paths.values())
    # The role hands that path to every connection it makes to a lab host.
    tasks = yaml.safe_load((ROOT / "roles/qemu_baremetal/tasks/hosts.yml").read_text())
    add_host = next(t["ansible.builtin.add_host"] for t in tasks if "ansible.builtin.add_host" in t)
    assert add_host["ansible_control_path"] == "{{ item.control_path }}"
    assert "ControlPath" not in add_host["ansible_ssh_common_args"]
    entries = baremetal.host_actions([host], [], "probe", [], credential=baremetal.credential_digest(key_b, known))
    assert entries[0]["control_path"] == paths["class b"]


# -- Pods: owned, not labelled ----------------------------------------------------------

def test_a_pod_with_the_pools_labels_but_no_owner_is_neither_counted_nor_deleted(testbed, namespace, tmp_path):
    with testbed.api_client() as api:
        core = client.CoreV1Api(api)
        labels = {constants.LABEL_EXPORTER_SET: "pool", constants.LABEL_EXPORTER: "pool-0"}
        pod = core.create_namespaced_pod(namespace, client.V1Pod(
            metadata=client.V1ObjectMeta(name="pool-0", labels=labels),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="registry.example/x:1")])))
        planted = api.sanitize_for_serialization(pod)
        the_set = {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSet",
                   "metadata": {"name": "pool", "namespace": namespace, "uid": f"set-{namespace}"},
                   "spec": {"virtualTargetClassName": "pods", "minReplicas": 1, "maxReplicas": 1,
                            "template": {"spec": {"drivers": []}}}}
        vclass = {"metadata": {"name": "pods", "namespace": namespace},
                  "spec": {"provisioner": constants.PROVISIONER_QEMU, "parameters": {}}}
        owned = exporter(namespace, "pool-0", "uid-pool-0")
        owned["status"] = {"credential": {"name": "pool-0-exporter"}}

        observed = k8s_observe.observe(the_set, {
            "VirtualTargetClass": [vclass], "ExporterSet": [the_set], "Exporter": [owned], "Lease": [],
            "Pod": [planted], "ExporterSetPolicy": []}, NOW)
        # Not the set's Pod: no instance state from it, and pool-0 still needs its own.
        assert observed["pods"] == []
        assert k8s_objects.instances_from_pods(observed["pods"]) == {}
        assert k8s_observe.unprovisioned({**observed, "controller_ca": {"available": True}}) == ["pool-0"]

        # Neither making pool-0's instance nor removing it deletes the planted Pod.
        module = f"{FQCN}.exporter_pods"
        common = {"exporterset": the_set, "virtual_target_class": vclass, "owned_exporters": [owned],
                  "exporters": ["pool-0"]}
        present, absent = run_tasks(tmp_path, [{module: {**common, "state": "present"}},
                                               {module: {**common, "state": "absent"}}])
        assert present["waiting"] == ["pool-0"] and present["deleted"] == [], present
        assert absent["deleted"] == [] and not absent["changed"], absent
        still = core.read_namespaced_pod("pool-0", namespace)
        assert still.metadata.uid == pod.metadata.uid and still.metadata.deletion_timestamp is None


def test_runs_with_two_credentials_never_share_an_ssh_master(testbed, namespace, standin, lab_hosts, tmp_path):
    """Two classes reach the same lab hosts as the same user, one with another
    known_hosts: each run's ssh opens its own master, on its own socket."""
    from lab_beds import Bed

    bed = Bed(testbed, namespace, standin, lab_hosts, tmp_path)
    data_a = lab_hosts.secret_data()
    data_b = {**data_a, "known_hosts": base64.b64encode(
        base64.b64decode(data_a["known_hosts"]) + b"# the second class trusts these keys too\n").decode()}
    bed.core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="lab-ssh-b"), data=data_b))
    control_dir = os.path.expanduser(os.environ.get("ANSIBLE_SSH_CONTROL_PATH_DIR", "~/.ansible/cp"))
    hosts = bed.vclass["spec"]["parameters"]["hosts"]

    def sockets(data):
        digest = baremetal.credential_digest(*(base64.b64decode(data[key]) for key in (
            baremetal.SECRET_PRIVATE_KEY, baremetal.SECRET_KNOWN_HOSTS)))
        return {baremetal.host_connection(h, digest)["control_path"] % {"directory": control_dir} for h in hosts}

    sockets_a, sockets_b = sockets(data_a), sockets(data_b)
    assert len(sockets_a) == len(hosts) and not sockets_a & sockets_b
    results, _ = bed.run("probe", [])
    assert not any(r["unreachable"] for r in results.values()), results
    assert all(os.path.exists(path) for path in sockets_a), sorted(os.listdir(control_dir))
    bed.vclass["spec"]["credentialsSecretRef"]["name"] = "lab-ssh-b"
    results, _ = bed.run("probe", [])
    assert not any(r["unreachable"] for r in results.values()), results
    # The second class's run opened masters of its own, beside the first's.
    assert all(os.path.exists(path) for path in sockets_b | sockets_a), sorted(os.listdir(control_dir))
