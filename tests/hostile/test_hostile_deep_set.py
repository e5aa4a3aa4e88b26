"""A tenant's set nested as deep as the API server takes (a driver config
2,000 levels down, about 12 KB), beside an ordinary set in the same
namespace, against the real operator on the bed.

Python's JSON decoder gives up at about 1,000 levels, so the operator's
list of the namespace's sets failed whole and no set of it (of the cluster,
installed cluster-wide) was served any more. The operator reads it now
(plugins/module_utils/bounded_json.py): the ordinary set is served, and the
deep one is refused naming the field, with nothing made for it."""

from __future__ import annotations

import json
import sys

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from jumpstarter_standin import wait_for, wait_gone
from kubernetes import client
from pool_helpers import GROUP, condition, get_set, make_class, make_set

TCP_NETWORK = "jumpstarter_driver_network.driver.TcpNetwork"
LEVELS = 2000


def test_a_set_nested_deeper_than_python_reads_is_refused_and_the_namespaces_other_sets_are_served(
        api, namespace, standin, operator):
    # This process's client recurses to write and read it; the operator's
    # limit is its own (another process).
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * LEVELS + 1000))
    try:
        _served_and_refused(api, namespace, standin, operator)
        # Gone before the limit is back: the namespace's teardown lists sets.
        custom = client.CustomObjectsApi(api)
        custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "deep",
                                              {"metadata": {"finalizers": None}})
        custom.delete_namespaced_custom_object(*GROUP, namespace, "exportersets", "deep")
        wait_gone(lambda: custom.get_namespaced_custom_object(*GROUP, namespace, "exportersets", "deep"),
                  timeout=60, message="the deep set deleted")
    finally:
        sys.setrecursionlimit(limit)


def _served_and_refused(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, name="plain", board="plain", minAvailableReplicas=1, maxReplicas=1)
    deep = json.loads('{"n":' * (LEVELS // 2) + "[" * (LEVELS // 2) + "1" + "]" * (LEVELS // 2) + "}" * (LEVELS // 2))
    body = {
        "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSet",
        "metadata": {"name": "deep", "namespace": namespace},
        "spec": {"virtualTargetClassName": "qemu-small", "minReplicas": 0, "maxReplicas": 1,
                 "minAvailableReplicas": 1, "selector": {"matchLabels": {"board": "deep"}},
                 "template": {"metadata": {"labels": {"board": "deep"}}, "spec": {"drivers": [
                     {"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu"},
                     {"name": "ssh", "type": TCP_NETWORK, "config": {"port": 22, "x": deep}}]}}}}
    custom.create_namespaced_custom_object(*GROUP, namespace, "exportersets", body)
    operator()

    wait_for(lambda: standin.exporters(f"{c.LABEL_EXPORTER_SET}=plain"), timeout=90,
             message="the ordinary set's Exporters")

    def refused():
        found = condition(get_set(custom, namespace, "deep"), "Degraded") or {}
        return found if found.get("status") == "True" else None

    found = wait_for(refused, timeout=60, message="deep: Degraded")
    assert found["reason"] == "NotAllowedByClass", found
    assert "spec.template.spec.drivers[1].config.x.n.n.n" in found["message"], found["message"]
    assert "nested deeper than 64 levels" in found["message"]
    assert [e for e in standin.exporters(f"{c.LABEL_EXPORTER_SET}=deep")
            if c.ANNOTATION_DORMANT not in (e["metadata"].get("annotations") or {})] == []
    assert standin.pods(f"{c.LABEL_EXPORTER_SET}=deep") == []
