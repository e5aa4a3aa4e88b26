"""Images given by url on real lab hosts (sshd in network namespaces, real QEMU
under TCG, real ``jmp run``): the hosts fetch the test guest's kernel and
initramfs from a real HTTP server and from a real OCI registry on this
machine (10.213.0.1, where the hosts reach it), verify their digests into
the host's image cache and boot from it; a wrong digest boots nothing and is
a ReplicaFailure on the ExporterSet."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from image_servers import ImageServer, Registry, free_port, sha256
from jumpstarter_standin import wait_for
from kubernetes import client
from lab_beds import PROVISIONER, Bed
from labhosts import GUEST
from pool_helpers import condition, get_set, make_class, make_set
from test_baremetal_role import phases

WRONG = "sha256:" + "0" * 64
HOST = "lab1"


@pytest.fixture
def lab(lab_hosts):
    # The cache outlives a session on the hosts: each test starts from an empty one.
    for host in lab_hosts.hosts:
        shutil.rmtree(lab_hosts.work_dir(host) / "image-cache", ignore_errors=True)
    return lab_hosts


@pytest.fixture
def server(tmp_path):
    served = ImageServer(tmp_path / "served")
    yield served
    served.close()


def guest_images(server):
    """(kernel, initrd) image refs of the test guest served over HTTP."""
    kernel_url, kernel_digest = server.add("guest/vmlinuz", GUEST / "vmlinuz")
    initrd_url, initrd_digest = server.add("guest/initramfs.cpio.gz", GUEST / "initramfs.cpio.gz")
    return {"url": kernel_url, "digest": kernel_digest}, {"url": initrd_url, "digest": initrd_digest}


def provision_until_running(bed, names):
    """Provision entry point runs until it reports every one of ``names`` (all
    on HOST) Running; between runs, until the host's files and QMP say they
    run (no playbook run per check)."""
    def running():
        results, _ = bed.run("provision", names)
        return results if set(phases(results).values()) == {"Running"} and set(phases(results)) == set(names) \
            else None

    if running() is None:
        bed.wait_up(dict.fromkeys(names, HOST), names, timeout=120)
        wait_for(running, timeout=60, interval=1, message=f"{names} running")


def qemu_running_for(namespace, name):
    """Pids of QEMU processes started for the instance ``name`` of ``namespace``
    (its ``-name`` argument and its instance directory: other tests may run a
    ``pool-0`` of their own at the same time)."""
    pids = []
    instance = f"/instances/{namespace}.{name}/".encode()
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"qemu-system-x86_64") and b"-name" in argv:
            if argv[argv.index(b"-name") + 1] == name.encode() and any(instance in arg for arg in argv):
                pids.append(int(proc.name))
    return pids


def test_images_by_url_are_verified_cached_and_shared_on_the_host(testbed, namespace, standin, lab,
                                                                  server, tmp_path):
    bed = Bed(testbed, namespace, standin, lab, tmp_path)
    kernel, initrd = guest_images(server)
    parameters = lab.parameters({HOST: 6})  # removed instances keep their Exporters
    parameters.update(kernel=kernel, initrd=initrd)
    bed.vclass["spec"]["parameters"] = parameters
    bed.create_exporters(["pool-0", "pool-1"])

    # Two instances on one host: the images are fetched once, both boot from the cache.
    provision_until_running(bed, ["pool-0", "pool-1"])
    assert server.gets["/guest/vmlinuz"] == 1
    assert server.gets["/guest/initramfs.cpio.gz"] == 1
    cache = lab.work_dir(HOST) / "image-cache" / "sha256"
    for name in ("pool-0", "pool-1"):
        link = bed.instance_dir(HOST, name) / "kernel"
        assert link.readlink() == Path("/var/lib/jumpstarter-virtual/image-cache/sha256") / \
            kernel["digest"].split(":")[1]
    assert sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock")) == sorted(
        d["digest"].split(":")[1] for d in (kernel, initrd))
    bed.run("remove", ["pool-0", "pool-1"])

    # A wrong digest: the image is refused, QEMU and the exporter never start.
    parameters["kernel"] = {"url": kernel["url"], "digest": WRONG}
    bed.create_exporters(["pool-2"])
    results, _ = bed.run("provision", ["pool-2"])
    state = results[HOST]["instances"]["pool-2"]
    assert (state["phase"], state["reason"]) == ("Failed", "ImageDigestMismatch")
    assert state["message"] == f"{kernel['url']}: digest mismatch: its content does not have the digest {WRONG}"
    directory = bed.instance_dir(HOST, "pool-2")
    for service in ("vm", "exporter"):
        assert not (directory / service / "supervise.pid").exists()
        assert not (directory / service / "pid").exists()
    assert not (directory / "kernel").exists()
    assert qemu_running_for(namespace, "pool-2") == []
    assert server.gets["/guest/vmlinuz"] == 2
    # It stays refused without fetching again until the instance is replaced.
    again, _ = bed.run("provision", ["pool-2"])
    assert again[HOST]["instances"]["pool-2"]["reason"] == "ImageDigestMismatch"
    assert server.gets["/guest/vmlinuz"] == 2
    bed.run("remove", ["pool-2"])

    # An unreachable url is named.
    closed = f"http://10.213.0.1:{free_port()}/vmlinuz"
    parameters["kernel"] = {"url": closed, "digest": kernel["digest"]}
    shutil.rmtree(cache)
    bed.create_exporters(["pool-3"])
    results, _ = bed.run("provision", ["pool-3"])
    state = results[HOST]["instances"]["pool-3"]
    assert (state["phase"], state["reason"]) == ("Failed", "ImageUnavailable")
    assert state["message"] == f"{closed}: cannot be fetched"
    assert qemu_running_for(namespace, "pool-3") == []
    bed.run("remove", ["pool-3"])


def test_images_from_an_oci_registry_boot(testbed, namespace, standin, lab, tmp_path):
    registry = Registry(tmp_path / "registry")
    try:
        bed = Bed(testbed, namespace, standin, lab, tmp_path)
        kernel_digest, initrd_digest = sha256(GUEST / "vmlinuz"), sha256(GUEST / "initramfs.cpio.gz")
        parameters = lab.parameters({HOST: 2})
        parameters.update(
            kernel={"url": registry.push("guest/vmlinuz:v1", GUEST / "vmlinuz"),
                    "digest": kernel_digest, "plainHTTP": True},
            # JEP-0014's form of a reference, without a scheme.
            initrd={"url": registry.push("guest/initramfs:v1", GUEST / "initramfs.cpio.gz")[6:],
                    "digest": initrd_digest, "plainHTTP": True},
        )
        bed.vclass["spec"]["parameters"] = parameters
        bed.create_exporters(["pool-0", "pool-1"])

        provision_until_running(bed, ["pool-0", "pool-1"])
        wait_for(lambda: registry.blob_gets(kernel_digest) == 1, timeout=10,
                 message="the kernel blob pulled once")
        assert registry.blob_gets(initrd_digest) == 1
        bed.run("remove", ["pool-0", "pool-1"])
    finally:
        registry.close()


def test_wrong_digest_is_a_replica_failure_on_the_set(api, namespace, standin, operator, lab, server):
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="lab-ssh"), data=lab.secret_data()))
    kernel, initrd = guest_images(server)
    parameters = lab.parameters({HOST: 2})
    parameters.update(kernel={"url": kernel["url"], "digest": WRONG}, initrd=initrd)
    make_class(custom, namespace, name="lab", parameters=parameters, provisioner=PROVISIONER,
               credentialsSecretRef={"name": "lab-ssh"})
    make_set(custom, namespace, board="lab-x86", virtualTargetClassName="lab", minAvailableReplicas=1)
    operator(provisioners=(PROVISIONER,))

    expected = f"{kernel['url']}: digest mismatch: its content does not have the digest {WRONG}"
    degraded = wait_for(lambda: (c := condition(get_set(custom, namespace), "Degraded"))
                        and c["reason"] == "ReplicaFailure" and c, timeout=180, interval=0.5,
                        message="Degraded/ReplicaFailure")
    assert degraded["status"] == "True"
    assert expected in degraded["message"], degraded
    warnings = wait_for(lambda: [e for e in core.list_namespaced_event(namespace).items
                                 if e.type == "Warning" and expected in (e.message or "")],
                        timeout=30, message="a Warning event naming the url and digest")
    assert {e.reason for e in warnings} & {"ReplicaFailed", "ReplicaFailure"}, warnings
    # Nothing booted: no QEMU for any of the set's Exporters, and the wrong image stayed out of the cache.
    assert not any(p for name in [e["metadata"]["name"] for e in standin.exporters()]
                   for p in qemu_running_for(namespace, name))
    assert not (lab.work_dir(HOST) / "image-cache" / "sha256" / WRONG.split(":")[1]).exists()
    # One refused instance, then the pool backs off instead of fetching again and again.
    assert server.gets["/guest/vmlinuz"] == 1
