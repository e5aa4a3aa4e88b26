"""The Jumpstarter core CRDs the bed installs (tests/testbed/jumpstarter_crds.py)
against the upstream release's files, and their validation on a real API server."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from testbed.bed import upstream_core_crd_files, upstream_release_crd_files

ASPECTS = ("group", "names", "scope", "versions")


def _without_descriptions(node):
    if isinstance(node, dict):
        return {key: _without_descriptions(value) for key, value in node.items() if key != "description"}
    if isinstance(node, list):
        return [_without_descriptions(value) for value in node]
    return node


def _differences(ours, theirs, path=""):
    if type(ours) is not type(theirs):
        return [f"{path}: {ours!r} != {theirs!r}"]
    if isinstance(ours, dict):
        found = []
        for key in sorted(set(ours) | set(theirs)):
            if key not in ours or key not in theirs:
                found.append(f"{path}/{key}: only in {'ours' if key in ours else 'upstream'}")
            else:
                found += _differences(ours[key], theirs[key], f"{path}/{key}")
        return found
    if isinstance(ours, list):
        if len(ours) != len(theirs):
            return [f"{path}: {len(ours)} items != {len(theirs)}"]
        pairs = enumerate(zip(ours, theirs, strict=True))
        return [line for index, pair in pairs for line in _differences(*pair, f"{path}[{index}]")]
    return [] if ours == theirs else [f"{path}: {ours!r} != {theirs!r}"]


@pytest.mark.parametrize(
    "index", range(4), ids=lambda i: ["exporters", "leases", "clients", "exporteraccesspolicies"][i]
)
def test_core_crd_matches_the_upstream_release(index):
    ours_path = upstream_core_crd_files()[index]
    theirs_path = upstream_release_crd_files()[index]
    assert ours_path.name == theirs_path.name
    if not theirs_path.is_file():
        pytest.skip(f"no upstream release beside the checkout to compare with: {theirs_path}")
    ours = yaml.safe_load(ours_path.read_text())
    theirs = yaml.safe_load(theirs_path.read_text())
    assert ours["metadata"]["name"] == theirs["metadata"]["name"]
    for aspect in ASPECTS:
        assert (
            _differences(_without_descriptions(ours["spec"][aspect]), _without_descriptions(theirs["spec"][aspect]))
            == []
        )


def test_differences_are_reported_by_path():
    """The comparison above names what differs, so it cannot pass vacuously."""
    assert _differences({"a": {"b": 1}}, {"a": {"b": 2}}) == ["/a/b: 1 != 2"]
    assert _differences({"a": [1]}, {"a": [1, 2]}) == ["/a: 1 items != 2"]
    assert _differences({"a": 1}, {}) == ["/a: only in ours"]


def _lease(name: str, spec: dict) -> dict:
    return {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Lease", "metadata": {"name": name}, "spec": spec}


@pytest.mark.testbed
def test_lease_rules_hold_on_the_bed(testbed, namespace):
    """The bed's Lease CRD enforces the release's CEL rules and prunes what
    the release prunes."""
    with testbed.api_client() as api:
        crd = client.CustomObjectsApi(api)

        def create(name, spec):
            return crd.create_namespaced_custom_object(
                "jumpstarter.dev", "v1alpha1", namespace, "leases", _lease(name, spec)
            )

        with pytest.raises(ApiException) as refused:
            create("no-selector", {"clientRef": {"name": "me"}})
        assert refused.value.status == 422
        assert "one of selector or exporterRef.name is required" in refused.value.body

        with pytest.raises(ApiException) as refused:
            create(
                "long-context",
                {"clientRef": {"name": "me"}, "selector": {"matchLabels": {"a": "b"}}, "context": {"k" * 33: "v"}},
            )
        assert "context keys max 32 chars" in refused.value.body

        made = create(
            "tagged",
            {
                "clientRef": {"name": "me"},
                "selector": {"matchLabels": {"a": "b"}},
                "tags": {"team": "x"},
                "unknownField": 1,
            },
        )
        assert "unknownField" not in made["spec"]
        made["spec"]["tags"] = {"team": "y"}
        with pytest.raises(ApiException) as refused:
            crd.replace_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "leases", "tagged", made)
        assert "tags are immutable after creation" in refused.value.body

        by_name = create("by-name", {"clientRef": {"name": "me"}, "exporterRef": {"name": "e"}})
        assert by_name["spec"]["selector"] == {}
