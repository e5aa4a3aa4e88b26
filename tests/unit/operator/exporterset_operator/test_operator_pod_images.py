"""The operator's image options: the registry of the instance Pods' images
(--image-registry, IMAGE_REGISTRY) and one image per role (--exporter-image,
--qemu-runtime-image, --image-fetch-image, OLM's RELATED_IMAGE_ variables),
handed to the reconcile playbook as ``exporter_pod_images``."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import base
from exporterset_operator.__main__ import parse_args, pod_images

VARIABLES = ("IMAGE_REGISTRY", "RELATED_IMAGE_EXPORTER", "RELATED_IMAGE_QEMU_RUNTIME", "RELATED_IMAGE_IMAGE_FETCH")


def images(monkeypatch, *flags, **environment):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return {role: spec["image"] for role, spec in pod_images(parse_args(list(flags))).items()}


def test_without_options_the_pods_run_the_released_images(monkeypatch):
    assert images(monkeypatch) == {role: spec["image"] for role, spec in base.default_images().items()}


def test_the_registry_names_every_image_from_the_flag_or_the_environment(monkeypatch):
    expected = {"exporter": f"mirror.test/jve/exporter:{base.IMAGE_VERSION}",
                "runtime": f"mirror.test/jve/qemu-runtime:{base.IMAGE_VERSION}",
                "images": f"mirror.test/jve/exporter:{base.IMAGE_VERSION}"}
    assert images(monkeypatch, "--image-registry", "mirror.test/jve") == expected
    assert images(monkeypatch, IMAGE_REGISTRY="mirror.test/jve/") == expected


def test_one_image_by_flag_or_related_image_variable(monkeypatch):
    digest = "mirror.test/fetch@sha256:" + "e" * 64
    chosen = images(monkeypatch, "--image-registry", "mirror.test/jve", "--image-fetch-image", digest,
                    RELATED_IMAGE_QEMU_RUNTIME="mirror.test/qemu:9")
    assert chosen == {"exporter": f"mirror.test/jve/exporter:{base.IMAGE_VERSION}",
                      "runtime": "mirror.test/qemu:9", "images": digest}
    assert images(monkeypatch, RELATED_IMAGE_EXPORTER="mirror.test/exporter:3")["images"] == "mirror.test/exporter:3"
