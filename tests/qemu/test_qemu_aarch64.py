"""aarch64 guests under TCG, with the command line ``qemu_argv()`` renders:
the test guest's arm64 build booted directly from its kernel, and a guest
given no kernel booting the default UEFI (Debian's AAVMF) on a variable
store of its own."""

import hashlib
import re
import time

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    SERIAL_LOG,
    UEFI_FIRMWARE,
    UEFI_VARS,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.qmp import vm_status
from jumpstarter_standin import wait_for
from qemu_vm import AARCH64_GUEST_DIR, SerialConsole, running_vm

pytestmark = pytest.mark.slow


def guest_files():
    files = {name: AARCH64_GUEST_DIR / name for name in ("vmlinuz", "initramfs.cpio.gz", "rootfs.img")}
    missing = [str(path) for path in files.values() if not path.exists()]
    assert not missing, f"{missing} missing: run scripts/guest-image (scripts/test does)"
    return files


def test_the_arm64_guest_boots_its_kernel_and_the_root_filesystem_on_its_disk(tmp_path):
    """Direct kernel boot (no firmware): the initramfs finds the root
    filesystem image on the virtio disk and switches to it, which reports
    the vCPUs, memory and disk the parameters give and the virt machine."""
    files = guest_files()
    parameters = {"arch": "aarch64", "resources": {"cpu": 2, "memory": "256Mi", "storage": "32Mi"},
                  "kernel": {"path": str(files["vmlinuz"])}, "initrd": {"path": str(files["initramfs.cpio.gz"])},
                  "disk": {"path": str(files["rootfs.img"]), "format": "raw"}}
    started = time.monotonic()
    with running_vm(tmp_path / "run", name="arm64", parameters=parameters) as vm:
        assert vm.argv[0] == "qemu-system-aarch64" and "-bios" not in vm.argv
        assert not any("if=pflash" in arg for arg in vm.argv)
        # Read from the serial log: a console client that does not read
        # would hold the guest's output (and the guest) back.
        log = tmp_path / "run" / SERIAL_LOG
        boot = wait_for(lambda: re.search(rb"booted from its disk:(.*)\n", log.read_bytes()) and log.read_bytes(),
                        timeout=120, message="the root filesystem's init")
        booted = time.monotonic() - started
        line = boot.split(b"booted from its disk:", 1)[1].split(b"\n", 1)[0].decode()
        assert b"Booting Linux" in boot and b"Machine model: linux,dummy-virt" in boot
        assert "cpus=2" in line and f"disk_bytes={32 * 2**20}" in line and 'machine="linux,dummy-virt"' in line
        serial = SerialConsole(vm.serial_socket)
        assert serial.run("uname -m") == "aarch64"
        serial.close()
    print(f"aarch64 direct boot to the disk's init: {booted:.1f}s")


def test_a_guest_without_a_kernel_boots_uefi_on_its_own_variable_store(tmp_path):
    """AAVMF runs from the read-only code image and reaches its boot manager;
    what it writes lands in the instance's copy of the template, never in
    the template."""
    template = UEFI_FIRMWARE["aarch64"]["vars"]
    with open(template, "rb") as handle:
        before = hashlib.sha256(handle.read()).hexdigest()
    parameters = {"machineType": "virt", "resources": {"cpu": 1, "memory": "256Mi", "storage": "16Mi"}}
    started = time.monotonic()
    with running_vm(tmp_path / "run", name="uefi", parameters=parameters) as vm:
        # The serial log, not the console socket: the firmware's first lines
        # may come before a client could connect.
        log = tmp_path / "run" / SERIAL_LOG
        wait_for(lambda: b"UEFI firmware" in log.read_bytes(), timeout=120, message="the UEFI banner")
        banner = time.monotonic() - started
        # Its boot manager runs (and tries the blank disk, then EDK2's shell).
        wait_for(lambda: b"BdsDxe: " in log.read_bytes(), timeout=120, message="the UEFI boot manager")
        shell = time.monotonic() - started
        assert vm_status(vm.qmp_socket, timeout=20)["status"] == "running"
        store = (tmp_path / "run" / UEFI_VARS).read_bytes()
    with open(template, "rb") as handle:
        template_bytes = handle.read()
    assert hashlib.sha256(template_bytes).hexdigest() == before
    assert len(store) == len(template_bytes) and store != template_bytes
    print(f"UEFI banner {banner:.1f}s, boot manager {shell:.1f}s")
