"""Which pending Leases are demand for which ExporterSet (one namespace).

Rule (documented in docs/pool-semantics.md):

1. A lease is pending when it has not ended, is not being released or
   deleted, has no assigned exporter (``status.exporterRef``), is not pinned
   to a named exporter (``spec.exporterRef``: a new exporter could never
   serve it), its ``spec.beginTime`` is not in the future and its
   ``spec.endTime`` is not in the past.
2. Pending leases are taken oldest first (creationTimestamp, then name).
3. A lease that an available exporter (ready, enabled, unleased, virtual or
   physical) satisfies will be served by the Jumpstarter controller; it
   claims that exporter (the first by name) and needs no new instance. Each
   available exporter absorbs at most one lease. When the claimed exporter
   belongs to a set, the lease is listed for that set: it counts towards the
   set's target so that the exporter about to be leased is not taken for
   surplus and scaled down before the controller assigns it (the pool
   already holds it, so no instance is created for it). A lease claimed by
   an exporter of no set (physical) is demand for nobody.
4. A lease that an Exporter no set controls (a lab's physical board, an
   Exporter of another controller or detached from its set; not being
   deleted) satisfies, whatever that Exporter's state, is demand for no set: it is asked for
   Exporters of someone else's, and a set that copied their labels would
   otherwise grow for it and be handed it (``withheld``: each set whose
   template labels satisfy it, with the Exporter, for its condition).
5. Otherwise it is demand for exactly one set whose template labels satisfy
   the lease selector: the one with the most headroom left (maxReplicas
   minus owned replicas, the dormant Exporter not counted, minus leases
   already attributed to it; no ceiling counts as unlimited), ties broken by
   set name.
"""

import math

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.constants import (
    ANNOTATION_DORMANT,
    EXPORTER_SET,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    exporter_name,
    is_available,
    is_terminating,
    read_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.lease_safety import (
    LeaseView,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.ownership import controller_of
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.selectors import (
    LabelIndex,
    selector_matches,
    selector_to_string,
    unowned_label_sets,
    unowned_match,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    parse_time,
)


def is_pending_lease(lease, now):
    now = parse_time(now)
    spec = lease.get("spec") or {}
    status = lease.get("status") or {}
    if status.get("ended") is True or spec.get("release") is True or is_terminating(lease):
        return False
    if (status.get("exporterRef") or {}).get("name"):
        return False
    if (spec.get("exporterRef") or {}).get("name"):
        return False
    if spec.get("beginTime") and parse_time(spec["beginTime"]) > now:
        return False
    return not (spec.get("endTime") and parse_time(spec["endTime"]) <= now)


def attribute_lease_demand(exporter_sets, leases, exporters, now):
    """Map every set name to the names of the pending leases it should serve."""
    return attribute_leases(exporter_sets, leases, exporters, now)[0]


def attribute_leases(exporter_sets, leases, exporters, now):
    """``(demand, withheld)``: ``demand`` as ``attribute_lease_demand``;
    ``withheld`` maps a set name to a message per pending lease its template
    labels satisfy that is no set's demand because an Exporter no set
    controls satisfies it too (rule 4), naming the lease and that Exporter."""
    now = parse_time(now)
    sets = sorted(
        (s for s in exporter_sets or () if not is_terminating(s)),
        key=lambda s: s["metadata"]["name"],
    )
    demand = {s["metadata"]["name"]: [] for s in sets}
    withheld = {}
    # While no lease waits there is nothing to attribute: the pool is not read.
    waiting = [lease for lease in leases or () if is_pending_lease(lease, now)]
    if not waiting:
        return demand, withheld
    owned_counts = {}
    for exporter in exporters or ():
        owner = controller_of(exporter, EXPORTER_SET.kind)
        dormant = ANNOTATION_DORMANT in (exporter["metadata"].get("annotations") or {})
        if owner in demand and not is_terminating(exporter) and not dormant:
            owned_counts[owner] = owned_counts.get(owner, 0) + 1
    headroom = {}
    for exporter_set in sets:
        name = exporter_set["metadata"]["name"]
        ceiling = (exporter_set.get("spec") or {}).get("maxReplicas") or 0
        headroom[name] = ceiling - owned_counts.get(name, 0) if ceiling > 0 else math.inf
    template_labels = {
        s["metadata"]["name"]: ((s["spec"].get("template") or {}).get("metadata") or {}).get(
            "labels"
        )
        or {}
        for s in sets
    }
    # An Exporter a Lease names is taken, even before its leaseRef says so.
    lease_view = LeaseView(leases)
    # Grouped by label set: each lease looks at every label set once, not at
    # every Exporter (LabelIndex).
    unclaimed = LabelIndex(
        (e for e in exporters or () if is_available(e) and not lease_view.holders(e)),
        key=exporter_name,
    )
    # The controller records an assignment on the Exporter and on the Lease in
    # two writes; a lease an Exporter already holds is not demand, whichever
    # write is seen first.
    held = {read_exporter(e)[4] for e in exporters or ()} - {None}
    unowned = unowned_label_sets(exporters)
    pending = sorted(
        (lease for lease in waiting if lease["metadata"]["name"] not in held),
        key=_lease_order,
    )
    for lease in pending:
        selector = (lease.get("spec") or {}).get("selector") or {}
        claimed = unclaimed.take_first(selector)
        if claimed is not None:
            holder = controller_of(claimed, EXPORTER_SET.kind)
            if holder in demand:
                demand[holder].append(lease["metadata"]["name"])
                headroom[holder] -= 1
            continue
        candidates = [n for n in demand if selector_matches(selector, template_labels[n])]
        if not candidates:
            continue
        theirs = unowned_match(selector, unowned)
        if theirs is not None:
            for name in candidates:
                withheld.setdefault(name, []).append(
                    f"Lease {lease['metadata']['name']} ({selector_to_string(selector)}): Exporter "
                    f"{theirs}, which no set controls, satisfies it")
            continue
        chosen = min(candidates, key=lambda n: (-headroom[n], n))
        demand[chosen].append(lease["metadata"]["name"])
        headroom[chosen] -= 1
    return demand, withheld


def _lease_order(lease):
    created = lease["metadata"].get("creationTimestamp")
    return (parse_time(created) if created else parse_time("1970-01-01T00:00:00Z"),
            lease["metadata"]["name"])
