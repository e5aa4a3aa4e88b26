"""The operator on the bed at three edges: a ``role:`` entry in watches.yaml,
a name taken by another object just before the operator creates it, and
Events about several Exporters of one set."""

from __future__ import annotations

import json

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from exporterset_operator.__main__ import playbook_env
from exporterset_operator.controller import Controller
from exporterset_operator.metrics import Metrics
from exporterset_operator.reconciler import Reconciler
from exporterset_operator.runner import PlaybookRunner
from exporterset_operator.watches import SERVED, load_watches
from jumpstarter_standin import wait_for
from kubernetes import client
from operator_process import ROOT, OperatorProcess, watches_file
from pool_helpers import SET_LABEL, make_class, make_set, settle_pool

EXPORTERS = ("jumpstarter.dev", "v1alpha1")


def test_a_role_entry_reconciles_and_tears_down(testbed, api, namespace, standin, tmp_path):
    """watches.yaml naming the reconcile role instead of the playbook: the
    pool fills through the playbook generated for the role, and the
    finalizer (vars only) runs the role again to tear the set down."""
    def role_entry(entry):
        del entry["playbook"]
        entry["role"] = "jumpstarter.virtual_exporters.reconcile"

    watches = watches_file(tmp_path, role_entry)
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    proc = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, "--watches-file", str(watches)).start()
    try:
        proc.wait_ready()
        settle_pool(standin, 1, custom, namespace, timeout=180)
        # The Pod was made by a run of the generated play.
        commands = [json.loads((run / "command").read_text())["command"]
                    for run in (tmp_path / "artifacts").iterdir() if (run / "command").exists()]
        assert commands and all(any(arg.endswith("/role.yml") for arg in command) for command in commands)
        # The run that made the Pod ends a moment after the Pod is seen.
        wait_for(lambda: proc.metric("jumpstarter_exporterset_playbook_runs_total", 'result="successful"') >= 1,
                 timeout=60, message="the backend run counted as successful")

        custom.delete_namespaced_custom_object(*constants.EXPORTER_SET.at(namespace), "pool")
        wait_for(lambda: not [s for s in custom.list_namespaced_custom_object(
            *constants.EXPORTER_SET.at(namespace))["items"]], timeout=120, message="set torn down")
        wait_for(lambda: standin.pods() == [], timeout=60, message="the set's Pods gone")
    finally:
        proc.stop()
        print(f"--- operator log ---\n{proc.log_tail(40)}")


def test_a_name_taken_before_the_set_creates_it_does_not_stall_the_set(
        testbed, api, namespace, standin, tmp_path):
    """The pool loop is about to create pool-1 when another object takes the
    name: its create meets a 409. The set is not held waiting for a pool-1 of
    its own to show up: the next reconcile goes on at once and makes pool-2.
    (The reconciler runs here, on the operator's informers.)"""
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    root = ROOT
    watch = load_watches(root / "operator" / "watches.yaml", root=root).entry(*SERVED)
    runner = PlaybookRunner(str(root), str(tmp_path / "artifacts"), env=playbook_env(str(testbed.kubeconfig)))
    metrics = Metrics()
    controller = Controller(
        api, lambda caches: Reconciler(caches, api, runner, metrics, {"qemu.jumpstarter.dev"},
                                       plan_options=watch.vars.get("reconcile_plan_options"), watch=watch),
        metrics, workers=1, namespace=namespace)
    controller.start_informers()
    key = (namespace, "pool")
    taken = []
    reconciler = controller.reconciler
    original_apply = reconciler._apply_in_process

    def apply_with_a_namesake_first(exporter_set, plan, provisioner, **kwargs):
        creates = [c["name"] for c in plan.get("create") or []]
        if creates and not taken and exporter_set["spec"].get("minAvailableReplicas") == 2:
            custom.create_namespaced_custom_object(*EXPORTERS, namespace, "exporters", {
                "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
                "metadata": {"name": creates[0], "labels": {"board": "elsewhere"}},
                "spec": {}})
            taken.append(creates[0])
        return original_apply(exporter_set, plan, provisioner, **kwargs)

    reconciler._apply_in_process = apply_with_a_namesake_first
    try:
        assert controller.wait_synced(30)
        cache = controller.caches["Exporter"]

        def owned():
            return sorted(e["metadata"]["name"] for e in cache.list(namespace)
                          if (e["metadata"].get("labels") or {}).get(SET_LABEL) == "pool")

        wait_for(lambda: reconciler.reconcile(key) and "pool-0" in owned(), timeout=30, message="pool-0")
        custom.patch_namespaced_custom_object(*constants.EXPORTER_SET.at(namespace), "pool",
                                              {"spec": {"minAvailableReplicas": 2}})
        wait_for(lambda: controller.caches["ExporterSet"].get(namespace, "pool")["spec"]["minAvailableReplicas"] == 2,
                 timeout=30, message="the cache sees minAvailableReplicas 2")
        result = reconciler.reconcile(key)
        assert result.path == "inprocess" and not result.error, result
        assert taken == ["pool-1"]
        namesake = custom.get_namespaced_custom_object(*EXPORTERS, namespace, "exporters", "pool-1")
        assert not namesake["metadata"].get("ownerReferences")
        wait_for(lambda: cache.get(namespace, "pool-1"), timeout=30, message="the cache sees the namesake")

        # Not "waiting" for a pool-1 of the set's own (that would hold the set
        # for the expectation's 30 s): the set goes on and makes pool-2.
        result = reconciler.reconcile(key)
        assert result.path != "waiting", result
        wait_for(lambda: reconciler.reconcile(key).path != "waiting" and "pool-2" in owned(),
                 timeout=20, message="pool-2 made")
        assert "pool-1" not in owned()
    finally:
        controller.stop()
        runner.close()


def test_recycled_exporters_each_get_an_event(api, namespace, standin, operator):
    """Two leases end: each recycled Exporter has its own Event on the set."""
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=2, maxReplicas=4)
    operator()
    settle_pool(standin, 2, custom, namespace)
    leased = []
    for lease in ("lease-a", "lease-b"):
        standin.create_lease(lease, {"board": "qemu-x86"})
        leased.append(standin.wait_assigned(lease))
    leased.sort()
    assert len(set(leased)) == 2, leased
    standin.release("lease-a")
    standin.release("lease-b")

    def recycling_events():
        events = [e for e in core.list_namespaced_event(namespace).items
                  if e.reason == "Recycling" and e.involved_object.name == "pool"]
        return events if sorted(e.related.name for e in events if e.related) == leased else None

    events = wait_for(recycling_events, timeout=90, message=f"a Recycling Event for each of {leased}")
    for event in events:
        assert event.message.startswith(f"{event.related.name}: "), event.message
        assert event.count == 1
