"""The one writer of every kind (api/writer.py), on the in-memory API
server (fake_kube.py): its outcomes, its check mode, what it records for
the diff, and the one error it raises for any other answer."""

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import writer
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import Changes
from fake_kube import FakeKube
from kubernetes.client.rest import ApiException

NS = "ns"
WRITES = {"create", "patch", "update", "delete"}


@pytest.fixture
def kube():
    return FakeKube(NS)


def make(kube, check_mode=False):
    changes = Changes()
    return writer.Writer(kube.api_client(), check_mode=check_mode, changes=changes), changes


def exporter(name, **spec):
    return {"apiVersion": constants.EXPORTER.api_version, "kind": "Exporter",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


def written(kube):
    return [call for call in kube.calls if call[0] in WRITES]


@pytest.mark.parametrize("resource, body", [
    (constants.EXPORTER, exporter("e1", enabled=True)),
    ("Secret", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "e1"}, "stringData": {"a": "b"}}),
    (constants.POD, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "e1"},
                     "spec": {"containers": [{"name": "c", "image": "i"}]}}),
])
def test_a_create_is_written_once_then_the_name_is_taken(kube, resource, body):
    write, changes = make(kube)
    kind = body["kind"]
    first = write.create(resource, NS, body)
    assert first.status == writer.WRITTEN and first.obj["metadata"]["uid"]
    assert (kind, "e1") in kube.objects
    assert changes.before == {f"{kind}/e1": None} and changes.after == {f"{kind}/e1": body}
    again = write.create(resource, NS, body)
    assert again.status == writer.EXISTS and again.error.status == 409
    assert written(kube) == [("create", kind, "e1"), ("create", kind, "e1")]


def test_check_mode_writes_nothing_and_records_the_change(kube):
    kube.put("Exporter", "e1", spec={"enabled": True})
    kube.put("Secret", "s1")
    write, changes = make(kube, check_mode=True)
    before = kube.objects
    outcomes = [write.create(constants.EXPORTER, NS, exporter("e2")),
                write.patch(constants.EXPORTER, NS, "e1", {"spec": {"enabled": False}},
                            current=kube.objects[("Exporter", "e1")]),
                write.patch_status(constants.EXPORTER, NS, "e1", {"status": {"a": 1}}),
                write.replace("Secret", NS, "s1", {"metadata": {"name": "s1"}, "data": {}}),
                write.delete("Secret", NS, "s1", uid="u")]
    assert [o.status for o in outcomes] == [writer.WRITTEN] * 5
    assert kube.objects == before and written(kube) == []
    assert set(changes.after) == {"Exporter/e2", "Exporter/e1", "Secret/s1"}
    assert changes.before["Exporter/e1"] == {"spec": {"enabled": True}}
    assert changes.after["Exporter/e1"] == {"spec": {"enabled": False}, "status": {"a": 1}}
    # The delete's after stands last: the Secret would be gone.
    assert changes.after["Secret/s1"] is None


def test_a_patch_guarded_by_a_stale_resource_version_is_a_conflict(kube):
    kube.put("Exporter", "e1", spec={"enabled": True})
    version = kube.objects[("Exporter", "e1")]["metadata"]["resourceVersion"]
    kube.write("Exporter", "e1", {"metadata": {"labels": {"other": "writer"}}})
    write, changes = make(kube)
    stale = write.patch(constants.EXPORTER, NS, "e1", {"spec": {"enabled": False}}, resource_version=version)
    assert stale.status == writer.CONFLICT and stale.error.status == 409
    assert kube.objects[("Exporter", "e1")]["spec"] == {"enabled": True}
    assert not changes
    fresh = kube.objects[("Exporter", "e1")]
    done = write.patch(constants.EXPORTER, NS, "e1", {"spec": {"enabled": False}},
                       resource_version=fresh["metadata"]["resourceVersion"], current=fresh)
    assert done.written and done.version != fresh["metadata"]["resourceVersion"]
    assert kube.objects[("Exporter", "e1")]["spec"] == {"enabled": False}
    # The precondition was sent, and is not part of the change.
    assert kube.requests[-1].body["metadata"]["resourceVersion"] == fresh["metadata"]["resourceVersion"]
    assert changes.after == {"Exporter/e1": {"spec": {"enabled": False}}}


