"""Rollout of a class change on the bed, with the operator and the Jumpstarter
controller stand-in.

A filled set (warm buffer two, InPlaceReuse) has two Exporters leased when
its class's memory changes, under an ExporterSetPolicy with a Proactive
rollout, maxUnavailable 1. The idle Exporters are replaced one at a time,
each replacement made before the one it replaces goes, so the warm buffer
never drops below two; the leased ones are not touched while leased, and
once their leases end they are replaced (not reset in place, although the
set reuses instances in place). Then updatedReplicas reaches replicas and
RollingOut turns False.

Every write is caught by watches on Exporters, Leases and Pods (the
recorder of test_lease_safety_race); replayed in resourceVersion order they
show the namespace at each write: no leased Exporter disabled, deleted or
reset, at most one Exporter out for the rollout at a time, and never fewer
than two available Exporters.

Without a policy, the default Opportunistic rollout replaces an outdated
Exporter when its lease ends and leaves the idle ones alone.
"""

from __future__ import annotations

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from jumpstarter_standin import wait_for
from kubernetes import client
from pool_helpers import GROUP, QEMU_PARAMETERS, SET_LABEL, condition, get_set, make_class, make_set, settle_pool
from test_lease_safety_race import Recorder, Seen, _lease_state, analyse

WARM = 2


def _hash(exporter):
    return (exporter["metadata"].get("annotations") or {}).get(constants.ANNOTATION_TEMPLATE_HASH)


def _retiring(exporter):
    return (exporter["metadata"].get("annotations") or {}).get(constants.ANNOTATION_RETIRING)


def _ready(exporter):
    found = {c.get("type"): c.get("status") for c in (exporter.get("status") or {}).get("conditions") or ()}
    return found.get("Registered") == "True" and found.get("Online") == "True"


def replay_rollout(events, since):
    """(fewest available Exporters, most Exporters out for the rollout at once,
    the namespace when fewest were available) from revision ``since`` on,
    replaying the recorded events in order.

    What is measured is what the operator does: an Exporter counts as ready
    from the first event that shows it Registered and Online. The
    controller's own status writes can show a ready Exporter unready for a
    moment (a merge patch made from a read taken before the Exporter
    registered rewrites its conditions, the real controller's as well as the
    stand-in's), which no operator can prevent. An Exporter that has served a
    lease never counts again: this set replaces used ones.
    """
    exporters, leases = {}, {}
    ready_once, used = set(), set()
    fewest, most_out, at_fewest = None, 0, ""
    for seen in sorted(events, key=lambda s: s.revision):
        name = seen.obj["metadata"]["name"]
        if seen.kind == "Lease":
            leases[name] = _lease_state(seen.obj)
        elif seen.kind != "Exporter":
            continue
        elif seen.type == "DELETED":
            exporters.pop(name, None)
        else:
            exporters[name] = seen.obj
            if _ready(seen.obj):
                ready_once.add(seen.obj["metadata"]["uid"])
        held = {exporter for exporter, ended in leases.values() if exporter and not ended}
        used.update(e["metadata"]["uid"] for n, e in exporters.items() if n in held or _lease_ref(e))
        if seen.kind != "Exporter" or seen.revision < since:
            continue
        available = sum(1 for n, e in exporters.items() if _available(n, e, held, ready_once, used))
        out = sum(1 for e in exporters.values() if _retiring(e) == constants.DELETE_ROLLOUT)
        if fewest is None or available < fewest:
            at_fewest = _describe(seen, exporters, held, ready_once, used)
        fewest = available if fewest is None else min(fewest, available)
        most_out = max(most_out, out)
    return fewest, most_out, at_fewest


def _lease_ref(exporter):
    return ((exporter.get("status") or {}).get("leaseRef") or {}).get("name")


def _available(name, exporter, held, ready_once, used):
    uid = exporter["metadata"]["uid"]
    return (uid in ready_once and uid not in used
            and (exporter.get("spec") or {}).get("enabled", True) is not False
            and not exporter["metadata"].get("deletionTimestamp") and name not in held
            and not _lease_ref(exporter)
            and constants.ANNOTATION_DORMANT not in (exporter["metadata"].get("annotations") or {}))


def _describe(seen, exporters, held, ready_once, used):
    """The write replayed and every Exporter as it stood after it, for a failure message."""
    lines = [f"after {seen.type} {seen.kind} {seen.obj['metadata']['name']} at revision {seen.revision}:"]
    for name, exporter in sorted(exporters.items()):
        uid = exporter["metadata"]["uid"]
        conditions = {c.get("type"): f"{c.get('status')}/{c.get('reason')}"
                      for c in (exporter.get("status") or {}).get("conditions") or ()}
        lines.append(
            f"  {name}: available={_available(name, exporter, held, ready_once, used)} "
            f"ready_once={uid in ready_once} used={uid in used} "
            f"enabled={(exporter.get('spec') or {}).get('enabled', True)} "
            f"retiring={_retiring(exporter)} deleting={bool(exporter['metadata'].get('deletionTimestamp'))} "
            f"leaseRef={_lease_ref(exporter)} exporterStatus={(exporter.get('status') or {}).get('exporterStatus')} "
            f"conditions={conditions}")
    return "\n".join(lines)


