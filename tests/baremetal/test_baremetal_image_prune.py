"""A lab host's image cache kept within the class's quota (real sshd lab host,
real QEMU, the qemu_baremetal role as the operator runs it): after a run's
fetches the least recently used digests go until the cache fits, and a digest
a running instance links to stays however old it is."""

from __future__ import annotations

import hashlib
import os
import shutil
import time

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)
from image_servers import ImageServer
from jumpstarter_standin import wait_for
from lab_beds import Bed
from labhosts import GUEST
from test_baremetal_images import HOST, guest_images

HOUR = 3600


def age(path, seconds):
    then = time.time() - seconds
    os.utime(path, (then, then))


def plant(cache, content, seconds):
    """A cache entry for ``content`` last used ``seconds`` ago; its hex name."""
    name = hashlib.sha256(content).hexdigest()
    (cache / name).write_bytes(content)
    age(cache / name, seconds)
    return name


def test_a_cache_over_its_quota_is_pruned_to_it_and_an_image_in_use_survives(
        testbed, namespace, standin, lab_hosts, tmp_path):
    shutil.rmtree(lab_hosts.work_dir(HOST) / "image-cache", ignore_errors=True)
    server = ImageServer(tmp_path / "served")
    try:
        bed = Bed(testbed, namespace, standin, lab_hosts, tmp_path)
        kernel, initrd = guest_images(server)
        # pool-1's initramfs differs from pool-0's (trailing zeros the kernel skips).
        padded = tmp_path / "initramfs-padded.cpio.gz"
        padded.write_bytes((GUEST / "initramfs.cpio.gz").read_bytes() + bytes(512))
        initrd_url, initrd_digest = server.add("guest/initramfs-padded.cpio.gz", padded)
        parameters = lab_hosts.parameters({HOST: 2})
        parameters.update(kernel=kernel, initrd=initrd)
        bed.vclass["spec"]["parameters"] = parameters
        bed.create_exporters(["pool-0"])
        bed.run("provision", ["pool-0"])
        wait_for(lambda: lab_hosts.service_pid(HOST, namespace, "pool-0", "vm"), message="pool-0's QEMU")

        # pool-0's images are the oldest of the cache, older than two others no instance uses.
        cache = lab_hosts.work_dir(HOST) / "image-cache" / "sha256"
        hexes = {key: image["digest"].split(":")[1] for key, image in (("kernel", kernel), ("initrd", initrd))}
        for name in hexes.values():
            age(cache / name, 4 * HOUR)
        oldest = plant(cache, b"a" * 4096, 3 * HOUR)
        older = plant(cache, b"b" * 4096, 2 * HOUR)
        quota = sum((cache / name).stat().st_size for name in hexes.values()) + padded.stat().st_size + 4096
        bed.vclass["metadata"]["annotations"] = {image_fetch.ANNOTATION_CACHE_QUOTA: str(quota)}

        # pool-1 shares the kernel and brings an initramfs of its own: the cache
        # goes over the quota and comes back to it.
        parameters["initrd"] = {"url": initrd_url, "digest": initrd_digest}
        bed.create_exporters(["pool-1"])
        bed.run("provision", ["pool-1"])

        left = {path.name: path.stat() for path in cache.iterdir() if not path.name.endswith(".lock")}
        assert sorted(left) == sorted([hexes["kernel"], hexes["initrd"], initrd_digest.split(":")[1], older])
        assert oldest not in left
        assert sum(info.st_size for info in left.values()) <= quota
        # pool-1's start marked the kernel used; pool-0's initramfs is as old as it was.
        assert time.time() - left[hexes["kernel"]].st_mtime < HOUR
        assert time.time() - left[hexes["initrd"]].st_mtime > 3 * HOUR
        assert lab_hosts.service_pid(HOST, namespace, "pool-0", "vm")
        assert (bed.instance_dir(HOST, "pool-0") / "initrd").readlink().name == hexes["initrd"]
    finally:
        server.close()
