"""The install's image options reach the instance Pods: an operator started
with --image-registry and --image-fetch-image makes Pods whose exporter, QEMU
and ``images`` init container run those images, through the reconcile
playbook's run (roles/qemu_pod, the exporter_pods module)."""

from __future__ import annotations

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import IMAGE_VERSION
from jumpstarter_standin import wait_for
from kubernetes import client
from pool_helpers import QEMU_PARAMETERS, make_class, make_set

MIRROR = "mirror.example.com/jve"
FETCHER = "mirror.example.com/fetch@sha256:" + "f" * 64
KERNEL = {"url": "https://images.example.com/vmlinuz", "digest": "sha256:" + "a" * 64}


def test_the_operators_registry_and_fetch_image_name_the_pods_images(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace, parameters={**QEMU_PARAMETERS, "kernel": KERNEL})
    make_set(custom, namespace, minAvailableReplicas=1)
    operator("--image-registry", MIRROR, "--image-fetch-image", FETCHER)

    (pod,) = wait_for(standin.pods, timeout=90, message="the set's Pod")
    spec = api.sanitize_for_serialization(pod)["spec"]
    images = {c["name"]: c["image"] for c in spec["initContainers"] + spec["containers"]}
    assert images == {"images": FETCHER, "exporter": f"{MIRROR}/exporter:{IMAGE_VERSION}",
                      "qemu": f"{MIRROR}/qemu-runtime:{IMAGE_VERSION}"}
