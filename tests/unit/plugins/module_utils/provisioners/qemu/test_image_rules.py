"""The rules a tenant's image url meets (scheme, token realm, size), the
class's size limit, and the Pod's ``images`` init container: the operator's
image, never a class's or set's, run as a non-root user."""

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import set_overrides
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
    validate_parameters,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)
from hypothesis import given, settings
from hypothesis import strategies as st

DIGEST = "sha256:" + "ab" * 32

_AUTHORITY_PARTS = st.sampled_from(["a", "B", "0", "9", ".", "-", ":", "@", "%", "[", "]", "\\", "/", "?",
                                    "#", " ", "\u0661", "\uff10", "::1", "80", "127.0.0.1", "x.example"])


@settings(max_examples=500, deadline=None)
@given(scheme=st.sampled_from(["http://", "HTTPS://", "oci://", "", "//"]),
       authority=st.lists(_AUTHORITY_PARTS, max_size=8).map("".join),
       rest=st.sampled_from(["", "/", "/x/disk.img", "/r:tag"]))
def test_the_fetch_reads_a_urls_host_as_the_classs_policy_does(scheme, authority, rest):
    """A redirect is followed to the hosts a set's url may name: the fetch
    cannot import set_overrides, so its own reading must be the same."""
    url = scheme + authority + rest
    assert image_fetch.url_host(url) == set_overrides.url_host(url)


@pytest.mark.parametrize("url", [
    "https://images.example.com/vmlinuz",
    "http://10.0.0.1:8080/guest/disk.qcow2",
    "oci://registry.example.com/rpi4/rootfs:2025.1",
    "registry.example.com/rpi4/rootfs:2025.1",
    "localhost:5000/rootfs@sha256:" + "ab" * 32,
])
def test_http_https_and_oci_urls_are_allowed(url):
    assert image_fetch.url_problem(url) is None
    assert image_fetch.check_url(url) == url


@pytest.mark.parametrize("url", [
    "file:///etc/shadow",
    "FILE:///var/lib/jumpstarter-virtual/lab/exporter.yaml",
    "file:/etc/shadow",
    "ftp://files.example.com/disk.img",
    "data:application/octet-stream;base64,AAAA",
    "gopher://example.com/x",
    "https:///no-host",
    "",
])
def test_other_schemes_are_refused_naming_the_field(url):
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.check_url(url, "parameters.disk.url")
    assert raised.value.reason == image_fetch.REASON_INVALID
    assert str(raised.value).startswith("parameters.disk.url: ")


@pytest.mark.parametrize("name", ["disk", "kernel", "initrd", "firmware"])
def test_parameter_validation_refuses_a_file_url_naming_the_field(name):
    for provisioner in ("qemu.jumpstarter.dev", "qemu-baremetal.jumpstarter.dev"):
        errors = validate_parameters(provisioner, {name: {"url": "file:///etc/shadow", "digest": DIGEST}})["errors"]
        assert [e for e in errors if e.startswith(f"parameters.{name}.url: ")], errors
        fine = validate_parameters(provisioner, {name: {"url": "https://h.example/x", "digest": DIGEST}})
        assert not [e for e in fine["errors"] if ".url" in e]


def test_fetch_refuses_a_file_url_before_reading_it(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"token")
    with pytest.raises(image_fetch.ImageError) as raised:
        image_fetch.fetch(f"file://{secret}", image_fetch.file_digest(str(secret)), str(tmp_path / "cache"),
                          field="parameters.kernel.url")
    assert raised.value.reason == image_fetch.REASON_INVALID
    assert "parameters.kernel.url" in str(raised.value)
    assert not (tmp_path / "cache").exists()


def test_the_default_limit_is_finite_and_fits_a_disk_image():
    assert 4 << 30 <= image_fetch.DEFAULT_MAX_BYTES <= 64 << 30


def _fetch_container(vclass, images):
    exporter_set = {"metadata": {"name": "pool", "namespace": "lab", "uid": "u"},
                    "spec": {"template": {"spec": {"drivers": []}}}}
    exporter = {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
                "metadata": {"name": "pool-0", "namespace": "lab", "uid": "e"}}
    parameters = {"resources": {"memory": "128Mi"},
                  "kernel": {"url": "https://h.example/vmlinuz", "digest": DIGEST}}
    pod = k8s_pod.instance_pod(exporter_set, vclass, exporter, "qemu.jumpstarter.dev", parameters, images)
    return next(c for c in pod["spec"]["initContainers"] if c["name"] == "images")


def test_the_fetch_container_runs_the_operators_image_as_non_root_whatever_the_images_say():
    hostile = {role: {"image": "attacker.example/shell:latest", "imagePullPolicy": "Always"}
               for role in ("exporter", "runtime", "images", "fetch")}
    container = _fetch_container({"spec": {}}, hostile)
    assert container["image"] == k8s_pod.IMAGE_FETCH_IMAGE["image"]
    assert container["imagePullPolicy"] == k8s_pod.IMAGE_FETCH_IMAGE["imagePullPolicy"]
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["runAsUser"] == k8s_pod.IMAGE_FETCH_UID != 0
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert container["command"][:2] == ["python3", "-c"]
    assert container["command"][2] == image_fetch.script_source()


def test_the_fetch_container_carries_the_class_size_limit():
    command = _fetch_container({"spec": {}}, None)["command"]
    assert command[command.index("--max-bytes") + 1] == str(image_fetch.DEFAULT_MAX_BYTES)
    vclass = {"metadata": {"annotations": {image_fetch.ANNOTATION_MAX_SIZE: "2Gi"}}, "spec": {}}
    command = _fetch_container(vclass, None)["command"]
    assert command[command.index("--max-bytes") + 1] == str(2 << 30)
