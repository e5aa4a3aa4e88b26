"""Whichever runs a set, the operator or ``ansible-playbook
playbooks/reconcile.yml`` (what an AWX job runs on a schedule), the set ends
in the same state: the same Exporters, Pods and config Secrets, the same
status counters and conditions, the same finalizer, and once it is deleted
the same left: nothing (class reclaimPolicy Delete), or its Exporters and
their backends, detached from it (Retain).

One scenario, run twice side by side on one bed: in one namespace the
playbook is run again and again until a run changes nothing, as a schedule
would; in another the operator runs. Each namespace is served by its own
Jumpstarter controller stand-in (credentials, registration, Online).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from jumpstarter_standin import wait_for
from jumpstarter_standin.pytest_plugin import serve_namespace
from kubernetes import client
from operator_process import ROOT, OperatorProcess
from pool_helpers import GROUP, SET_LABEL, make_class, make_set

# The set's status fields that describe the pool (counters, the selector,
# the generation seen); conditions are compared by type, status and reason.
STATUS_FIELDS = ("replicas", "readyReplicas", "availableReplicas", "unavailableReplicas", "leasedReplicas",
                 "selector", "observedGeneration")
NAME = re.compile(r"^pool-\d+$")
# Runs of the playbook a converge may take (each one a scheduled AWX job).
MAX_RUNS = 12


def _run_playbook(namespace: str) -> int:
    """One ``ansible-playbook playbooks/reconcile.yml`` of the set; returns
    the number of changed tasks."""
    result = subprocess.run(
        [f"{sys.prefix}/bin/ansible-playbook", "playbooks/reconcile.yml",
         "-e", "exporterset_name=pool", "-e", f"exporterset_namespace={namespace}",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    recap = [line for line in result.stdout.splitlines() if line.startswith("localhost")]
    assert recap, result.stdout[-3000:]
    return int(re.search(r"changed=(\d+)", recap[-1]).group(1))


def state(api, namespace: str) -> dict:
    """The set's end state with what differs between two namespaces taken out."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    try:
        pool = custom.get_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool")
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        pool = None
    exporters = [e for e in custom.list_namespaced_custom_object(
        "jumpstarter.dev", "v1alpha1", namespace, "exporters", label_selector=f"{SET_LABEL}=pool")["items"]]
    pods = core.list_namespaced_pod(namespace, label_selector=SET_LABEL).items
    secrets = core.list_namespaced_secret(namespace, label_selector=SET_LABEL).items
    normalized = {
        "exporters": sorted(
            (bool(NAME.match(e["metadata"]["name"])), e["metadata"]["name"],
             tuple(sorted(e["metadata"].get("labels", {}).items())), e["spec"].get("enabled", True),
             bool(e["metadata"].get("deletionTimestamp")),
             any(ref.get("kind") == "ExporterSet" for ref in e["metadata"].get("ownerReferences") or []))
            for e in exporters),
        "pods": sorted((p.metadata.name, tuple(sorted((p.metadata.labels or {}).items())), p.status.phase,
                        bool(p.metadata.deletion_timestamp)) for p in pods),
        "secrets": sorted((s.metadata.name, tuple(sorted((s.metadata.labels or {}).items()))) for s in secrets),
    }
    if pool is not None:
        status = pool.get("status") or {}
        normalized["set"] = {
            "finalizers": sorted(pool["metadata"].get("finalizers") or []),
            "deleting": bool(pool["metadata"].get("deletionTimestamp")),
            "status": {key: status.get(key) for key in STATUS_FIELDS},
            "conditions": sorted((c["type"], c["status"], c.get("reason")) for c in status.get("conditions") or []),
        }
    return normalized


def converge_by_hand(api, namespace: str, done) -> tuple[dict, int]:
    """Run the playbook until a run changes nothing and ``done(state)``
    holds, as a scheduled job would; returns the state and the runs made."""
    for runs in range(1, MAX_RUNS + 1):
        changed = _run_playbook(namespace)
        now = state(api, namespace)
        if changed == 0 and done(now):
            return now, runs
        # The controller and the exporters take their turn between two runs.
        time.sleep(1)
    raise AssertionError(f"the playbook did not converge in {MAX_RUNS} runs: {now}")


