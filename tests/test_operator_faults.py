"""Faults the operator must survive: kills, API restarts, conflicts, a second replica."""

from __future__ import annotations

import random
import time

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import k8s_status
from jumpstarter_standin import JumpstarterStandIn, wait_for
from jumpstarter_standin.pytest_plugin import serve_namespace
from kubernetes import client
from operator_process import OperatorProcess
from pool_helpers import GROUP, SET_LABEL, get_set, make_class, make_set, settle_pool


def assert_no_orphans(api, namespace, set_name="pool"):
    """Every Pod and config Secret belongs to an existing Exporter of the set,
    and every Exporter of the set is owned by it."""
    standin = JumpstarterStandIn(api, namespace)
    core = client.CoreV1Api(api)
    exporter_set = get_set(client.CustomObjectsApi(api), namespace, set_name)
    exporters = standin.exporters(f"{SET_LABEL}={set_name}")
    names = {e["metadata"]["name"] for e in exporters}
    for exporter in exporters:
        refs = exporter["metadata"].get("ownerReferences") or []
        assert [r["uid"] for r in refs if r.get("controller")] == [exporter_set["metadata"]["uid"]]
    live_pods = [p for p in standin.pods() if not p.metadata.deletion_timestamp]
    assert {p.metadata.labels["virtualtarget.jumpstarter.dev/exporter"] for p in live_pods} <= names
    secrets = core.list_namespaced_secret(namespace, label_selector=SET_LABEL).items
    assert {s.metadata.labels["virtualtarget.jumpstarter.dev/exporter"] for s in secrets} <= names
    return names


def test_sigkill_during_scale_up_leaves_no_duplicates_or_orphans(testbed, api, namespace, standin, tmp_path):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=6, maxReplicas=8)
    rng = random.Random(20261121)
    proc = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path)
    high_water = 0
    for _ in range(20):
        proc.start()
        time.sleep(rng.uniform(0.3, 2.5))
        proc.kill()
        high_water = max(high_water, len(standin.exporters(f"{SET_LABEL}=pool")))
        assert high_water <= 8, "more Exporters than maxReplicas"
    proc.start()
    try:
        status = settle_pool(standin, 6, custom, namespace, timeout=120)
        names = assert_no_orphans(api, namespace)
        assert status["replicas"] == 6
        assert names == {f"pool-{i}" for i in range(6)}
    finally:
        proc.stop()
    assert proc.starts == 21


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
    election = ("--leader-elect", "--leader-election-id", "pool-operator", "--leader-election-namespace", namespace)
    first = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, *election).start()
    second = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, *election).start()
    try:
        # Both serve /readyz once their caches are synced, leader or not: a
        # Deployment's rolling update waits on exactly that.
        first.wait_ready()
        second.wait_ready()
        leader = wait_for(lambda: next((p for p in (first, second) if p.leads()), None), message="a leader")
        follower = second if leader is first else first
        settle_pool(standin, 1, custom, namespace)
        assert follower.metric("jumpstarter_exporterset_reconciles_total") == 0
        assert not follower.leads()
        assert follower.probe("/readyz") == (200, "ok")
        assert follower.probe("/healthz") == (200, "ok")
        lease = client.CoordinationV1Api(api).read_namespaced_lease("pool-operator", namespace)
        assert lease.spec.holder_identity.endswith(f"_{leader.proc.pid}")

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

