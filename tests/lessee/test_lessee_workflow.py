"""What a lessee's ``j`` commands drive, for the Pod provisioner.

For qemu.jumpstarter.dev, whose Pods kwok runs without containers, the
ExporterConfig the operator writes is checked against the Pod it runs in.
The lessee's walk-through on a lab host target (power, console, flash, dump
with a real ``jmp shell``) runs in test_end_to_end_lessee.py, on the second
lease of the set it grows from zero.
"""

from __future__ import annotations

import base64

import yaml
from jumpstarter.config.exporter import ExporterConfigV1Alpha1
from jumpstarter_driver_virtual_qemu.driver import VirtualQemu
from jumpstarter_standin import wait_for
from kubernetes import client
from pool_helpers import make_class, make_set


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
