"""The rendered QEMU command line boots a real guest, and QMP controls it."""

import asyncio
import json
import os
import subprocess
import time

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    disk_create_argv,
    qemu_argv,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.qmp import (
    probe_accel,
    wait_for_qmp,
)
from qemu.qmp import QMPClient
from qemu_vm import GUEST_BANNER, SerialConsole, guest_parameters, running_vm

pytestmark = pytest.mark.slow


async def qmp(socket, *commands):
    client = QMPClient("test")
    await client.connect(socket)
    try:
        return [await client.execute(command) for command in commands]
    finally:
        await client.disconnect()


def test_guest_gets_what_was_asked_for_and_survives_system_reset(tmp_path):
    """One guest (each boot under TCG takes seconds): it boots with the CPUs,
    memory and disk asked for, and a QMP system_reset reboots it in the same
    QEMU."""
    started = time.monotonic()
    parameters = guest_parameters(
        resources={"cpu": 2, "memory": "200Mi", "storage": "80Mi"})
    # A comma in the run directory must survive QEMU's option syntax.
    with running_vm(tmp_path / "run,dir", name="boot-test", parameters=parameters) as vm:
        qmp_ready = time.monotonic() - started
        serial = SerialConsole(vm.serial_socket)
        (status,) = asyncio.run(qmp(vm.qmp_socket, "query-status"))
        assert status["status"] == "running" and status["running"] is True

        serial.read_until(GUEST_BANNER)
        banner_after = time.monotonic() - started
        assert serial.run("nproc") == "2"
        # /sys/block/vda/size counts 512-byte sectors: 80 MiB is 163840.
        assert serial.run("cat /sys/block/vda/size") == "163840"
        mem_total_kib = int(serial.run("grep MemTotal /proc/meminfo").split()[1])
        # The kernel keeps a few MiB for itself; it must see more than 160 of
        # the 200 MiB and never more than 200.
        assert 160 * 1024 < mem_total_kib <= 200 * 1024

        asyncio.run(qmp(vm.qmp_socket, "system_reset"))
        reset_at = time.monotonic()
        serial.read_until(GUEST_BANNER)
        reboot = time.monotonic() - reset_at
        assert vm.process.poll() is None, "QEMU exited on reset"
        (status,) = asyncio.run(qmp(vm.qmp_socket, "query-status"))
        assert status["status"] == "running"
        serial.close()
    print(f"accel={vm.accel} qmp={qmp_ready:.2f}s banner={banner_after:.2f}s "
          f"reboot={reboot:.2f}s")


def qemu_img_info(path):
    result = subprocess.run(["qemu-img", "info", "--output=json", str(path)], check=True,
                            capture_output=True, text=True)
    return json.loads(result.stdout)


def test_disk_create_argv_makes_blank_and_overlay_disks(tmp_path):
    blank_dir, overlay_dir = tmp_path / "blank", tmp_path / "overlay"
    blank_dir.mkdir()
    overlay_dir.mkdir()
    subprocess.run(disk_create_argv({"resources": {"storage": "64Mi"}}, str(blank_dir)),
                   check=True)
    blank = qemu_img_info(blank_dir / "disk.qcow2")
    assert (blank["format"], blank["virtual-size"]) == ("qcow2", 64 * 2**20)
    assert "backing-filename" not in blank

    base = tmp_path / "base.raw"
    subprocess.run(["qemu-img", "create", "-q", "-f", "raw", str(base), "32M"], check=True)
    parameters = {"disk": {"path": str(base), "format": "raw"}, "resources": {"storage": "48Mi"}}
    subprocess.run(disk_create_argv(parameters, str(overlay_dir)), check=True)
    overlay = qemu_img_info(overlay_dir / "disk.qcow2")
    assert overlay["backing-filename"] == str(base)
    assert overlay["backing-filename-format"] == "raw"
    assert overlay["virtual-size"] == 48 * 2**20


def test_kvm_probe_matches_what_qemu_really_does(tmp_path):
    """Whatever the probe says about this host, the guest started with KVM behaves so:
    it boots to its banner under KVM exactly when the probe says ``kvm``."""
    parameters = guest_parameters(kvm=True)
    accel = probe_accel(parameters)
    argv = qemu_argv(parameters, run_dir=str(tmp_path), name="kvm-check", accel="kvm")
    assert "q35,accel=kvm" in argv
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        # QEMU answering QMP is not enough: on some hosts the firmware runs
        # under KVM and the kernel then hangs without a word.
        kvm_ran = False
        if wait_for_qmp(str(tmp_path / "qmp.sock"), 20, process):
            deadline = time.monotonic() + 30
            log = tmp_path / "serial.log"
            while time.monotonic() < deadline and process.poll() is None:
                if log.exists() and GUEST_BANNER in log.read_bytes():
                    kvm_ran = True
                    break
                time.sleep(0.2)
    finally:
        process.kill()
        process.wait()
    assert kvm_ran == (accel == "kvm"), (
        f"probe said {accel}, but a KVM guest {'booted' if kvm_ran else 'did not boot'}; "
        f"/dev/kvm accessible: {os.access('/dev/kvm', os.R_OK | os.W_OK)}")


def test_kvm_probe_falls_back_when_qemu_cannot_start():
    missing = guest_parameters(runtime={"binary": "/nonexistent/qemu-system-x86_64"})
    assert probe_accel(missing) == "tcg"
