"""The writes that have a way within fewer grants (pool/permissions.py):
an Event repeated with create and patch alone, an Exporter deleted without
Secret deletion, an instance reset and removed without exec or Secret
deletion. The API is a recorder of the calls made, in memory."""

from __future__ import annotations

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import apply as k8s_apply
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import client as k8s_client
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import core as k8s_core
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import exporter_pods
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import permissions
from kubernetes import client
from kubernetes.client.rest import ApiException

SLOT = permissions.Permissions.from_denied(
    ["secret-delete: secrets delete", "exec-reset: pods/exec create", "exec-reset: pods/exec get"])
SET = {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSet",
       "metadata": {"name": "pool", "namespace": "ns", "uid": "set-uid"}, "spec": {}}


def owned_by(kind, name, owner_kind, owner_uid, **extra):
    return {"kind": kind, "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid",
                                       "resourceVersion": "1", "ownerReferences": [
                                           {"kind": owner_kind, "name": "pool-0", "uid": owner_uid,
                                            "controller": True}]}, **extra}


class Api:
    """core/v1 (k8s/core.CoreApi) and the custom objects over one store,
    every call recorded as (verb, kind, name[, detail])."""

    def __init__(self, objects=()):
        self.objects = {(o["kind"], o["metadata"]["name"]): o for o in objects}
        self.calls = []

    # core.CoreApi
    def read(self, kind, namespace, name, missing_ok=False):
        self.calls.append(("get", kind, name))
        found = self.objects.get((kind, name))
        if found is None and not missing_ok:
            raise ApiException(status=404)
        return found

    def create(self, kind, namespace, body):
        self.calls.append(("create", kind, body["metadata"]["name"]))
        if (kind, body["metadata"]["name"]) in self.objects:
            raise ApiException(status=409)
        body = dict(body, kind=kind, metadata={**body["metadata"], "resourceVersion": "1"})
        self.objects[(kind, body["metadata"]["name"])] = body
        return body

    def replace(self, kind, namespace, name, body):
        self.calls.append(("update", kind, name))
        self.objects[(kind, name)] = body
        return body

    def patch(self, kind, namespace, name, body):
        self.calls.append(("patch", kind, name))
        current = self.objects[(kind, name)]
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise ApiException(status=409)
        merged = {**current, **{k: v for k, v in body.items() if k != "metadata"}}
        merged["metadata"] = {**current["metadata"],
                              "resourceVersion": str(int(current["metadata"]["resourceVersion"]) + 1)}
        self.objects[(kind, name)] = merged
        return merged

    def delete(self, kind, namespace, name, body=None, grace_period_seconds=None):
        self.calls.append(("delete", kind, name))
        self.objects.pop((kind, name), None)

    def exec(self, namespace, name, container, command, timeout):
        self.calls.append(("create", "pods/exec", name))
        return 0, ""

    # CustomObjectsApi
    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        return self.read("Exporter", namespace, name)

    def list_namespaced_custom_object(self, group, version, namespace, plural, label_selector=None):
        self.calls.append(("list", "Lease", ""))
        return {"metadata": {"resourceVersion": "7"}, "items": []}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, body):
        self.calls.append(("delete", "Exporter", name, body.get("propagationPolicy")))
        self.objects.pop(("Exporter", name), None)


@pytest.fixture
def api(monkeypatch):
    memory = Api()
    monkeypatch.setattr(k8s_core, "CoreApi", lambda _: memory)
    monkeypatch.setattr(client, "CustomObjectsApi", lambda _: memory)
    return memory


def writes(api):
    return [call for call in api.calls if call[0] not in ("get", "list")]


def test_a_repeated_event_is_created_then_patched_never_read_or_replaced(api):
    event = {"type": "Warning", "reason": "MissingPermission", "message": "delete secrets not granted"}
    for _ in range(3):
        k8s_status.emit_events(None, SET, [event])
    (stored,) = [o for (kind, _), o in api.objects.items() if kind == "Event"]
    assert stored["count"] == 3 and stored["reason"] == "MissingPermission"
    assert {call[0] for call in api.calls} == {"create", "patch"}


