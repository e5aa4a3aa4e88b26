"""JEP-0014's sa8295 profile on a lab host: aarch64 hosts, the runtime's
``binary: /usr/bin/qemu-system-aarch64`` and ``kvm: true`` (no aarch64 KVM
on an x86_64 host: TCG), through the real operator, sshd, ``jmp run`` and
QEMU: the set's instance boots the arm64 test guest's kernel and registers
with the controller."""

from __future__ import annotations

import subprocess

import pytest
from jumpstarter_standin import wait_for
from kubernetes import client
from lab_beds import AARCH64_HOST as HOST
from lab_beds import PROVISIONER, serial_log
from labhosts import IMAGES
from pool_helpers import SET_LABEL, make_class, make_set
from qemu_vm import AARCH64_GUEST_DIR

pytestmark = pytest.mark.slow

GUEST_FILES = {"vmlinuz": "arm64-vmlinuz", "initramfs.cpio.gz": "arm64-initramfs.cpio.gz"}


def sa8295_parameters(lab_hosts):
    """The JEP's qcom-sa8295-baremetal parameters, its host our lab host."""
    return {
        "hosts": [{"name": HOST, "address": lab_hosts.hosts[HOST], "arch": "aarch64", "slots": 2}],
        "runtime": {"binary": "/usr/bin/qemu-system-aarch64", "kvm": True},
        "board": {"soc": "sa8295"},
        "resources": {"cpu": 1, "memory": "256Mi", "storage": "32Mi"},
    }


def test_the_sa8295_profile_boots_the_arm64_guest_on_a_lab_host(api, namespace, standin, operator, lab_hosts):
    for name, installed in GUEST_FILES.items():
        subprocess.run(["install", "-o", "jumpstarter", "-g", "jumpstarter", "-m", "0644",
                        str(AARCH64_GUEST_DIR / name), str(lab_hosts.work_dir(HOST) / "images" / installed)],
                       check=True)
    custom = client.CustomObjectsApi(api)
    client.CoreV1Api(api).create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="lab-ssh"), data=lab_hosts.secret_data()))
    parameters = {**sa8295_parameters(lab_hosts), "kernel": {"path": f"{IMAGES}/{GUEST_FILES['vmlinuz']}"},
                  "initrd": {"path": f"{IMAGES}/{GUEST_FILES['initramfs.cpio.gz']}"}}
    make_class(custom, namespace, name="sa8295", parameters=parameters, provisioner=PROVISIONER,
               credentialsSecretRef={"name": "lab-ssh"})
    make_set(custom, namespace, name="sa8295", board="sa8295", virtualTargetClassName="sa8295",
             minAvailableReplicas=1, maxReplicas=1, parameters={"board": {"fidelity": "high"}})
    operator(provisioners=(PROVISIONER,))

    def exporter_of(set_name):
        return next((e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}={set_name}")
                     if not e["metadata"].get("deletionTimestamp") and "dormant" not in e["metadata"]["name"]),
                    None)
    booted = wait_for(lambda: exporter_of("sa8295"), timeout=120, message="the sa8295 set's Exporter")
    standin.wait_online(booted, timeout=240)
    run = (lab_hosts.instance_dir(HOST, namespace, booted) / "vm" / "run").read_text()
    assert "/usr/bin/qemu-system-aarch64" in run and "cortex-a57" in run, run

    wait_for(lambda: "jumpstarter-guest ready" in serial_log(lab_hosts, namespace, booted), timeout=180,
             message="the arm64 guest's banner in its serial log")
    log = serial_log(lab_hosts, namespace, booted)
    assert "Machine model: linux,dummy-virt" in log and "-arm64" in log
