"""The writes that have a way within fewer grants (pool/permissions.py):
an Event repeated with create and patch alone, an Exporter deleted without
Secret deletion, an instance reset and removed without exec or Secret
deletion. The API server is the in-memory one (fake_kube.py), which
records every request."""

from __future__ import annotations

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import client as k8s_client
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import core as k8s_core
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import apply as k8s_apply
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import exporter_pods
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import permissions
from fake_kube import FakeKube

SLOT = permissions.Permissions.from_denied(
    ["secret-delete: secrets delete", "exec-reset: pods/exec create", "exec-reset: pods/exec get"])
SET = {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSet",
       "metadata": {"name": "pool", "namespace": "ns", "uid": "set-uid"}, "spec": {}}


EXPORTER_UID = "e-uid"


def owned_by(owner_uid):
    return {"ownerReferences": [{"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter", "name": "pool-0",
                                 "uid": owner_uid, "controller": True}]}


@pytest.fixture
def api():
    return FakeKube("ns")


def writes(api):
    return [call for call in api.calls if call[0] not in ("get", "list")]


def test_a_repeated_event_is_created_then_patched_never_read_or_replaced(api):
    event = {"type": "Warning", "reason": "MissingPermission", "message": "delete secrets not granted"}
    for _ in range(3):
        k8s_status.emit_events(api.api_client(), SET, [event])
    (stored,) = api.events
    assert stored["count"] == 3 and stored["reason"] == "MissingPermission"
    assert {call[0] for call in api.calls} == {"create", "patch"}


def exporter(api):
    return api.put("Exporter", "pool-0", metadata={"uid": EXPORTER_UID}, spec={"enabled": False},
                   status={"credential": {"name": "pool-0-exporter"}})


def pool_objects(api):
    made = exporter(api)
    api.put("Pod", "pool-0", metadata=owned_by(EXPORTER_UID))
    api.put("Secret", "pool-0-config", metadata=owned_by(EXPORTER_UID))
    api.put("Secret", "pool-0-exporter", metadata=owned_by(EXPORTER_UID))
    return made


@pytest.mark.parametrize("granted, propagation, secrets_deleted", [
    (permissions.Permissions(), "Orphan", True),
    (SLOT, "Background", False),
])
def test_an_exporter_without_secret_deletion_leaves_its_secrets_to_the_garbage_collector(
        api, granted, propagation, secrets_deleted):
    pool_objects(api)
    applier = k8s_apply.PlanApplier(api.api_client(), SET, permissions=granted)
    assert applier.delete("pool-0", EXPORTER_UID, "qemu.jumpstarter.dev")
    assert [r.body["propagationPolicy"] for r in api.requests
            if (r.verb, r.kind, r.name) == ("delete", "Exporter", "pool-0")] == [propagation]
    assert ("delete", "Pod", "pool-0") in api.calls
    deleted = {call[2] for call in api.calls if call[:2] == ("delete", "Secret")}
    assert deleted == ({"pool-0-config", "pool-0-exporter"} if secrets_deleted else set())
    api.collect_garbage()
    assert set(api.objects) == set()


def test_a_stale_credential_secret_blocks_the_name_and_is_left_to_the_garbage_collector(api):
    api.put("Secret", "pool-0-exporter", metadata=owned_by("gone-uid"))
    applier = k8s_apply.PlanApplier(api.api_client(), SET, permissions=SLOT)
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
    monkeypatch.setattr(k8s_client, "module_api_client", lambda module: api.api_client())
    monkeypatch.setattr(k8s_core.CoreApi, "exec", lambda core, *args: api.exec(*args))
    module = Module(exporterset=SET, virtual_target_class={"spec": {"provisioner": "qemu.jumpstarter.dev"}},
                    owned_exporters=[exporter(api)], exporters=["pool-0"], parameters={}, images={},
                    default_images={}, controller_tls_ca="", state="reset", denied_permissions=denied)
    return exporter_pods.PodManager(module)


def running_pod(api):
    api.put("Pod", "pool-0", metadata=owned_by(EXPORTER_UID), status={"phase": "Running"})


def test_without_exec_a_reset_is_a_fresh_pod_and_the_config_secret_stays(monkeypatch, api):
    running_pod(api)
    api.put("Secret", "pool-0-config", metadata=owned_by(EXPORTER_UID))
    manager = pod_manager(monkeypatch, api, SLOT.as_denied())
    manager.reset("pool-0")
    assert writes(api) == [("delete", "Pod", "pool-0")]
    assert manager.result["deleted"] == ["pool-0"] and not manager.module.warnings


def test_with_every_grant_a_reset_runs_in_the_pod(monkeypatch, api):
    running_pod(api)
    manager = pod_manager(monkeypatch, api, [])
    manager.reset("pool-0")
    assert writes(api) == [("create", "pods/exec", "pool-0")]
    assert manager.result["reset"] == ["pool-0"]


def test_a_denied_permission_naming_no_feature_fails_the_module(monkeypatch, api):
    with pytest.raises(AssertionError, match="names no feature"):
        pod_manager(monkeypatch, api, ["teleport: pods create"])
