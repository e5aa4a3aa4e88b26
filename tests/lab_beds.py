"""The lab hosts (the ``lab_hosts`` fixture) as the qemu-baremetal.jumpstarter.dev
tests drive them: ``Bed`` runs the qemu_baremetal role's entry points by
hand, ``Lab`` is a set's view of the hosts under the operator."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml
from jumpstarter_standin import wait_for
from kubernetes import client
from pool_helpers import get_set

BIN = os.path.dirname(sys.executable)
PROVISIONER = "qemu-baremetal.jumpstarter.dev"
HOST_LABEL = "virtualtarget.jumpstarter.dev/host"
BOARD = "lab-x86"
# The host the aarch64 tests place their instances on.
AARCH64_HOST = "lab3"


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


class Lab:
    """The set's view of the lab hosts and of the controller."""

    def __init__(self, standin, lab):
        self.custom = standin.custom
        self.standin = standin
        self.namespace = standin.namespace
        self.lab = lab

    def placed(self):
        """{Exporter name: host} of the set's live Exporters."""
        return {e["metadata"]["name"]: e["metadata"]["labels"].get(HOST_LABEL)
                for e in self.standin.exporters("virtualtarget.jumpstarter.dev/exporterset=pool")
                if not e["metadata"].get("deletionTimestamp")}

    def running(self, name, host):
        return bool(self.lab.service_pid(host, self.namespace, name, "vm")
                    and self.lab.service_pid(host, self.namespace, name, "exporter"))

    def settle(self, available, timeout=180, **expected):
        expected["availableReplicas"] = available

        def step():
            status = get_set(self.custom, self.namespace).get("status") or {}
            return status if all(status.get(k) == v for k, v in expected.items()) else None

        return wait_for(step, timeout=timeout, interval=0.5, message=f"{expected}")

    def vm_status(self, host, name):
        """QMP query-status of an instance."""
        return self.lab.vm_status(host, self.namespace, name)


def serial_log(lab_hosts, namespace, name, host=AARCH64_HOST):
    try:
        return (lab_hosts.instance_dir(host, namespace, name) / "serial.log").read_text(errors="replace")
    except OSError:
        return ""
