"""32-bit arm guests where the provisioners run them: the command line
``qemu_argv()`` renders for ``arch: arm`` starts Debian's qemu-system-arm
(the package the runtime image and lab_bootstrap install) and the guest
runs the firmware it is given (``parameters.firmware``: a few A32
instructions of the test's own that write a line to the virt machine's
UART); on the bed, an arm class and set are admitted and make an instance
whose runtime runs qemu-system-arm, and an arm guest given nothing to boot
is refused naming the field."""

import struct

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import SERIAL_LOG
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.qmp import vm_status
from jumpstarter_standin import wait_for
from kubernetes import client
from pool_helpers import GROUP, condition, make_class, make_set, settle_pool
from qemu_vm import running_vm

pytestmark = pytest.mark.slow

BANNER = b"jumpstarter arm32 firmware\n"
# virt's first UART (PL011) on a 32-bit arm guest.
UART = 0x09000000


def firmware_blob():
    """A32 code run from address 0: movw/movt r0 = UART; for each byte of
    BANNER, mov r1, #byte; str r1, [r0]; then b . (spins)."""
    words = [0xE3000000 | (UART & 0xF000) << 4 | (UART & 0xFFF),
             0xE3400000 | (UART >> 28) << 16 | (UART >> 16 & 0xFFF)]
    for byte in BANNER:
        words += [0xE3A01000 | byte, 0xE5801000]
    words.append(0xEAFFFFFE)
    return struct.pack(f"<{len(words)}I", *words)


def arm_parameters(firmware):
    return {"arch": "arm", "resources": {"cpu": 1, "memory": "128Mi"}, "firmware": {"path": str(firmware)}}


def test_an_arm_guest_runs_the_firmware_it_is_given_on_a_cortex_a15(tmp_path):
    firmware = tmp_path / "armv7.bin"
    firmware.write_bytes(firmware_blob())
    with running_vm(tmp_path / "run", name="armv7", parameters=arm_parameters(firmware)) as vm:
        assert vm.argv[0] == "qemu-system-arm" and vm.argv[vm.argv.index("-cpu") + 1] == "cortex-a15"
        assert vm.argv[vm.argv.index("-bios") + 1] == str(firmware)
        log = tmp_path / "run" / SERIAL_LOG
        wait_for(lambda: BANNER in log.read_bytes(), timeout=60, message="the firmware's line on the UART")
        assert vm_status(vm.qmp_socket, timeout=20)["status"] == "running"


def commands(pod):
    return [" ".join(c.command or []) for c in (pod.spec.init_containers or []) + pod.spec.containers]


def test_an_arm_set_is_admitted_and_runs_qemu_system_arm(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    # A path on the node: the kwok Pods run nothing, the class names the file.
    make_class(custom, namespace, name="armv7", parameters=arm_parameters("/var/lib/images/armv7.bin"))
    make_set(custom, namespace, name="armv7", board="armv7", virtualTargetClassName="armv7",
             minAvailableReplicas=1, maxReplicas=1)
    make_class(custom, namespace, name="armv7-bare", parameters={"arch": "arm"})
    make_set(custom, namespace, name="armv7-bare", board="armv7-bare", virtualTargetClassName="armv7-bare",
             minAvailableReplicas=1, maxReplicas=1)
    operator()
    settle_pool(standin, 1, custom, namespace, name="armv7", timeout=120)
    (exporter,) = standin.exporters("virtualtarget.jumpstarter.dev/exporterset=armv7")
    pod = client.CoreV1Api(api).read_namespaced_pod(exporter["metadata"]["name"], namespace)
    (qemu,) = [command for command in commands(pod) if "qemu-system-arm " in command]
    assert "-cpu cortex-a15" in qemu and "-machine virt,accel=" in qemu and "-bios /var/lib/images/armv7.bin" in qemu

    degraded = wait_for(lambda: condition(custom.get_namespaced_custom_object(
        *GROUP, namespace, "exportersets", "armv7-bare"), "Degraded"), timeout=60, message="armv7-bare planned")
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidParameters"), degraded
    assert "parameters.kernel: an arm guest needs a kernel or firmware" in degraded["message"]
    # Nothing is made for it (its dormant Exporter, which only lets leases match, aside).
    assert [e["metadata"]["name"] for e in standin.exporters("virtualtarget.jumpstarter.dev/exporterset=armv7-bare")
            if "dormant" not in e["metadata"]["name"]] == []
