"""Whichever runs a set, the operator or ``ansible-playbook
playbooks/reconcile.yml`` (what an AWX job runs on a schedule), the set ends
in the same state: the same Exporters, Pods and config Secrets, the same
status counters and conditions, the same finalizer, and once it is deleted
the same left: nothing (class reclaimPolicy Delete), or its Exporters and
their backends, detached from it (Retain).

One scenario, run four times side by side on one bed: for each reclaim
policy, in one namespace the playbook is run again and again until a run
changes nothing, as a schedule would, and in another the operator runs.
The two by-hand sets are run at the same time, as two scheduled jobs would
be, so a step costs the runs of the slower of the two. Each namespace is
served by its own Jumpstarter controller stand-in (credentials,
registration, Online).
"""

from __future__ import annotations

import contextlib
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
EXPORTER_LABEL = "virtualtarget.jumpstarter.dev/exporter"
NAME = re.compile(r"^pool-\d+$")
# Runs of the playbook a converge may take (each one a scheduled AWX job).
MAX_RUNS = 12


def _start_playbook(namespace: str) -> subprocess.Popen:
    """One ``ansible-playbook playbooks/reconcile.yml`` of the set, started."""
    return subprocess.Popen(
        [f"{sys.prefix}/bin/ansible-playbook", "playbooks/reconcile.yml",
         "-e", "exporterset_name=pool", "-e", f"exporterset_namespace={namespace}",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _changed(run: subprocess.Popen) -> int:
    """The number of changed tasks of a started run, once it ends."""
    try:
        stdout, stderr = run.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        run.kill()
        stdout, stderr = run.communicate()
        raise AssertionError(f"the playbook did not end in 300 s: {stdout[-6000:]}{stderr[-2000:]}") from None
    assert run.returncode == 0, stdout[-6000:] + stderr[-2000:]
    recap = [line for line in stdout.splitlines() if line.startswith("localhost")]
    assert recap, stdout[-3000:]
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


def _condition_true(obj: dict, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def settled(api, namespace: str) -> bool:
    """The controller and the exporters have taken their turn after a run:
    every enabled Exporter of the set has its credential, and every one
    whose Pod runs is Registered and Online."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    exporters = custom.list_namespaced_custom_object(
        "jumpstarter.dev", "v1alpha1", namespace, "exporters", label_selector=f"{SET_LABEL}=pool")["items"]
    with_pod = {(p.metadata.labels or {}).get(EXPORTER_LABEL)
                for p in core.list_namespaced_pod(namespace, label_selector=SET_LABEL).items
                if not p.metadata.deletion_timestamp}
    for exporter in exporters:
        if not exporter["spec"].get("enabled", True) or exporter["metadata"].get("deletionTimestamp"):
            continue
        if not ((exporter.get("status") or {}).get("credential") or {}).get("name"):
            return False
        if exporter["metadata"]["name"] in with_pod and not (
                _condition_true(exporter, "Registered") and _condition_true(exporter, "Online")):
            return False
    return True


def converge_by_hand(api, namespaces, done, what: str) -> dict[str, dict]:
    """Run the playbook of each set, all at the same time, until a run
    changes nothing and ``done(state)`` holds for it, as scheduled jobs
    would; between two runs the controller and the exporters take their
    turn (``settled``). Returns each namespace's state."""
    pending, converged, now = list(namespaces), {}, {}
    for runs in range(1, MAX_RUNS + 1):
        started = time.monotonic()
        # Every run started before any is waited for: they run side by side.
        running = {namespace: _start_playbook(namespace) for namespace in pending}
        changed = {namespace: _changed(run) for namespace, run in running.items()}
        for namespace in list(pending):
            now[namespace] = state(api, namespace)
            if changed[namespace] == 0 and done(now[namespace]):
                converged[namespace] = now[namespace]
                pending.remove(namespace)
        print(f"{what}: run {runs} of {len(running)} set(s) took {time.monotonic() - started:.1f} s, "
              f"changed {changed}")
        if not pending:
            return converged
        wait_for(lambda: all(settled(api, namespace) for namespace in pending), timeout=60, interval=0.25,
                 message=f"{what}: the controller's turn in {pending}")
    raise AssertionError(f"{what}: the playbook did not converge in {MAX_RUNS} runs: "
                         f"{ {namespace: now.get(namespace) for namespace in pending} }")


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
def test_playbook_and_operator_end_in_the_same_state(testbed, api, namespace, standin, tmp_path):
    # reclaimPolicy -> (the namespace run by hand, the operator's namespace)
    spaces = {"Delete": (namespace, f"{namespace}-op"), "Retain": (f"{namespace}-r", f"{namespace}-r-op")}
    by_hand = [hand for hand, _ in spaces.values()]
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    with contextlib.ExitStack() as stack:
        # The `standin` fixture serves the first namespace; each other has its own.
        for extra in [ns for pair in spaces.values() for ns in pair if ns != namespace]:
            stack.callback(core.delete_namespace, extra)
            stack.enter_context(serve_namespace(testbed.kubeconfig, extra))
        operators = [OperatorProcess(str(testbed.kubeconfig), by_operator, tmp_path / reclaim).start()
                     for reclaim, (_, by_operator) in spaces.items()]
        try:
            for operator in operators:
                operator.wait_ready()
            for reclaim, pair in spaces.items():
                for ns in pair:
                    make_class(custom, ns, reclaimPolicy=reclaim)
                    # No cooldown: the shrink is checked, not how long it waits.
                    make_set(custom, ns, maxReplicas=4, minAvailableReplicas=2, scaleDownCooldown="0s")

            # A warm buffer of two: two Exporters, their Pods and config Secrets.
            filled = converge_by_hand(api, by_hand, available(2), "fill")
            for reclaim, (hand, by_operator) in spaces.items():
                assert [e[:2] for e in filled[hand]["exporters"]] == [(True, "pool-0"), (True, "pool-1")], reclaim
                agree(api, hand, by_operator, filled[hand], f"a warm buffer of two ({reclaim})")

            # A smaller buffer: one Exporter goes with its backend.
            for pair in spaces.values():
                for ns in pair:
                    custom.patch_namespaced_custom_object(*GROUP, ns, "exportersets", "pool",
                                                          {"spec": {"minAvailableReplicas": 1}})
            shrunk = converge_by_hand(api, by_hand, available(1), "shrink")
            for reclaim, (hand, by_operator) in spaces.items():
                assert len(shrunk[hand]["exporters"]) == len(shrunk[hand]["pods"]) == len(
                    shrunk[hand]["secrets"]) == 1, (reclaim, shrunk[hand])
                agree(api, hand, by_operator, shrunk[hand], f"a warm buffer of one ({reclaim})")

            # Deleted: the set waits for its teardown, which leaves nothing
            # (Delete), or the Exporters with their backends, detached (Retain).
            for pair in spaces.values():
                for ns in pair:
                    custom.delete_namespaced_custom_object(*GROUP, ns, "exportersets", "pool")
            for reclaim, (hand, _) in spaces.items():
                waiting = state(api, hand)
                assert (waiting.get("set") or {}).get("deleting"), (
                    f"the set deleted by hand went before any teardown ran ({reclaim}): {waiting}")
            gone = converge_by_hand(api, by_hand, lambda now: "set" not in now, "teardown")
            for reclaim, (hand, by_operator) in spaces.items():
                if reclaim == "Delete":
                    left = {"exporters": [], "pods": [], "secrets": []}
                    wait_for(lambda hand=hand, left=left: state(api, hand) == left, timeout=60,
                             message="nothing left by hand")
                else:
                    left = gone[hand]
                    # The same Exporters, no longer owned by the set.
                    before = shrunk[hand]
                    assert [e[:-1] for e in left["exporters"]] == [e[:-1] for e in before["exporters"]], left
                    assert not any(e[-1] for e in left["exporters"]), left
                    assert left["pods"] == before["pods"] and left["secrets"] == before["secrets"], left
                agree(api, hand, by_operator, left, f"what is left after delete ({reclaim})")
        finally:
            for operator in operators:
                operator.stop()
            for operator in operators:
                print(f"--- operator log {operator.namespace} ---\n{operator.log_tail(100)}")
