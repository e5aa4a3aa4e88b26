"""ExporterSet status: the upstream counters and conditions.

Conditions keep their ``lastTransitionTime`` while their status does not
change, as metav1.Condition consumers expect.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    read_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.selectors import (
    selector_to_string,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    format_time,
    parse_time,
)

_POD_COUNTERS = {"Running": "podsRunning", "Pending": "podsPending", "Failed": "podsFailed"}
COUNTER_NAMES = (
    "replicas", "readyReplicas", "availableReplicas", "unavailableReplicas", "leasedReplicas",
    "exportersActive", "exportersIdle", "exportersOffline", "exportersDisabled",
    "podsRunning", "podsPending", "podsFailed", "podsUnknown",
)


def tally_exporter(tally, ready, online, enabled, leased, phase):
    """Count one non-terminating Exporter by the facts the counters depend on.

    Counting combinations first keeps the per-Exporter work to a dict update;
    counters_from_tally turns the few combinations into the status counters.
    """
    key = (ready, online, enabled, leased, phase)
    tally[key] = tally.get(key, 0) + 1


def counters_from_tally(tally):
    counters = dict.fromkeys(COUNTER_NAMES, 0)
    for (ready, online, enabled, leased, phase), count in tally.items():
        counters["replicas"] += count
        counters["readyReplicas"] += ready * count
        counters["leasedReplicas"] += leased * count
        counters["exportersActive"] += leased * count
        counters["availableReplicas"] += (ready and enabled and not leased) * count
        counters["unavailableReplicas"] += (enabled and not ready) * count
        counters["exportersIdle"] += (online and enabled and not leased) * count
        counters["exportersOffline"] += (enabled and not online) * count
        counters["exportersDisabled"] += (not enabled) * count
        if phase is not None:
            counters[_POD_COUNTERS.get(phase, "podsUnknown")] += count
    return counters


def pool_counters(exporters, instances=None):
    """Counters over the owned, non-terminating Exporters.

    ``instances`` maps Exporter names to the backend's view ({"phase": ...});
    phases other than Running, Pending and Failed count as podsUnknown, and
    Exporters without an instance count in no pod counter.
    """
    instances = instances or {}
    tally = {}
    for exporter in exporters:
        name, ready, online, enabled, lease, terminating = read_exporter(exporter)
        if not terminating:
            instance = instances.get(name)
            tally_exporter(tally, ready, online, enabled, lease is not None,
                           instance.get("phase") if instance else None)
    return counters_from_tally(tally)


def make_condition(kind, status, reason, message):
    """A condition to merge: ``status`` a bool, the rest as written."""
    return {"type": kind, "status": "True" if status else "False", "reason": reason,
            "message": message}


def merge_condition(previous_conditions, condition, generation, now):
    """A full metav1.Condition: ``condition`` over the previous one of its type.

    ``lastTransitionTime`` is the previous one while the status is unchanged,
    ``now`` when it changed, and the condition's own (else ``now``) when it is
    new. ``observedGeneration`` is ``generation``, else the condition's own.
    """
    previous = next(
        (c for c in previous_conditions or () if c.get("type") == condition["type"]), None
    )
    if previous is None:
        transition = condition.get("lastTransitionTime") or format_time(parse_time(now))
    elif previous.get("status") == condition["status"]:
        transition = previous.get("lastTransitionTime") or format_time(parse_time(now))
    else:
        transition = format_time(parse_time(now))
    merged = {
        "type": condition["type"],
        "status": condition["status"],
        "reason": condition["reason"],
        "message": condition.get("message", ""),
        "lastTransitionTime": transition,
    }
    if generation is None:
        generation = condition.get("observedGeneration")
    if generation is not None:
        merged["observedGeneration"] = generation
    return merged


def merge_conditions(previous_conditions, updates, now, generation=None):
    """``previous_conditions`` with ``updates`` merged by type, sorted by type.

    Conditions of types no update names are kept as they are; an update of a
    type already updated merges over the earlier update.
    """
    by_type = {c["type"]: dict(c) for c in previous_conditions or ()}
    for update in updates:
        earlier = by_type.get(update["type"])
        by_type[update["type"]] = merge_condition(
            [earlier] if earlier is not None else (), update, generation, now)
    return sorted(by_type.values(), key=lambda c: c["type"])


def set_healthy_condition(conditions):
    """JEP-0014's ``SetHealthy``, read off the set's other conditions; None
    while they say nothing yet (no ``Degraded`` among them).

    A set is healthy when it is not ``Degraded`` (its class is usable, its
    parameters valid and allowed, its instances not failing in a row, its
    backend not refusing its credentials, the controller CA readable) and
    its ExporterSetPolicy is not invalid (``PolicyValid`` not False). False
    takes the reason and message of the condition that makes it so. A pool
    short of its warm buffer, capped, provisioning, rolling out or paused is
    still healthy: ``Available``, ``ScalingLimited``, ``Progressing``,
    ``RollingOut`` and ``Paused`` say so.
    """
    by_type = {condition.get("type"): condition for condition in conditions or ()}
    degraded = by_type.get(constants.CONDITION_DEGRADED)
    if degraded is None:
        return None
    policy = by_type.get(constants.CONDITION_POLICY_VALID) or {}
    for cause, bad in ((degraded, "True"), (policy, "False")):
        if cause.get("status") == bad:
            return make_condition(constants.CONDITION_SET_HEALTHY, False,
                                  cause.get("reason") or cause["type"], cause.get("message") or "")
    return make_condition(constants.CONDITION_SET_HEALTHY, True, constants.REASON_HEALTHY,
                          "not degraded, and the set's policy, if any, is valid")


def with_set_healthy(conditions, now, generation=None):
    """``conditions`` with ``SetHealthy`` derived from the others and merged
    in (its ``lastTransitionTime`` held while its status holds). Every writer
    that changes ``Degraded`` or ``PolicyValid`` on a set's plan calls it."""
    healthy = set_healthy_condition(conditions)
    if healthy is None:
        return list(conditions or ())
    return merge_conditions(conditions, [healthy], now, generation)


def pool_status(exporter_set, exporters, instances=None, now=None, conditions=None,
                counters=None):
    """The full new status of an ExporterSet.

    ``conditions`` is a list of {type, status, reason, message}; each is
    merged with the previous status, and previous conditions of other types
    are kept. Without it the previous conditions are kept as they are. ``now`` is required when conditions are given.
    ``counters`` skips counting when the caller already has pool_counters.
    """
    generation = exporter_set["metadata"].get("generation")
    previous = (exporter_set.get("status") or {}).get("conditions") or []
    status = dict(counters) if counters is not None else pool_counters(exporters, instances)
    status["selector"] = selector_to_string((exporter_set.get("spec") or {}).get("selector"))
    if generation is not None:
        status["observedGeneration"] = generation
    if conditions is None:
        status["conditions"] = [dict(c) for c in previous]
    else:
        # Conditions other writers own (the operator's Running/Successful/
        # Failure outcome) are kept as they are, in their place.
        status["conditions"] = with_set_healthy(
            merge_conditions(previous, conditions, now, generation), now, generation)
    return status
