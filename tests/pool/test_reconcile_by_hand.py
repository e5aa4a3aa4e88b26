"""The reconcile role run by hand, more than once in one play (an admin's or
an AWX job's playbook over several sets): each run observes and plans for
its own set, never for the one a previous run left in the host's facts.
Run by hand, the role records what the operator records in process: the
outcome, and the status of the ExporterSetPolicies naming the set; a pass
makes at most two module calls, around its backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy
from jumpstarter_standin import wait_for
from kubernetes import client
from operator_process import ROOT
from pool_helpers import GROUP, SET_LABEL, get_set, make_class, make_set


def test_two_sets_in_one_play_each_get_their_own_plan(api, namespace, standin, tmp_path):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, name="alpha", board="alpha", minAvailableReplicas=1)
    make_set(custom, namespace, name="beta", board="beta", minAvailableReplicas=2)
    playbook = tmp_path / "two-sets.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{"name": f"Reconcile {name}", "ansible.builtin.include_role": {
            "name": "jumpstarter.virtual_exporters.reconcile"},
            "vars": {"exporterset_name": name, "exporterset_namespace": namespace}}
            for name in ("alpha", "beta", "alpha")],
    }]))
    result = subprocess.run(
        [f"{sys.prefix}/bin/ansible-playbook", "-i", "localhost,", str(playbook),
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    for name, count in (("alpha", 1), ("beta", 2)):
        names = sorted(e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}={name}"))
        assert names == [f"{name}-{i}" for i in range(count)], (name, names)
        assert all(e["metadata"]["labels"]["board"] == name for e in standin.exporters(f"{SET_LABEL}={name}"))


def _reconcile(namespace, *extra, env=None):
    return subprocess.run(
        [f"{sys.prefix}/bin/ansible-playbook", "playbooks/reconcile.yml",
         "-e", "exporterset_name=pool", "-e", f"exporterset_namespace={namespace}",
         "-e", f"ansible_python_interpreter={sys.executable}", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def _counted(namespace):
    """A run whose output is its tasks' results (the json callback): the
    run, and the collection's exporterset modules it called, in order."""
    run = _reconcile(namespace, env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    results = json.loads(run.stdout[run.stdout.index("{"):])
    called = [result["action"].rsplit(".", 1)[-1]
              for play in results["plays"] for task in play["tasks"]
              for result in [task["hosts"].get("localhost") or {}]
              if result and not result.get("skipped") and "exporterset_" in (result.get("action") or "")]
    return run, called


def _outcome(custom, namespace):
    conditions = get_set(custom, namespace).get("status", {}).get("conditions") or []
    return {c["type"]: c for c in conditions if c["type"] in ("Successful", "Failure")}


def test_successful_only_once_the_backends_are_made(api, namespace, standin):
    """Run by hand as by the operator: a reconcile whose backends could not
    be made is a Failure naming the step, never Successful."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1, maxReplicas=1)
    # No Pod may be made in the namespace.
    core.create_namespaced_resource_quota(namespace, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="no-pods"), spec=client.V1ResourceQuotaSpec(hard={"pods": "0"})))
    # No backend can be made yet (no credential): one module call does the pass.
    _, called = _counted(namespace)
    assert called == ["exporterset_pass"], called
    wait_for(lambda: ((standin.exporter("pool-0").get("status") or {}).get("credential") or {}).get("name"),
             message="pool-0's credential")

    failed = _reconcile(namespace)
    assert failed.returncode != 0, failed.stdout[-4000:]
    outcome = _outcome(custom, namespace)
    assert outcome["Successful"]["status"] == "False", outcome
    assert (outcome["Failure"]["status"], outcome["Failure"]["reason"]) == ("True", "ReconcileFailed"), outcome
    assert outcome["Failure"]["message"].startswith("Create the config Secrets and Pods of new instances: "), outcome
    assert "pool-0: 403 Forbidden" in outcome["Failure"]["message"], outcome
    events = [e for e in core.list_namespaced_event(namespace).items
              if e.involved_object.name == "pool" and e.reason == "ReconcileFailed"]
    assert events and events[0].type == "Warning", events

    core.delete_namespaced_resource_quota("no-pods", namespace)
    wait_for(lambda: not core.list_namespaced_resource_quota(namespace).items, message="the quota gone")
    # The backends made between the pass's two calls; the second records the outcome.
    _, called = _counted(namespace)
    assert called == ["exporterset_pass", "exporterset_pass"], called
    assert standin.pods()
    outcome = _outcome(custom, namespace)
    assert (outcome["Successful"]["status"], outcome["Failure"]["status"]) == ("True", "False"), outcome


def test_check_mode_writes_nothing(api, namespace):
    """--check reports the finalizer, the Exporters and the outcome it would
    write, and writes none of them, nor the status of the set's policy."""
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    _make_policy(custom, namespace, "steady")
    before = get_set(custom, namespace)
    checked = _reconcile(namespace, "--check")
    assert checked.returncode == 0, checked.stdout[-4000:]
    recap = [line for line in checked.stdout.splitlines() if line.startswith("localhost")][-1]
    assert "changed=0" not in recap, checked.stdout[-4000:]
    after = get_set(custom, namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert not after["metadata"].get("finalizers") and not after.get("status")
    assert custom.list_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters")["items"] == []
    assert not _policies(custom, namespace)["steady"].get("status")


def _make_policy(custom, namespace, name, **spec):
    body = {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSetPolicy",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"exporterSetName": "pool", **spec}}
    return custom.create_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", body)


def _policies(custom, namespace):
    return {p["metadata"]["name"]: p for p in
            custom.list_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies")["items"]}


def _valid(esp):
    return next(c for c in esp["status"]["conditions"] if c["type"] == "Valid")


def test_a_run_by_hand_writes_the_status_of_the_policies_naming_the_set(api, namespace):
    """The policy's status as the operator's policy reconciler writes it
    (pool/policy.py): in force for the set, then in conflict with a second
    policy naming it (test_check_mode_writes_nothing: --check writes none)."""
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=0)
    _make_policy(custom, namespace, "steady", paused=True)
    first = _reconcile(namespace)
    assert first.returncode == 0, first.stdout[-4000:]
    steady = _policies(custom, namespace)["steady"]
    assert steady["status"]["exporterSet"] == "pool", steady
    assert steady["status"]["observedGeneration"] == steady["metadata"]["generation"], steady
    assert (_valid(steady)["status"], _valid(steady)["reason"]) == ("True", "Valid"), steady
    # What the operator would write on these objects is what the run wrote.
    sets = custom.list_namespaced_custom_object(*GROUP, namespace, "exportersets")["items"]
    wanted = policy.desired_status(steady, [steady], sets, datetime.now(UTC))
    assert not policy.status_differs(steady["status"], wanted), (steady["status"], wanted)

    _make_policy(custom, namespace, "rival")
    second = _reconcile(namespace)
    assert second.returncode == 0, second.stdout[-4000:]
    for name, other in (("steady", "rival"), ("rival", "steady")):
        esp = _policies(custom, namespace)[name]
        assert esp["status"]["exporterSet"] == "", esp
        assert (_valid(esp)["status"], _valid(esp)["reason"]) == ("False", "ConflictingPolicies"), esp
        assert f"ExporterSetPolicies {other} also name ExporterSet pool" in _valid(esp)["message"], esp

