"""playbooks/drain_host.yml with the operator running a qemu-baremetal pool on
the test lab hosts: the drained host gets nothing new, its idle instances move,
a leased one stays until its lease ends and is then replaced elsewhere."""

from __future__ import annotations

import json
import os
import subprocess

from jumpstarter_standin import wait_for
from kubernetes import client
from lab_beds import BOARD, PROVISIONER, Lab
from operator_process import ROOT
from pool_helpers import GROUP, condition, get_set, make_class, make_set

DRAINED = "virtualtarget.jumpstarter.dev/drained-hosts"


def drain(namespace, host):
    completed = subprocess.run(
        ["ansible-playbook", "playbooks/drain_host.yml", "-e", f"lab_host={host}",
         "-e", f"drain_namespace={namespace}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_SHOW_CUSTOM_STATS": "1"})
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-2000:]
    return json.loads(completed.stdout)["global_custom_stats"]


def test_drain_moves_idle_instances_and_waits_for_leases(api, namespace, standin, operator, lab_hosts):
    custom = client.CustomObjectsApi(api)
    client.CoreV1Api(api).create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="lab-ssh"), data=lab_hosts.secret_data()))
    make_class(custom, namespace, name="lab", parameters=lab_hosts.parameters({"lab1": 2, "lab2": 3}),
               provisioner=PROVISIONER, credentialsSecretRef={"name": "lab-ssh"})
    make_set(custom, namespace, board=BOARD, virtualTargetClassName="lab", minAvailableReplicas=3,
             recycleStrategy="InPlaceReuse")
    lab = Lab(standin, lab_hosts)
    operator(provisioners=(PROVISIONER,))
    lab.settle(3, replicas=3)
    on_lab1 = sorted(n for n, h in lab.placed().items() if h == "lab1")
    assert len(on_lab1) == 1
    leased = on_lab1[0]
    lab.standin.create_lease("lease-a", {"board": BOARD}, exporter=leased)
    assert lab.standin.wait_assigned("lease-a") == leased
    lab.settle(3, replicas=4, leasedReplicas=1)
    idle = sorted(n for n, h in lab.placed().items() if h == "lab1" and n != leased)
    assert len(idle) == 1

    stats = drain(namespace, "lab1")
    assert stats["removed_exporters"] == idle and stats["leased_exporters"] == [leased]
    assert custom.get_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "lab")[
        "metadata"]["annotations"][DRAINED] == "lab1"
    assert not lab_hosts.instance_dir("lab1", namespace, idle[0]).exists()
    assert lab.running(leased, "lab1")

    # The pool refills on lab2 only; the leased instance keeps running on lab1.
    lab.settle(3, replicas=4, leasedReplicas=1)
    placed = lab.placed()
    assert [n for n, h in placed.items() if h == "lab1"] == [leased]
    assert lab.running(leased, "lab1")

    # The lease ends: InPlaceReuse would reset it on lab1; it is replaced instead.
    lab.standin.release("lease-a")
    wait_for(lambda: leased not in lab.placed(), timeout=60, message="the leased Exporter replaced")
    wait_for(lambda: not lab_hosts.instance_dir("lab1", namespace, leased).exists(),
             timeout=60, message="its instance removed from lab1")
    lab.settle(3, replicas=3)

    # lab2 is full now; one more does not go to the drained host, and the set says so.
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                          {"spec": {"minAvailableReplicas": 4}})
    limited = wait_for(lambda: (c := condition(get_set(custom, namespace), "ScalingLimited"))
                       and c["status"] == "True" and c, message="ScalingLimited")
    assert "no free slot on hosts lab2" in limited["message"] and "drained hosts lab1" in limited["message"]
    assert set(lab.placed().values()) == {"lab2"}

    # Draining again changes nothing.
    assert drain(namespace, "lab1")["removed_exporters"] == []
