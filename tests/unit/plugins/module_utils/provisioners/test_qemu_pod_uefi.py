"""The Pod of an aarch64 guest booting the default UEFI: QEMU's supervisor
gives each QEMU it starts (the first, and each after a reset in place) a
fresh copy of the firmware's variable template, where QEMU's writable flash
device reads it."""

import os
import shlex
import signal
import subprocess
import sys
import time

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import POD_RUN_DIR
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    UEFI_FIRMWARE,
    UEFI_VARS,
)

SET = {"metadata": {"name": "rpi4", "namespace": "lab", "uid": "set-uid"},
       "spec": {"template": {"spec": {"drivers": [{"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu"}]}}}}
EXPORTER = {"metadata": {"name": "rpi4-0", "namespace": "lab", "uid": "exporter-uid"}, "status": {}}
CLASS = {"metadata": {"name": "rpi4", "namespace": "lab"}, "spec": {"provisioner": "qemu.jumpstarter.dev"}}
TEMPLATE = UEFI_FIRMWARE["aarch64"]["vars"]

# Stands in for QEMU: notes the variable store it was started with, then
# writes to it as the firmware does at boot, and listens on QMP until SIGTERM.
FAKE_QEMU = """
import os, signal, socket, sys
run, store = sys.argv[1], sys.argv[1] + "/efivars.fd"
with open(os.path.join(run, "starts"), "a") as starts:
    starts.write(open(store, "rb").read().decode() + "\\n")
with open(store, "r+b") as vars_file:
    vars_file.write(b"boot entries of a lessee")
listener = socket.socket(socket.AF_UNIX)
listener.bind(os.path.join(run, "qmp.sock"))
listener.listen()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
signal.pause()
"""


def render(parameters):
    return k8s_pod.instance_pod(SET, CLASS, EXPORTER, "qemu.jumpstarter.dev", parameters, {}, accel="tcg")


def qemu_container(pod):
    (runtime,) = pod["spec"]["containers"]
    return runtime


def test_the_vars_drive_reads_the_copy_the_supervisor_makes_before_qemu_starts():
    command = qemu_container(render({"machineType": "virt", "resources": {"storage": "1Gi"}}))["command"]
    script, qemu = command[2], command[4:]
    assert qemu[0] == "qemu-system-aarch64"
    store = f"{POD_RUN_DIR}/{UEFI_VARS}"
    assert f"if=pflash,format=raw,unit=1,file={store}" in qemu
    copy = shlex.join(["qemu-img", "convert", "-q", "-f", "raw", "-O", "raw", TEMPLATE, store])
    assert script.index(copy) < script.index('"$@" &')
    # Nothing else of the Pod makes it: the runtime image's qemu-img does, in QEMU's container.
    init_containers = render({"arch": "aarch64"})["spec"]["initContainers"]
    assert all(copy not in shlex.join(c.get("command") or []) for c in init_containers)


def test_a_guest_without_the_default_uefi_gets_no_copy():
    for parameters in ({"arch": "x86_64"}, {"arch": "aarch64", "kernel": {"path": "/images/Image"}}):
        assert "efivars" not in qemu_container(render(parameters))["command"][2]


def _wait_for(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_each_qemu_start_and_each_reset_in_place_gets_a_fresh_store(tmp_path):
    """With a real /bin/sh and qemu-img: the store QEMU starts with is the
    template, never what the QEMU before it wrote."""
    template = tmp_path / "AAVMF_VARS.fd"
    template.write_bytes(b"the firmware's template".ljust(4096, b"\0"))
    run = tmp_path / "run"
    run.mkdir()
    script = qemu_container(render({"arch": "aarch64"}))["command"][2]
    script = script.replace(TEMPLATE, str(template)).replace(POD_RUN_DIR, str(run))
    supervisor = subprocess.Popen(["/bin/sh", "-c", script, "qemu", sys.executable, "-c", FAKE_QEMU, str(run)])
    try:
        _wait_for(lambda: (run / "qmp.sock").exists())
        # What InPlaceReuse's reset command asks of the supervisor.
        (run / "reset-requested").touch()
        os.kill(supervisor.pid, signal.SIGUSR1)
        _wait_for(lambda: not (run / "reset-requested").exists() and (run / "qmp.sock").exists()
                  and len((run / "starts").read_text().splitlines()) == 2)
        starts = [line.rstrip("\0") for line in (run / "starts").read_text().splitlines()]
        assert starts == ["the firmware's template"] * 2
        assert template.read_bytes().startswith(b"the firmware's template")
        assert (run / UEFI_VARS).stat().st_size == 4096
    finally:
        supervisor.terminate()
    assert supervisor.wait(timeout=10) == 0
