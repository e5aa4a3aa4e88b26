"""The qemu_baremetal role's entry points against real lab hosts (sshd in network
namespaces), real QEMU under TCG and real ``jmp run``, with Exporters and Secrets
in the real test bed."""

import base64
import json
import os
import pwd
import subprocess
import sys
import time

import pytest
import yaml
from jumpstarter_standin import wait_for
from kubernetes import client

BIN = os.path.dirname(sys.executable)
HOST_LABEL = "virtualtarget.jumpstarter.dev/host"


@pytest.fixture
def lab(lab_hosts):
    return lab_hosts


class Bed:
    def __init__(self, testbed, namespace, standin, lab, tmp_path):
        self.api = testbed.api_client().__enter__()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.standin = standin
        self.namespace = namespace
        self.lab = lab
        self.tmp_path = tmp_path
        self.exporter_set = {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSet",
                             "metadata": {"name": "pool", "namespace": namespace, "uid": "u1"},
                             "spec": {"template": {"spec": {"drivers": [
                                 {"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu"}]}}}}
        self.vclass = {"metadata": {"name": "lab"}, "spec": {
            "provisioner": "qemu-baremetal.jumpstarter.dev", "credentialsSecretRef": {"name": "lab-ssh"},
            "parameters": lab.parameters({name: 2 for name in lab.hosts})}}
        self.core.create_namespaced_secret(namespace, client.V1Secret(
            metadata=client.V1ObjectMeta(name="lab-ssh"),
            data=lab.secret_data()))

    def create_exporters(self, names):
        for name in names:
            self.custom.create_namespaced_custom_object("jumpstarter.dev", "v1alpha1", self.namespace, "exporters", {
                "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
                "metadata": {"name": name, "labels": {"virtualtarget.jumpstarter.dev/exporterset": "pool"}},
                "spec": {"enabled": True}})
        # The controller issues each its credential.
        wait_for(lambda: all((e.get("status") or {}).get("credential") for e in self.exporters())
                 and len(self.exporters()) >= len(names), message="credentials issued")

    def exporters(self):
        return self.standin.exporters()

    def disable(self, names):
        """What the pool does before a reset or a removal: the role acts only on
        Exporters a fresh read shows disabled and unleased."""
        for name in names:
            self.custom.patch_namespaced_custom_object("jumpstarter.dev", "v1alpha1", self.namespace,
                                                       "exporters", name, {"spec": {"enabled": False}})

    def run(self, entry_point, names):
        playbook = self.tmp_path / f"{entry_point}.yml"
        playbook.write_text(yaml.safe_dump([{
            "hosts": "localhost", "connection": "local", "gather_facts": False,
            "vars": {"_virtualtarget_jumpstarter_dev_exporterset": self.exporter_set,
                     "ansible_operator_meta": {"name": "pool", "namespace": self.namespace},
                     "virtual_target_class": self.vclass, "owned_exporters": self.exporters(),
                     "merged_parameters": self.vclass["spec"]["parameters"],
                     "provisioner_exporters": names},
            "tasks": [{"ansible.builtin.include_role": {
                "name": "jumpstarter.virtual_exporters.qemu_baremetal", "tasks_from": entry_point}}],
        }]))
        env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_PYTHON_INTERPRETER": sys.executable, "ANSIBLE_LOCALHOST_WARNING": "false",
               "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}
        completed = subprocess.run([f"{BIN}/ansible-playbook", "-i", "localhost,", str(playbook)],
                                   env=env, capture_output=True, text=True, timeout=300)
        assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-2000:]
        report = json.loads(completed.stdout)
        tasks = report["plays"][0]["tasks"]
        report_task = next(t for t in tasks
                           if t["task"]["name"].endswith("Report the state of the instances on each lab host"))
        facts = report_task["hosts"]["localhost"]["ansible_facts"]
        return facts["qemu_baremetal_instances"], completed.stdout

    def wait_up(self, hosts, names, timeout):
        """Until the instances ``names`` (on ``hosts[name]``) run, as read on
        this machine (no playbook run)."""
        wait_for(lambda: all(self.lab.instance_up(hosts[name], self.namespace, name) for name in names),
                 timeout=timeout, interval=0.2, message=f"{names} up on the hosts")

    def instance_dir(self, host, name):
        return self.lab.instance_dir(host, self.namespace, name)


