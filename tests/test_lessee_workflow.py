"""A lessee drives a lab host target with the stock ``j`` commands.

A qemu-baremetal set with one instance on lab3 (the operator, the controller
stand-in over TLS, a real ``jmp run`` with the runtime's real QEMU); a real
``jmp shell`` leases it and runs, through the exporter's virtual QEMU driver:
power off and on, the console showing the guest boot, a flash refused while
on, power off, flash of the root filesystem image scripts/guest-image makes,
a dump of the disk showing the image on it, power on and the flashed image
booting with the CPUs, memory, disk and machine of the class, and a power
cycle booting it again. QEMU stays the provisioner's process throughout.

For qemu.jumpstarter.dev, whose Pods kwok runs without containers, the
ExporterConfig the operator writes is checked against the Pod it runs in.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import threading

import yaml
from jumpstarter.config.exporter import ExporterConfigV1Alpha1
from jumpstarter_driver_virtual_qemu.driver import VirtualQemu
from jumpstarter_standin import wait_for
from kubernetes import client
from labhosts import GUEST
from pool_helpers import make_class, make_set
from test_baremetal_operator import BOARD, PROVISIONER, Lab
from test_end_to_end_lessee import JMP, live_exporters, make_client

USER = "lessee"
CPUS = 2
MEMORY_MIB = 160
DISK_MIB = 48
BOOT_TIMEOUT = 240

# What the lessee types, in order (docs/lessee.md walks through the same).
# `j qemu console pipe` runs in the background while the guest boots; the
# console shows output from the latest power on, so it may attach after it.
SCRIPT = r"""
set -eu
wait_for() {  # FILE PATTERN SECONDS
    tries=0
    until grep -q "$2" "$1" 2>/dev/null; do
        tries=$((tries + 1))
        if [ "$tries" -gt $(($3 * 10)) ]; then
            echo "no '$2' on the console within $3s:"; cat "$1" 2>/dev/null; return 1
        fi
        sleep 0.1
    done
}
boot() {  # LOG PATTERN: the console of the boot that just started, until PATTERN
    # (a PATTERN that ends where the awaited line ends: the console is cut
    # as soon as it matches)
    j qemu console pipe --no-input -o "$1" & console=$!
    wait_for "$1" "$2" BOOT_TIMEOUT
    kill "$console"; wait "$console" || true
}
echo "== power off, power on"
j qemu power off
j qemu power on
boot boot-1.log "jumpstarter-guest ready"
echo "== flash while on"
if j qemu flasher flash rootfs.img > refused.log 2>&1; then echo "flash while on succeeded"; exit 1; fi
echo "== power off, flash"
j qemu power off
j qemu flasher flash rootfs.img
echo "== dump"
j qemu flasher dump disk.img
echo "== power on"
j qemu power on
boot boot-2.log 'booted from its disk:.* machine="[^"]*"'
echo "== power cycle"
j qemu power cycle --wait 1
boot boot-3.log 'booted from its disk:.* machine="[^"]*"'
echo "== done"
""".replace("BOOT_TIMEOUT", str(BOOT_TIMEOUT))


def lessee_shell(config, home, workdir):
    env = {**os.environ, "HOME": str(home), "JMP_CLIENT_CONFIG_HOME": str(home), "NO_COLOR": "1"}
    return subprocess.run(
        [JMP, "shell", "--client-config", str(config), "--selector", f"board={BOARD}",
         "--duration", "30m", "--acquisition-timeout", "300", "--", "sh", "-c", SCRIPT],
        env=env, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=1500)


def test_a_lessee_powers_flashes_and_watches_the_console_of_a_lab_host_target(
        api, namespace, standin, operator, lab_hosts, tmp_path):
    custom = client.CustomObjectsApi(api)
    client.CoreV1Api(api).create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="lab-ssh"), data=lab_hosts.secret_data()))
    parameters = lab_hosts.parameters({"lab3": 1})
    parameters["resources"] = {"cpu": CPUS, "memory": f"{MEMORY_MIB}Mi", "storage": f"{DISK_MIB}Mi"}
    parameters["machineType"] = "pc"
    make_class(custom, namespace, name="lab", parameters=parameters, provisioner=PROVISIONER,
               credentialsSecretRef={"name": "lab-ssh"})
    make_set(custom, namespace, board=BOARD, virtualTargetClassName="lab", minReplicas=1,
             minAvailableReplicas=0, maxReplicas=1)
    lab = Lab(standin, lab_hosts)
    operator(provisioners=(PROVISIONER,))
    wait_for(lambda: "pool-0" in live_exporters(standin), timeout=120, message="pool-0 made")
    standin.wait_online("pool-0", timeout=240)
    assert lab.running("pool-0", "lab3")
    instance = lab_hosts.instance_dir("lab3", namespace, "pool-0")
    qemu_pid = lab_hosts.service_pid("lab3", namespace, "pool-0", "vm")
    assert qemu_pid

    make_client(standin, USER)
    config = standin.grpc.write_client_config(tmp_path / "client.yaml", USER)
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copyfile(GUEST / "rootfs.img", workdir / "rootfs.img")

    outcome = {}
    shell = threading.Thread(target=lambda: outcome.update(result=lessee_shell(config, tmp_path, workdir)),
                             daemon=True)
    shell.start()
    # The flashed image boots in the provisioner's QEMU, the process that ran
    # before the lease (its serial log, its pid): the driver starts none.
    wait_for(lambda: "booted from its disk" in read(instance / "serial.log") or not shell.is_alive(),
             timeout=1200, message="the flashed image booting in the instance's QEMU")
    assert lab_hosts.service_pid("lab3", namespace, "pool-0", "vm") == qemu_pid
    shell.join(timeout=1500)
    result = outcome["result"]
    exporter_log = instance / "exporter" / "log"
    assert result.returncode == 0, (
        result.stdout[-4000:] + result.stderr[-4000:]
        + (exporter_log.read_text()[-4000:] if exporter_log.exists() else ""))
    # The script's steps all ran.
    assert "== done" in result.stdout, result.stdout

    # Power on booted the guest the class describes, from its (blank) disk's
    # absence of a root filesystem: the initramfs.
    assert "jumpstarter-guest ready" in (workdir / "boot-1.log").read_text()
    # Flashing needs the target off, and says so.
    assert "power it off first" in (workdir / "refused.log").read_text()
    # The flashed image booted, twice (power on, power cycle), on the
    # hardware the class's parameters give.
    for log in ("boot-2.log", "boot-3.log"):
        text = (workdir / log).read_text()
        line = text.split("booted from its disk:", 1)[1].splitlines()[0]
        facts = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
        assert int(facts["cpus"]) == CPUS, facts
        assert 0.95 * MEMORY_MIB * 1024 < int(facts["memory_kib"]) <= MEMORY_MIB * 1024, facts
        assert int(facts["disk_bytes"]) == DISK_MIB * 2**20, facts
        assert "i440FX" in facts["machine"], facts
        # Each boot's console starts at that boot: nothing of the first one.
        assert "jumpstarter-guest ready" not in text
    # Once flashed, the disk held the image, then zeros up to the class's
    # storage size (dumped before the guest mounted it).
    image = (workdir / "rootfs.img").read_bytes()
    disk = (workdir / "disk.img").read_bytes()
    assert len(disk) == DISK_MIB * 2**20
    assert disk[:len(image)] == image
    assert disk[len(image):].count(0) == len(disk) - len(image)


def read(path):
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def test_a_pod_targets_exporter_config_drives_the_runtime_containers_qemu(api, namespace, standin, operator):
    """qemu.jumpstarter.dev on the bed: kwok runs no containers, so the Pod's
    ExporterConfig is checked as the operator wrote it: jumpstarter's own
    model builds the virtual QEMU driver from it, and its run directory,
    sockets and disk node are those of the runtime container's QEMU, in the
    volume both containers mount."""
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    parameters = {"arch": "x86_64", "resources": {"cpu": 1, "memory": "256Mi", "storage": "1Gi"}}
    make_class(custom, namespace, parameters=parameters)
    make_set(custom, namespace, minReplicas=1, maxReplicas=1, minAvailableReplicas=0)
    operator()
    pod = wait_for(lambda: next((p for p in standin.pods() if p.metadata.name == "pool-0"), None),
                   timeout=120, message="the Pod of pool-0")
    secret = core.read_namespaced_secret("pool-0-config", namespace)
    rendered = yaml.safe_load(base64.b64decode(secret.data["pool-0.yaml"]))
    entry = rendered["export"]["qemu"]
    assert entry["type"] == "jumpstarter_driver_virtual_qemu.driver.VirtualQemu"
    driver = ExporterConfigV1Alpha1.model_validate(rendered).export["qemu"].instantiate()
    assert isinstance(driver, VirtualQemu)
    assert sorted(driver.children) == ["console", "flasher", "power"]

    containers = {c.name: c for c in pod.spec.containers + (pod.spec.init_containers or [])}
    runtime = containers["qemu"]
    exporter = next(c for c in containers.values() if c.command and "run" in c.command
                    and "--exporter-config" in c.command)
    for container in (runtime, exporter):
        assert any(m.mount_path == driver.run_dir and m.name == "run" for m in container.volume_mounts)
    argv = runtime.command
    assert argv[argv.index("-qmp") + 1].startswith(f"unix:{driver.path(driver.qmp_socket)},")
    chardev = argv[argv.index("-chardev") + 1]
    assert f"path={driver.path(driver.serial_socket)}," in chardev
    assert chardev.endswith(f"logfile={driver.path(driver.serial_log)}")
    assert f"node-name={driver.disk_node}," in argv[argv.index("-blockdev") + 1]
