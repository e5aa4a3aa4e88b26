"""The operator against the real test bed: kube-apiserver, etcd, kwok Pods.

The Jumpstarter controller serving the test's namespace is the stand-in
(the ``standin`` fixture): it issues credentials, matches leases, and the
exporter process of every running Pod registers with it over gRPC with the
config the operator wrote (endpoint, controller CA, token).
"""

from __future__ import annotations

import json
import subprocess

from jumpstarter_standin import wait_for
from kubernetes import client
from operator_process import ROOT
from pool_helpers import (
    GROUP,
    QEMU_PARAMETERS,
    SET_LABEL,
    condition,
    get_set,
    make_class,
    make_set,
    settle_pool,
)


def test_pool_fills_refills_recycles_and_shrinks(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    make_class(custom, namespace)
    make_set(custom, namespace)
    proc = operator()

    status = settle_pool(standin, 2, custom, namespace)
    assert status["replicas"] == 2
    exporters = standin.exporters(f"{SET_LABEL}=pool")
    assert sorted(e["metadata"]["name"] for e in exporters) == ["pool-0", "pool-1"]
    for exporter in exporters:
        assert exporter["metadata"]["labels"]["board"] == "qemu-x86"
        owner = exporter["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("ExporterSet", "pool", True)
    pods = standin.pods()
    assert sorted(p.metadata.name for p in pods) == ["pool-0", "pool-1"]
    assert all(p.status.phase == "Running" for p in pods)
    assert condition(get_set(custom, namespace), "Available")["status"] == "True"

    # A lease takes one: the pool refills to two available.
    standin.create_lease("lease-a", {"board": "qemu-x86"})
    assert standin.wait_assigned("lease-a") == "pool-0"
    status = settle_pool(standin, 2, custom, namespace, leasedReplicas=1, replicas=3)
    assert status["readyReplicas"] == 3

    # The lease ends: ExitAndReplace deletes the used instance, and the
    # lease stays as history.
    standin.release("lease-a")
    wait_for(lambda: "pool-0" not in {e["metadata"]["name"] for e in standin.exporters()},
             message="pool-0 recycled")
    wait_for(lambda: "pool-0" not in {p.metadata.name for p in standin.pods()}, message="pool-0 Pod gone")

    # ExitAndReplace removed the used instance; the pool is at its target
    # of two again without a surplus.
    status = settle_pool(standin, 2, custom, namespace, replicas=2, leasedReplicas=0)
    assert "pool-0" not in {e["metadata"]["name"] for e in standin.exporters()}
    assert standin.lease("lease-a")["status"]["ended"] is True

    # A smaller buffer makes one surplus: after the 2 s cooldown it is
    # disabled, then deleted with its Pod and config Secret, and nothing else.
    before = {e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}=pool")}
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                          {"spec": {"minAvailableReplicas": 1}})

    def shrunk():
        names = {e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}=pool")}
        return names if len(names) == 1 else None

    remaining = wait_for(shrunk, timeout=60, message="pool shrunk to 1")
    assert remaining < before
    settle_pool(standin, 1, custom, namespace, replicas=1)
    assert {p.metadata.name for p in standin.pods() if not p.metadata.deletion_timestamp} == remaining
    secrets = {s.metadata.name for s in core.list_namespaced_secret(namespace, label_selector=SET_LABEL).items}
    assert secrets == {f"{name}-config" for name in remaining}
    reasons = {e.reason for e in core.list_namespaced_event(namespace).items if e.involved_object.name == "pool"}
    assert {"ScaledUp", "ScaledDown"} <= reasons
    assert proc.metric("jumpstarter_exporterset_scale_up_total") >= 3
    assert proc.metric("jumpstarter_exporterset_scale_down_total") >= 1


def steady_pool(api, namespace, standin, operator):
    """A class, a set of two and a running operator, settled and idle."""
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, maxReplicas=2)
    proc = operator()
    settle_pool(standin, 2, custom, namespace)
    # Settled: the last backend run has ended and its outcome is written.
    wait_for(lambda: (condition(get_set(custom, namespace), "Successful") or {}).get("status") == "True"
             and proc.metric("jumpstarter_exporterset_backend_runs") == 0
             and proc.metric("jumpstarter_exporterset_workqueue_depth") == 0, message="idle operator")
    return custom, standin, proc


