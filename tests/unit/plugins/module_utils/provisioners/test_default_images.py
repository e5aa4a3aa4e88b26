"""``base.default_images``: the released images under a registry, one by one
replaceable; the image fetch follows the exporter's unless named."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import base
from hypothesis import given
from hypothesis import strategies as st

NAME = st.lists(st.text("abcdefghijklmnopqrstuvwxyz0123456789.-", min_size=1, max_size=10),
                min_size=1, max_size=3).map("/".join)
OVERRIDE = st.one_of(st.none(), st.just(""), NAME.map(lambda n: n + "/x@sha256:" + "f" * 64))


@given(registry=NAME, slash=st.booleans())
def test_each_role_is_its_released_name_under_the_registry_at_the_collections_version(registry, slash):
    images = base.default_images(registry + ("/" if slash else ""))
    assert images == {
        "exporter": {"image": f"{registry}/exporter:{base.IMAGE_VERSION}", "imagePullPolicy": "IfNotPresent"},
        "runtime": {"image": f"{registry}/qemu-runtime:{base.IMAGE_VERSION}", "imagePullPolicy": "IfNotPresent"},
        base.IMAGE_FETCH_ROLE: {"image": f"{registry}/exporter:{base.IMAGE_VERSION}",
                                "imagePullPolicy": "IfNotPresent"},
    }


@given(registry=NAME, exporter=OVERRIDE, runtime=OVERRIDE, fetch=OVERRIDE)
def test_an_override_replaces_its_role_alone(registry, exporter, runtime, fetch):
    plain = base.default_images(registry)
    images = base.default_images(registry, {"exporter": exporter, "runtime": runtime,
                                            base.IMAGE_FETCH_ROLE: fetch})
    assert images["exporter"]["image"] == (exporter or plain["exporter"]["image"])
    assert images["runtime"]["image"] == (runtime or plain["runtime"]["image"])
    assert images[base.IMAGE_FETCH_ROLE]["image"] == (fetch or images["exporter"]["image"])


def test_no_registry_is_the_projects_and_the_built_in_defaults_are_those():
    assert base.default_images(None) == base.default_images() == base.default_images("")
    assert base.default_images()["exporter"]["image"].startswith(base.IMAGE_REGISTRY + "/")
    assert {role: base.default_images()[role] for role in base.DEFAULT_IMAGES} == base.DEFAULT_IMAGES
