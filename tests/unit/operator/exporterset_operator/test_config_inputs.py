"""The operator's side of the config re-sync on change: a Secret or
ConfigMap event becomes the key of the set whose instances' config it feeds
(controller.py), and the caches of a namespace's Secrets and ConfigMaps are
started once, only for a set of a Pod provisioner, and are not planned from
until synced (config_inputs.py). The bed tests are in tests/pool/test_config_resync.py."""

from __future__ import annotations

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from exporterset_operator import config_inputs
from exporterset_operator.controller import Controller
from exporterset_operator.keys import SetKey
from exporterset_operator.metrics import Metrics
from kubernetes import client


def _obj(kind, name, namespace="lab", owner=None, version="1", **fields):
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": version}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "uid": f"uid-{owner[1]}",
                                    "controller": True}]
    return {"kind": kind, "metadata": meta, **fields}


def controller_with(*objects):
    """A controller (never started) whose caches hold ``objects``, put there
    by the informers' own event path."""
    controller = Controller(None, lambda caches: None, Metrics(), workers=1)
    for obj in objects:
        controller.caches[obj["kind"]]._apply("ADDED", obj)
    while controller.queue.depth():  # what those events queued
        controller.queue.done(controller.queue.get())
    return controller


def test_a_credential_or_config_secret_brings_back_the_set_of_its_exporter():
    controller = controller_with(
        _obj("Exporter", "pool-0", owner=("ExporterSet", "pool")),
        _obj("Exporter", "loose-0"))
    credential = _obj("Secret", "pool-0-exporter", owner=("Exporter", "pool-0"), version="2")
    before = _obj("Secret", "pool-0-exporter", owner=("Exporter", "pool-0"), version="1")
    assert list(controller._map_secret(credential, before)) == [SetKey("lab", "pool")]
    assert list(controller._map_secret(credential, None)) == [SetKey("lab", "pool")]
    # The same version again (a relist): nothing changed.
    assert list(controller._map_secret(credential, credential)) == []
    # An Exporter no set owns, an Exporter not in the cache, a Secret of no Exporter.
    assert list(controller._map_secret(_obj("Secret", "loose-0-exporter", owner=("Exporter", "loose-0")),
                                       None)) == []
    assert list(controller._map_secret(_obj("Secret", "gone-exporter", owner=("Exporter", "gone")), None)) == []
    assert list(controller._map_secret(_obj("Secret", "tls"), None)) == []


def test_the_ca_configmap_brings_back_the_sets_whose_class_reads_it():
    other = _obj("VirtualTargetClass", "other-ca", spec={"provisioner": c.PROVISIONER_QEMU})
    other["metadata"]["annotations"] = {c.ANNOTATION_CONTROLLER_CA_CONFIGMAP: "lab-ca/bundle.pem"}
    controller = controller_with(
        _obj("VirtualTargetClass", "qemu-small", spec={"provisioner": c.PROVISIONER_QEMU}), other,
        _obj("ExporterSet", "a", spec={"virtualTargetClassName": "qemu-small"}),
        _obj("ExporterSet", "b", spec={"virtualTargetClassName": "qemu-small"}),
        _obj("ExporterSet", "c", spec={"virtualTargetClassName": "other-ca"}),
        _obj("ExporterSet", "d", spec={"virtualTargetClassName": "missing"}),
        _obj("ExporterSet", "e", namespace="elsewhere", spec={"virtualTargetClassName": "qemu-small"}))
    default = _obj("ConfigMap", c.DEFAULT_CONTROLLER_CA_CONFIGMAP)
    assert sorted(controller._map_configmap(default, None)) == [SetKey("lab", "a"), SetKey("lab", "b")]
    assert list(controller._map_configmap(_obj("ConfigMap", "lab-ca"), None)) == [SetKey("lab", "c")]
    assert list(controller._map_configmap(_obj("ConfigMap", "kube-root-ca.crt"), None)) == []


def test_a_namespace_is_watched_once_and_planned_from_only_once_synced():
    # An API server that is not there: the caches start, fail to list and retry.
    nowhere = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    inputs = config_inputs.ConfigInputs(nowhere, lambda kind: lambda *event: None)
    try:
        inputs.watch("lab")
        first = dict(inputs._caches["lab"])
        inputs.watch("lab")
        assert inputs._caches["lab"] == first and inputs.namespaces() == ["lab"]
        assert {(kind, i.namespace, i.resource.metadata_only) for kind, i in first.items()} == {
            ("ConfigMap", "lab", False), ("Secret", "lab", True)}
        assert inputs.objects("lab") == {} and inputs.objects("elsewhere") == {}
        # What a successful list does: the Secret cached, the cache synced.
        first["Secret"]._apply("ADDED", _obj("Secret", "pool-0-exporter"))
        first["Secret"].synced.set()
        assert inputs.objects("lab") == {}  # the ConfigMaps are not synced yet
        first["ConfigMap"].synced.set()
        assert [s["metadata"]["name"] for s in inputs.objects("lab")["Secret"]] == ["pool-0-exporter"]
        assert inputs.objects("lab")["ConfigMap"] == []
    finally:
        inputs.stop()
    inputs.watch("after")  # stopped: nothing more starts
    assert inputs.namespaces() == ["lab"]
    nowhere.close()
