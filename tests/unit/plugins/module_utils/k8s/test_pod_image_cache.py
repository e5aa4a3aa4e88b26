"""The node's image cache in a rendered qemu.jumpstarter.dev Pod: only the
operator's ``images`` init container mounts it; every other container that
reads the instance's images gets its own digests alone, read-only, at the
paths the run directory's links name, whatever image it runs; and the run
directory has a sizeLimit."""

import re

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import argv as qemu_argv
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_pod import (
    RUN_DIR_HEADROOM,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.quantity import quantity_to_bytes
from hypothesis import given
from hypothesis import strategies as st

EXPORTER_SET = {"metadata": {"name": "pool", "namespace": "lab", "uid": "set-uid"},
                "spec": {"template": {"spec": {"drivers": [{"name": "qemu",
                                                            "type": "jumpstarter_driver_qemu.driver.Qemu"}]}}}}
EXPORTER = {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
            "metadata": {"name": "pool-0", "namespace": "lab", "uid": "exporter-uid"}}
KERNEL = "sha256:" + "a" * 64
INITRD = "sha256:" + "b" * 64
DISK = "sha256:" + "c" * 64
BY_URL = {"kernel": {"url": "https://images.test/vmlinuz", "digest": KERNEL},
          "initrd": {"url": "https://images.test/initrd", "digest": INITRD},
          "disk": {"url": "oci://registry.test/rootfs:1", "digest": DISK, "format": "qcow2"}}
SUB_PATH = re.compile(r"^sha256/[0-9a-f]{64}$")


def render(parameters, vclass=None, images=None, provisioner="qemu.jumpstarter.dev"):
    return k8s_pod.instance_pod(EXPORTER_SET, vclass or {"spec": {}}, EXPORTER, provisioner,
                                {"resources": {"memory": "128Mi"}, **parameters}, images)["spec"]


def containers(spec):
    return {c["name"]: c for c in spec["initContainers"] + spec["containers"]}


def cache_mounts(container):
    return [m for m in container.get("volumeMounts", []) if m["name"] == "image-cache"]


def test_only_the_images_container_mounts_the_cache_and_the_others_get_their_digests_read_only():
    spec = render(BY_URL)
    by_name = containers(spec)
    assert cache_mounts(by_name["images"]) == [{"name": "image-cache", "mountPath": k8s_pod.IMAGE_CACHE_DIR}]
    own = sorted(f"sha256/{digest.split(':')[1]}" for digest in (KERNEL, INITRD, DISK))
    for name in ("disk", "qemu"):
        assert cache_mounts(by_name[name]) == [
            {"name": "image-cache", "mountPath": f"{k8s_pod.IMAGE_CACHE_DIR}/{sub}", "subPath": sub,
             "readOnly": True} for sub in own]
    assert cache_mounts(by_name["exporter"]) == []


def test_the_digest_mounts_are_where_the_run_directorys_links_point():
    """The ``images`` container links ``<run>/kernel`` to ``cache_path(--cache,
    digest)``; QEMU's container has a file mounted at exactly that path."""
    spec = render(BY_URL)
    argv = containers(spec)["images"]["command"]
    cache = argv[argv.index("--cache") + 1]
    mounted = {m["mountPath"] for m in cache_mounts(containers(spec)["qemu"])}
    assert mounted == {image_fetch.cache_path(cache, digest) for digest in (KERNEL, INITRD, DISK)}


def test_a_runtime_image_of_the_sets_choice_gets_the_same_mounts():
    """The per-digest mounts hold for any runtime image, one a class allows too."""
    chosen = render(BY_URL, images={"runtime": {"image": "registry.tenant.test/qemu:mine"}})
    default = render(BY_URL)
    assert containers(chosen)["qemu"]["image"] == "registry.tenant.test/qemu:mine"
    for name in ("disk", "qemu"):
        assert cache_mounts(containers(chosen)[name]) == cache_mounts(containers(default)[name])
    assert containers(chosen)["images"]["image"] == k8s_pod.IMAGE_FETCH_IMAGE["image"]


DIGESTS = st.one_of(
    st.sampled_from([KERNEL, INITRD, DISK, KERNEL.upper().replace("SHA256", "sha256"), " " + DISK + " "]),
    st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda hex_digest: "sha256:" + hex_digest),
    st.sampled_from([None, "", "sha256:../../etc", "sha256:" + "a" * 63, "md5:" + "a" * 32,
                     "sha256:" + "a" * 64 + "/../x"]),
)


