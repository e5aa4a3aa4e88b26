"""A lab host honours the class's image size limit
(``virtualtarget.jumpstarter.dev/image-max-size``) as the node cache does:
the qemu_baremetal role passes what ``baremetal_targets`` reads of the class
to ``baremetal_instances`` on a real lab host, whose fetch stops past it,
keeps no partial file, caches nothing and starts nothing."""

from __future__ import annotations

import shutil

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import images
from image_servers import ImageServer
from lab_beds import Bed
from labhosts import GUEST
from test_baremetal_images import HOST, qemu_running_for


@pytest.fixture
def server(tmp_path):
    served = ImageServer(tmp_path / "served")
    yield served
    served.close()


def test_an_image_over_the_classs_size_limit_is_refused_on_the_lab_host(testbed, namespace, standin, lab_hosts,
                                                                         server, tmp_path):
    shutil.rmtree(lab_hosts.work_dir(HOST) / "image-cache", ignore_errors=True)
    bed = Bed(testbed, namespace, standin, lab_hosts, tmp_path)
    kernel_url, kernel_digest = server.add("guest/vmlinuz", GUEST / "vmlinuz")
    size = (GUEST / "vmlinuz").stat().st_size
    parameters = lab_hosts.parameters({HOST: 1})
    parameters.update(kernel={"url": kernel_url, "digest": kernel_digest})
    bed.vclass["spec"]["parameters"] = parameters
    # A byte short of the kernel (the default, 16 GiB, takes it).
    limit = size - 1
    bed.vclass["metadata"]["annotations"] = {images.ANNOTATION_MAX_SIZE: str(limit)}
    bed.create_exporters(["pool-0"])

    results, _ = bed.run("provision", ["pool-0"])
    state = results[HOST]["instances"]["pool-0"]
    assert (state["phase"], state["reason"]) == ("Failed", "ImageInvalid")
    assert state["message"].startswith(
        f"{kernel_url}: larger than the image size limit of {limit} bytes; the class sets it "
        f"({images.ANNOTATION_MAX_SIZE})"), state["message"]
    cache = lab_hosts.work_dir(HOST) / "image-cache" / "sha256"
    kept = sorted(p.name for p in cache.iterdir()) if cache.exists() else []
    assert kernel_digest.split(":")[1] not in kept and not [name for name in kept if name.endswith(".part")]
    directory = bed.instance_dir(HOST, "pool-0")
    assert not (directory / "kernel").exists() and not (directory / "vm" / "pid").exists()
    assert qemu_running_for(namespace, "pool-0") == []
    bed.run("remove", ["pool-0"])
