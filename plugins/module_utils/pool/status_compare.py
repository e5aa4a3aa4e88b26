"""Whether writing a status changes what an object carries: the one
comparison every status writer asks (an ExporterSet's, a
VirtualTargetClass's, an ExporterSetPolicy's).

A status that would not change is not written, so a second run over
unchanged objects reports no change. What counts as a change:

- any field's value (``observedGeneration``, counters such as
  ``replicas`` or ``setCount``, lists such as ``sets``);
- a condition's type, status, reason, message or ``observedGeneration``.

What does not: the order of the conditions (they are keyed by type), and a
condition's ``lastTransitionTime`` alone (it only moves when the status
moves, which the comparison already sees; a writer that recomputed it
would otherwise write on every pass).

``wanted_keys_only`` is the knob of a writer whose status is merge-patched
over fields it does not own: only the fields it writes are compared, and a
field of the current status it does not name is not a change.

Pure: no API I/O.
"""

TRANSITION = "lastTransitionTime"


def comparable_conditions(conditions):
    """``conditions`` without their transition times, sorted by type."""
    return sorted(
        ({key: value for key, value in condition.items() if key != TRANSITION}
         for condition in conditions or []),
        key=lambda condition: str(condition.get("type")),
    )


def comparable(status, keys=None):
    """``status`` (None counts as empty) as the comparison sees it: the
    fields of ``keys`` only when given, its conditions made comparable."""
    status = dict(status or {})
    if keys is not None:
        status = {key: value for key, value in status.items() if key in keys}
    if "conditions" in status or keys is None:
        status["conditions"] = comparable_conditions(status.get("conditions"))
    return status


def status_differs(current, wanted, wanted_keys_only=False):
    """True when writing ``wanted`` over ``current`` would change it."""
    keys = set(wanted or {}) if wanted_keys_only else None
    return comparable(current, keys) != comparable(wanted, keys)
