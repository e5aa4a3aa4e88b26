"""The qemu_baremetal role's entry points against real lab hosts (sshd in network
namespaces), real QEMU under TCG and real ``jmp run``, with Exporters and Secrets
in the real test bed."""

import base64
import json
import pwd
import time

import pytest
from jumpstarter_standin import wait_for
from lab_beds import HOST_LABEL, Bed


@pytest.fixture
def lab(lab_hosts):
    return lab_hosts


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
