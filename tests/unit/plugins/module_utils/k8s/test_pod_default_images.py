"""The install's images in a rendered instance Pod (``default_images``): the
operator's choice fills the roles neither class nor set names and is the
``images`` init container's image, which no class or set image reaches; the
built-in ones are the released images under the project's registry."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import base
from hypothesis import given, settings
from hypothesis import strategies as st

EXPORTER_SET = {"metadata": {"name": "pool", "namespace": "lab", "uid": "set-uid"},
                "spec": {"template": {"spec": {"drivers": [{"name": "qemu",
                                                            "type": "jumpstarter_driver_qemu.driver.Qemu"}]}}}}
EXPORTER = {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
            "metadata": {"name": "pool-0", "namespace": "lab", "uid": "exporter-uid"}}
# A kernel by url: the Pod gets the images init container.
BY_URL = {"resources": {"memory": "128Mi"},
          "kernel": {"url": "https://images.test/vmlinuz", "digest": "sha256:" + "a" * 64}}
PART = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=10)
REGISTRY = st.lists(PART, min_size=1, max_size=3).map("/".join)
REFERENCE = st.tuples(REGISTRY, st.one_of(PART.map(lambda tag: ":" + tag),
                                          st.binary(min_size=32, max_size=32).map(lambda b: "@sha256:" + b.hex())),
                      ).map("".join)


def images_of(default_images=None, images=None):
    spec = k8s_pod.instance_pod(EXPORTER_SET, {"spec": {}}, EXPORTER, "qemu.jumpstarter.dev", BY_URL,
                                images, default_images=default_images)["spec"]
    return {c["name"]: (c["image"], c["imagePullPolicy"]) for c in spec["initContainers"] + spec["containers"]}


def test_without_the_installs_images_the_pod_runs_the_released_ones():
    released = base.default_images()
    ran = images_of()
    assert ran["images"] == (released["images"]["image"], "IfNotPresent")
    assert ran["exporter"] == (released["exporter"]["image"], "IfNotPresent")
    assert ran["qemu"] == (released["runtime"]["image"], "IfNotPresent")


@settings(deadline=None)
@given(registry=REGISTRY)
def test_the_installs_registry_names_every_image_of_the_pod(registry):
    ran = images_of(base.default_images(registry))
    for container, name in (("exporter", "exporter"), ("qemu", "qemu-runtime"), ("images", "exporter")):
        assert ran[container][0] == f"{registry}/{name}:{base.IMAGE_VERSION}"


@settings(deadline=None)
@given(fetch=REFERENCE, exporter=REFERENCE)
def test_the_images_container_runs_the_installs_image_whatever_class_and_set_name(fetch, exporter):
    chosen = {"exporter": {"image": exporter, "imagePullPolicy": "Always"},
              "runtime": {"image": "tenant.test/qemu:1", "imagePullPolicy": "Always"}}
    defaults = {"images": {"image": fetch, "imagePullPolicy": "Never"}}
    ran = images_of(defaults, chosen)
    assert ran["images"] == (fetch, "Never")
    assert ran["exporter"] == (exporter, "Always")
    assert ran["qemu"] == ("tenant.test/qemu:1", "Always")


def test_a_role_the_install_leaves_out_keeps_the_built_in_image():
    ran = images_of({"runtime": {"image": "mirror.test/qemu:2", "imagePullPolicy": "Always"},
                     "exporter": None})
    assert ran["qemu"] == ("mirror.test/qemu:2", "Always")
    assert ran["exporter"][0] == ran["images"][0] == base.DEFAULT_IMAGES["exporter"]["image"]
