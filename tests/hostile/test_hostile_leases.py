"""Hostile tenants against the leases of others, on the bed: a set author
may create ExporterSets in their namespace and lease Exporters, nothing more.

- A set whose template labels copy another set's (so that the other set's
  selector, and the leases asked with it, would take its Exporters), or that
  carries a reserved label, is refused: ``Degraded=True`` with reason
  ``TemplateLabelConflict`` naming the field, a Warning Event, no Exporter
  made; the set created first and the lease it serves are untouched.
- ``maxReplicas: 0`` is no way past the operator's ceiling on replicas per
  set (``--max-replicas-per-set``): ``ScalingLimited`` with reason
  ``OperatorReplicaCeiling``.
- Deleting a set never destroys what is leased: the teardown deletes the
  unleased Exporters, keeps the leased ones (one leased with
  ``allowDisabled`` on an Exporter an admin disabled) with their instances,
  says it waits (``WaitingForLeases`` condition and Event) and keeps its
  finalizer; once the leases end the set goes.
"""

from __future__ import annotations

import time

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from jumpstarter_standin import wait_for
from kubernetes import client
from pool_helpers import GROUP, condition, get_set, make_class, make_set, settle_pool

BOARD = "qemu-x86"


def owned_by(standin, set_name):
    return sorted(e["metadata"]["name"] for e in standin.exporters()
                  if any(ref.get("kind") == "ExporterSet" and ref.get("name") == set_name
                         for ref in e["metadata"].get("ownerReferences") or ()))


def set_events(core, namespace, name):
    return [e for e in core.list_namespaced_event(namespace).items if e.involved_object.name == name]


def refused(custom, namespace, name):
    degraded = condition(get_set(custom, namespace, name), "Degraded") or {}
    return degraded if degraded.get("reason") == "TemplateLabelConflict" else None


def test_copied_or_reserved_labels_are_refused_and_max_replicas_zero_is_capped(api, namespace, standin,
                                                                              operator):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    make_class(custom, namespace)
    make_set(custom, namespace, name="pool", board=BOARD, minAvailableReplicas=1, maxReplicas=2)
    operator("--max-replicas-per-set", "2")
    settle_pool(standin, 1, custom, namespace)
    standin.create_lease("victim-lease", {"board": BOARD})
    held = standin.wait_assigned("victim-lease")
    settle_pool(standin, 1, custom, namespace, leasedReplicas=1)
    victim_before = owned_by(standin, "pool")

    # The thief copies the victim's labels: its Exporters would serve the
    # victim's leases. Another names the set label, reserved to the operator.
    make_set(custom, namespace, name="thief", board=BOARD, minAvailableReplicas=1, maxReplicas=2)
    make_set(custom, namespace, name="reserved", board="reserved-board", minAvailableReplicas=1, template={
        "metadata": {"labels": {"board": "reserved-board", c.LABEL_EXPORTER_SET: "pool"}},
        "spec": {"drivers": [{"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu"}]}})
    # No ceiling of its own: the operator's (2) holds.
    make_set(custom, namespace, name="wide", board="wide-board", maxReplicas=0, minAvailableReplicas=3)

    thief = wait_for(lambda: refused(custom, namespace, "thief"), message="thief refused")
    assert thief["status"] == "True" and thief["message"].startswith("spec.template.metadata.labels:")
    assert "ExporterSet pool" in thief["message"]
    reserved = wait_for(lambda: refused(custom, namespace, "reserved"), message="reserved refused")
    assert reserved["message"].startswith(f"spec.template.metadata.labels.{c.LABEL_EXPORTER_SET}: reserved")
    for name in ("thief", "reserved"):
        warnings = [e for e in set_events(core, namespace, name)
                    if e.type == "Warning" and e.reason == "TemplateLabelConflict"]
        assert warnings and "spec.template.metadata.labels" in warnings[0].message

    status = settle_pool(standin, 2, custom, namespace, name="wide", replicas=2)
    limited = condition(get_set(custom, namespace, "wide"), "ScalingLimited")
    assert (limited["status"], limited["reason"]) == ("True", "OperatorReplicaCeiling")
    assert "--max-replicas-per-set" in limited["message"]
    # The operator had time to act on every set: still 2, and nothing for the refused ones.
    time.sleep(3)
    assert len(owned_by(standin, "wide")) == 2 and status["replicas"] == 2
    assert owned_by(standin, "thief") == [] and owned_by(standin, "reserved") == []
    assert {p.metadata.labels.get(c.LABEL_EXPORTER_SET) for p in standin.pods()} <= {"pool", "wide"}

    # The victim is untouched: its lease holds the same Exporter, it is not refused.
    lease = standin.lease("victim-lease")
    assert lease["status"]["exporterRef"]["name"] == held and not lease["status"].get("ended")
    assert held in owned_by(standin, "pool") and set(victim_before) <= set(owned_by(standin, "pool"))
    assert (condition(get_set(custom, namespace, "pool"), "Degraded") or {}).get("status") == "False"

    # Once the thief's labels are its own, it is served.
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "thief", {"spec": {
        "selector": {"matchLabels": {"board": "thief-board"}},
        "template": {"metadata": {"labels": {"board": "thief-board", "virtual": "true"}}}}})
    settle_pool(standin, 1, custom, namespace, name="thief")


