"""QMP control of a running QEMU, and the KVM probe, for modules, roles and the operator.

Every call opens its own QMP session and closes it: QEMU accepts one QMP
client per socket at a time, so holding a session would lock out the
exporter and other callers.
"""

import asyncio
import os
import subprocess
import tempfile
import time

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    ACCEL_KVM,
    ACCEL_TCG,
    QMP_SOCKET,
    SERIAL_LOG,
    console_of,
    qemu_argv,
    run_path,
)

try:
    from qemu.qmp import ConnectError, QMPClient

    QMP_IMPORT_ERROR = None
except ImportError as error:
    QMP_IMPORT_ERROR = error

COMMANDS = ("status", "reset", "stop", "cont", "quit")
STATUS_ABSENT = "absent"
DEFAULT_TIMEOUT = 10.0
# How long a VM started with KVM must keep running to count as working: on
# the broken hosts QEMU aborts while resetting the vCPUs, within milliseconds.
KVM_PROBE_SETTLE_SECONDS = 1.0
# How long a guest kernel started with KVM may take to print its banner; a
# working KVM prints it in well under a second, TCG in about half a second.
KVM_PROBE_BOOT_SECONDS = 15.0
KVM_PROBE_BANNER = b"Linux version"
_RETRY_INTERVAL = 0.05
# Connection failures that mean no QEMU listens on the socket: no file, or a
# file left behind by a QEMU that ended.
_NOBODY_LISTENS = (FileNotFoundError, ConnectionRefusedError)
# Connection failures that mean a QEMU is ending: its socket still took the
# connection, and the connection closed during the handshake (either side may
# see it first, so a write fails as well as a read).
_QEMU_ENDING = (ConnectionResetError, BrokenPipeError, EOFError)


class QmpUnavailable(Exception):
    """Nothing answers QMP on the socket: no file, nobody listening, or a QEMU ending.

    ``ending`` is true when a process still listens on the socket but closed
    the connection during the handshake (a QEMU on its way out).
    """

    def __init__(self, message, ending=False):
        super().__init__(message)
        self.ending = ending


def vm_status(socket, timeout=DEFAULT_TIMEOUT):
    """``query-status`` of the VM as a dict, or None when nothing answers."""
    try:
        return asyncio.run(_with_session(socket, timeout, _query_status))
    except QmpUnavailable:
        return None


def control_vm(socket, command, *, timeout=DEFAULT_TIMEOUT, check_mode=False):
    """Bring the VM to the state ``command`` asks for, idempotently.

    Returns ``{"changed", "status", "running", "before"}`` where ``status`` is
    the ``query-status`` status after the command ("absent" once QEMU quit)
    and ``before`` the status found. ``stop`` on a VM that is not running,
    ``cont`` on a running one, ``status``, and ``quit`` when nothing answers
    change nothing; ``reset`` always changes. In check mode nothing is sent
    but the query, and ``status`` is the status found. Raises QmpUnavailable
    when nothing answers and the command needs a VM.
    """
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; one of {', '.join(COMMANDS)}")
    deadline = time.monotonic() + timeout
    try:
        result = asyncio.run(
            _with_session(socket, timeout, _control, command=command, check_mode=check_mode)
        )
    except QmpUnavailable:
        if command != "quit":
            raise
        return {"changed": False, "status": STATUS_ABSENT, "running": False,
                "before": STATUS_ABSENT}
    if result["status"] == STATUS_ABSENT:
        _wait_until_gone(socket, deadline)
    return result


