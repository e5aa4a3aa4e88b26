"""A tenant's disk image that is more than data: a qcow2 whose header names
another file of the host or node (a backing file, an external data file), as
qemu-img writes them. The fetch refuses it before it is linked into any
instance, on the node (the Pod's ``images`` init container, run for real)
and on a lab host (``fetch_all``, as ``baremetal_instances`` calls it); and
QEMU, given such a base by any other way, opens the base alone: the guest,
booted for real, reads none of the named file.
"""

from __future__ import annotations

import subprocess

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import argv as qemu_argv
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)
from image_servers import ImageServer, instance_pod, run_images_container
from qemu_vm import GUEST_BANNER, SerialConsole, guest_parameters, running_vm

LOCAL = "127.0.0.1"
# What another tenant's exporter.yaml holds, at the start of a file.
SECRET = b"token: other-tenants-exporter-token\n"


@pytest.fixture
def server(tmp_path):
    served = ImageServer(tmp_path / "served", address=LOCAL)
    yield served
    served.close()


def qemu_img(*args):
    subprocess.run(["qemu-img", *args], check=True, capture_output=True)


def secret_file(tmp_path):
    secret = tmp_path / "other-namespace.pool-0" / "exporter.yaml"
    secret.parent.mkdir()
    secret.write_bytes(SECRET + b"\0" * (1 << 20))
    return secret


def crafted(tmp_path, how):
    """A qcow2 image that makes QEMU open ``secret_file`` when it opens it."""
    secret = secret_file(tmp_path)
    image = tmp_path / f"{how}.qcow2"
    if how == "backing":
        qemu_img("create", "-q", "-f", "qcow2", "-b", str(secret), "-F", "raw", str(image))
    else:
        qemu_img("create", "-q", "-f", "qcow2", "-o", f"data_file={secret},data_file_raw=on",
                 str(image), "1M")
    return image


@pytest.mark.parametrize(("how", "named"), [
    ("backing", "the qcow2 image names a backing file"),
    ("data_file", "the qcow2 image uses an external data file"),
])
def test_a_fetched_qcow2_that_names_another_file_is_refused_on_node_and_lab_host(server, tmp_path,
                                                                                 how, named):
    url, digest = server.add(f"tenant/{how}.qcow2", crafted(tmp_path, how))
    parameters = {"resources": {"memory": "128Mi"}, "disk": {"url": url, "digest": digest}}

    pod = instance_pod(parameters)
    images = next(c for c in pod["spec"]["initContainers"] if c["name"] == "images")
    done = run_images_container(images, tmp_path / "node-cache", tmp_path / "pod-run")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"ImageInvalid: parameters.disk.url {url}: {named}; an image must be standalone")
    assert not (tmp_path / "pod-run" / "disk.base").exists()

    run_dir = tmp_path / "instance"
    run_dir.mkdir()
    files = qemu_argv.runtime_files(parameters, str(run_dir))
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch_all(files, str(tmp_path / "host-cache"))
    assert raised.value.reason == image_fetch.REASON_INVALID
    assert named in str(raised.value) and "parameters.disk.url" in str(raised.value)
    assert not (run_dir / "disk.base").exists()


def test_the_same_image_converted_to_a_standalone_one_is_fetched(server, tmp_path):
    standalone = tmp_path / "standalone.qcow2"
    qemu_img("convert", "-f", "qcow2", "-O", "qcow2", str(crafted(tmp_path, "backing")), str(standalone))
    url, digest = server.add("tenant/standalone.qcow2", standalone)
    run_dir = tmp_path / "instance"
    run_dir.mkdir()
    files = qemu_argv.runtime_files({"disk": {"url": url, "digest": digest}}, str(run_dir))
    assert image_fetch.fetch_all(files, str(tmp_path / "cache")) == ["disk"]
    assert (run_dir / "disk.base").read_bytes() == standalone.read_bytes()


def guest_reads_its_disk(tmp_path, base):
    """The first bytes of /dev/vda as the guest of ``base`` reads them, booted for real."""
    parameters = guest_parameters(disk={"path": str(base)})
    with running_vm(tmp_path / "run", name="disk-image", parameters=parameters) as vm:
        console = SerialConsole(vm.serial_socket)
        try:
            console.read_until(GUEST_BANNER)
            return console.run(f"head -c {len(SECRET) - 1} /dev/vda | grep -c other-tenant")
        finally:
            console.close()


def test_a_base_whose_header_names_another_file_gives_the_guest_nothing_of_it(tmp_path):
    # The base reaches QEMU by a class's path, which nothing fetched checks.
    assert guest_reads_its_disk(tmp_path / "named", crafted(tmp_path, "backing")) == "0"
    # The same bytes inside the base itself are what the guest reads.
    copy = tmp_path / "copy"
    copy.mkdir()
    copied = copy / "copied.qcow2"
    qemu_img("convert", "-f", "raw", "-O", "qcow2", str(secret_file(copy)), str(copied))
    assert guest_reads_its_disk(copy, copied) == "1"
