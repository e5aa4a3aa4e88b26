"""api/core.CoreApi on the bed: the core/v1 calls the collection makes,
through the ApiClient alone, with dicts in and out and the client's
ApiException for anything but 2xx."""

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import core as k8s_core
from jumpstarter_standin import wait_for
from kubernetes.client.rest import ApiException


@pytest.fixture
def core(api):
    return k8s_core.CoreApi(api)


def test_a_client_without_param_serialize_is_refused_naming_the_requirement():
    with pytest.raises(RuntimeError, match="requirements.txt"):
        k8s_core.CoreApi(object())


def secret(name, value="one"):
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": {"suite": "core"}},
            "stringData": {"key": value}}


def test_read_create_replace_list_delete_a_secret(core, namespace):
    assert core.read("Secret", namespace, "s1", missing_ok=True) is None
    with pytest.raises(ApiException) as missing:
        core.read("Secret", namespace, "s1")
    assert missing.value.status == 404
    created = core.create("Secret", namespace, secret("s1"))
    assert created["metadata"]["name"] == "s1" and created["data"]["key"] == "b25l"
    with pytest.raises(ApiException) as taken:
        core.create("Secret", namespace, secret("s1"))
    assert taken.value.status == 409
    read = core.read("Secret", namespace, "s1")
    read["stringData"] = {"key": "two"}
    core.replace("Secret", namespace, "s1", read)
    assert core.read("Secret", namespace, "s1")["data"]["key"] == "dHdv"
    core.create("Secret", namespace, secret("s2"))
    listed = core.list("Secret", namespace, label_selector="suite=core")
    assert sorted(s["metadata"]["name"] for s in listed["items"]) == ["s1", "s2"]
    # A precondition on another UID is refused and deletes nothing.
    with pytest.raises(ApiException) as refused:
        core.delete("Secret", namespace, "s1", body=k8s_core.delete_options(uid="not-its-uid"))
    assert refused.value.status == 409
    core.delete("Secret", namespace, "s1", body=k8s_core.delete_options(uid=created["metadata"]["uid"]))
    assert core.read("Secret", namespace, "s1", missing_ok=True) is None


def test_a_pod_deleted_at_once_and_an_event_written(core, namespace):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1"},
           "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]}}
    made = core.create("Pod", namespace, pod)
    core.delete("Pod", namespace, "p1", grace_period_seconds=0,
                body=k8s_core.delete_options(uid=made["metadata"]["uid"]))
    wait_for(lambda: core.read("Pod", namespace, "p1", missing_ok=True) is None, timeout=60,
             message="Pod p1 gone")
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
             "involvedObject": {"kind": "Pod", "name": "p1", "namespace": namespace},
             "reason": "Testing", "message": "m", "type": "Normal", "count": 1,
             "firstTimestamp": "2026-11-27T00:00:00Z", "lastTimestamp": "2026-11-27T00:00:00Z"}
    core.create("Event", namespace, event)
    assert core.read("Event", namespace, "e1")["reason"] == "Testing"
