"""Faults the operator must survive: kills, API restarts, conflicts, a second replica."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from jumpstarter_standin import JumpstarterStandIn, wait_for
from jumpstarter_standin.pytest_plugin import serve_namespace
from kubernetes import client
from operator_process import OperatorProcess, leader_and_standby
from pool_helpers import (
    GROUP,
    SET_LABEL,
    EventRecorder,
    assert_no_event,
    get_set,
    make_class,
    make_set,
    no_event,
    settle_pool,
)
from testbed import processes

EXPORTER_LABEL = "virtualtarget.jumpstarter.dev/exporter"


def duplicates(api, namespace, set_name="pool"):
    """What is there twice, read from the API as it is (lists, not sets):
    a live Exporter with more than one live Pod, an ordinal with more than
    one live Exporter of the set. Empty when there is nothing twice."""
    standin = JumpstarterStandIn(api, namespace)
    exporters = [e for e in standin.exporters(f"{SET_LABEL}={set_name}") if not e["metadata"].get("deletionTimestamp")]
    found = []
    ordinals = Counter(e["metadata"]["name"].rsplit("-", 1)[1] for e in exporters)
    found += [f"ordinal {o} has {n} Exporters" for o, n in sorted(ordinals.items()) if n > 1]
    pods = Counter(p.metadata.labels.get(EXPORTER_LABEL) for p in standin.pods() if not p.metadata.deletion_timestamp)
    found += [f"Exporter {name} has {n} Pods" for name, n in sorted(pods.items()) if n > 1]
    return found


def assert_no_orphans(api, namespace, set_name="pool"):
    """Every Pod and config Secret belongs to an existing Exporter of the set,
    every Exporter of the set is owned by it, and nothing is there twice."""
    standin = JumpstarterStandIn(api, namespace)
    core = client.CoreV1Api(api)
    exporter_set = get_set(client.CustomObjectsApi(api), namespace, set_name)
    exporters = standin.exporters(f"{SET_LABEL}={set_name}")
    names = [e["metadata"]["name"] for e in exporters]
    for exporter in exporters:
        refs = exporter["metadata"].get("ownerReferences") or []
        assert [r["uid"] for r in refs if r.get("controller")] == [exporter_set["metadata"]["uid"]]
    live_pods = [p for p in standin.pods() if not p.metadata.deletion_timestamp]
    assert not [p.metadata.name for p in live_pods if p.metadata.labels[EXPORTER_LABEL] not in names]
    secrets = core.list_namespaced_secret(namespace, label_selector=SET_LABEL).items
    assert not [s.metadata.name for s in secrets if s.metadata.labels[EXPORTER_LABEL] not in names]
    assert duplicates(api, namespace, set_name) == []
    return names


def kill_tree(proc: OperatorProcess) -> None:
    """SIGKILL the operator and everything it started (its playbook runs),
    as a container's end does: each is stopped first, so none starts
    another or writes once this returns."""
    stopped, pending = [], [proc.proc.pid]
    while pending:
        pid = pending.pop()
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            continue
        stopped.append(pid)
        pending += processes.children(pid)
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.proc.wait()


def _operator_write(event_type, obj):
    """Only the operator adds or deletes Exporters of the set and their Pods."""
    return event_type in ("ADDED", "DELETED")


class WriteCounter:
    """Counts the operator's writes (Exporters and Pods of the set added or
    deleted) from watches, and SIGKILLs the operator the moment a count is
    reached: from the watch thread, between two of its writes."""

    def __init__(self, api, namespace):
        self.lock = threading.Lock()
        self.writes: list[tuple[str, str, str]] = []
        self.kill_at = None
        self.proc = None
        self.killed_at = None
        self.killed = threading.Event()
        self.recorders = [EventRecorder(api, kind, namespace, label_selector=SET_LABEL, on_event=self._seen)
                          for kind in ("Exporter", "Pod")]

    def _seen(self, event_type, obj):
        if not _operator_write(event_type, obj):
            return
        with self.lock:
            self.writes.append((event_type, obj["kind"], obj["metadata"]["name"]))
            if self.kill_at is not None and len(self.writes) >= self.kill_at:
                kill_tree(self.proc)
                self.killed_at = len(self.writes)
                self.kill_at = None
                self.killed.set()

    def count(self) -> int:
        with self.lock:
            return len(self.writes)

    def arm(self, proc, kill_at):
        with self.lock:
            self.proc, self.kill_at, self.killed_at = proc, kill_at, None
            self.killed.clear()

    def disarm(self):
        with self.lock:
            self.kill_at = None

    def stop(self):
        for recorder in self.recorders:
            recorder.stop()


def _scaled_up_names(core, namespace):
    """Exporters a finished reconcile reported creating (its ScaledUp Event is
    among its last writes, after the creations)."""
    names = set()
    for event in core.list_namespaced_event(namespace).items:
        if event.reason == "ScaledUp" and event.involved_object.name == "pool":
            names.update(n.strip() for n in event.message.split(":", 1)[1].split(","))
    return names


def _unfinished_runs(artifacts: Path) -> list[str]:
    """Playbook runs that never wrote their final status (killed mid-run)."""
    if not artifacts.is_dir():
        return []
    return sorted(run.name for run in artifacts.iterdir() if run.is_dir() and not (run / "status").exists())


def _settled(api, namespace, replicas):
    """The set has ``replicas`` live Exporters (the dormant one aside), each
    with one live Pod, nothing twice, and its status says all are available."""
    standin = JumpstarterStandIn(api, namespace)
    exporters = [e for e in standin.exporters(f"{SET_LABEL}=pool")
                 if "dormant" not in e["metadata"]["name"] and not e["metadata"].get("deletionTimestamp")]
    pods = [p for p in standin.pods() if not p.metadata.deletion_timestamp]
    status = get_set(client.CustomObjectsApi(api), namespace).get("status") or {}
    return (len(exporters) == len(pods) == replicas and duplicates(api, namespace) == []
            and status.get("replicas") == status.get("availableReplicas") == replicas)


def _killed_or_settled(counter, proc, api, namespace, replicas, timeout, quiet=3.0):
    """True once the armed kill landed. False after ``timeout``, or once the
    operator serves /readyz (its caches synced), the set is settled and no
    write came for ``quiet`` seconds since (longer than the set's 2 s
    scale-down cooldown): a settled pool makes no more writes for a kill
    to wait for."""
    deadline = time.monotonic() + timeout
    count, since = counter.count(), None
    while time.monotonic() < deadline:
        if counter.killed.wait(0.2):
            return True
        if since is None:
            if proc.probe("/readyz") == (200, "ok"):
                since = time.monotonic()
            continue
        if counter.count() != count:
            count, since = counter.count(), time.monotonic()
        elif time.monotonic() - since >= quiet and _settled(api, namespace, replicas):
            break
    return counter.killed.is_set()


def test_sigkill_mid_reconcile_leaves_no_duplicates_or_orphans(testbed, api, namespace, standin, tmp_path):
    """Twenty SIGKILLs, each at a chosen count of the operator's writes (1 to 3
    writes into a run), read from watches. A kill lands between two writes of
    one reconcile when the Exporters it created never made it into a
    ScaledUp Event (written after the creations) or its playbook run never
    wrote a final status; both are counted and printed. Whatever was cut,
    the restarted operator converges with nothing twice and nothing orphaned."""
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=6, maxReplicas=8)
    rng = random.Random(20261121)
    proc = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path)
    artifacts = tmp_path / "artifacts"
    counter = WriteCounter(api, namespace)
    cut_applies = cut_runs = 0
    try:
        for cycle in range(20):
            before = counter.count()
            counter.arm(proc, before + rng.randint(1, 3))
            proc.start()
            if not _killed_or_settled(counter, proc, api, namespace, 6, timeout=30):
                counter.disarm()
                kill_tree(proc)
                print(f"kill {cycle}: fewer writes than the kill waited for after {before}: "
                      f"the pool settled, nothing more to do\n{proc.log_tail(30)}")
                break
            # The whole process tree is gone: nothing the operator started
            # writes any more (a write sent just before the kill may still
            # land before this watch starts, and is counted as "after").
            with no_event(api, "Pod", _operator_write, 1.0, namespace, label_selector=SET_LABEL,
                          what="Pod write after the kill"):
                assert_no_event(api, "Exporter", _operator_write, 1.0, namespace, label_selector=SET_LABEL,
                                what="Exporter write after the kill")
            # The dormant Exporter is not in ScaledUp's list.
            created = [name for kind_type, kind, name in counter.writes[before:counter.killed_at]
                       if kind == "Exporter" and kind_type == "ADDED" and "dormant" not in name]
            unreported = sorted(set(created) - _scaled_up_names(core, namespace))
            unfinished = _unfinished_runs(artifacts)
            cut_applies += bool(unreported)
            cut_runs += bool(unfinished)
            print(f"kill {cycle}: writes {before} -> {counter.killed_at} at the kill "
                  f"({counter.count()} once the tree was gone); Exporters created but never reported: {unreported}; "
                  f"playbook runs cut: {len(unfinished)}")
            for run in unfinished:  # counted once
                (artifacts / run / "status").write_text("killed")
            high_water = len(JumpstarterStandIn(api, namespace).exporters(f"{SET_LABEL}=pool"))
            assert high_water <= 8 + 1, "more Exporters than maxReplicas and the dormant one"
            assert duplicates(api, namespace) == []
        print(f"kills between the writes of one reconcile: {cut_applies} in-process applies, "
              f"{cut_runs} playbook runs")
        assert cut_applies + cut_runs >= 3, "the kills did not land inside reconciles"
    finally:
        counter.stop()
    proc.start()
    try:
        status = settle_pool(standin, 6, custom, namespace, timeout=120)
        names = assert_no_orphans(api, namespace)
        assert status["replicas"] == 6
        assert sorted(n for n in names if "dormant" not in n) == [f"pool-{i}" for i in range(6)]
    finally:
        proc.stop()

    # The duplicate check sees a duplicate: a second Pod for pool-0.
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="pool-0-twice", labels={SET_LABEL: "pool", EXPORTER_LABEL: "pool-0"}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="none")],
                              node_selector={"no-such-node": "true"}))
    core.create_namespaced_pod(namespace, pod)
    try:
        assert duplicates(api, namespace) == ["Exporter pool-0 has 2 Pods"]
    finally:
        core.delete_namespaced_pod("pool-0-twice", namespace, grace_period_seconds=0)


def test_operator_converges_across_an_api_server_restart(testbed_factory, tmp_path):
    bed = testbed_factory("restart")
    with bed.api_client() as api:
        namespace = "restart"
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        custom = client.CustomObjectsApi(api)
        make_class(custom, namespace)
        make_set(custom, namespace, minAvailableReplicas=1)
        with serve_namespace(bed.kubeconfig, namespace) as standin:
            proc = OperatorProcess(str(bed.kubeconfig), namespace, tmp_path).start()
            try:
                proc.wait_ready()
                settle_pool(standin, 1, custom, namespace)
                bed.restart_apiserver()
                # Demand that arrives after the restart is only seen through a
                # re-established watch.
                custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                                      {"spec": {"minAvailableReplicas": 3}})
                settle_pool(standin, 3, custom, namespace, timeout=120)
                assert proc.proc.poll() is None, "the operator must not exit on an API outage"
                assert_no_orphans(api, namespace)
            finally:
                proc.stop()


def test_status_write_retries_a_real_conflict(api, namespace, monkeypatch):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace)
    original = client.CustomObjectsApi.patch_namespaced_custom_object_status
    conflicts = []

    def racing_patch(self, group, version, ns, plural, name, body, **kwargs):
        if not conflicts:
            # Another writer gets in between our read and our write.
            original(self, group, version, ns, plural, name, {"status": {"replicas": 99}})
            conflicts.append(body["metadata"]["resourceVersion"])
        return original(self, group, version, ns, plural, name, body, **kwargs)

    monkeypatch.setattr(client.CustomObjectsApi, "patch_namespaced_custom_object_status", racing_patch)
    status = {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0, "conditions": []}
    changed, _ = k8s_status.write_status(api, namespace, "pool", status)
    assert changed and len(conflicts) == 1
    written = get_set(custom, namespace)["status"]
    assert written["replicas"] == 0  # ours, written after the conflict, on a fresh read


def test_only_the_leader_acts(testbed, api, namespace, standin, tmp_path):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    # A 5 s Lease instead of the default 15 s: the takeover below waits it out.
    election = ("--leader-elect", "--leader-election-id", "pool-operator", "--leader-election-namespace", namespace,
                "--leader-election-lease-duration", "5s", "--leader-election-renew-deadline", "4s",
                "--leader-election-retry-period", "1s")
    first = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, *election).start()
    second = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, *election).start()
    try:
        # Both serve /readyz once their caches are synced, leader or not: a
        # Deployment's rolling update waits on exactly that.
        leader, follower = leader_and_standby(first, second)
        settle_pool(standin, 1, custom, namespace)
        assert follower.metric("jumpstarter_exporterset_reconciles_total") == 0
        assert not follower.leads()
        assert follower.probe("/readyz") == (200, "ok")
        assert follower.probe("/healthz") == (200, "ok")
        lease = client.CoordinationV1Api(api).read_namespaced_lease("pool-operator", namespace)
        assert lease.spec.holder_identity.endswith(f"_{leader.proc.pid}")
        assert lease.spec.lease_duration_seconds == 5

        # The leader dies; the follower takes over once the lease expires and
        # serves new demand.
        leader.kill()
        wait_for(lambda: follower.leads(), timeout=60, message="follower takes over")
        custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                              {"spec": {"minAvailableReplicas": 2}})
        settle_pool(standin, 2, custom, namespace)
        assert follower.metric("jumpstarter_exporterset_reconciles_total") > 0
    finally:
        first.stop()
        second.stop()



def test_the_no_event_watch_fails_on_what_it_guards_against(api, namespace):
    """The negative checks above and elsewhere (pool_helpers.no_event) are
    watches that do fail: an Exporter added inside the block, or within the
    bound after it, is reported by name."""
    custom = client.CustomObjectsApi(api)

    def exporter(name):
        custom.create_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters", {
            "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
            "metadata": {"name": name, "labels": {SET_LABEL: "pool"}}, "spec": {}})

    added = lambda event_type, obj: event_type == "ADDED"  # noqa: E731
    with pytest.raises(AssertionError, match="unexpected Exporter in the block: ADDED Exporter inside"):
        with no_event(api, "Exporter", added, 2.0, namespace, what="Exporter in the block"):
            exporter("inside")
    with pytest.raises(AssertionError, match="ADDED Exporter later"):
        with no_event(api, "Exporter", added, 5.0, namespace, what="Exporter in the bound"):
            threading.Timer(1.0, exporter, args=("later",)).start()
    # Objects that were there before the watch are not events.
    assert_no_event(api, "Exporter", added, 1.0, namespace, what="Exporter")
