"""The one guarded writer of a pool object's status (api/guarded_write.py)
on the real API server: a write that meets a 409 Conflict (another writer
got in between its read and its write) reads the object again and writes on
the fresh one; a caller that gave its cached copy gets the 409; a status
that would not change makes no write; a gone object is no error; check mode
writes nothing. The class's and the policy's writers (k8s/pool_writes.py)
go through it. No operator runs: each test calls the writer itself."""

from __future__ import annotations

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import guarded_write
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pool_writes
from kubernetes import client
from kubernetes.client.rest import ApiException
from pool_helpers import GROUP, make_class, make_set

pytestmark = pytest.mark.testbed

CLASSES = "virtualtargetclasses"
VALID_STATUS = {"observedGeneration": 1, "sets": [], "setCount": 0, "conditions": []}


def read_class(custom, namespace, name="qemu-small"):
    return custom.get_namespaced_custom_object(*GROUP, namespace, CLASSES, name)


def make_policy(custom, namespace, name="pool-policy", set_name="pool"):
    body = {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSetPolicy",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"exporterSetName": set_name}}
    return custom.create_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", body)


def test_a_409_reads_again_and_writes_on_the_fresh_object(api, namespace):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    seen = []

    def plan(current):
        seen.append(current["metadata"]["resourceVersion"])
        if len(seen) == 1:
            # Another writer gets in between this read and the write below.
            custom.patch_namespaced_custom_object(*GROUP, namespace, CLASSES, "qemu-small",
                                                  {"metadata": {"labels": {"other": "writer"}}})
        return guarded_write.status_patch(current, {**VALID_STATUS, "setCount": len(seen)})

    written = guarded_write.read_modify_write(api, constants.VIRTUAL_TARGET_CLASS, namespace, "qemu-small", plan)
    assert written.exists and written.changed
    assert len(seen) == 2 and seen[0] != seen[1]  # planned again on a fresh read
    stored = read_class(custom, namespace)
    assert stored["status"]["setCount"] == 2 and stored["metadata"]["labels"] == {"other": "writer"}
    # Unchanged: no write, the resourceVersion stays.
    again = guarded_write.read_modify_write(api, constants.VIRTUAL_TARGET_CLASS, namespace, "qemu-small",
                                            lambda current: guarded_write.status_patch(current, stored["status"]))
    assert not again.changed and again.current["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]


def test_the_class_sync_retries_a_409_and_a_cached_class_gets_it(api, namespace, monkeypatch):
    custom = client.CustomObjectsApi(api)
    cached = make_class(custom, namespace)
    make_set(custom, namespace)
    original = client.CustomObjectsApi.patch_namespaced_custom_object_status
    raced, races = [], []

    def racing_patch(self, group, version, ns, plural, name, body, **kwargs):
        if not raced:
            # Another operator writes the class's status first (a value of
            # its own each time: a patch that changes nothing is no write).
            races.append(name)
            original(self, group, version, ns, plural, name, {"status": {"setCount": 6 + len(races)}})
            raced.append(body["metadata"]["resourceVersion"])
        return original(self, group, version, ns, plural, name, body, **kwargs)

    monkeypatch.setattr(client.CustomObjectsApi, "patch_namespaced_custom_object_status", racing_patch)
    # The operator's way: its cached class, the 409 raised for a later look.
    with pytest.raises(ApiException) as conflict:
        pool_writes.sync_class(api, namespace, "qemu-small", vclass=cached)
    assert conflict.value.status == 409 and len(raced) == 1
    raced.clear()
    # The module's way: read again and write on the fresh class.
    result = pool_writes.sync_class(api, namespace, "qemu-small")
    assert result["changed"] and len(raced) == 1
    stored = read_class(custom, namespace)
    assert stored["status"]["setCount"] == 1 and stored["status"]["sets"] == ["pool"]
    monkeypatch.undo()
    # A second run reports no change and writes nothing.
    assert not pool_writes.sync_class(api, namespace, "qemu-small")["changed"]
    assert read_class(custom, namespace)["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]


def test_policy_status_is_guarded_and_a_gone_object_is_no_error(api, namespace):
    custom = client.CustomObjectsApi(api)
    esp = make_policy(custom, namespace)
    status = {"exporterSet": "", "observedGeneration": 1, "conditions": []}
    # Check mode: the change is reported, nothing is written.
    planned = guarded_write.read_modify_write(
        api, constants.EXPORTER_SET_POLICY, namespace, "pool-policy",
        lambda current: guarded_write.status_patch(current, status, wanted_keys_only=True), check_mode=True)
    assert planned.changed and "status" not in custom.get_namespaced_custom_object(
        *GROUP, namespace, "exportersetpolicies", "pool-policy")
    written = pool_writes.write_policy_status(api, esp, status)
    assert written.exists and written.changed
    # The copy it was given is stale now: its resourceVersion refuses the write.
    with pytest.raises(ApiException) as conflict:
        pool_writes.write_policy_status(api, esp, {**status, "exporterSet": "pool"})
    assert conflict.value.status == 409
    assert not pool_writes.write_policy_status(api, written.current, status).changed
    custom.delete_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", "pool-policy")
    gone = pool_writes.write_policy_status(api, written.current, {**status, "exporterSet": "pool"})
    assert not gone.exists and not gone.changed
