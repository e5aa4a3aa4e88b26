"""Rollout of changes: which Exporters were made from an earlier template.

Every Exporter the planner creates carries, in the annotation
``constants.ANNOTATION_TEMPLATE_HASH``, the hash of what its instance is
made from (``template_hash``): the provisioner, the set's parameters and
images merged over its class's (``set_overrides.resolve``), the class's
``scheduling`` (the instance Pod's resources and placement) and the set's
``spec.template`` (the Exporter's labels and annotations, the drivers of its
exporter config). An Exporter whose hash differs from the set's current one
is outdated. One without the annotation was made before rollouts existed:
what it was made from cannot be told, so it counts as up to date and is
never rolled (it goes as before: at its lease's end with ExitAndReplace, on
failure, on scale-down).

The strategy comes from the set's ExporterSetPolicy (``options["policy"]``,
pool/policy.py), ``rollout.strategy``:

* ``Opportunistic`` (the default): an outdated Exporter whose lease ended is
  replaced (disabled, then deleted, and a new one made), never reset in
  place, even under ``InPlaceReuse``.
* ``Proactive``: as Opportunistic, and idle outdated Exporters (unleased)
  are replaced, at most ``rollout.maxUnavailable`` at a time, while the warm
  buffer stays met (``choose``).
* ``None``: outdated Exporters are kept; they are counted, nothing more.

A leased Exporter is never touched by a rollout (lease_safety.py); it is
replaced once its lease ends. Pure: no I/O.
"""

import hashlib
import json

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.policy import (
    ROLLOUT_NONE,
    ROLLOUT_OPPORTUNISTIC,
    ROLLOUT_PROACTIVE,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import (
    make_condition,
)

# Hex digits of the sha256 kept in the annotation.
HASH_LENGTH = 16


def template_hash(virtual_target_class, exporter_set, parameters, images):
    """The hash of what a new instance of ``exporter_set`` is made from.

    ``parameters`` and ``images`` are the merged ones (``set_overrides.resolve``).
    Canonical JSON (sorted keys, no spaces), sha256, the first
    ``HASH_LENGTH`` hex digits: equal inputs give equal hashes whatever the
    order of their keys.
    """
    class_spec = (virtual_target_class or {}).get("spec") or {}
    set_spec = (exporter_set or {}).get("spec") or {}
    inputs = {
        "provisioner": class_spec.get("provisioner"),
        "parameters": parameters or {},
        "images": images or {},
        "scheduling": class_spec.get("scheduling") or {},
        "template": set_spec.get("template") or {},
    }
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_LENGTH]


def settings(policy):
    """(strategy, maxUnavailable) of a normalized policy (or None: the defaults)."""
    rollout = (policy or {}).get("rollout") or {}
    strategy = rollout.get("strategy") or ROLLOUT_OPPORTUNISTIC
    if strategy not in (ROLLOUT_OPPORTUNISTIC, ROLLOUT_PROACTIVE, ROLLOUT_NONE):
        strategy = ROLLOUT_OPPORTUNISTIC
    try:
        max_unavailable = max(int(rollout.get("maxUnavailable") or 1), 1)
    except (TypeError, ValueError):
        max_unavailable = 1
    return strategy, max_unavailable


def outdated(annotations, current):
    """Whether an Exporter with ``annotations`` was made from another template
    than ``current`` (False without the annotation: made before rollouts)."""
    made_from = (annotations or {}).get(c.ANNOTATION_TEMPLATE_HASH)
    return made_from is not None and current is not None and made_from != current


def choose(candidates, max_unavailable, in_flight, available, warm_buffer):
    """Proactive: which idle outdated members to replace in this plan.

    ``candidates`` are the idle outdated members (enabled, unleased, not
    departing); ``in_flight`` the rollout's Exporters still disabled and not
    yet gone; ``available`` the idle members that are ready. At most
    ``max_unavailable - in_flight`` are taken, those not ready first (they
    serve nobody), then the oldest. Of those, a ready one goes only while
    ``available`` stays at or above ``warm_buffer`` without it.

    Returns (the members to disable now, how many taken wait for a
    replacement): the caller counts the waiting ones out of the pool, so
    their replacements are made first; once those are ready, the next plan
    lets them go.
    """
    budget = max_unavailable - in_flight
    if budget <= 0 or not candidates:
        return [], 0
    order = sorted(candidates, key=lambda m: (m.ready, m.created_sort_key, m.name))
    going, waiting = [], 0
    spare = available - warm_buffer
    for member in order[:budget]:
        if not member.ready:
            going.append(member)
        elif spare > 0:
            going.append(member)
            spare -= 1
        else:
            waiting += 1
    return going, waiting


def updated_count(template_hashes, current):
    """Exporters made from ``current`` (or before rollouts existed), of the
    survey's ``{(hash or None, leased): count}``."""
    return sum(count for (made_from, _), count in template_hashes.items()
               if made_from is None or made_from == current)


def condition(strategy, template_hashes, current, held_by=None):
    """The set's ``RollingOut`` condition.

    True (reason the strategy) while outdated Exporters remain, with the
    counts; False ``UpToDate`` when none; False ``RolloutOff`` under strategy
    None. ``held_by`` says why a rollout cannot go on (invalid parameters).
    """
    replicas = sum(template_hashes.values())
    updated = updated_count(template_hashes, current)
    leased = sum(count for (made_from, is_leased), count in template_hashes.items()
                 if is_leased and made_from is not None and made_from != current)
    outdated_count = replicas - updated
    if outdated_count == 0:
        return make_condition(c.CONDITION_ROLLING_OUT, False, c.REASON_UP_TO_DATE,
                              f"all {replicas} exporter(s) made from template {current}")
    counts = (f"{updated} of {replicas} exporter(s) made from template {current}; "
              f"{outdated_count} outdated, {leased} of them leased")
    if strategy == ROLLOUT_NONE:
        return make_condition(c.CONDITION_ROLLING_OUT, False, c.REASON_ROLLOUT_OFF,
                              f"{counts}; rollout strategy None keeps them")
    how = ("idle ones are replaced, the leased once their lease ends"
           if strategy == ROLLOUT_PROACTIVE else "each is replaced when its lease ends")
    if held_by:
        how = f"held: {held_by}"
    return make_condition(c.CONDITION_ROLLING_OUT, True, strategy, f"{counts}; {how}")
