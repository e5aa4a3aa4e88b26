"""The operator with qemu-baremetal.jumpstarter.dev end to end: the real operator
process on the test bed, three lab hosts with real sshd (network namespaces),
real QEMU under TCG and real ``jmp run`` on them.

The Jumpstarter controller is the stand-in (the ``standin`` fixture) serving
gRPC over TLS with a private CA: the ``jmp run`` exporters on the hosts
register with it using the endpoint, controller CA and token the operator
wrote into their config, and it matches the leases.
"""

from __future__ import annotations

import json
import pwd
import time

from jumpstarter_standin import wait_for
from kubernetes import client
from lab_beds import BOARD, PROVISIONER, Lab
from operator_process import watches_file
from pool_helpers import GROUP, condition, get_set, make_class, make_set

REPORT = "hostReport"  # of status.operatorState (pool/operator_state.py)
# Short enough to cost the test one probe interval (5 s at least), not
# two, long enough that a host slow to answer under load is not lost.
RECONNECT_TIMEOUT = 6
# The lost host's two instances are replaced as two failures in a row, and
# the next create waits out the failure backoff: 10 s doubled by default,
# longer than the reconnect timeout itself. The test checks the
# replacement, not the backoff (tests/pool/test_pool_healing.py does): 1 s.
FAILURE_BACKOFF_BASE = 1


def _fast_failure_backoff(entry):
    entry["vars"]["reconcile_plan_options"]["failure_backoff_base"] = FAILURE_BACKOFF_BASE


def patch_set(custom, namespace, spec):
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool", {"spec": spec})


def test_pool_on_lab_hosts(api, namespace, standin, operator, lab_hosts, tmp_path):
    started = time.monotonic()
    custom = client.CustomObjectsApi(api)
    client.CoreV1Api(api).create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="lab-ssh"), data=lab_hosts.secret_data()))
    parameters = lab_hosts.parameters({"lab1": 2, "lab2": 2})
    parameters["reconnectTimeout"] = f"{RECONNECT_TIMEOUT}s"
    make_class(custom, namespace, name="lab", parameters=parameters, provisioner=PROVISIONER,
               credentialsSecretRef={"name": "lab-ssh"})
    make_set(custom, namespace, board=BOARD, virtualTargetClassName="lab", minAvailableReplicas=4,
             recycleStrategy="InPlaceReuse")
    lab = Lab(standin, lab_hosts)
    proc = operator("--watches-file", str(watches_file(tmp_path, _fast_failure_backoff)),
                    provisioners=(PROVISIONER,))

    # 0 -> 4 on two hosts with two slots each.
    lab.settle(4, replicas=4)
    placed = lab.placed()
    assert sorted(placed.values()) == ["lab1", "lab1", "lab2", "lab2"]
    for name, host in placed.items():
        config = lab_hosts.instance_dir(host, namespace, name) / "exporter.yaml"
        # The instance's own identity alone reads its token (jumpstarter-instance).
        assert oct(config.stat().st_mode & 0o777) == "0o400"
        assert config.stat().st_uid != pwd.getpwnam("jumpstarter").pw_uid
        assert lab.running(name, host)
        # Its own jmp run, registered with the controller over TLS.
        assert lab.standin.online(name)
    print(f"0 -> 4 instances: {time.monotonic() - started:.0f}s")

    # The 5th does not fit: ScalingLimited names the full hosts.
    patch_set(custom, namespace, {"minAvailableReplicas": 5})
    limited = wait_for(lambda: (c := condition(get_set(custom, namespace), "ScalingLimited"))
                       and c["status"] == "True" and c, message="ScalingLimited")
    assert limited["reason"] == "NoFreeSlots"
    assert "lab1, lab2" in limited["message"], limited
    assert len(lab.placed()) == 4

    # InPlaceReuse: a used instance gets a fresh VM and disk, same Exporter, same host.
    used = sorted(placed)[0]
    host = placed[used]
    disk = lab_hosts.instance_dir(host, namespace, used) / "disk.qcow2"
    disk_before = disk.stat().st_ctime
    vm_before = lab_hosts.service_pid(host, namespace, used, "vm")
    lab.standin.create_lease("lease-a", {"board": BOARD}, exporter=used)
    assert lab.standin.wait_assigned("lease-a") == used
    lab.settle(3, leasedReplicas=1)
    lab.standin.release("lease-a")
    vm_after = wait_for(lambda: (pid := lab_hosts.service_pid(host, namespace, used, "vm"))
                        and pid != vm_before and pid, message="a new QEMU for the reused instance")
    assert disk.stat().st_ctime > disk_before
    assert wait_for(lambda: (lab.vm_status(host, used) or {}).get("status") == "running",
                    message="QMP of the reset VM")
    assert lab.placed()[used] == host and vm_after != vm_before
    # The reused instance counts as available again before the hosts grow:
    # a class change while it still registers would make the set place two
    # on lab3 (three available then) and scale the surplus one down again,
    # a removal run the rest of the test would wait for.
    lab.settle(4, replicas=4)

    # A third host with three slots takes the 5th.
    parameters["hosts"] = lab_hosts.parameters({"lab1": 2, "lab2": 2, "lab3": 3})["hosts"]
    custom.patch_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "lab",
                                          {"spec": {"parameters": parameters}})
    lab.settle(5, replicas=5)
    assert sorted(lab.placed().values()) == ["lab1", "lab1", "lab2", "lab2", "lab3"]
    assert condition(get_set(custom, namespace), "ScalingLimited")["status"] == "False"

    # lab1 dies (sshd, QEMU, exporters): after the reconnect timeout its
    # instances are replaced on lab3; the old ones stay on the dead host.
    lost = sorted(n for n, h in lab.placed().items() if h == "lab1")
    crashed = time.monotonic()
    lab_hosts.crash("lab1")
    wait_for(lambda: not set(lost) & set(lab.placed()), timeout=120, interval=0.5,
             message="the lost host's Exporters replaced")
    replaced_after = time.monotonic() - crashed
    assert replaced_after >= RECONNECT_TIMEOUT
    report = json.loads(get_set(custom, namespace)["status"]["operatorState"][REPORT])
    assert report["hosts"]["lab1"]["unreachableSince"]
    # The status said 5 of 5 before the crash too: wait for the new placement.
    refilled = ["lab2", "lab2", "lab3", "lab3", "lab3"]
    wait_for(lambda: sorted(lab.placed().values()) == refilled,
             timeout=180, interval=0.5, message=f"replacements placed as {refilled}")
    lab.settle(5, replicas=5)
    assert sorted(lab.placed().values()) == refilled
    assert all(lab_hosts.instance_dir("lab1", namespace, name).exists() for name in lost)
    print(f"lost host's instances replaced after {replaced_after:.0f}s")

    # lab1 answers again: the leftovers of the replaced instances are removed.
    lab_hosts.up()
    wait_for(lambda: not any(lab_hosts.instance_dir("lab1", namespace, n).exists() for n in lost),
             timeout=60, interval=0.5, message="leftovers on lab1 removed")
    wait_for(lambda: not json.loads(get_set(custom, namespace)["status"]["operatorState"][REPORT])
             ["hosts"]["lab1"]["unreachableSince"], message="lab1 reachable in the report")

    # Scale-down stops exactly the instances it chose and nothing else.
    before = lab.placed()
    pids = {n: lab_hosts.service_pid(h, namespace, n, "vm") for n, h in before.items()}
    patch_set(custom, namespace, {"minAvailableReplicas": 2})
    lab.settle(2, replicas=2)
    after = lab.placed()
    gone = set(before) - set(after)
    assert len(gone) == 3
    for name in gone:
        assert not lab_hosts.instance_dir(before[name], namespace, name).exists()
    for name, host in after.items():
        assert lab_hosts.service_pid(host, namespace, name, "vm") == pids[name]
    assert proc.metric("jumpstarter_exporterset_playbook_runs_total", 'result="failed"') == 0
    print(f"operator test on lab hosts: {time.monotonic() - started:.0f}s")


