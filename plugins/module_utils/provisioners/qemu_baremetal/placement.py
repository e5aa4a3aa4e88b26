"""Where qemu-baremetal instances go: slots on lab hosts.

A host's used slots are the non-terminating Exporters labelled with
``virtualtarget.jumpstarter.dev/host: <host name>``. Instances are spread:
each one goes to the host with the most free slots, ties broken by name.
Unreachable hosts get nothing.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.constants import (
    LABEL_HOST,
    REASON_NO_FREE_SLOTS,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    is_terminating,
)


def free_slots(hosts, exporters, unreachable=()):
    """{host name: free slots} for every reachable host (never negative)."""
    used = {}
    for exporter in exporters or ():
        host = (exporter["metadata"].get("labels") or {}).get(LABEL_HOST)
        if host is not None and not is_terminating(exporter):
            used[host] = used.get(host, 0) + 1
    unreachable = set(unreachable or ())
    return {
        host["name"]: max(int(host.get("slots", 0)) - used.get(host["name"], 0), 0)
        for host in hosts or ()
        if host["name"] not in unreachable
    }


def place_instances(hosts, exporters, count, unreachable=(), names=None):
    """Choose a host for each of ``count`` new instances.

    ``names`` (optional) are the Exporter names to place, in order; each
    placement then carries its ``exporter``. ``limited`` is True when fewer
    than ``count`` instances fit.
    """
    free = free_slots(hosts, exporters, unreachable)
    remaining = dict(free)
    placements = []
    for index in range(count):
        open_hosts = [name for name, slots in remaining.items() if slots > 0]
        if not open_hosts:
            break
        host = min(open_hosts, key=lambda name: (-remaining[name], name))
        remaining[host] -= 1
        placement = {"host": host}
        if names is not None and index < len(names):
            placement["exporter"] = names[index]
        placements.append(placement)
    limited = len(placements) < count
    message = ""
    if limited:
        message = (f"placed {len(placements)} of {count} instances; "
                   + _no_slot_message(hosts, free, unreachable))
    return {"placements": placements, "free": free, "limited": limited, "message": message}


def capacity_for(hosts, exporters, unreachable=()):
    """The ``capacity`` option of scale_plan for a set of lab hosts."""
    free = free_slots(hosts, exporters, unreachable)
    limit = sum(free.values())
    return {
        "limit": limit,
        "reason": REASON_NO_FREE_SLOTS,
        "message": _no_slot_message(hosts, free, unreachable) if limit == 0 else
        f"{limit} free slot(s) on hosts {', '.join(sorted(h for h, n in free.items() if n))}",
    }


def _no_slot_message(hosts, free, unreachable):
    full = sorted(name for name, slots in free.items() if slots == 0)
    down = sorted(set(unreachable or ()) & {h["name"] for h in hosts or ()})
    parts = []
    if full:
        parts.append(f"no free slot on hosts {', '.join(full)}")
    if down:
        parts.append(f"unreachable hosts {', '.join(down)}")
    return "; ".join(parts) or "no hosts configured"