@given(chosen=st.dictionaries(st.sampled_from(sorted(qemu_argv.FETCHED_IMAGE_NAMES)), DIGESTS, min_size=1),
       runtime=st.one_of(st.none(), st.text(min_size=1, max_size=40)))
def test_no_container_but_images_sees_more_of_the_cache_than_its_own_valid_digests(chosen, runtime):
    parameters = {key: {"url": f"https://images.test/{key}", "digest": digest} for key, digest in chosen.items()}
    spec = render(parameters, images={"runtime": {"image": runtime}} if runtime else None)
    own = set()
    for digest in chosen.values():
        try:
            own.add(image_fetch.check_digest(digest, "u"))
        except image_fetch.ImageError:
            pass
    expected = {f"sha256/{digest.split(':')[1]}" for digest in own}
    for name, container in containers(spec).items():
        mounts = cache_mounts(container)
        if name == "images":
            assert mounts == [{"name": "image-cache", "mountPath": k8s_pod.IMAGE_CACHE_DIR}]
            continue
        for mount in mounts:
            assert SUB_PATH.match(mount["subPath"]) and mount["readOnly"] is True, mount
            assert mount["mountPath"] == f"{k8s_pod.IMAGE_CACHE_DIR}/{mount['subPath']}"
        paths = [m["mountPath"] for m in container.get("volumeMounts", [])]
        assert len(paths) == len(set(paths))
        if name in ("disk", "qemu"):
            assert {m["subPath"] for m in mounts} == expected
        else:
            assert mounts == []


def test_images_by_path_mount_nothing_of_the_cache():
    spec = render({"kernel": {"path": "/images/vmlinuz"}})
    assert all(cache_mounts(c) == [] for c in containers(spec).values())
    assert "image-cache" not in [v["name"] for v in spec["volumes"]]


def run_volume(spec):
    return next(v for v in spec["volumes"] if v["name"] == "run")["emptyDir"]


def test_the_run_directory_has_a_size_limit_from_the_disk_or_the_default():
    assert run_volume(render({})) == {"sizeLimit": "1Gi"}
    assert run_volume(render({"resources": {"memory": "128Mi", "storage": "4Gi"}})) == {"sizeLimit": "5Gi"}
    # An overlay without a size grows to its base: at most the class's image size limit.
    limit = quantity_to_bytes(run_volume(render(BY_URL))["sizeLimit"])
    assert limit == image_fetch.DEFAULT_MAX_BYTES + RUN_DIR_HEADROOM
    limited = {"metadata": {"annotations": {image_fetch.ANNOTATION_MAX_SIZE: "2Gi"}}, "spec": {}}
    assert run_volume(render(BY_URL, vclass=limited)) == {"sizeLimit": "3Gi"}
    assert run_volume(render({"resources": {"memory": "128Mi", "storage": "100Mi"}})) == {"sizeLimit": "1124Mi"}


def test_the_classs_ephemeral_storage_limit_is_the_run_directorys_limit():
    vclass = {"spec": {"scheduling": {"resources": {"limits": {"ephemeral-storage": "10Gi"}}}}}
    assert run_volume(render({"resources": {"memory": "128Mi", "storage": "4Gi"}}, vclass=vclass)) == {
        "sizeLimit": "10Gi"}


def test_a_pod_of_another_provisioner_has_the_default_limit():
    vclass = {"spec": {"provisioner": "corellium.jumpstarter.dev", "credentialsSecretRef": {"name": "c"}}}
    spec = k8s_pod.instance_pod(EXPORTER_SET, vclass, EXPORTER, "corellium.jumpstarter.dev",
                                {"api": {"host": "corellium.test", "projectId": "p-1"}}, {})["spec"]
    assert run_volume(spec) == {"sizeLimit": "1Gi"}


@given(storage=st.integers(min_value=1, max_value=1 << 44))
def test_the_limit_is_above_the_writable_disk(storage):
    limit = quantity_to_bytes(run_volume(render({"resources": {"memory": "128Mi", "storage": str(storage)}}))[
        "sizeLimit"])
    assert limit == storage + RUN_DIR_HEADROOM


def test_the_images_container_carries_the_class_cache_quota():
    argv = containers(render(BY_URL))["images"]["command"]
    assert argv[argv.index("--quota-bytes") + 1] == str(image_fetch.DEFAULT_CACHE_QUOTA_BYTES)
    vclass = {"metadata": {"annotations": {image_fetch.ANNOTATION_CACHE_QUOTA: "100Gi"}}, "spec": {}}
    argv = containers(render(BY_URL, vclass=vclass))["images"]["command"]
    assert argv[argv.index("--quota-bytes") + 1] == str(100 << 30)
