"""ExporterSet status: the upstream counters and conditions.

Conditions keep their ``lastTransitionTime`` while their status does not
change, as metav1.Condition consumers expect.
"""

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


def merge_condition(previous_conditions, condition, generation, now):
    """A full metav1.Condition; lastTransitionTime kept if status is unchanged."""
    previous = next(
        (c for c in previous_conditions or () if c.get("type") == condition["type"]), None
    )
    if previous is not None and previous.get("status") == condition["status"]:
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
    if generation is not None:
        merged["observedGeneration"] = generation
    return merged


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
        planned = {condition["type"] for condition in conditions}
        # Conditions other writers own (the operator's Running/Successful/
        # Failure outcome) are kept as they are, in their place.
        status["conditions"] = sorted(
            [merge_condition(previous, condition, generation, now) for condition in conditions]
            + [dict(c) for c in previous if c.get("type") not in planned],
            key=lambda c: c["type"],
        )
    return status
