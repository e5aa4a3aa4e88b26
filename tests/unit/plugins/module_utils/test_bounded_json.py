"""JSON from the API at any depth the API server accepts (10,000 levels),
kept to the 64 the operator reads (``bounded_json``): a tenant's set nested
deeper is read, not a failure of the whole list, and is refused naming the
field; nothing deeper reaches the operator's code."""

from __future__ import annotations

import json
import threading

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import bounded_json
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import client as k8s_client
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import set_overrides
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client


def depth(value):
    """Levels of mappings and lists (the top one is 1), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def nested(levels, leaf="10.0.0.9"):
    """A document of ``levels`` mappings and lists, as text."""
    half = levels // 2
    return '{"n":' * half + "[" * (levels - half) + json.dumps(leaf) + "]" * (levels - half) + "}" * half


def a_list_of_sets(deep_levels):
    """An ExporterSetList as the API server sends it: one ordinary set, one
    whose driver config is nested ``deep_levels`` deep."""
    deep = nested(deep_levels)
    return ('{"kind":"ExporterSetList","items":[{"metadata":{"name":"plain"},"spec":{}},'
            '{"metadata":{"name":"deep"},"spec":{"template":{"spec":{"drivers":[{"name":"d",'
            '"type":"jumpstarter_driver_network.driver.TcpNetwork","config":{"port":22,"x":' + deep + '}}]}}}}]}')


def test_a_list_holding_a_set_nested_as_deep_as_the_api_server_takes_is_read_in_a_thread():
    text = a_list_of_sets(bounded_json.API_MAX_DEPTH - 12)
    read = {}
    worker = threading.Thread(target=lambda: read.update(body=bounded_json.loads(text)))
    worker.start()
    worker.join()
    body = read["body"]
    assert [item["metadata"]["name"] for item in body["items"]] == ["plain", "deep"]
    assert depth(body) == bounded_json.MAX_DEPTH
    (path,) = bounded_json.clipped_paths(body["items"][1]["spec"])
    assert path.startswith(".template.spec.drivers[0].config.x.n.n.n")


def test_the_clients_reads_of_custom_objects_are_bounded_too():
    api = k8s_client._bounded(client.ApiClient)(client.Configuration())
    body = api.deserialize(a_list_of_sets(5000), "object", "application/json")
    assert depth(body) == bounded_json.MAX_DEPTH and body["items"][0]["metadata"]["name"] == "plain"


def test_a_set_holding_what_was_clipped_is_refused_naming_the_field():
    body = bounded_json.loads(a_list_of_sets(200))
    shallow = bounded_json.loads(a_list_of_sets(40))
    klass = {"spec": {"provisioner": "qemu.jumpstarter.dev", "parameters": {}}}
    refused = set_overrides.resolve(klass, body["items"][1])["violations"]
    deep = [v for v in refused if "nested deeper than" in v]
    assert len(deep) == 1 and deep[0].startswith("spec.template.spec.drivers[0].config.x.n.n"), refused
    assert not [v for v in set_overrides.resolve(klass, shallow["items"][1])["violations"]
                if "nested deeper than" in v]


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=3),
                     lambda inner: (st.lists(inner, max_size=3)
                                    | st.dictionaries(st.text(max_size=2), inner, max_size=3)),
                     max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(_JSON, st.integers(1, 6))
def test_clip_keeps_what_is_shallow_enough_and_cuts_exactly_what_is_deeper(value, limit):
    original = json.loads(json.dumps(value))
    clipped = bounded_json.clip(json.loads(json.dumps(value)), limit)
    assert depth(clipped) <= limit
    if depth(original) <= limit:
        assert clipped == original
    else:
        assert bounded_json.clipped_paths(clipped)


_TEXT = st.text(alphabet='[]{}"\\ab', max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.integers() | _TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                    max_leaves=40),
       st.integers(1, 6))
def test_cutting_the_text_reads_as_clipping_the_value(value, limit):
    """Brackets, quotes and escapes inside strings are text, not nesting."""
    text = json.dumps(value)
    assert json.loads(bounded_json.clip_text(text, limit)) == bounded_json.clip(json.loads(text), limit)