def exporter(**meta):
    return {"kind": "Exporter", "metadata": {"name": "pool-0", "namespace": "ns", "uid": "e-uid",
                                             "resourceVersion": "3", **meta},
            "spec": {"enabled": False}, "status": {"credential": {"name": "pool-0-exporter"}}}


def pool_objects():
    return [exporter(), owned_by("Pod", "pool-0", "Exporter", "e-uid"),
            owned_by("Secret", "pool-0-config", "Exporter", "e-uid"),
            owned_by("Secret", "pool-0-exporter", "Exporter", "e-uid")]


@pytest.mark.parametrize("granted, propagation, secrets_deleted", [
    (permissions.Permissions(), "Orphan", True),
    (SLOT, "Background", False),
])
def test_an_exporter_without_secret_deletion_leaves_its_secrets_to_the_garbage_collector(
        api, granted, propagation, secrets_deleted):
    api.objects.update({(o["kind"], o["metadata"]["name"]): o for o in pool_objects()})
    applier = k8s_apply.PlanApplier(None, SET, permissions=granted)
    assert applier.delete("pool-0", "e-uid", "qemu.jumpstarter.dev")
    assert ("delete", "Exporter", "pool-0", propagation) in api.calls
    assert ("delete", "Pod", "pool-0") in api.calls
    deleted = {call[2] for call in api.calls if call[:2] == ("delete", "Secret")}
    assert deleted == ({"pool-0-config", "pool-0-exporter"} if secrets_deleted else set())


def test_a_stale_credential_secret_blocks_the_name_and_is_left_to_the_garbage_collector(api):
    stale = owned_by("Secret", "pool-0-exporter", "Exporter", "gone-uid")
    api.objects[("Secret", "pool-0-exporter")] = stale
    applier = k8s_apply.PlanApplier(None, SET, permissions=SLOT)
    assert not applier.create({"metadata": {"name": "pool-0"}})
    assert applier.result["blocked"] == ["pool-0"]
    assert writes(api) == []


class Module:
    def __init__(self, **params):
        self.params = params
        self.check_mode = False
        self.warnings = []

    def warn(self, text):
        self.warnings.append(text)

    def fail_json(self, msg, **result):
        raise AssertionError(msg)


def pod_manager(monkeypatch, api, denied):
    monkeypatch.setattr(k8s_client, "CoreApi", lambda _: api)
    monkeypatch.setattr(k8s_client, "module_api_client", lambda module: None)
    monkeypatch.setattr(k8s_apply, "backend_held", lambda *args: None)
    module = Module(exporterset=SET, virtual_target_class={"spec": {"provisioner": "qemu.jumpstarter.dev"}},
                    owned_exporters=[exporter()], exporters=["pool-0"], parameters={}, images={},
                    default_images={}, controller_tls_ca="", state="reset", denied_permissions=denied)
    return exporter_pods.PodManager(module)


def running_pod():
    return owned_by("Pod", "pool-0", "Exporter", "e-uid", status={"phase": "Running"})


def test_without_exec_a_reset_is_a_fresh_pod_and_the_config_secret_stays(monkeypatch, api):
    api.objects.update({("Pod", "pool-0"): running_pod(),
                        ("Secret", "pool-0-config"): owned_by("Secret", "pool-0-config", "Exporter", "e-uid")})
    manager = pod_manager(monkeypatch, api, SLOT.as_denied())
    manager.reset("pool-0")
    assert writes(api) == [("delete", "Pod", "pool-0")]
    assert manager.result["deleted"] == ["pool-0"] and not manager.module.warnings


def test_with_every_grant_a_reset_runs_in_the_pod(monkeypatch, api):
    api.objects[("Pod", "pool-0")] = running_pod()
    manager = pod_manager(monkeypatch, api, [])
    manager.reset("pool-0")
    assert writes(api) == [("create", "pods/exec", "pool-0")]
    assert manager.result["reset"] == ["pool-0"]


def test_a_denied_permission_naming_no_feature_fails_the_module(monkeypatch, api):
    with pytest.raises(AssertionError, match="names no feature"):
        pod_manager(monkeypatch, api, ["teleport: pods create"])
