"""The test guest as a class of QEMU Pods on the real node
(tests/testbed/node.py), its kernel and initramfs served by the node's
image server."""

from __future__ import annotations

from pool_helpers import make_class
from qemu_vm import GUEST_DIR, guest_parameters
from testbed.node import NODE_LABEL, TAINT_KEY

BOARD = "incluster-x86"


def guest_class(pool, name):
    """A class whose guest is the test guest, fetched from the node's address, on the real node."""
    kernel_url, kernel_digest = pool.images.add("vmlinuz", GUEST_DIR / "vmlinuz")
    initrd_url, initrd_digest = pool.images.add("initramfs.cpio.gz", GUEST_DIR / "initramfs.cpio.gz")
    parameters = guest_parameters(kvm=False, kernel={"url": kernel_url, "digest": kernel_digest},
                                  initrd={"url": initrd_url, "digest": initrd_digest})
    make_class(pool.custom, pool.namespace, name=name, parameters=parameters, scheduling={
        "nodeSelector": {NODE_LABEL: "true"},
        "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
    })