def phases(results):
    return {name: state["phase"] for result in results.values() if not result.get("unreachable")
            for name, state in result["instances"].items()}


def test_provision_reset_remove_and_host_loss(testbed, namespace, standin, lab, tmp_path):
    bed = Bed(testbed, namespace, standin, lab, tmp_path)
    names = ["pool-0", "pool-1", "pool-2", "pool-3"]
    bed.create_exporters(names)
    started = time.monotonic()
    results, stdout = bed.run("provision", names)
    print(f"provision of 4 instances on 3 hosts: {time.monotonic() - started:.1f}s")
    hosts = {e["metadata"]["name"]: e["metadata"]["labels"][HOST_LABEL] for e in bed.exporters()}
    assert sorted(hosts.values()) == ["lab1", "lab1", "lab2", "lab3"]
    tokens = {e["metadata"]["name"]: base64.b64decode(bed.core.read_namespaced_secret(
        e["status"]["credential"]["name"], namespace).data["token"]).decode() for e in bed.exporters()}
    for name, host in hosts.items():
        config_file = bed.instance_dir(host, name) / "exporter.yaml"
        assert oct(config_file.stat().st_mode & 0o777) == "0o400"
        assert config_file.stat().st_uid != pwd.getpwnam("jumpstarter").pw_uid
        assert json.loads(config_file.read_text())["token"] == tokens[name]
        assert tokens[name] not in stdout

    runs = []

    def all_running():
        again, _ = bed.run("provision", names)
        runs.append(phases(again))
        return again if set(phases(again).values()) == {"Running"} and len(phases(again)) == 4 else None

    # A playbook run per check is slow: the hosts' files and QMP say first
    # when the run that asserts it can expect them running.
    bed.wait_up(hosts, names, timeout=120)
    again = wait_for(all_running, timeout=60, interval=1, message="4 running instances")
    print(f"first provision run: {phases(results)}; provision runs until all Running: {len(runs)}")
    assert not any(r["changed"] for r in again.values())

    pool0 = bed.instance_dir(hosts["pool-0"], "pool-0")
    disk_before = (pool0 / "disk.qcow2").stat().st_ctime
    qemu_pid = (pool0 / "vm" / "pid").read_text()
    # Still enabled, pool-0 is not reset: the role checks just before the host acts.
    results, _ = bed.run("reset", ["pool-0"])
    assert results[hosts["pool-0"]]["changed_instances"] == []
    assert (pool0 / "vm" / "pid").read_text() == qemu_pid
    bed.disable(["pool-0", "pool-1", "pool-2"])
    reset_started = time.time()
    results, _ = bed.run("reset", ["pool-0"])
    assert results[hosts["pool-0"]]["changed_instances"] == ["pool-0"]
    assert (pool0 / "disk.qcow2").stat().st_ctime > max(disk_before, reset_started - 1)
    assert (pool0 / "vm" / "pid").read_text() != qemu_pid
    bed.wait_up(hosts, ["pool-0"], timeout=60)
    wait_for(lambda: phases(bed.run("provision", names)[0]).get("pool-0") == "Running",
             timeout=60, interval=1, message="pool-0 running after reset")

    results, _ = bed.run("remove", ["pool-1"])
    assert not bed.instance_dir(hosts["pool-1"], "pool-1").exists()
    assert sorted(phases(results)) == ["pool-0", "pool-2", "pool-3"]

    # A host that dies: its instances cannot be reached, the play goes on.
    lost = hosts["pool-2"]
    lab.crash(lost)
    results, _ = bed.run("remove", ["pool-2"])
    assert results[lost].get("unreachable")
    assert bed.instance_dir(lost, "pool-2").exists()
    bed.custom.delete_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters", "pool-2")
    bed.custom.delete_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters", "pool-1")
    # Back again, the leftover of the Exporter that went away is removed.
    lab.up()
    results, _ = bed.run("provision", [])
    assert not bed.instance_dir(lost, "pool-2").exists()
    assert sorted(phases(results)) == ["pool-0", "pool-3"]
    bed.disable(["pool-3"])
    bed.run("remove", ["pool-0", "pool-3"])