def test_proactive_rollout_of_a_class_change(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=WARM, maxReplicas=6,
             recycleStrategy="InPlaceReuse")
    custom.create_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", {
        "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSetPolicy",
        "metadata": {"name": "pool", "namespace": namespace},
        "spec": {"exporterSetName": "pool", "rollout": {"strategy": "Proactive", "maxUnavailable": 1}}})
    operator()
    settle_pool(standin, WARM, custom, namespace, replicas=WARM)
    for lease in ("lease-a", "lease-b"):
        standin.create_lease(lease, {"board": "qemu-x86"})
    leased = {standin.wait_assigned("lease-a"), standin.wait_assigned("lease-b")}
    status = settle_pool(standin, WARM, custom, namespace, leasedReplicas=2, replicas=4,
                         updatedReplicas=4)
    assert condition(get_set(custom, namespace), "RollingOut")["reason"] == "UpToDate"
    first = {_hash(e) for e in standin.exporters(f"{SET_LABEL}=pool")}
    assert len(first) == 1 and None not in first

    recorder = Recorder(api, namespace).start()
    # The watches report changes from now on: the replay starts from what is there.
    for kind, plural in (("Exporter", "exporters"), ("Lease", "leases")):
        for obj in custom.list_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace,
                                                        plural)["items"]:
            recorder.events.append(Seen(int(obj["metadata"]["resourceVersion"]), kind, "ADDED", obj))
    try:
        changed = custom.patch_namespaced_custom_object(
            *GROUP, namespace, "virtualtargetclasses", "qemu-small",
            {"spec": {"parameters": {**QEMU_PARAMETERS, "resources": {"cpu": 1, "memory": "384Mi"}}}})
        since = int(changed["metadata"]["resourceVersion"])

        def idle_rolled():
            exporters = standin.exporters(f"{SET_LABEL}=pool")
            new = [e for e in exporters if _hash(e) not in first]
            status = get_set(custom, namespace).get("status") or {}
            rolling = condition({"status": status}, "RollingOut") or {}
            done = (len(exporters) == 4 and len(new) == 2 and status.get("availableReplicas") == WARM
                    and status.get("updatedReplicas") == 2 and "2 of 4" in rolling.get("message", ""))
            return status if done else None

        status = wait_for(idle_rolled, timeout=180, message="the idle exporters replaced")
        rolling = condition(get_set(custom, namespace), "RollingOut")
        assert (rolling["status"], rolling["reason"]) == ("True", "Proactive"), rolling
        assert "2 of 4" in rolling["message"] and "2 of them leased" in rolling["message"]
        # The leased ones are still there, still made from the first template.
        names = {e["metadata"]["name"]: _hash(e) for e in standin.exporters(f"{SET_LABEL}=pool")}
        assert all(names.get(name) in first for name in leased), names

        for lease in ("lease-a", "lease-b"):
            standin.release(lease)
        wait_for(lambda: not leased & {e["metadata"]["name"] for e in standin.exporters()},
                 timeout=120, message="the used outdated exporters replaced, not reset")
        status = settle_pool(standin, WARM, custom, namespace, leasedReplicas=0, replicas=WARM,
                             updatedReplicas=WARM, timeout=180)
        rolling = wait_for(lambda: (c := condition(get_set(custom, namespace), "RollingOut"))
                           and c["status"] == "False" and c, message="RollingOut False")
        assert rolling["reason"] == "UpToDate"
    finally:
        recorder.close()

    counts, violations = analyse(recorder.events)
    fewest, most_out, at_fewest = replay_rollout(recorder.events, since)
    print(f"\nrollout: {counts['disables']} disables, {counts['deletes']} Exporter deletes, "
          f"{counts['resets']} resets; fewest available {fewest}, at most {most_out} out at once; "
          f"leased Exporters touched: {len(violations)}")
    assert not recorder.errors, recorder.errors
    assert violations == []
    # The leased ones were replaced after their lease, never reset in place.
    assert counts["resets"] == 0
    assert most_out == 1
    assert fewest >= WARM, at_fewest
    assert status["replicas"] == status["updatedReplicas"] == WARM


def test_opportunistic_default_replaces_only_at_lease_end(api, namespace, standin, operator):
    """No ExporterSetPolicy: the default Opportunistic rollout replaces an
    outdated Exporter when its lease ends (not reset, although the set
    reuses instances in place) and leaves the idle ones as they are."""
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=WARM, maxReplicas=6,
             recycleStrategy="InPlaceReuse")
    operator()
    settle_pool(standin, WARM, custom, namespace, replicas=WARM)
    standin.create_lease("lease-a", {"board": "qemu-x86"})
    used = standin.wait_assigned("lease-a")
    settle_pool(standin, WARM, custom, namespace, leasedReplicas=1, replicas=3, updatedReplicas=3)
    idle = {e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}=pool")} - {used}
    custom.patch_namespaced_custom_object(
        *GROUP, namespace, "virtualtargetclasses", "qemu-small",
        {"spec": {"parameters": {**QEMU_PARAMETERS, "resources": {"cpu": 1, "memory": "384Mi"}}}})

    def says(reason, text):
        found = condition(get_set(custom, namespace), "RollingOut") or {}
        return found.get("reason") == reason and text in found.get("message", "") and found

    rolling = wait_for(lambda: says("Opportunistic", "0 of 3"), message="RollingOut Opportunistic")
    assert rolling["status"] == "True" and "1 of them leased" in rolling["message"]
    standin.release("lease-a")
    wait_for(lambda: used not in {e["metadata"]["name"] for e in standin.exporters()},
             timeout=120, message="the used outdated exporter replaced")
    status = settle_pool(standin, WARM, custom, namespace, leasedReplicas=0, replicas=WARM)
    # The idle ones are the same Exporters, still made from the first template.
    names = {e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}=pool")}
    assert names == idle and status["updatedReplicas"] == 0
    assert says("Opportunistic", "0 of 2")
    assert not [e for e in client.CoreV1Api(api).list_namespaced_event(namespace).items
                if e.reason == "RollingOut"]
