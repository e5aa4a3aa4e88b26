"""The virtual QEMU driver against a real QEMU started with ``qemu_argv()``.

The driver is served in process (jumpstarter's ``serve``) and called through
its real clients, the ones ``j`` uses: the power, flasher and serial console
clients. The guest is scripts/guest-image's: its initramfs prints
"jumpstarter-guest ready", and boots the root filesystem of rootfs.img
instead once that image is on the disk.
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager

import pexpect
import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    qemu_driver_overrides,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.qmp import vm_status
from jumpstarter.common.utils import serve
from jumpstarter_driver_virtual_qemu.driver import VirtualQemu
from qemu_vm import GUEST_BANNER, GUEST_DIR, guest_parameters, running_vm

pytestmark = pytest.mark.slow

ROOTFS = GUEST_DIR / "rootfs.img"
FLASHED_BANNER = "booted from its disk:"
BOOT_TIMEOUT = 120


@pytest.fixture
def target(tmp_path):
    """A running VM of the test class and the driver the provisioner's config gives it."""
    assert ROOTFS.exists(), f"{ROOTFS} missing: run scripts/guest-image (scripts/test does)"
    with running_vm(tmp_path / "run", parameters=guest_parameters(kernelArgs="console=ttyS0")) as vm:
        config = qemu_driver_overrides([{"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu"}],
                                       str(vm.run_dir))["qemu"]["config"]
        with serve(VirtualQemu(**config)) as client:
            yield vm, client


def status(vm):
    return vm_status(vm.qmp_socket)["status"]


def error_text(error: BaseException) -> str:
    """The messages of an error and of every error it groups (the client raises groups)."""
    if isinstance(error, BaseExceptionGroup):
        return " ".join(error_text(inner) for inner in error.exceptions)
    return str(error)


def wait_for_the_guest_shell(vm, after=None):
    """Wait until serial.log shows the guest's banner (after ``after``, when given).

    Its shell reads the console only from then on: a line typed while the
    kernel still boots is lost (the UART drops what it received before the
    tty is opened), and under load a TCG guest takes far longer to get there.
    """
    log = vm.run_dir / "serial.log"
    deadline = time.monotonic() + BOOT_TIMEOUT
    while GUEST_BANNER.decode() not in log.read_text(errors="replace").split(after or "\0")[-1]:
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
        time.sleep(0.1)


@contextmanager
def showing_the_guest(vm):
    """A console wait that times out fails with what the guest printed and
    the VM's state, so that a guest that did not boot and a console that did
    not show it are told apart."""
    try:
        yield
    except pexpect.TIMEOUT:
        log = (vm.run_dir / "serial.log").read_text(errors="replace")
        raise AssertionError(f"the console did not show it; VM {status(vm)!r}, "
                             f"serial.log ends:\n{log[-3000:]}") from None


def boot_facts(console):
    console.expect(FLASHED_BANNER, timeout=BOOT_TIMEOUT)
    console.expect("\n")
    return dict(re.findall(r'(\w+)=("[^"]*"|\S+)', console.before.decode(errors="replace")))


def test_power_off_holds_the_guest_at_reset_and_power_on_boots_it(target):
    vm, client = target
    assert status(vm) == "running"
    client.power.off()
    assert status(vm) == "prelaunch"
    client.power.off()  # already off: nothing to do
    assert status(vm) == "prelaunch"
    client.power.on()
    assert status(vm) == "running"
    with client.console.pexpect() as console, showing_the_guest(vm):
        console.expect(GUEST_BANNER.decode(), timeout=BOOT_TIMEOUT)
        # The console takes input: the guest's shell answers.
        console.sendline("echo answer-$((40 + 2))")
        console.expect("answer-42", timeout=30)
    # The same QEMU process throughout: the driver starts none.
    assert vm.process.poll() is None


def test_the_console_shows_the_latest_boot_from_its_start(target):
    vm, client = target
    wait_for_the_guest_shell(vm)
    with client.console.pexpect() as console:
        console.sendline("echo earlier-$((2 + 3))")
        # The command's own output line (not, say, "sh: earlier-5: not found").
        console.expect(r"\nearlier-5\r?\n", timeout=30)
    client.power.off()
    client.power.on()
    # Opened only once the guest is up again, the console still shows that
    # boot from its first line, and nothing from before it.
    wait_for_the_guest_shell(vm, after="earlier-5")
    with client.console.pexpect() as console:
        console.expect("Linux version", timeout=30)
        console.expect(GUEST_BANNER.decode(), timeout=30)
        console.sendline("echo later-$((3 + 4))")
        console.expect(r"\nlater-7\r?\n", timeout=30)
        assert b"earlier" not in console.before


def test_flash_needs_the_target_off_and_the_flashed_image_boots(target):
    vm, client = target
    with pytest.raises(BaseException) as refused:
        client.flasher.flash(str(ROOTFS))
    assert "power it off first" in error_text(refused.value)

    client.power.off()
    client.flasher.flash(str(ROOTFS))
    client.power.on()
    with client.console.pexpect() as console, showing_the_guest(vm):
        facts = boot_facts(console)
    parameters = guest_parameters()
    assert int(facts["cpus"]) == parameters["resources"]["cpu"]
    assert 0.95 * 192 * 1024 < int(facts["memory_kib"]) <= 192 * 1024
    assert int(facts["disk_bytes"]) == 96 * 2**20
    assert "Q35" in facts["machine"]
    assert vm.process.poll() is None


def test_dump_reads_back_the_image_then_zeros(target, tmp_path):
    vm, client = target
    client.power.off()
    # A disk that held other data first: the flash overwrites all of it.
    client.flasher.flash(str(ROOTFS))
    second = tmp_path / "second.img"
    second.write_bytes(b"second image" * 1000)
    client.flasher.flash(str(second))
    dumped = tmp_path / "disk.img"
    client.flasher.dump(str(dumped))
    data = dumped.read_bytes()
    assert len(data) == 96 * 2**20
    assert data[:12000] == second.read_bytes()
    assert data[12000:].count(0) == len(data) - 12000
    # The flash and dump files in the run directory are gone.
    assert sorted(p.name for p in vm.run_dir.glob("*.img")) == []


def test_an_image_larger_than_the_disk_is_refused_and_the_disk_kept(target, tmp_path):
    vm, client = target
    client.power.off()
    big = tmp_path / "big.img"
    big.write_bytes(b"x" * (96 * 2**20 + 1))
    with pytest.raises(BaseException) as refused:
        client.flasher.flash(str(big))
    assert "larger than the target's disk (100663296 bytes" in error_text(refused.value)
    with pytest.raises(BaseException) as unknown:
        client.flasher.flash(str(ROOTFS), target="boot")
    assert "unknown partition 'boot'" in error_text(unknown.value)
    dumped = tmp_path / "disk.img"
    client.flasher.dump(str(dumped))
    assert dumped.read_bytes().count(0) == 96 * 2**20
