"""The controller stand-in does what the real Jumpstarter controller does,
failures included (docs/controller.md lists the contract).

Exporters here have no process behind them: a test writes what the gRPC
service would (``devices``, ``lastSeen``, ``exporterStatus``), and the
stand-in's reconcile thread derives everything else on its own.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from jumpstarter_standin import JS, LEASE_ENDED_LABEL, condition_true, wait_for, wait_gone
from kubernetes import client
from kubernetes.client.rest import ApiException

BOARD = {"board": "standin"}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_exporter(standin, name, labels=None, enabled=True):
    body = {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
            "metadata": {"name": name, "namespace": standin.namespace, "labels": labels or dict(BOARD)},
            "spec": {"enabled": enabled}}
    return standin.custom.create_namespaced_custom_object(*JS, standin.namespace, "exporters", body)


def report_online(standin, name, exporter_status="Available"):
    """What the gRPC service writes when the exporter registers and reports."""
    standin.custom.patch_namespaced_custom_object_status(
        *JS, standin.namespace, "exporters", name,
        {"status": {"devices": [], "lastSeen": _now(), "exporterStatus": exporter_status}})
    return wait_for(lambda: condition_true(e := standin.exporter(name), "Online")
                    and condition_true(e, "Registered") and e, message=f"{name} Online")


def lease_condition(lease, kind):
    return next((c for c in (lease.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def wait_lease(standin, name, predicate, message):
    return wait_for(lambda: predicate(lease := standin.lease(name)) and lease, timeout=30, message=message)


def ended_with(standin, name, kind, reason):
    lease = wait_lease(standin, name, lambda x: (x.get("status") or {}).get("ended"), f"{name} ended")
    condition = lease_condition(lease, kind)
    assert condition and condition["status"] == "True" and condition["reason"] == reason, lease["status"]
    assert lease["status"].get("endTime")
    assert not lease["status"].get("exporterRef")
    wait_lease(standin, name, lambda x: x["metadata"].get("labels", {}).get(LEASE_ENDED_LABEL) == "true",
               "ended label")
    return lease


def test_zero_matching_exporters_end_the_lease_at_once(standin):
    standin.create_lease("nobody", BOARD)
    lease = ended_with(standin, "nobody", "Unsatisfiable", "NoAccess")
    assert "0 exporters" in lease_condition(lease, "Unsatisfiable")["message"]


def test_only_disabled_matches_end_the_lease(standin):
    make_exporter(standin, "parked", enabled=False)
    standin.create_lease("waits-not", BOARD)
    ended_with(standin, "waits-not", "Unsatisfiable", "AllDisabled")


def test_offline_match_keeps_the_lease_pending_until_it_comes_online(standin):
    make_exporter(standin, "sleepy")
    standin.create_lease("patient", BOARD)
    lease = wait_lease(standin, "patient", lambda x: lease_condition(x, "Pending"), "Pending")
    assert lease_condition(lease, "Pending")["reason"] == "Offline"
    assert not lease["status"]["ended"]

    exporter = report_online(standin, "sleepy")
    lease = wait_lease(standin, "patient", lambda x: condition_true(x, "Ready"), "Ready")
    assert lease["status"]["exporterRef"] == {"name": "sleepy"}
    assert lease["status"]["beginTime"]
    # Pending is not reset when the lease becomes Ready.
    assert lease_condition(lease, "Pending")["status"] == "True"
    wait_lease(standin, "patient", lambda x: x["metadata"].get("ownerReferences"), "owner reference")
    owner = standin.lease("patient")["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Exporter", "sleepy", exporter["metadata"]["uid"], True)
    wait_for(lambda: (standin.exporter("sleepy").get("status") or {}).get("leaseRef") == {"name": "patient"},
             message="leaseRef")


def test_all_leased_waits_not_available_then_release_frees_the_exporter(standin):
    make_exporter(standin, "only")
    report_online(standin, "only")
    standin.create_lease("first", BOARD)
    assert standin.wait_assigned("first") == "only"
    standin.create_lease("second", BOARD)
    lease = wait_lease(standin, "second", lambda x: lease_condition(x, "Pending"), "Pending")
    assert lease_condition(lease, "Pending")["reason"] == "NotAvailable"

    standin.release("first")
    first = wait_lease(standin, "first", lambda x: (x.get("status") or {}).get("ended"), "released")
    assert lease_condition(first, "Ready") == {**lease_condition(first, "Ready"), "status": "False",
                                               "reason": "Released"}
    assert standin.wait_assigned("second") == "only"


def test_leases_waiting_together_never_share_an_exporter(standin):
    """Three Leases wait on one offline Exporter; when it comes online they
    are matched together, and only one of them gets it."""
    make_exporter(standin, "shared")
    names = ["wait-a", "wait-b", "wait-c"]
    for name in names:
        standin.create_lease(name, BOARD)
    for name in names:
        wait_lease(standin, name, lambda x: lease_condition(x, "Pending"), f"{name} Pending")
    report_online(standin, "shared")

    def holder_names():
        return [name for name in names if (standin.lease(name).get("status") or {}).get("exporterRef")]

    winner = wait_for(lambda: holder_names(), timeout=60, message="one lease assigned")
    assert len(winner) == 1, winner
    for name in set(names) - set(winner):
        lease = wait_lease(standin, name, lambda x: (lease_condition(x, "Pending") or {}).get("reason")
                           == "NotAvailable", f"{name} NotAvailable")
        assert not lease["status"].get("exporterRef"), lease["status"]
    assert holder_names() == winner


def test_lease_expires_after_its_duration(standin):
    make_exporter(standin, "brief")
    report_online(standin, "brief")
    standin.create_lease("short", BOARD, duration="2s")
    standin.wait_assigned("short")
    lease = wait_lease(standin, "short", lambda x: x["status"].get("ended"), "expired")
    assert lease_condition(lease, "Ready")["reason"] == "Expired"
    wait_for(lambda: not (standin.exporter("brief").get("status") or {}).get("leaseRef"), message="leaseRef cleared")


def test_not_ready_exporter_status_keeps_the_lease_pending(standin):
    make_exporter(standin, "busy")
    report_online(standin, "busy", exporter_status="AfterLeaseHook")
    standin.create_lease("later", BOARD)
    lease = wait_lease(standin, "later", lambda x: lease_condition(x, "Pending"), "Pending")
    assert lease_condition(lease, "Pending")["reason"] == "NotReady"


def test_access_policies_filter_exporters_by_client(standin):
    make_exporter(standin, "guarded")
    report_online(standin, "guarded")
    for name, team in (("alice", "dev"), ("mallory", "other")):
        standin.custom.create_namespaced_custom_object(*JS, standin.namespace, "clients", {
            "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Client",
            "metadata": {"name": name, "labels": {"team": team}}, "spec": {}})
    standin.custom.create_namespaced_custom_object(*JS, standin.namespace, "exporteraccesspolicies", {
        "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "ExporterAccessPolicy",
        "metadata": {"name": "dev-only"},
        "spec": {"exporterSelector": {"matchLabels": BOARD},
                 "policies": [{"priority": 10, "from": [{"clientSelector": {"matchLabels": {"team": "dev"}}}]}]}})
    standin.create_lease("denied", BOARD, client_name="mallory")
    ended_with(standin, "denied", "Unsatisfiable", "NoAccess")
    standin.create_lease("granted", BOARD, client_name="alice")
    assert standin.wait_assigned("granted") == "guarded"
    assert standin.lease("granted")["status"]["priority"] == 10


def _token_subject(core, namespace, secret_name):
    token = base64.b64decode(core.read_namespaced_secret(secret_name, namespace).data["token"]).decode()
    claims = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["sub"]


def test_credential_secret_is_bound_to_the_uid_and_survives_a_name_reuse(standin):
    first = make_exporter(standin, "reused")
    wait_for(lambda: (standin.exporter("reused").get("status") or {}).get("credential"), message="credential")
    subject = _token_subject(standin.core, standin.namespace, "reused-exporter")
    assert subject == f"exporter:{standin.namespace}:reused:{first['metadata']['uid']}"

    # Deleted without its dependents and made again. Whether the old Secret is
    # still there is up to the garbage collector: one it had not seen yet
    # (the Secret is a second old) still names the deleted owner and is
    # collected; one it had seen is orphaned and stays. Both happen with the
    # real controller, and each has its outcome.
    standin.custom.delete_namespaced_custom_object(*JS, standin.namespace, "exporters", "reused",
                                                   propagation_policy="Orphan")
    wait_for(lambda: not standin.exporters(), message="exporter gone")
    try:
        survived = standin.core.read_namespaced_secret("reused-exporter", standin.namespace)
    except ApiException as exc:
        assert exc.status == 404
        survived = None
    second = make_exporter(standin, "reused")

    def owned_by_second():
        try:
            refs = standin.core.read_namespaced_secret("reused-exporter", standin.namespace).metadata.owner_references
        except ApiException as exc:
            assert exc.status == 404
            return False
        return bool(refs) and refs[0].uid == second["metadata"]["uid"]
    wait_for(owned_by_second, message="secret owned by the new exporter")
    subject = _token_subject(standin.core, standin.namespace, "reused-exporter")
    current = standin.core.read_namespaced_secret("reused-exporter", standin.namespace)
    if survived is not None and current.metadata.uid == survived.metadata.uid:
        # The orphan was re-parented and keeps the old token: refused at Register.
        assert subject.endswith(first["metadata"]["uid"])
    else:
        # A new Secret: a token for the new UID.
        assert subject.endswith(second["metadata"]["uid"])


def test_deleting_an_exporter_collects_its_leases(standin):
    make_exporter(standin, "doomed")
    report_online(standin, "doomed")
    standin.create_lease("history", BOARD)
    standin.wait_assigned("history")
    standin.release("history")
    wait_lease(standin, "history", lambda x: x["metadata"].get("labels", {}).get(LEASE_ENDED_LABEL), "ended")
    standin.custom.delete_namespaced_custom_object(*JS, standin.namespace, "exporters", "doomed")
    wait_gone(lambda: standin.lease("history"), timeout=60, message="ended lease garbage-collected with its exporter")


def test_exporter_seen_too_long_ago_goes_offline(standin):
    make_exporter(standin, "stale")
    old = "2020-01-01T00:00:00Z"
    standin.custom.patch_namespaced_custom_object_status(
        *JS, standin.namespace, "exporters", "stale",
        {"status": {"devices": [], "lastSeen": old, "exporterStatus": "Available"}})
    exporter = wait_for(lambda: (e := standin.exporter("stale")).get("status", {}).get("exporterStatus") == "Offline"
                        and e, message="offline")
    online = next(c for c in exporter["status"]["conditions"] if c["type"] == "Online")
    assert (online["status"], online["message"]) == ("False", "Last seen more than 1 minute ago")
    assert condition_true(exporter, "Registered")


@pytest.mark.parametrize("kind", ["exporters", "clients"])
def test_credentials_and_endpoint_are_written(standin, kind):
    body = {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": kind[:-1].capitalize(),
            "metadata": {"name": "someone"}, "spec": {}}
    standin.custom.create_namespaced_custom_object(*JS, standin.namespace, kind, body)
    suffix = "exporter" if kind == "exporters" else "client"
    status = wait_for(lambda: (standin.custom.get_namespaced_custom_object(
        *JS, standin.namespace, kind, "someone").get("status") or {}).get("credential"), message="credential")
    assert status == {"name": f"someone-{suffix}"}
    secret = client.CoreV1Api(standin.core.api_client).read_namespaced_secret(f"someone-{suffix}", standin.namespace)
    assert secret.metadata.owner_references[0].controller is True


def _pod(name, command):
    """A Pod another controller made: its own labels, none of this collection's."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"exporterset.jumpstarter.dev/name": "elsewhere"}),
        spec=client.V1PodSpec(
            containers=[client.V1Container(
                name="exporter", image="registry.invalid/exporter:1", command=command,
                volume_mounts=[client.V1VolumeMount(name="config", mount_path="/etc/jumpstarter/exporters")])],
            volumes=[client.V1Volume(name="config",
                                     secret=client.V1SecretVolumeSource(secret_name="elsewhere-0-config"))]))


def test_a_pod_running_jmp_run_registers_its_exporter_whatever_its_labels(standin, tmp_path):
    """The exporter process of a Pod is its ``jmp run`` container, whoever
    made the Pod; a Pod without that command has none."""
    make_exporter(standin, "elsewhere-0")
    config = standin.grpc.write_exporter_config(tmp_path / "config.yaml", "elsewhere-0")
    core = client.CoreV1Api(standin.core.api_client)
    core.create_namespaced_secret(standin.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="elsewhere-0-config"), string_data={"config.yaml": config.read_text()}))
    core.create_namespaced_pod(standin.namespace, _pod("no-exporter", ["sleep", "infinity"]))
    wait_for(lambda: core.read_namespaced_pod("no-exporter", standin.namespace).status.phase == "Running",
             message="the Pod without jmp run Running")
    # Started after the first one ran, so the pass that plays it saw both.
    core.create_namespaced_pod(standin.namespace, _pod(
        "elsewhere-0", ["jmp", "run", "--exporter-config", "/etc/jumpstarter/exporters/config.yaml"]))
    standin.wait_online("elsewhere-0", timeout=60)
    assert sorted(standin.pod_exporters.processes) == ["elsewhere-0"]
