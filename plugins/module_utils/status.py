"""ExporterSet status: the upstream counters and conditions.

Conditions keep their ``lastTransitionTime`` while their status does not
change, as metav1.Condition consumers expect.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.exporter_state import (
    is_enabled,
    is_online,
    is_ready,
    is_terminating,
    lease_name,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.selectors import (
    selector_to_string,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    format_time,
    parse_time,
)

_POD_COUNTERS = {"Running": "podsRunning", "Pending": "podsPending", "Failed": "podsFailed"}


def pool_counters(exporters, instances=None):
    """Counters over the owned, non-terminating Exporters.

    ``instances`` maps Exporter names to the backend's view ({"phase": ...});
    phases other than Running, Pending and Failed count as podsUnknown.
    """
    instances = instances or {}
    counters = dict.fromkeys(
        (
            "replicas", "readyReplicas", "availableReplicas", "unavailableReplicas",
            "leasedReplicas", "exportersActive", "exportersIdle", "exportersOffline",
            "exportersDisabled", "podsRunning", "podsPending", "podsFailed", "podsUnknown",
        ),
        0,
    )
    for exporter in exporters:
        if is_terminating(exporter):
            continue
        counters["replicas"] += 1
        ready = is_ready(exporter)
        online = is_online(exporter)
        enabled = is_enabled(exporter)
        leased = lease_name(exporter) is not None
        counters["readyReplicas"] += ready
        counters["leasedReplicas"] += leased
        counters["exportersActive"] += leased
        counters["availableReplicas"] += ready and enabled and not leased
        counters["unavailableReplicas"] += enabled and not ready
        counters["exportersIdle"] += online and enabled and not leased
        counters["exportersOffline"] += enabled and not online
        counters["exportersDisabled"] += not enabled
        instance = instances.get(exporter["metadata"]["name"])
        if instance is not None:
            counters[_POD_COUNTERS.get(instance.get("phase"), "podsUnknown")] += 1
    return counters


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


def pool_status(exporter_set, exporters, instances=None, now=None, conditions=None):
    """The full new status of an ExporterSet.

    ``conditions`` is a list of {type, status, reason, message}; each is
    merged with the previous status. Without it the previous conditions are
    kept as they are. ``now`` is required when conditions are given.
    """
    generation = exporter_set["metadata"].get("generation")
    previous = (exporter_set.get("status") or {}).get("conditions") or []
    status = pool_counters(exporters, instances)
    status["selector"] = selector_to_string((exporter_set.get("spec") or {}).get("selector"))
    if generation is not None:
        status["observedGeneration"] = generation
    if conditions is None:
        status["conditions"] = [dict(c) for c in previous]
    else:
        status["conditions"] = [
            merge_condition(previous, condition, generation, now) for condition in conditions
        ]
    return status