def reconcile_by_hand(namespace):
    result = subprocess.run(
        ["ansible-playbook", "playbooks/reconcile.yml",
         "-e", "exporterset_name=pool", "-e", f"exporterset_namespace={namespace}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_steady_pool_runs_no_playbook_and_writes_nothing(api, namespace, standin, operator):
    custom, _, proc = steady_pool(api, namespace, standin, operator)
    before = get_set(custom, namespace)
    runs_before = proc.metric("jumpstarter_exporterset_playbook_runs_total")
    fast_before = proc.metric("jumpstarter_exporterset_fast_path_total")

    # An unrelated change to the set's labels triggers a reconcile with nothing to do.
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                          {"metadata": {"labels": {"touched": "yes"}}})
    wait_for(lambda: proc.metric("jumpstarter_exporterset_fast_path_total") > fast_before,
             message="a fast-path reconcile")
    assert proc.metric("jumpstarter_exporterset_playbook_runs_total") == runs_before
    after = get_set(custom, namespace)
    assert after["metadata"]["labels"]["touched"] == "yes"
    # The only write since is our own label patch: the status was left alone.
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    assert after["status"] == before["status"]


def test_playbook_by_hand_agrees_with_fast_path(api, namespace, standin, operator, testbed):
    """At steady state the operator does nothing; the playbook run by hand
    plans from the API the same way and so changes nothing either."""
    custom, standin, proc = steady_pool(api, namespace, standin, operator)
    proc.stop()
    result = reconcile_by_hand(namespace)
    recap = [line for line in result.stdout.splitlines() if line.startswith("localhost")]
    assert recap and "changed=0" in recap[-1], result.stdout

    # One exporter goes offline: the by-hand run sees it and records it in the
    # status as the operator would, with its own outcome condition.
    standin.kill_pod_exporter("pool-1")
    standin.wait_online("pool-1", online=False)
    reconcile_by_hand(namespace)
    status = get_set(custom, namespace)["status"]
    assert status["readyReplicas"] == 1
    assert condition(get_set(custom, namespace), "Successful")["status"] == "True"


def test_invalid_parameters_get_condition_and_event(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    make_class(custom, namespace)
    make_set(custom, namespace, parameters={"resources": {"memory": "8Gx"}})
    operator()

    def degraded():
        cond = condition(get_set(custom, namespace), "Degraded")
        return cond if cond and cond["status"] == "True" else None

    cond = wait_for(degraded, message="Degraded condition")
    assert cond["reason"] == "InvalidParameters"
    assert "parameters.resources.memory" in cond["message"] and "8Gx" in cond["message"]
    events = wait_for(
        lambda: [e for e in core.list_namespaced_event(namespace).items if e.reason == "InvalidParameters"],
        message="InvalidParameters event",
    )
    assert "parameters.resources.memory" in events[0].message
    assert events[0].involved_object.name == "pool"
    # Nothing can be made, but leases for the set wait on its dormant Exporter.
    assert [e["metadata"]["name"] for e in standin.exporters()] == ["pool-dormant-0"]

    # Fixing the class's parameters is a class change: the set re-merges.
    custom.patch_namespaced_custom_object(
        *GROUP, namespace, "exportersets", "pool", {"spec": {"parameters": {"resources": {"memory": "512Mi"}}}}
    )
    wait_for(lambda: len(standin.exporters()) == 2, message="exporters after fix")
    cond = wait_for(lambda: (c := condition(get_set(custom, namespace), "Degraded")) and c["status"] == "False"
                    and c, message="Degraded cleared")
    assert cond["reason"] != "InvalidParameters"


def test_class_change_reaches_new_pods(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1, parameters={"resources": {"memory": "384Mi"}})
    operator()
    settle_pool(standin, 1, custom, namespace)
    pod = standin.pods()[0]
    assert "-m" in pod.spec.containers[0].command
    assert pod.spec.containers[0].command[pod.spec.containers[0].command.index("-m") + 1] == "384"

    # The class now asks for 2 vCPUs: the next instance gets them, and the
    # set's memory override still wins.
    params = json.loads(json.dumps(QEMU_PARAMETERS))
    params["resources"]["cpu"] = 2
    custom.patch_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small",
                                          {"spec": {"parameters": params}})
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                          {"spec": {"minAvailableReplicas": 2}})
    settle_pool(standin, 2, custom, namespace)
    newest = next(p for p in standin.pods() if p.metadata.name == "pool-1")
    command = newest.spec.containers[0].command
    assert command[command.index("-smp") + 1] == "2"
    assert command[command.index("-m") + 1] == "384"
