"""image_fetch against a real HTTP server and a real OCI registry: the digest
is verified before anything lands in the cache, the cache is keyed by digest
and shared (one download however many instances ask at once), failures name
the url and both digests; and the Pod's ``images`` init container runs the
same file as a script."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import objects as k8s_objects
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import argv as qemu_argv
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)
from image_servers import ImageServer, Registry, free_port, instance_pod, run_images_container
from kubernetes import client
from pool_helpers import QEMU_PARAMETERS, make_class, make_set, settle_pool

KERNEL = os.urandom(256 * 1024)
OTHER = b"not the image the class names"
WRONG = "sha256:" + "0" * 64
# Nothing here runs on the lab hosts: loopback, which every machine has.
LOCAL = "127.0.0.1"


@pytest.fixture
def server(tmp_path):
    served = ImageServer(tmp_path / "served", address=LOCAL)
    yield served
    served.close()


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    running = Registry(tmp_path_factory.mktemp("registry"), address=LOCAL)
    yield running
    running.close()


def leftovers(cache):
    return sorted(name for _, _, names in os.walk(cache) for name in names
                  if not name.endswith(".lock") and len(name) != 64)


def test_http_image_is_verified_cached_by_digest_and_fetched_once(server, tmp_path):
    url, digest = server.add("guest/vmlinuz", KERNEL)
    cache = tmp_path / "cache"
    path, downloaded = image_fetch.fetch(url, digest, str(cache))
    assert downloaded
    assert path == str(cache / "sha256" / digest.split(":")[1])
    assert open(path, "rb").read() == KERNEL
    assert oct(os.stat(path).st_mode & 0o777) == "0o444"
    again, downloaded = image_fetch.fetch(url, digest, str(cache))
    assert (again, downloaded) == (path, False)
    assert server.gets["/guest/vmlinuz"] == 1
    assert leftovers(cache) == []


def test_concurrent_fetches_of_one_digest_download_once(server, tmp_path):
    url, digest = server.add("guest/big", os.urandom(8 * 2**20))
    cache = str(tmp_path / "cache")
    start = threading.Barrier(4)
    results = []

    def instance():
        start.wait()
        results.append(image_fetch.fetch(url, digest, cache))

    threads = [threading.Thread(target=instance) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == 4 and len({path for path, _ in results}) == 1
    assert sorted(downloaded for _, downloaded in results) == [False, False, False, True]
    assert server.gets["/guest/big"] == 1


def test_digest_mismatch_names_the_url_and_its_digest_only_and_caches_nothing(server, tmp_path):
    url, actual = server.add("guest/vmlinuz", OTHER)
    cache = tmp_path / "cache"
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch(url, WRONG, str(cache))
    error = raised.value
    assert error.reason == image_fetch.REASON_DIGEST_MISMATCH
    # What the url served stays out of the message (the set's status): only its detail has it.
    assert str(error) == f"{url}: digest mismatch: its content does not have the digest {WRONG}"
    assert (error.got, error.detail) == (actual, f"got {actual}")
    assert not (cache / "sha256" / WRONG.split(":")[1]).exists()
    assert leftovers(cache) == []


def test_unreachable_and_missing_urls_name_the_url(server, tmp_path):
    closed = f"http://{LOCAL}:{free_port(LOCAL)}/vmlinuz"
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch(closed, WRONG, str(tmp_path), timeout=5)
    assert raised.value.reason == image_fetch.REASON_UNAVAILABLE
    assert str(raised.value) == f"{closed}: cannot be fetched"
    assert raised.value.detail
    missing = f"{server.url}/nothing"
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch(missing, WRONG, str(tmp_path))
    assert str(raised.value) == f"{missing}: cannot be fetched"
    assert raised.value.detail == "HTTP 404 File not found"


@pytest.mark.parametrize("digest", [None, "sha256:abc...", "md5:" + "0" * 32])
def test_an_image_url_needs_a_sha256_digest(digest, tmp_path):
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch("https://images.example.com/vmlinuz", digest, str(tmp_path))
    assert raised.value.reason == image_fetch.REASON_INVALID
    assert "digest of https://images.example.com/vmlinuz" in str(raised.value)


def test_oci_artifact_is_pulled_from_a_real_registry(registry, tmp_path):
    image = tmp_path / "vmlinuz"
    image.write_bytes(KERNEL)
    url = registry.push("guest/kernel:v1", image)
    digest = "sha256:" + hashlib.sha256(KERNEL).hexdigest()
    cache = str(tmp_path / "cache")
    path, downloaded = image_fetch.fetch(url, digest, cache, plain_http=True)
    assert downloaded and open(path, "rb").read() == KERNEL
    assert registry.blob_gets(digest) == 1
    # JEP-0014's form, without a scheme, is the same reference.
    assert image_fetch.fetch(url[len("oci://"):], digest, cache, plain_http=True) == (path, False)
    assert registry.blob_gets(digest) == 1


def test_oci_artifact_with_another_digest_is_refused(registry, tmp_path):
    image = tmp_path / "other"
    image.write_bytes(OTHER)
    url = registry.push("guest/kernel:wrong", image)
    actual = "sha256:" + hashlib.sha256(OTHER).hexdigest()
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch(url, WRONG, str(tmp_path / "cache"), plain_http=True)
    assert str(raised.value) == f"{url}: digest mismatch: its content does not have the digest {WRONG}"
    assert raised.value.got == actual
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch(url.replace(":wrong", ":absent"), WRONG, str(tmp_path), plain_http=True)
    assert raised.value.reason == image_fetch.REASON_UNAVAILABLE
    assert "HTTP 404" in raised.value.detail and "404" not in str(raised.value)


# -- the Pod ----------------------------------------------------------------

def test_pod_fetches_and_verifies_into_the_node_cache_before_the_disk_and_qemu(server, tmp_path):
    url, digest = server.add("guest/base.qcow2", KERNEL)
    parameters = {"resources": {"memory": "128Mi"}, "disk": {"url": url, "digest": digest, "format": "raw"}}
    spec = instance_pod(parameters)["spec"]
    init = [c["name"] for c in spec["initContainers"]]
    assert init[:2] == ["images", "disk"]
    images = spec["initContainers"][0]
    assert images["image"] == k8s_pod.DEFAULT_IMAGES["exporter"]["image"]
    assert images["terminationMessagePolicy"] == "FallbackToLogsOnError"
    volume = next(v for v in spec["volumes"] if v["name"] == "image-cache")
    assert volume["hostPath"] == {"path": k8s_pod.NODE_IMAGE_CACHE, "type": "DirectoryOrCreate"}
    # The disk's and QEMU's containers get the instance's image alone, read-only.
    own = k8s_pod.digest_mounts([{"digest": digest}])
    assert own[0]["subPath"] == f"sha256/{digest.split(':')[1]}" and own[0]["readOnly"] is True
    for container in (spec["initContainers"][1], spec["containers"][0]):
        assert [m for m in container["volumeMounts"] if m["name"] == "image-cache"] == own

    cache, run_dir = tmp_path / "node-cache", tmp_path / "run"
    run_dir.mkdir()
    for _ in range(2):  # a second Pod on the node finds the image in the cache
        done = run_images_container(images, cache, run_dir)
        assert done.returncode == 0, done.stderr
    assert server.gets["/guest/base.qcow2"] == 1
    base = run_dir / qemu_argv.FETCHED_IMAGE_NAMES["disk"]
    assert os.readlink(base) == str(cache / "sha256" / digest.split(":")[1])
    assert base.read_bytes() == KERNEL


def test_pod_with_a_wrong_digest_fails_its_init_container_naming_url_and_digest(server, tmp_path):
    url, actual = server.add("guest/vmlinuz", OTHER)
    spec = instance_pod({"resources": {"memory": "128Mi"}, "kernel": {"url": url, "digest": WRONG}})["spec"]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    done = run_images_container(spec["initContainers"][0], tmp_path / "cache", run_dir)
    assert done.returncode == 1
    assert not (run_dir / "kernel").exists()
    last_words = done.stderr.strip().splitlines()[-1]
    assert last_words == f"ImageDigestMismatch: {url}: digest mismatch: its content does not have the digest {WRONG}"
    assert actual not in done.stderr
    # What the kubelet then reports is the instance's failure, with that message.
    pod_object = {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {
        "phase": "Pending", "initContainerStatuses": [{
            "name": "images", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
            "lastState": {"terminated": {"exitCode": 1, "message": done.stderr}}}]}}
    state = k8s_objects.pod_instance_state(pod_object)
    assert (state["phase"], state["reason"]) == ("Failed", "ImageDigestMismatch")
    assert state["message"] == f"{url}: digest mismatch: its content does not have the digest {WRONG}"


def test_images_by_path_need_no_fetch_container():
    spec = instance_pod({"resources": {"memory": "128Mi"}, "kernel": {"path": "/images/vmlinuz"}})["spec"]
    assert "images" not in [c["name"] for c in spec["initContainers"]]
    assert "image-cache" not in [v["name"] for v in spec["volumes"]]


def test_the_operator_renders_the_images_init_container_that_fetches_for_real(api, namespace, standin,
                                                                             operator, server, tmp_path):
    """On the bed (kwok runs no containers): the Pod the operator makes carries the
    fetch script; run as its command, it fetches and verifies into a node cache."""
    url, digest = server.add("guest/vmlinuz", KERNEL)
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace, parameters={**QEMU_PARAMETERS, "kernel": {"url": url, "digest": digest}})
    make_set(custom, namespace, minAvailableReplicas=1)
    operator()
    settle_pool(standin, 1, custom, namespace)
    pod = api.sanitize_for_serialization(standin.pods()[0])
    init = pod["spec"]["initContainers"]
    assert init[0]["name"] == "images"
    assert init[0]["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert k8s_pod.digest_mounts([{"digest": digest}])[0] in pod["spec"]["containers"][0]["volumeMounts"]
    command = pod["spec"]["containers"][0]["command"]
    assert command[command.index("-kernel") + 1] == f"{k8s_pod.RUN_DIR}/kernel"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    done = run_images_container(init[0], tmp_path / "node-cache", run_dir)
    assert done.returncode == 0, done.stderr
    assert (run_dir / "kernel").read_bytes() == KERNEL
    assert server.gets["/guest/vmlinuz"] == 1