def test_a_status_patch_writes_the_status_alone(kube):
    kube.put("ExporterSet", "set", spec={"replicas": 1})
    write, _ = make(kube)
    outcome = write.patch_status(constants.EXPORTER_SET, NS, "set", {"status": {"ready": 1}, "spec": {"replicas": 9}})
    assert outcome.written
    assert kube.requests[-1].subresource == "status"
    stored = kube.objects[("ExporterSet", "set")]
    assert stored["status"] == {"ready": 1} and stored["spec"] == {"replicas": 1}
    with pytest.raises(ValueError, match="Pod"):
        write.patch_status("Pod", NS, "p", {"status": {}})


@pytest.mark.parametrize("verb, args", [
    ("patch", ({"spec": {"enabled": False}},)),
    ("patch_status", ({"status": {}},)),
    ("replace", (exporter("gone"),)),
    ("delete", ()),
])
def test_a_write_of_a_missing_object_is_gone(kube, verb, args):
    write, changes = make(kube)
    outcome = getattr(write, verb)(constants.EXPORTER, NS, "gone", *args)
    assert outcome.status == writer.GONE and outcome.error.status == 404
    # Only a delete records: the object is gone either way.
    assert bool(changes) == (verb == "delete")


def test_a_delete_sends_its_preconditions_policy_and_grace_period(kube):
    pod = kube.put("Pod", "p1")
    write, changes = make(kube)
    namesake = write.delete(constants.POD, NS, "p1", uid="not-its-uid", grace_period_seconds=0)
    assert namesake.status == writer.CONFLICT and ("Pod", "p1") in kube.objects
    assert kube.requests[-1].body["preconditions"] == {"uid": "not-its-uid"}
    # In the body: the API server reads no query option beside one.
    assert kube.requests[-1].body["gracePeriodSeconds"] == 0 and not kube.requests[-1].query
    assert not changes
    assert write.delete("Pod", NS, "p1", uid=pod["metadata"]["uid"], grace_period_seconds=0).written
    assert ("Pod", "p1") not in kube.objects
    assert changes.before == {"Pod/p1": {"metadata": {"uid": pod["metadata"]["uid"]}}}
    assert changes.after == {"Pod/p1": None}

    held = kube.put("Exporter", "e1")
    stale = write.delete(constants.EXPORTER, NS, "e1", uid=held["metadata"]["uid"], resource_version="1",
                         propagation_policy="Orphan")
    assert stale.status == writer.CONFLICT
    body = kube.requests[-1].body
    assert body["propagationPolicy"] == "Orphan"
    assert body["preconditions"] == {"uid": held["metadata"]["uid"], "resourceVersion": "1"}


def test_a_record_given_or_none_replaces_the_default(kube):
    kube.put("Secret", "s1")
    write, changes = make(kube)
    write.replace("Secret", NS, "s1", {"metadata": {"name": "s1"}, "data": {}}, record=({"was": 1}, {"is": 2}))
    write.create("Event", NS, {"metadata": {"name": "ev"}, "reason": "R", "message": "m"}, record=None)
    assert changes.before == {"Secret/s1": {"was": 1}} and changes.after == {"Secret/s1": {"is": 2}}
    assert kube.events and kube.events[0]["reason"] == "R"


def test_any_other_answer_is_one_error_naming_the_write(kube):
    kube.put("Exporter", "e1")
    write, changes = make(kube)
    # A replace of a custom resource without a resourceVersion: 422.
    with pytest.raises(writer.WriteError) as raised:
        write.replace(constants.EXPORTER, NS, "e1", exporter("e1", enabled=False))
    error = raised.value
    assert isinstance(error, ApiException) and error.status == 422
    assert str(error).startswith("replacing Exporter ns/e1: 422 ")
    assert (error.verb, error.kind, error.namespace, error.name) == ("replacing", "Exporter", NS, "e1")
    assert not changes
