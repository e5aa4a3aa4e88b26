"""Scale-down: parked members (disabled by an earlier scale-down) re-enabled
while the pool needs them and deleted otherwise, and the least useful idle
members disabled once the surplus outlasted ``scaleDownCooldown``."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import operator_state, rollout
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.selectors import (
    selector_matches,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    parse_time,
)


def custom_scale_in(scale_in):
    """Whether a policy's scaleIn changes the default order."""
    return (scale_in.get("order") or "Default") != "Default" or bool(scale_in.get("preferSelector"))


def name_order_key(name):
    """Sort key of an Exporter name, its trailing number compared as a
    number: ``pool-9`` before ``pool-10``. One plan names the Exporters it
    makes with the lowest free numbers in increasing order (phases/naming.py),
    so within a plan this is the order they were made in."""
    stem = name.rstrip("0123456789")
    digits = name[len(stem):]
    return (stem, int(digits) if digits else -1, name)


def order(idle, scale_in=None):
    """Idle members, the first to disable first: least useful (backend lost,
    provisioning, offline, idle), then those the policy's
    ``scaleIn.preferSelector`` matches, then newest first (``OldestFirst``:
    oldest first). Members made in the same second (creationTimestamp has
    whole seconds) follow their names the same way: one plan numbers the
    Exporters it makes in the order it makes them, so the choice does not
    hang on where a second's boundary fell."""
    scale_in = scale_in or {}
    prefer = scale_in.get("preferSelector")
    newest_first = scale_in.get("order") != "OldestFirst"
    # Stable sorts: by name, then by age, then preferred first, then least useful first.
    members = sorted(idle, key=lambda m: name_order_key(m.name), reverse=newest_first)
    members.sort(key=lambda m: m.created_sort_key, reverse=newest_first)
    if prefer:
        members.sort(key=lambda m: not selector_matches(
            prefer, m.exporter["metadata"].get("labels") or {}))
    members.sort(key=lambda m: m.rank)
    return members


def settle_parked(parked, need, template_hash, rolling, draft):
    """Re-enable as many parked members as the pool ``need``s (those made from
    the current template first while rolling out), delete the rest; returns
    the re-enabled ones and the names of the deleted ones."""
    if rolling and need > 0 and parked:
        parked = sorted(parked, key=lambda m: rollout.outdated(m.annotations, template_hash))
    reenabled = parked[:max(need, 0)]
    for member in reenabled:
        draft.enable.append(member.name)
        draft.annotate(member.name, c.ANNOTATION_SCALE_DOWN, None)
    deleted = parked[len(reenabled):]
    for member in deleted:
        draft.remove(member.exporter, c.DELETE_SCALE_DOWN)
    if deleted:
        draft.event("Normal", "ScaledDown",
                    f"deleting {len(deleted)} disabled exporter(s): "
                    f"{', '.join(m.name for m in deleted)}")
    return reenabled, [m.name for m in deleted]


def disable_surplus(survey, idle, fresh_idle, surplus, cooldown, warm_buffer, options, now, draft):
    """Disable up to ``surplus`` idle members once the cooldown has run out.

    ``fresh_idle``: ``idle`` is not the survey's own list (its kept order does
    not hold). Returns whether the cooldown is still running, and how many
    were disabled.
    """
    if surplus <= 0 or not idle:
        draft.remember(operator_state.SURPLUS_SINCE, None)
        return False, 0
    scale_in = (options.get("policy") or {}).get("scaleIn") or {}
    if fresh_idle or custom_scale_in(scale_in):
        members = order(idle, scale_in)
    else:
        members = survey.scale_down_order()
    # Only ready idle members beyond the warm buffer may go: one being
    # reset counts as useful, but it is not available until it is ready.
    spare_ready = max(sum(1 for m in idle if m.ready) - warm_buffer, 0)
    return _scale_down(members, surplus, cooldown, now, draft, spare_ready)


def _scale_down(members, surplus, cooldown, now, draft, spare_ready):
    """Disable the least useful idle exporters once the cooldown has run out.

    ``members`` is the idle members in ``order``; at most ``spare_ready`` of
    the victims may be ready (the rest of the ready ones are the warm
    buffer). Returns whether the cooldown is still running, and how many
    were disabled.
    """
    since_text = draft.state_values.get(operator_state.SURPLUS_SINCE)
    try:
        since = parse_time(since_text) if since_text else None
    except ValueError:
        since = None
    if since is None:
        draft.remember(operator_state.SURPLUS_SINCE, draft.now_text)
        since = now
    remaining = cooldown - (now - since).total_seconds()
    if remaining > 0:
        draft.requeue_at(remaining)
        return True, 0
    victims = []
    for member in members:
        if len(victims) == surplus:
            break
        if member.ready:
            if spare_ready == 0:
                continue
            spare_ready -= 1
        victims.append(member)
    if not victims:
        return False, 0
    for member in victims:
        draft.disable.append(member.name)
        draft.annotate(member.name, c.ANNOTATION_SCALE_DOWN, draft.now_text)
    names = sorted(m.name for m in victims)
    draft.event("Normal", "ScalingDown",
                f"disabling {len(names)} idle exporter(s) before deletion: {', '.join(names)}")
    return False, len(victims)
