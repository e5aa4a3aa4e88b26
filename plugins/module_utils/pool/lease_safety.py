"""Lease safety: the one rule for touching an Exporter a user may hold.

The pool deletes, disables and resets Exporters (scale-down, recycle after
a lease, in-place reuse, failure replacement). The Jumpstarter controller
assigns leases on its own meanwhile, and it writes an assignment on the
Lease first (``status.exporterRef``) and on the Exporter later
(``status.leaseRef``). So an Exporter is leased when either side says so:

* its ``status.leaseRef`` names a lease, or
* a Lease that has not ended names it in ``status.exporterRef``.

The rule, applied by the planner (``plan.py``) on what it observed and by
the writers (``k8s/apply.py``) on a fresh read just before each write:

1. An Exporter is disabled (``spec.enabled: false``; the controller assigns
   no new lease to a disabled Exporter) only while it is unleased from both
   sides, with its resourceVersion as precondition.
2. It is deleted, or its instance reset, only once it is seen disabled and
   unleased from both sides; a delete carries its UID and resourceVersion as
   preconditions, and a 409 leaves it for the next plan.

A lease's end is read from the Lease objects, not from having watched the
Exporter leased: a Lease has ended when it carries the
``jumpstarter.dev/lease-ended`` label, ``status.ended``, or a ``Ready=False``
condition with reason ``Released`` or ``Expired``. An Exporter served an
ended Lease when that Lease names it in ``status.exporterRef`` and either
has it (its UID) as owner or, without an Exporter owner (orphaned when a
namesake was deleted), began after the Exporter was created.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.constants import EXPORTER
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import ownership
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    read_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    format_time,
    parse_time,
)

LEASE_ENDED_LABEL = "jumpstarter.dev/lease-ended"
# Lists only the Leases that may still hold an Exporter.
ACTIVE_LEASES_SELECTOR = "!" + LEASE_ENDED_LABEL
_ENDED_REASONS = ("Released", "Expired")


def lease_ended(lease):
    """Whether the controller ended ``lease`` (label, status.ended or Ready=False Released/Expired)."""
    if LEASE_ENDED_LABEL in (lease["metadata"].get("labels") or {}):
        return True
    status = lease.get("status") or {}
    if status.get("ended"):
        return True
    return any(
        condition.get("type") == "Ready" and condition.get("status") == "False"
        and condition.get("reason") in _ENDED_REASONS
        for condition in status.get("conditions") or ()
    )


def assigned_exporter(lease):
    """The name in the Lease's ``status.exporterRef``, or None."""
    return ((lease.get("status") or {}).get("exporterRef") or {}).get("name") or None


def _time_key(text):
    try:
        return format_time(parse_time(text)) if text else ""
    except ValueError:
        return ""


def ended_key(lease):
    """Orders ended Leases by when they ended: (endTime, creationTimestamp, name)."""
    status = lease.get("status") or {}
    created = _time_key(lease["metadata"].get("creationTimestamp"))
    return (_time_key(status.get("endTime")) or created, created, lease["metadata"]["name"])


def format_ended_key(key):
    """The text of an ``ended_key`` kept in the Exporter's ``reused-after`` annotation."""
    return " ".join(key)


def parse_ended_key(text):
    parts = (text or "").split(" ")
    return tuple(parts) if len(parts) == 3 else None


def served_by(lease, exporter):
    """Whether ``exporter`` (this very object, by UID) is the one ``lease`` was assigned to."""
    meta = exporter["metadata"]
    if assigned_exporter(lease) != meta["name"]:
        return False
    if ownership.controller_ref(lease, EXPORTER.kind):
        return ownership.controlled_by(lease, meta.get("uid"))
    began = (lease.get("status") or {}).get("beginTime") or lease["metadata"].get("creationTimestamp")
    created = meta.get("creationTimestamp")
    if not began or not created:
        return True
    # An Exporter is never leased in the second it is created (it must first
    # get its credential and come Online); a lease of a namesake deleted and
    # re-made within one second must not recycle the new one again and again.
    return parse_time(began) > parse_time(created)


class LeaseView:
    """The Leases of a namespace, by the Exporter they name."""

    def __init__(self, leases=()):
        self.active = {}
        self.ended = {}
        for lease in leases or ():
            name = assigned_exporter(lease)
            if name is None:
                continue
            bucket = self.ended if lease_ended(lease) else self.active
            bucket.setdefault(name, []).append(lease)

    def active_holders(self, name):
        """Names of the Leases not ended that name the Exporter ``name``, sorted."""
        return sorted({lease["metadata"]["name"] for lease in self.active.get(name, ())})

    def holders(self, exporter):
        """Names of the leases holding ``exporter`` from either side, sorted; empty when free."""
        names = set(self.active_holders(exporter["metadata"]["name"]))
        lease_ref = read_exporter(exporter)[4]
        if lease_ref:
            names.add(lease_ref)
        return sorted(names)

    def last_ended(self, exporter):
        """The latest ended Lease ``exporter`` served, or None."""
        served = [lease for lease in self.ended.get(exporter["metadata"]["name"], ()) if served_by(lease, exporter)]
        return max(served, key=ended_key) if served else None

    def lease_to_recycle(self, exporter, handled_annotation):
        """The ended Lease after which ``exporter`` must be recycled, or None.

        ``handled_annotation`` is the ``reused-after`` annotation: the end of
        the last lease it was already reset after (InPlaceReuse).
        """
        lease = self.last_ended(exporter)
        if lease is None:
            return None
        handled = parse_ended_key(handled_annotation)
        if handled is not None and ended_key(lease) <= handled:
            return None
        return lease


def untouchable(exporter, active_leases, require_disabled=True):
    """Why the rule forbids acting on ``exporter`` now, or None when it may be acted on.

    ``active_leases`` are the namespace's Leases read after ``exporter`` (any
    Lease, ended ones are ignored). ``require_disabled`` is off only to
    disable it, or for the dormant Exporter, which has no instance and is
    never Online.
    """
    if exporter is None:
        return "gone"
    _, _, _, enabled, _, terminating = read_exporter(exporter)
    if terminating:
        return "being deleted"
    holders = LeaseView(active_leases).holders(exporter)
    if holders:
        return f"leased by {', '.join(holders)}"
    if require_disabled and enabled:
        return "still enabled"
    return None
