import copy

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.merge import (
    deep_merge,
    merge_images,
)

JEP_CLASS = {
    "resources": {"cpu": 4, "memory": "4Gi", "storage": "16Gi"},
    "firmware": {"url": "registry.example.com/firmware/rpi4:v1", "digest": "sha256:abc"},
}


@pytest.mark.parametrize(
    ("base", "override", "expected"),
    [
        # The JEP-0014 example: only memory changes.
        (JEP_CLASS, {"resources": {"memory": "8Gi"}},
         {"resources": {"cpu": 4, "memory": "8Gi", "storage": "16Gi"},
          "firmware": JEP_CLASS["firmware"]}),
        ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),
        ({"a": {"b": 1}}, {"a": 5}, {"a": 5}),
        ({"a": 5}, {"a": {"b": 1}}, {"a": {"b": 1}}),
        ({"a": 1, "b": 2}, {"a": None}, {"b": 2}),
        ({"a": {"b": 1, "c": 2}}, {"a": {"c": None}}, {"a": {"b": 1}}),
        ({"a": 1}, {"new": {"x": None, "y": 1}}, {"a": 1, "new": {"y": 1}}),
        (None, {"a": 1}, {"a": 1}),
        ({"a": 1}, None, {"a": 1}),
        (None, None, {}),
        ({"a": False}, {"a": 0}, {"a": 0}),
    ],
)
def test_deep_merge(base, override, expected):
    assert deep_merge(base, override) == expected


def test_deep_merge_never_mutates_and_never_shares():
    base = copy.deepcopy(JEP_CLASS)
    override = {"resources": {"memory": "8Gi"}, "list": [{"k": 1}]}
    before_base, before_override = copy.deepcopy(base), copy.deepcopy(override)
    merged = deep_merge(base, override)
    merged["resources"]["cpu"] = 99
    merged["firmware"]["url"] = "changed"
    merged["list"][0]["k"] = 2
    assert base == before_base
    assert override == before_override


def test_deep_merge_rejects_non_mappings():
    with pytest.raises(TypeError):
        deep_merge([1], {})


@pytest.mark.parametrize(
    ("class_images", "set_images", "expected"),
    [
        (None, None, {}),
        ({"exporter": {"image": "e:1", "imagePullPolicy": "Always"}}, None,
         {"exporter": {"image": "e:1", "imagePullPolicy": "Always"}}),
        # JEP-0014: a set's ImageSpec replaces the class's ImageSpec as a whole.
        ({"exporter": {"image": "e:1", "imagePullPolicy": "Always"},
          "runtime": {"image": "r:1"}},
         {"exporter": {"image": "e:2"}},
         {"exporter": {"image": "e:2"}, "runtime": {"image": "r:1"}}),
        ({}, {"runtime": {"image": "r:2", "imagePullPolicy": "Never"}},
         {"runtime": {"image": "r:2", "imagePullPolicy": "Never"}}),
    ],
)
def test_merge_images(class_images, set_images, expected):
    assert merge_images(class_images, set_images) == expected
