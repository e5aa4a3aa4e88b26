"""A real QEMU virtual target for the tests.

Boots the exact command line ``qemu_argv()`` renders, with the kernel and
busybox initramfs that ``scripts/guest-image`` caches, and reads the serial
console over the run directory's UNIX socket like the exporter does.
"""

import contextlib
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    QMP_SOCKET,
    SERIAL_SOCKET,
    disk_create_argv,
    qemu_argv,
    uefi_vars_argv,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.qmp import (
    probe_accel,
    wait_for_qmp,
)
from testbed import processes
from testbed.bed import CACHE_DIR

GUEST_DIR = CACHE_DIR / "guest"
# The aarch64 build of the same guest.
AARCH64_GUEST_DIR = GUEST_DIR / "aarch64"
# What the guest's init prints on the serial console once userspace runs
# (see scripts/guest-image).
GUEST_BANNER = b"jumpstarter-guest ready"
BOOT_TIMEOUT = 60.0


def guest_parameters(**changes):
    """Merged parameters of a small x86_64 target that boots the test guest."""
    kernel, initrd = GUEST_DIR / "vmlinuz", GUEST_DIR / "initramfs.cpio.gz"
    missing = [str(path) for path in (kernel, initrd) if not path.exists()]
    assert not missing, f"{missing} missing: run scripts/guest-image (scripts/test does)"
    parameters = {
        "arch": "x86_64",
        "machineType": "q35",
        "kvm": True,
        "resources": {"cpu": 2, "memory": "192Mi", "storage": "96Mi"},
        "kernel": {"path": str(kernel)},
        "initrd": {"path": str(initrd)},
        "kernelArgs": "console=ttyS0 quiet",
    }
    parameters.update(changes)
    return parameters


class SerialConsole:
    """The guest's first serial port, through QEMU's UNIX socket."""

    def __init__(self, path):
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.connect(str(path))
        self.received = b""

    def read_until(self, marker, timeout=BOOT_TIMEOUT):
        """Everything up to and including the next ``marker``; consumed."""
        deadline = time.monotonic() + timeout
        while marker not in self.received:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{marker!r} not seen on the serial console; got "
                                   f"{self.received[-2000:]!r}")
            self._socket.settimeout(remaining)
            chunk = self._socket.recv(4096)
            if not chunk:
                raise EOFError(f"serial console closed before {marker!r}")
            self.received += chunk
        head, _, self.received = self.received.partition(marker)
        return head + marker

    def run(self, shell_command, timeout=20.0):
        """Output of a command typed into the guest's shell."""
        # The terminal echoes what is typed; quoting splits the markers in the
        # echo so only the command's own output contains them whole.
        self._socket.sendall(f"echo BEG''IN; {shell_command}; echo EN''D\n".encode())
        self.read_until(b"BEGIN", timeout)
        return self.read_until(b"END", timeout)[: -len(b"END")].decode().strip()

    def close(self):
        self._socket.close()


@dataclass
class RunningVm:
    run_dir: Path
    argv: list
    accel: str
    process: subprocess.Popen

    @property
    def qmp_socket(self):
        return str(self.run_dir / QMP_SOCKET)

    @property
    def serial_socket(self):
        return str(self.run_dir / SERIAL_SOCKET)

    def log(self):
        return (self.run_dir / "qemu.log").read_text(errors="replace")


@contextlib.contextmanager
def running_vm(run_dir, name="vm", parameters=None):
    """Creates the disk, starts QEMU with ``qemu_argv()`` and waits for QMP."""
    parameters = parameters or guest_parameters()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for make in (disk_create_argv, uefi_vars_argv):
        argv = make(parameters, str(run_dir))
        if argv:
            subprocess.run(argv, check=True)
    accel = probe_accel(parameters)
    argv = qemu_argv(parameters, run_dir=str(run_dir), name=name, accel=accel)
    with open(run_dir / "qemu.log", "wb") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT)
    processes.track(process.pid, f"QEMU {name} ({run_dir})")
    vm = RunningVm(run_dir, argv, accel, process)
    try:
        assert wait_for_qmp(vm.qmp_socket, 20, process), f"QMP never answered: {vm.log()}"
        yield vm
    finally:
        process.kill()
        process.wait()
