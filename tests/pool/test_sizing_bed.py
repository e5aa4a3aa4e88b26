"""The warm buffer on the bed (kube-apiserver, etcd, kwok Pods, the
Jumpstarter stand-in), driven as users drive it.

* An autoscaler writes the set's ceiling through ``/scale`` (GET the Scale,
  PUT it back with ``spec.replicas``, as an HPA's scale client does): a
  ceiling below leased + buffer stops creation and says ``ScalingLimited``,
  but never takes a leased Exporter or the floor; one under the floor is
  refused by the API server.
* A lease-wait target on kwok: a burst of leases teaches the model; the
  next burst finds the buffer it chose ready, meets its target, and
  ``kubectl describe`` shows the decision and its ``WarmBufferSized`` Event.
"""

from __future__ import annotations

import subprocess

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import sizing
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.timings import (
    quantile,
    seconds_of,
)
from jumpstarter_standin import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from pool_helpers import GROUP, SET_LABEL, EventRecorder, condition, get_set, make_class, make_set, settle_pool

BOARD = {"board": "qemu-x86"}


def write_scale(custom, namespace, replicas):
    """What an HPA's scale client does: read the Scale, write it back with
    its resourceVersion, and read again when the operator wrote the set in
    between (409)."""
    for _ in range(20):
        scale = custom.get_namespaced_custom_object_scale(*GROUP, namespace, "exportersets", "pool")
        scale["spec"]["replicas"] = replicas
        try:
            return custom.replace_namespaced_custom_object_scale(*GROUP, namespace, "exportersets", "pool",
                                                                 scale)
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise AssertionError(f"/scale to {replicas}: 20 conflicts in a row")


def test_scale_writes_below_leased_and_buffer_keep_the_floor_and_the_leased(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=2, maxReplicas=6, scaleDownCooldown="1s")
    operator()
    settle_pool(standin, 2, custom, namespace, replicas=2)
    for name in ("lease-a", "lease-b"):
        standin.create_lease(name, BOARD)
    held = {standin.wait_assigned("lease-a"), standin.wait_assigned("lease-b")}
    settle_pool(standin, 2, custom, namespace, leasedReplicas=2, replicas=4)

    exporters = EventRecorder(api, "Exporter", namespace, label_selector=f"{SET_LABEL}=pool")
    try:
        # Under the floor (minAvailableReplicas 2): the API server refuses it.
        with pytest.raises(ApiException) as refused:
            write_scale(custom, namespace, 1)
        assert refused.value.status == 422 and "minAvailableReplicas" in refused.value.body
        # Three: below leased + buffer (4). Nothing is taken away: the two
        # leased stay leased and enabled, and the floor stays available.
        assert write_scale(custom, namespace, 3)["spec"]["replicas"] == 3
        assert get_set(custom, namespace)["spec"]["maxReplicas"] == 3

        def limited():
            the_set = get_set(custom, namespace)
            limit = condition(the_set, "ScalingLimited") or {}
            return limit.get("status") == "True" and the_set["metadata"]["generation"] == \
                the_set["status"].get("observedGeneration") and the_set
        wait_for(limited, timeout=60, message="ScalingLimited=True at the ceiling of 3")
        # A third lease: it takes a warm one; nothing is made over the ceiling.
        standin.create_lease("lease-c", BOARD)
        held.add(standin.wait_assigned("lease-c"))
        status = settle_pool(standin, 1, custom, namespace, leasedReplicas=3, replicas=4)
        assert status["replicas"] == 4
        # The autoscaler raises the ceiling again: the floor is back.
        write_scale(custom, namespace, 6)
        settle_pool(standin, 2, custom, namespace, leasedReplicas=3, replicas=5)
        touched = [(kind, obj["metadata"]["name"]) for kind, obj in exporters.events
                   if obj["metadata"]["name"] in held
                   and (kind == "DELETED" or (obj.get("spec") or {}).get("enabled") is False)]
        assert touched == [], touched
        assert {e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}=pool")} >= held
        assert exporters.error is None
    finally:
        exporters.stop()


def kubectl(testbed, *args):
    result = subprocess.run(["kubectl", *args], env=testbed.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def burst(standin, prefix, count):
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        standin.create_lease(name, BOARD)
    for name in names:
        standin.wait_assigned(name)
    return names


def waits(standin, names):
    out = []
    for name in names:
        lease = standin.lease(name)
        out.append(seconds_of(lease["status"]["beginTime"]) - seconds_of(lease["metadata"]["creationTimestamp"]))
    return out


# Each Pod's exporter dials the controller 5 s after the Pod runs: the cold
# start (over the target of 3 s) must not hang on how fast kwok is today.
@pytest.mark.standin(exporter_start_delay=5.0)
def test_a_burst_on_kwok_finds_the_buffer_its_predecessor_taught(testbed, api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=0, maxReplicas=12, scaleDownCooldown="1m")
    custom.create_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", {
        "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSetPolicy",
        "metadata": {"name": "pool"},
        "spec": {"exporterSetName": "pool", "leaseWait": {"percentile": 95, "target": "3s"}}})
    operator()
    # No buffer yet (nothing is known): the dormant Exporter holds the
    # selector, for the controller not to end a lease at once.
    wait_for(lambda: standin.exporters(f"{SET_LABEL}=pool"), timeout=60, message="the dormant Exporter")
    # The first burst finds no pool: each lease waits for a cold start. Its
    # Leases go with their Exporters (ExitAndReplace): the set's record keeps
    # the arrivals.
    first = burst(standin, "first", 5)
    cold = waits(standin, first)
    for name in first:
        standin.release(name)

    def sized():
        the_set = get_set(custom, namespace)
        decision = (the_set.get("status") or {}).get("sizing") or {}
        return decision.get("reason") == sizing.REASON_FORECAST and decision["buffer"] >= 5 \
            and (the_set["status"].get("availableReplicas") or 0) >= decision["buffer"] and decision
    decision = wait_for(sized, timeout=60, message="a buffer for the next burst, warm")
    # The model read the cold starts the first burst paid for.
    assert decision["windowSeconds"] > 0 and decision["coldStartSeconds"] > 3
    second = burst(standin, "second", 5)
    warm = waits(standin, second)
    print(f"waits: first burst {cold}, second {warm}; decision {decision}")
    # Times are whole seconds: a wait of 0.1 s may read as 1.
    assert quantile(warm, 95) <= 3.0, (warm, cold)
    assert max(cold) > 3.0, cold

    described = kubectl(testbed, "describe", "exporterset", "pool", "-n", namespace)
    assert "Sizing:" in described and sizing.REASON_FORECAST in described, described
    assert "WarmBufferSized" in described, described