def agree(api, by_hand_namespace: str, operator_namespace: str, expected: dict, what: str, timeout=120) -> dict:
    """Until the operator's namespace shows the by-hand state; fails naming the difference."""
    last = {}

    def same():
        last["operator"] = state(api, operator_namespace)
        return last["operator"] == expected

    try:
        wait_for(same, timeout=timeout, interval=0.5, message=what)
    except AssertionError:
        pass
    assert last["operator"] == expected, (
        f"{what}: the operator and the playbook disagree\n"
        f"playbook ({by_hand_namespace}): {expected}\noperator ({operator_namespace}): {last['operator']}")
    return expected


def available(count):
    def done(now):
        status = (now.get("set") or {}).get("status") or {}
        return status.get("availableReplicas") == count and status.get("replicas") == count
    return done


@pytest.mark.testbed
@pytest.mark.slow
@pytest.mark.parametrize("reclaim", ["Delete", "Retain"])
def test_playbook_and_operator_end_in_the_same_state(testbed, api, namespace, standin, tmp_path, reclaim):
    by_hand, by_operator = namespace, f"{namespace}-op"
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    with serve_namespace(testbed.kubeconfig, by_operator):
        try:
            operator = OperatorProcess(str(testbed.kubeconfig), by_operator, tmp_path).start()
            try:
                operator.wait_ready()
                for ns in (by_hand, by_operator):
                    make_class(custom, ns, reclaimPolicy=reclaim)
                    make_set(custom, ns, maxReplicas=4, minAvailableReplicas=2)

                # A warm buffer of two: two Exporters, their Pods and config Secrets.
                filled, runs = converge_by_hand(api, by_hand, available(2))
                print(f"fill: {runs} playbook runs")
                assert [e[:2] for e in filled["exporters"]] == [(True, "pool-0"), (True, "pool-1")]
                agree(api, by_hand, by_operator, filled, "a warm buffer of two")

                # A smaller buffer: after the cooldown one Exporter goes with its backend.
                for ns in (by_hand, by_operator):
                    custom.patch_namespaced_custom_object(*GROUP, ns, "exportersets", "pool",
                                                          {"spec": {"minAvailableReplicas": 1}})
                shrunk, runs = converge_by_hand(api, by_hand, available(1))
                print(f"shrink: {runs} playbook runs")
                assert len(shrunk["exporters"]) == len(shrunk["pods"]) == len(shrunk["secrets"]) == 1
                agree(api, by_hand, by_operator, shrunk, "a warm buffer of one")

                # Deleted: the set waits for its teardown, which leaves nothing
                # (Delete), or the Exporters with their backends, detached (Retain).
                for ns in (by_hand, by_operator):
                    custom.delete_namespaced_custom_object(*GROUP, ns, "exportersets", "pool")
                waiting = state(api, by_hand)
                assert (waiting.get("set") or {}).get("deleting"), (
                    f"the set deleted by hand went before any teardown ran: {waiting}")
                gone, runs = converge_by_hand(api, by_hand, lambda now: "set" not in now)
                print(f"teardown: {runs} playbook runs")
                if reclaim == "Delete":
                    left = {"exporters": [], "pods": [], "secrets": []}
                    wait_for(lambda: state(api, by_hand) == left, timeout=60, message="nothing left by hand")
                else:
                    left = gone
                    # The same Exporters, no longer owned by the set.
                    assert [e[:-1] for e in left["exporters"]] == [e[:-1] for e in shrunk["exporters"]], left
                    assert not any(e[-1] for e in left["exporters"]), left
                    assert left["pods"] == shrunk["pods"] and left["secrets"] == shrunk["secrets"], left
                agree(api, by_hand, by_operator, left, f"what is left after delete ({reclaim})")
            finally:
                operator.stop()
                print(f"--- operator log ---\n{operator.log_tail(100)}")
        finally:
            core.delete_namespace(by_operator)
