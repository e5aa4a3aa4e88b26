"""The operator on a cluster where upstream Jumpstarter installed its own
ExporterSet and VirtualTargetClass CRDs (same names and group as ours; from
../shared/anchors/jumpstarter, or the copies tests/testbed writes), and no
ExporterSetPolicy CRD.

What works: the operator starts and serves; a set over a qemu class gets
its Exporters, its counters and its conditions; a pending lease still
counts as demand. What degrades, each with a condition or by design and
never a crash or a write loop: the fields upstream's schema prunes
(``status.updatedReplicas``, ``status.backoff``, the class's whole status,
``scheduling.affinity``) are gone after each write, and the operator does
not write them again and again; without the policy CRD every set runs with
the default controls. docs/beside-upstream.md says the same for users.
"""

from __future__ import annotations

import time

import pytest
from jumpstarter_standin import wait_for
from kubernetes import client
from operator_process import OperatorProcess
from pool_helpers import GROUP, condition, get_set, make_class, make_set
from testbed import namespace_name, upstream_crd_files

EXPORTERS = ("jumpstarter.dev", "v1alpha1")


@pytest.fixture(scope="module")
def upstream_bed(testbed_factory):
    """etcd + kube-apiserver with upstream's CRDs only (no ExporterSetPolicy)."""
    missing = [str(path) for path in upstream_crd_files() if not path.is_file()]
    assert not missing, f"upstream CRDs missing: {missing}"
    return testbed_factory("beside-upstream", crd_files=upstream_crd_files(), controllers=False)


def owned(custom, namespace):
    return sorted(e["metadata"]["name"] for e in custom.list_namespaced_custom_object(
        *EXPORTERS, namespace, "exporters")["items"]
        if any(r.get("kind") == "ExporterSet" for r in e["metadata"].get("ownerReferences") or ()))


def test_the_operator_serves_sets_on_upstreams_crds_and_degrades_without_a_fight(upstream_bed, tmp_path):
    namespace = namespace_name("beside-upstream")
    with upstream_bed.api_client() as api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        make_class(custom, namespace)
        make_set(custom, namespace, minAvailableReplicas=2, maxReplicas=3)
        proc = OperatorProcess(str(upstream_bed.kubeconfig), namespace, tmp_path).start()
        try:
            proc.wait_ready()
            wait_for(lambda: len(owned(custom, namespace)) == 2, timeout=60, message="two Exporters")
            status = wait_for(lambda: (get_set(custom, namespace).get("status") or {}).get("replicas") == 2
                              and get_set(custom, namespace)["status"], timeout=60, message="status written")
            available = condition(get_set(custom, namespace), "Available")
            assert available is not None and available["status"] == "False"  # none ready: no controller here
            assert condition(get_set(custom, namespace), "SetHealthy")["status"] == "True"
            # Pruned by upstream's schema: written, and gone.
            assert "updatedReplicas" not in status
            vclass = custom.get_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small")
            assert "status" not in vclass or not vclass["status"]

            # No fight over what is pruned: the set and the class settle.
            def versions():
                return (get_set(custom, namespace)["metadata"]["resourceVersion"],
                        custom.get_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses",
                                                            "qemu-small")["metadata"]["resourceVersion"])

            settled = wait_for(lambda: _steady(versions, 3.0), timeout=60, message="set and class settle")
            assert settled
            events = core.list_namespaced_event(namespace).items
            assert len(events) < 20, [(e.reason, e.count, e.message) for e in events]
            assert proc.proc.poll() is None
            log = proc.log_tail(400)
            assert "Traceback" not in log, log
        finally:
            proc.stop()
            print(f"--- operator log {proc.log_path} ---\n{proc.log_tail(200)}")
            core.delete_namespace(namespace)


def _steady(read, seconds):
    """True when ``read()`` gives the same value for ``seconds``, else None."""
    first = read()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if read() != first:
            return None
    return True