def wait_for_qmp(socket, timeout=DEFAULT_TIMEOUT, process=None):
    """Wait until QMP answers on ``socket``; False on timeout or if ``process`` ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            return False
        if vm_status(socket, timeout=max(deadline - time.monotonic(), _RETRY_INTERVAL)):
            return True
        time.sleep(_RETRY_INTERVAL)
    return False


def _wait_until_gone(socket, deadline):
    """After ``quit``: return once nothing listens on the socket any more.

    A QEMU on its way out may still take a connection and drop it during the
    handshake; only a refused connection (or no file) says it has ended, so a
    repeated quit finds nothing.
    """
    while time.monotonic() < deadline:
        try:
            asyncio.run(_with_session(
                socket, max(deadline - time.monotonic(), _RETRY_INTERVAL), _query_status,
            ))
        except QmpUnavailable as error:
            if not error.ending:
                return
        time.sleep(_RETRY_INTERVAL)
    raise TimeoutError(f"QEMU still listens on {socket} after quit")


def probe_accel(parameters, timeout=DEFAULT_TIMEOUT, kernel=None):
    """``"kvm"`` if a VM of these parameters really runs under KVM here, else ``"tcg"``.

    ``/dev/kvm`` being there is not enough. On some hosts QEMU aborts as soon
    as the vCPUs are reset; on others the firmware runs and the guest kernel
    then hangs without a word. So a small VM with the same binary, machine
    and CPU model is started with KVM. With a guest kernel (``kernel``, or
    the parameters' ``kernel.path``) it must print its banner on the serial
    console within ``KVM_PROBE_BOOT_SECONDS``; without one it must answer QMP
    and still be running a moment later. The answer is kept for the process,
    per binary, machine, CPU model and kernel.
    """
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return ACCEL_TCG
    probe = {key: parameters[key] for key in ("arch", "machineType", "cpuModel")
             if parameters.get(key)}
    probe["kvm"] = True
    probe["resources"] = {"cpu": 1, "memory": "128Mi"}
    binary = (parameters.get("runtime") or {}).get("binary")
    if binary:
        probe["runtime"] = {"binary": binary}
    if kernel is None:
        kernel = ((parameters.get("kernel") or {}).get("path")) or None
    if kernel and not os.path.isfile(kernel):
        kernel = None
    if kernel:
        probe["kernel"] = {"path": kernel}
        probe["kernelArgs"] = f"console={console_of(probe)} panic=-1"
    key = (binary, probe.get("arch"), probe.get("machineType"), probe.get("cpuModel"), kernel)
    if key not in _PROBED:
        _PROBED[key] = _probe(probe, timeout, kernel is not None)
    return _PROBED[key]


# What probe_accel found, per binary, machine, CPU model and kernel.
_PROBED = {}


def _probe(probe, timeout, boots_kernel):
    with tempfile.TemporaryDirectory(prefix="kvm-probe-") as run_dir:
        argv = qemu_argv(probe, run_dir=run_dir, name="kvm-probe", accel=ACCEL_KVM)
        socket = run_path(run_dir, QMP_SOCKET)
        try:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            return ACCEL_TCG
        try:
            if not wait_for_qmp(socket, timeout, process):
                return ACCEL_TCG
            if boots_kernel:
                log = run_path(run_dir, SERIAL_LOG)
                deadline = time.monotonic() + KVM_PROBE_BOOT_SECONDS
                while time.monotonic() < deadline and process.poll() is None:
                    if KVM_PROBE_BANNER in _read_bytes(log):
                        return ACCEL_KVM
                    time.sleep(0.1)
                return ACCEL_TCG
            time.sleep(KVM_PROBE_SETTLE_SECONDS)
            status = vm_status(socket, timeout)
            alive = process.poll() is None
            return ACCEL_KVM if alive and status and status.get("running") else ACCEL_TCG
        finally:
            process.kill()
            process.wait()


def _read_bytes(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return b""


async def _with_session(socket, timeout, action, **kwargs):
    if QMP_IMPORT_ERROR is not None:
        raise QMP_IMPORT_ERROR
    client = QMPClient(os.path.basename(socket))
    async with asyncio.timeout(timeout):
        try:
            await client.connect(socket)
        except ConnectError as error:
            if isinstance(error.exc, _NOBODY_LISTENS + _QEMU_ENDING):
                raise QmpUnavailable(
                    f"no QMP server on {socket}: {error.exc}",
                    ending=isinstance(error.exc, _QEMU_ENDING),
                ) from None
            raise
        try:
            return await action(client, **kwargs)
        finally:
            try:
                await client.disconnect()
            except EOFError:
                # QEMU closed the connection first (after "quit").
                pass


async def _query_status(client):
    return await client.execute("query-status")


async def _control(client, *, command, check_mode):
    before = await _query_status(client)
    changed = {
        "status": False,
        "stop": before["running"],
        "cont": not before["running"],
        "reset": True,
        "quit": True,
    }[command]
    after = before
    if changed and not check_mode:
        if command == "quit":
            await client.execute("quit")
            after = {"status": STATUS_ABSENT, "running": False}
        else:
            await client.execute("system_reset" if command == "reset" else command)
            after = await _query_status(client)
    return {"changed": changed, "status": after["status"], "running": after["running"],
            "before": before["status"]}