def test_a_credential_secret_missing_a_key_is_named_on_the_set(api, namespace, standin, operator):
    """The role's first task reads the class's SSH Secret with no_log (its
    result carries the exporter tokens): a Secret without ``known_hosts``
    fails the run with the module's own words on the set's Failure
    condition and its Event, not a censored result. No host is reached."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="lab-ssh"), string_data={"ssh-privatekey": "not a key"}))
    # An address of the lab hosts' range that no host takes.
    parameters = {"arch": "x86_64", "resources": {"cpu": 1, "memory": "128Mi", "storage": "64Mi"},
                  "kernel": {"path": "/var/lib/jumpstarter-virtual/images/vmlinuz"},
                  "hosts": [{"name": "lab9", "address": "10.213.0.250", "slots": 1}]}
    make_class(custom, namespace, name="lab", parameters=parameters, provisioner=PROVISIONER,
               credentialsSecretRef={"name": "lab-ssh"})
    make_set(custom, namespace, board=BOARD, virtualTargetClassName="lab", minAvailableReplicas=1)
    operator(provisioners=(PROVISIONER,))
    said = f"Secret {namespace}/lab-ssh: missing known_hosts"
    failure = wait_for(lambda: (c := condition(get_set(custom, namespace), "Failure")) and c["status"] == "True"
                       and c, timeout=90, message="the set's Failure condition")
    assert failure["reason"] == "ReconcileFailed" and said in failure["message"], failure
    assert "censored" not in failure["message"], failure
    events = [e for e in core.list_namespaced_event(namespace).items
              if e.involved_object.name == "pool" and e.reason == "ReconcileFailed"]
    assert events and said in events[0].message, events
