"""ExporterSetPolicy on the real API server with the operator running.

Pause: the set says so (condition ``Paused``, Event) and from then on the
operator makes no write for the set's objects, whatever happens to the
pool (a lease takes an instance, the warm buffer is raised), as the API
server's audit log shows; unpaused, the set converges. The CRD: its schema
refuses what ``pool/policy.py`` refuses, and ``kubectl get esp`` shows the
controls. Two policies naming one set: the set says so and runs with the
defaults. Beside upstream's ExporterSet CRD, which prunes controls written
on a set, the policy keeps them.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy
from jumpstarter_standin import wait_for
from jumpstarter_standin.pytest_plugin import serve_namespace
from kubernetes import client
from kubernetes.client.rest import ApiException
from operator_process import ROOT, USERNAME, OperatorProcess
from pool_helpers import GROUP, SET_LABEL, condition, get_set, make_class, make_set, settle_pool
from testbed import BIN_DIR, upstream_crd_files

WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def make_policy(custom, namespace, name="pool-policy", set_name="pool", **spec):
    body = {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSetPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"exporterSetName": set_name, **spec}}
    return custom.create_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", body)


def _entries(log: Path):
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("stage") == "ResponseComplete":
            yield entry


def _written_after(log: Path, moment: datetime) -> bool:
    lines = log.read_text().splitlines() if log.exists() else []
    return bool(lines) and datetime.fromisoformat(json.loads(lines[-1])["stageTimestamp"]) > moment


def operator_writes(log: Path, namespace: str, since: datetime, prefix: str) -> list[str]:
    """The operator's writes in ``namespace`` after ``since`` on objects whose
    name starts with ``prefix`` (the set, its Exporters, Pods, Secrets and
    Events all do)."""
    found = []
    for entry in _entries(log):
        ref = entry.get("objectRef") or {}
        if (entry.get("user", {}).get("username") == USERNAME and entry["verb"] in WRITES
                and ref.get("namespace") == namespace and (ref.get("name") or "").startswith(prefix)
                and datetime.fromisoformat(entry["stageTimestamp"]) > since):
            found.append(f"{entry['stageTimestamp']} {entry['verb']} {entry['requestURI']}")
    return found


def policy_status(custom, namespace, name="pool-policy"):
    return custom.get_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", name).get("status") or {}


def _paused_event(core, namespace):
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=pool").items
    return [e for e in events if e.reason == "Paused"]


@pytest.mark.testbed
def test_a_paused_set_makes_no_writes_and_converges_when_unpaused(testbed_factory, tmp_path):
    bed = testbed_factory("pool-policy", audit=True)
    namespace = "pool"
    with bed.api_client() as api, serve_namespace(bed.kubeconfig, namespace) as standin:
        custom = client.CustomObjectsApi(api)
        core = client.CoreV1Api(api)
        make_class(custom, namespace)
        make_set(custom, namespace)
        proc = OperatorProcess(str(bed.kubeconfig), namespace, tmp_path).start()
        try:
            proc.wait_ready()
            settle_pool(standin, 2, custom, namespace, replicas=2)
            before = sorted(e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}=pool"))

            make_policy(custom, namespace, paused=True)

            def paused():
                said = condition(get_set(custom, namespace), "Paused")
                in_force = policy_status(custom, namespace).get("exporterSet") == "pool"
                return said if said and said["status"] == "True" and _paused_event(core, namespace) and in_force \
                    else None

            said = wait_for(paused, timeout=30, message="Paused=True, its Event and the policy in force")
            assert said["reason"] == "Paused"
            since = datetime.now(UTC)

            # The pool would act on each of these: a lease takes an instance
            # (its annotation, a refill), and the warm buffer grows.
            standin.create_lease("lease-a", {"board": "qemu-x86"})
            leased = standin.wait_assigned("lease-a")
            custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                                  {"spec": {"minAvailableReplicas": 3}})
            # The bound: a set made after those changes, in the same
            # namespace and operator, is filled and reports so; the paused
            # set's events were queued before its own.
            make_set(custom, namespace, name="probe", board="probe-board", minAvailableReplicas=1)
            settle_pool(standin, 1, custom, namespace, name="probe", replicas=1)
            assert proc.metric("jumpstarter_exporterset_reconciles_total") > 0
            settled = datetime.now(UTC)
            wait_for(lambda: _written_after(bed.audit_log, settled), timeout=30, message="the audit log flushed")
            assert operator_writes(bed.audit_log, namespace, since, "probe"), "the marker set was written"
            assert operator_writes(bed.audit_log, namespace, since, "pool") == []
            assert sorted(e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}=pool")) == before

            # Unpaused: the set catches up (one leased, three warm) and says so.
            custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", "pool-policy",
                                                  {"spec": {"paused": False}})
            settle_pool(standin, 3, custom, namespace, leasedReplicas=1, replicas=4)
            resumed = condition(get_set(custom, namespace), "Paused")
            assert (resumed["status"], resumed["reason"]) == ("False", "Resumed")
            assert leased in {e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}=pool")}
        finally:
            proc.stop()
            print(f"--- operator log ---\n{proc.log_tail(60)}")


@pytest.mark.testbed
def test_two_policies_for_one_set_conflict_and_the_set_runs_with_defaults(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    make_policy(custom, namespace, name="a", paused=True)
    make_policy(custom, namespace, name="b", paused=True)
    operator()
    # Not paused: both policies are set aside, the pool fills.
    settle_pool(standin, 1, custom, namespace)
    said = condition(get_set(custom, namespace), "PolicyValid")
    assert (said["status"], said["reason"]) == ("False", "ConflictingPolicies")
    for name, rival in (("a", "b"), ("b", "a")):
        status = wait_for(lambda name=name: (policy_status(custom, namespace, name).get("conditions") or [None])[0],
                          timeout=30, message=f"policy {name}'s status")
        assert (status["type"], status["status"], status["reason"]) == ("Valid", "False", "ConflictingPolicies")
        assert f"{rival} also name ExporterSet pool" in status["message"]
        assert policy_status(custom, namespace, name)["exporterSet"] == ""
    assert "ExporterSetPolicies a, b all name this set" in said["message"]
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector="involvedObject.name=pool").items
    assert "ConflictingPolicies" in {e.reason for e in events}
    # One goes: the other is in force (the set is paused), and valid again.
    custom.delete_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", "b")

    def valid_and_paused():
        the_set = get_set(custom, namespace)
        return ((condition(the_set, "PolicyValid") or {}).get("status") == "True"
                and (condition(the_set, "Paused") or {}).get("status") == "True")

    wait_for(valid_and_paused, timeout=30, message="PolicyValid=True and Paused=True")
    wait_for(lambda: policy_status(custom, namespace, "a").get("exporterSet") == "pool", timeout=30,
             message="policy a in force for the set")


@pytest.mark.testbed
def test_the_schema_refuses_bad_controls_and_kubectl_shows_them(api, namespace, testbed):
    custom = client.CustomObjectsApi(api)
    for spec, field in (({"rollout": {"maxUnavailable": 0}}, "spec.rollout.maxUnavailable"),
                        ({"rollout": {"strategy": "Eager"}}, "spec.rollout.strategy"),
                        ({"scaleIn": {"order": "Random"}}, "spec.scaleIn.order"),
                        ({"healing": {"minFailingDuration": "soon"}}, "spec.healing.minFailingDuration"),
                        ({"healing": {"startupFailureThreshold": 0}}, "spec.healing.startupFailureThreshold")):
        with pytest.raises(ApiException) as refused:
            make_policy(custom, namespace, name="bad", **spec)
        assert refused.value.status == 422 and field in refused.value.body, refused.value.body
    made = make_policy(custom, namespace, paused=True, rollout={"strategy": "Proactive"},
                       scaleIn={"order": "OldestFirst"})
    # Defaults filled by the API server.
    assert made["spec"]["rollout"]["maxUnavailable"] == 1
    shown = subprocess.run([str(BIN_DIR / "kubectl"), "--kubeconfig", str(testbed.kubeconfig), "get", "esp",
                            "-n", namespace], capture_output=True, text=True, check=True).stdout.split("\n")
    assert shown[0].split() == ["NAME", "SET", "PAUSED", "ROLLOUT", "SCALE-IN", "AGE"]
    assert shown[1].split()[:5] == ["pool-policy", "pool", "true", "Proactive", "OldestFirst"]
    wide = subprocess.run([str(BIN_DIR / "kubectl"), "--kubeconfig", str(testbed.kubeconfig), "get", "esp",
                           "-n", namespace, "-o", "wide"], capture_output=True, text=True, check=True).stdout
    assert wide.split("\n")[0].split() == ["NAME", "SET", "PAUSED", "ROLLOUT", "SCALE-IN", "VALID", "AGE"]


@pytest.mark.testbed
def test_beside_upstreams_exporterset_crd_the_policy_keeps_what_the_set_would_lose(testbed_factory):
    """Why the controls are an object of their own: on a cluster that holds
    upstream Jumpstarter's ExporterSet CRD, a control written on the set is
    pruned, while the ExporterSetPolicy CRD installs beside it and keeps it."""
    bed = testbed_factory("upstream-policy", controllers=False,
                          crd_files=upstream_crd_files() + [ROOT / "config/crd/exportersetpolicies.yaml"])
    with bed.api_client() as api:
        custom = client.CustomObjectsApi(api)
        the_set = make_set(custom, "default", paused=True, rollout={"strategy": "Proactive"})
        assert "paused" not in the_set["spec"] and "rollout" not in the_set["spec"]
        made = make_policy(custom, "default", paused=True, rollout={"strategy": "Proactive"})
        assert made["spec"]["paused"] is True and made["spec"]["rollout"]["strategy"] == "Proactive"
        in_force, said = policy.policy_for(the_set, [made])
        assert said is None and in_force["paused"] is True and in_force["rollout"]["strategy"] == "Proactive"
