"""The operator's RBAC is what it uses, no more: a representative run of the
real operator under its own service account on a bed that writes an audit
log, then every (API group, resource, verb) the account sent is compared
with what config/rbac grants.

A verb the operator needs and the Roles lack already fails every operator
test (they all run as this account, see operator_process.py); this test
fails on the other side, a grant nothing used. A few grants are needed only
on paths this run cannot reach; they are listed in ``UNREACHED`` with the
reason, and docs/install.md says the same.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml
from audit_log import SELF_REVIEWS, audited, written_after
from jumpstarter_standin import wait_for
from jumpstarter_standin.pytest_plugin import serve_namespace
from kubernetes import client
from operator_process import ROOT, USERNAME, OperatorProcess
from pool_helpers import GROUP, SET_LABEL, make_class, make_set, settle_pool

RBAC = ROOT / "config" / "rbac"
# The qemu operator's Roles: this run's sets are qemu.jumpstarter.dev sets.
ROLE_FILES = ("role.yaml", "pool_role_qemu.yaml", "leader_election_role.yaml")

# Grants this run cannot show in the audit log, each with why it is kept.
# Grants whose use in this run depends on timing: they are neither required
# to be used nor to go unused.
TIMING = {
    # A repeated Event (same object, reason and message) bumps the count of
    # the existing one; whether a message recurs within the run is timing.
    ("", "events", "patch"): "Event repeat within the run",
}
UNREACHED = {
    # The OwnerReferencesPermissionEnforcement admission plugin (on in
    # OpenShift, off in the bed) checks `update` on the owner's finalizers
    # when an object gets a blockOwnerDeletion owner reference: Exporters
    # (owned by their set), instance Pods and config Secrets (owned by their
    # Exporter). No request is made, so nothing is audited.
    ("virtualtarget.jumpstarter.dev", "exportersets/finalizers", "update"): "owner reference admission check",
    ("jumpstarter.dev", "exporters/finalizers", "update"): "owner reference admission check",
    # An InPlaceReuse reset of a QEMU instance in its running Pod runs the
    # reset command through the API's exec (a WebSocket: get, and create on
    # newer API servers); this run's sets replace their instances, and the
    # reset is run on the real node (tests/qemu/test_incluster_pool.py), by the
    # operator's Pod under this same account.
    ("", "pods/exec", "get"): "reset in place in a running Pod",
    ("", "pods/exec", "create"): "reset in place in a running Pod",
}


def granted() -> set[tuple[str, str, str]]:
    grants = set()
    for name in ROLE_FILES:
        role = yaml.safe_load((RBAC / name).read_text())
        for rule in role["rules"]:
            assert not rule.get("resourceNames"), f"{name}: resourceNames would need a rule of their own here"
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants.add((group, resource, verb))
    return grants


@pytest.mark.testbed
def test_every_grant_is_used_and_nothing_is_refused(testbed_factory, tmp_path):
    bed = testbed_factory("rbac-audit", audit=True)
    namespace = "pool"
    election = ("--leader-elect", "--leader-election-id", "rbac-audit", "--leader-election-namespace", namespace)
    with bed.api_client() as api, serve_namespace(bed.kubeconfig, namespace) as standin:
        custom = client.CustomObjectsApi(api)
        core = client.CoreV1Api(api)
        make_class(custom, namespace)
        make_set(custom, namespace)
        # A policy: the informer, and its status (the set it is in force for).
        custom.create_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", {
            "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSetPolicy",
            "metadata": {"name": "pool"}, "spec": {"exporterSetName": "pool"}})
        proc = OperatorProcess(str(bed.kubeconfig), namespace, tmp_path, *election).start()
        try:
            proc.wait_ready()
            # Scale up: Exporters, credentials, config Secrets, Pods, status, Events.
            settle_pool(standin, 2, custom, namespace)
            wait_for(lambda: (custom.get_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", "pool")
                              .get("status") or {}).get("exporterSet") == "pool", message="the policy's status")
            # A lease ends: ExitAndReplace deletes the used instance and refills.
            standin.create_lease("lease-a", {"board": "qemu-x86"})
            used_name = standin.wait_assigned("lease-a")
            settle_pool(standin, 2, custom, namespace, leasedReplicas=1, replicas=3)
            standin.release("lease-a")
            wait_for(lambda: used_name not in {e["metadata"]["name"] for e in standin.exporters()},
                     message=f"{used_name} recycled")
            settle_pool(standin, 2, custom, namespace, replicas=2, leasedReplicas=0)
            # Scale down after the cooldown.
            custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                                  {"spec": {"minAvailableReplicas": 1}})
            settle_pool(standin, 1, custom, namespace, replicas=1)
            # An instance Pod is lost: a new one, with its config Secret rewritten.
            (pod,) = [p for p in standin.pods() if not p.metadata.deletion_timestamp]
            core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
            wait_for(lambda: [p for p in standin.pods() if p.metadata.name == pod.metadata.name
                              and p.metadata.uid != pod.metadata.uid], message="the Pod made again")
            settle_pool(standin, 1, custom, namespace, replicas=1)
            # The set is deleted: teardown, then the finalizer goes.
            custom.delete_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool")

            def gone():
                sets = custom.list_namespaced_custom_object(*GROUP, namespace, "exportersets")["items"]
                pods = core.list_namespaced_pod(namespace, label_selector=SET_LABEL).items
                return not sets and not [p for p in pods if not p.metadata.deletion_timestamp]

            wait_for(gone, timeout=120, message="the set and its Pods gone")
        finally:
            # SIGTERM: the leader releases its Lease on the way out.
            proc.stop()
            print(f"--- operator log ---\n{proc.log_tail(40)}")
        lease = client.CoordinationV1Api(api).read_namespaced_lease("rbac-audit", namespace)
        assert lease.spec.holder_identity is None

    # The audit backend writes in batches: once it holds an entry from after
    # the operator's exit, it holds all of the operator's.
    stopped = datetime.now(UTC)
    wait_for(lambda: written_after(bed.audit_log, stopped), timeout=30, message="the audit log flushed")
    used, refused = audited(bed.audit_log, USERNAME)
    assert refused == [], "requests the Roles do not allow"
    grants = granted()
    print("used:", *sorted(used), sep="\n  ")
    assert used - grants - SELF_REVIEWS == set()
    unused = grants - used - set(UNREACHED) - set(TIMING)
    assert unused == set(), f"granted but never used: {sorted(unused)}"
    # An UNREACHED entry that the run did reach belongs in the check above.
    assert set(UNREACHED) & used == set()
    assert set(UNREACHED) <= grants