def test_deleting_a_set_keeps_its_leased_exporters_until_their_leases_end(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    make_class(custom, namespace, reclaimPolicy="Delete")
    make_set(custom, namespace, board=BOARD, minAvailableReplicas=2, maxReplicas=3)
    operator()
    settle_pool(standin, 2, custom, namespace)
    standin.create_lease("lease-a", {"board": BOARD})
    leased = standin.wait_assigned("lease-a")
    settle_pool(standin, 2, custom, namespace, leasedReplicas=1, replicas=3)
    # An admin disables one; a lessee takes it anyway (jmp create lease --allow-disabled).
    disabled = sorted(set(owned_by(standin, "pool")) - {leased})[0]
    custom.patch_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters", disabled,
                                          {"spec": {"enabled": False}})
    standin.create_lease("lease-b", {"board": BOARD}, exporter=disabled, allow_disabled=True)
    assert standin.wait_assigned("lease-b") == disabled
    free = sorted(set(owned_by(standin, "pool")) - {leased, disabled})

    custom.delete_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool")

    def waiting():
        try:
            the_set = get_set(custom, namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                raise AssertionError(f"the set went while {leased} and {disabled} were leased: "
                                     f"left {owned_by(standin, 'pool')}") from None
            raise
        waits = condition(the_set, "WaitingForLeases") or {}
        gone = not set(free) & set(owned_by(standin, "pool"))
        return waits if gone and waits.get("status") == "True" else None

    waits = wait_for(waiting, timeout=90, message="unleased exporters deleted, the set waiting for leases")
    assert waits["reason"] == "ExportersLeased"
    assert f"{leased} (lease lease-a)" in waits["message"] and f"{disabled} (lease lease-b)" in waits["message"]
    assert any(e.reason == "WaitingForLeases" for e in set_events(core, namespace, "pool"))
    # It stays so: the leased Exporters and their instances are kept, the finalizer too.
    for _ in range(3):
        time.sleep(1)
        for name in (leased, disabled):
            exporter = standin.exporter(name)
            assert not exporter["metadata"].get("deletionTimestamp"), name
        assert {leased, disabled} <= {p.metadata.name for p in standin.pods() if not p.metadata.deletion_timestamp}
        assert "virtualtarget.jumpstarter.dev/teardown" in get_set(custom, namespace)["metadata"]["finalizers"]
    for name in ("lease-a", "lease-b"):
        assert not standin.lease(name)["status"].get("ended")

    # The leases end: the teardown finishes and the set goes.
    standin.release("lease-a")
    standin.release("lease-b")

    def set_gone():
        try:
            get_set(custom, namespace)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(set_gone, timeout=120, message="set deleted once its leases ended")
    wait_for(lambda: not owned_by(standin, "pool"), timeout=60, message="its exporters deleted")
