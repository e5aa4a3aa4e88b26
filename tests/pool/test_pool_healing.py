"""Autohealing and scale-in on the bed. An instance whose Pod cannot be
scheduled (its class asks for a node label no kwok node has) is retried
after waits that grow (the unschedulable backoff), each attempt visible in
the set's ``status.backoff`` and in a ``Retrying`` Event, read through
watches. A set's ExporterSetPolicy ``scaleIn.preferSelector`` decides which
idle Exporters scale-down disables.

The set's ExporterSetPolicy ``healing`` gives the backoff (2 s doubling to
8 s), the threshold and the minimum failing duration; the operator's
watches.yaml vars give a 2 s startup timeout (a pool option): the test
stays short.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import parse_time
from kubernetes import client
from operator_process import OperatorProcess, watches_file
from pool_helpers import GROUP, SET_LABEL, EventRecorder, make_class, make_set, settle_pool

NOWHERE = {"nodeSelector": {"virtualtarget.jumpstarter.dev/test-no-such-node": "true"}}
WAITED = re.compile(r"attempt (\d+) after (\d+) failure\(s\) in a row \(last: (\w+)\), having waited (\d+)s")


def test_unschedulable_instance_backs_off_longer_each_time(testbed, api, namespace, standin, tmp_path):
    watches = watches_file(tmp_path, lambda entry: entry["vars"].update(
        reconcile_plan_options={"startup_timeout": 2}))
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace, scheduling=NOWHERE)
    events = EventRecorder(api, "Event", namespace)
    sets = EventRecorder(api, "ExporterSet", namespace)
    exporters = EventRecorder(api, "Exporter", namespace)
    pods = EventRecorder(api, "Pod", namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    custom.create_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", {
        "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSetPolicy",
        "metadata": {"name": "pool-healing"},
        "spec": {"exporterSetName": "pool", "healing": {
            "startupFailureThreshold": 2, "minFailingDuration": "15s",
            "unschedulableBackoff": {"base": "2s", "max": "8s"}}}})
    proc = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path,
                           "--watches-file", str(watches)).start()
    try:
        proc.wait_ready()

        def retry(attempt):
            def accept(_, obj):
                match = WAITED.search(obj.get("message") or "")
                return (obj.get("reason") == "Retrying" and match is not None
                        and int(match.group(1)) == attempt)
            return accept

        # Attempts 2, 3 and 4 follow 1, 2 and 3 failures: 2 s, 4 s, then 8 s.
        retries = [events.wait(retry(attempt), timeout=120, message=f"Retrying Event of attempt {attempt}")[1]
                   for attempt in (2, 3, 4)]
        waited = [int(WAITED.search(e["message"]).group(4)) for e in retries]
        assert waited == [2, 4, 8]
        assert all(WAITED.search(e["message"]).group(3) == constants.DELETE_STARTUP_TIMEOUT for e in retries)

        # The set said each wait while it lasted: attempts and a growing delay.
        backoffs = {}
        for _, obj in sets.matching(lambda _, o: (o.get("status") or {}).get("backoff")):
            backoff = obj["status"]["backoff"]
            backoffs.setdefault(backoff["attempts"], backoff)
        assert [backoffs[k]["delaySeconds"] for k in (1, 2, 3)] == [2, 4, 8]
        progressing = [c for _, o in sets.events for c in (o.get("status") or {}).get("conditions") or ()
                       if c["type"] == "Progressing" and c["reason"] == "BackOff"]
        assert any(backoffs[3]["nextAttemptTime"] in c["message"] for c in progressing)

        # No attempt came before its time: each new Exporter after the first
        # is created no earlier than the nextAttemptTime the set announced.
        created = sorted({parse_time(o["metadata"]["creationTimestamp"]) for t, o in exporters.events
                          if t == "ADDED" and constants.ANNOTATION_DORMANT
                          not in (o["metadata"].get("annotations") or {})})
        for attempts in (1, 2, 3):
            due = parse_time(backoffs[attempts]["nextAttemptTime"])
            failed_at = due - timedelta(seconds=backoffs[attempts]["delaySeconds"])
            assert any(moment >= due for moment in created), (attempts, due, created)
            assert not [m for m in created if failed_at < m < due], (attempts, due, created)
        # The instances really were unschedulable Pods.
        unschedulable = [o for _, o in pods.events if any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in (o.get("status") or {}).get("conditions") or ())]
        assert unschedulable

        # Two failures reach the threshold, but ReplicaFailure waits until
        # the failures have lasted 15 s since the first one.
        def replica_failure(_, obj):
            degraded = next((c for c in (obj.get("status") or {}).get("conditions") or ()
                             if c["type"] == "Degraded"), {})
            return degraded.get("reason") == constants.REASON_REPLICA_FAILURE and degraded["status"] == "True"

        _, degraded_set = sets.wait(replica_failure, timeout=60, message="Degraded=True/ReplicaFailure")
        degraded = next(c for c in degraded_set["status"]["conditions"] if c["type"] == "Degraded")
        last_failure = json.loads(degraded_set["status"]["operatorState"]["lastFailure"])
        failing_for = parse_time(degraded["lastTransitionTime"]) - parse_time(last_failure["since"])
        assert failing_for >= timedelta(seconds=15), (degraded, last_failure)
        # ... although the threshold was reached well before that.
        second = parse_time(backoffs[2]["nextAttemptTime"]) - timedelta(seconds=backoffs[2]["delaySeconds"])
        assert second - parse_time(last_failure["since"]) < timedelta(seconds=15)
        for recorder in (events, sets, exporters, pods):
            assert recorder.error is None
    finally:
        for recorder in (events, sets, exporters, pods):
            recorder.stop()
        proc.stop()
        print(f"--- operator log ---\n{proc.log_tail(80)}")


def _default_order(exporters):
    """The scale-in order without a policy: newest first, then by name."""
    by_name = sorted(exporters, key=lambda e: e["metadata"]["name"])
    by_name.sort(key=lambda e: e["metadata"]["creationTimestamp"], reverse=True)
    return [e["metadata"]["name"] for e in by_name]


def test_scale_in_prefers_the_exporters_the_policy_selects(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=3, scaleDownCooldown="3s")
    custom.create_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", {
        "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSetPolicy",
        "metadata": {"name": "pool"},
        "spec": {"exporterSetName": "pool",
                 "scaleIn": {"preferSelector": {"matchLabels": {"spare": "true"}}}}})
    operator()
    settle_pool(standin, 3, custom, namespace, replicas=3)
    order = _default_order(standin.exporters(f"{SET_LABEL}=pool"))
    # Without the policy the first two of ``order`` would go; the policy
    # prefers the first and the last.
    spare = {order[0], order[2]}
    for name in spare:
        custom.patch_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters", name,
                                              {"metadata": {"labels": {"spare": "true"}}})
    exporters = EventRecorder(api, "Exporter", namespace, label_selector=f"{SET_LABEL}=pool")
    try:
        # The surplus lasts the 3 s cooldown before any is disabled; the
        # labels reach the operator's cache well before that.
        custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                              {"spec": {"minAvailableReplicas": 1}})
        disabled = set()

        def two_disabled(kind, obj):
            if kind == "MODIFIED" and (obj.get("spec") or {}).get("enabled") is False:
                disabled.add(obj["metadata"]["name"])
            return len(disabled) >= 2

        exporters.wait(two_disabled, timeout=90, message="two Exporters disabled for scale-in")
        assert disabled == spare, (disabled, order)
        settle_pool(standin, 1, custom, namespace, replicas=1)
        assert {e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}=pool")} == {order[1]}
        assert exporters.error is None
    finally:
        exporters.stop()
