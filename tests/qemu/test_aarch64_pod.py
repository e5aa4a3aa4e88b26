"""An aarch64 target in a Pod on the real node, end to end.

The class boots the arm64 build of the test guest (scripts/guest-image) on
the virt machine under TCG, in the runtime image's qemu-system-aarch64. A
lessee, under a real ``jmp shell`` that leases by label, powers it off,
flashes an image onto its disk through the exporter's flasher, powers it on,
waits for its banner on the console and has the guest read the image back
(the lessee program and operator fixture of test_incluster_pool.py, on the
session's real node that file also uses: one instance).

Select with ``-m realnode`` (root; ``scripts/realnode build`` installs what
it needs).
"""

from __future__ import annotations

import time

import pytest
from jumpstarter_standin import wait_for
from pool_helpers import make_class, make_set
from qemu_vm import AARCH64_GUEST_DIR
from realnode_guest import BOARD
from test_incluster_pool import MARK, make_client, pool, run_lessee  # noqa: F401 (fixtures)
from testbed.node import NODE_LABEL, TAINT_KEY

pytestmark = [pytest.mark.realnode, pytest.mark.testbed, pytest.mark.slow]


def test_a_lessee_powers_flashes_and_reads_an_aarch64_guest_in_a_pod(pool):  # noqa: F811 (the fixture)
    kernel_url, kernel_digest = pool.images.add("arm64-vmlinuz", AARCH64_GUEST_DIR / "vmlinuz")
    initrd_url, initrd_digest = pool.images.add("arm64-initramfs", AARCH64_GUEST_DIR / "initramfs.cpio.gz")
    # JEP-0014's rpi4 class gives the machine type alone: virt is aarch64.
    parameters = {"machineType": "virt", "resources": {"cpu": 1, "memory": "256Mi", "storage": "32Mi"},
                  "kernel": {"url": kernel_url, "digest": kernel_digest},
                  "initrd": {"url": initrd_url, "digest": initrd_digest}}
    make_class(pool.custom, pool.namespace, name="arm64", parameters=parameters, scheduling={
        "nodeSelector": {NODE_LABEL: "true"},
        "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
    })
    created = time.monotonic()
    make_set(pool.custom, pool.namespace, board=BOARD, virtualTargetClassName="arm64",
             minAvailableReplicas=1, maxReplicas=1)
    config = make_client(pool, "arm64-user")
    name = wait_for(lambda: next(iter(pool.live_exporters("pool")), None), timeout=60, interval=0.1,
                    message="the set's Exporter")
    pool.standin.wait_online(name, timeout=240)
    online = time.monotonic() - created
    (qemu,) = pool.core.read_namespaced_pod(name, pool.namespace).spec.containers
    assert qemu.command[4] == "qemu-system-aarch64", qemu.command
    assert "virt,accel=tcg" in qemu.command and "cortex-a57" in qemu.command

    said = run_lessee(pool, config, "arm64", "flash", MARK)
    assert "lessee: flashed" in said and "lessee: the disk holds the mark: 1" in said, said
    print(f"aarch64 set created -> Exporter Online in {online:.1f} s; "
          f"lessee done {time.monotonic() - created - online:.1f} s later")
