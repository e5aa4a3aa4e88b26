"""Conditions: the set's Available, Progressing, Degraded and ScalingLimited
conditions after this plan, the status they make, Warning Events for the
ones that turn bad, and the finished ``Plan``."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import operator_state, rollout
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.creates import (
    REASON_REPLICA_CEILING,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import (
    make_condition,
    pool_status,
)

# Degraded reason while the set's template labels are refused.
REASON_LABEL_CONFLICT = "TemplateLabelConflict"
# True while something the set or its class wrote is ignored (an unknown
# parameter, an annotation entry the class cannot mean, a Qemu driver
# setting the provisioner does not read): each named, with why.
CONDITION_FIELDS_IGNORED = "FieldsIgnored"
REASON_FIELDS_IGNORED = "FieldsIgnored"
_TURN_BAD = (c.CONDITION_DEGRADED, c.CONDITION_SCALING_LIMITED, c.CONDITION_CLASS_TERMINATING,
             CONDITION_FIELDS_IGNORED)
# Conditions whose Warning Event is told again when only their message
# changes (another field ignored is news; another count of failures not).
_TOLD_BY_MESSAGE = (CONDITION_FIELDS_IGNORED,)


def available(counters, warm_buffer):
    count = counters["availableReplicas"]
    message = f"{count} available, warm buffer {warm_buffer}"
    if count >= warm_buffer:
        return make_condition(c.CONDITION_AVAILABLE, True, "MinimumAvailable", message)
    return make_condition(c.CONDITION_AVAILABLE, False, "BelowMinimumAvailable", message)


def progressing(draft, provisioning, backoff, waiting_for_cooldown):
    if draft.create or draft.enable:
        return make_condition(c.CONDITION_PROGRESSING, True, "ScalingUp", "adding exporters")
    scaling_down = any(draft.exporter_annotations.get(name, {}).get(c.ANNOTATION_SCALE_DOWN)
                       for name in draft.disable)
    if scaling_down or any(d.reason == c.DELETE_SCALE_DOWN for d in draft.delete):
        return make_condition(c.CONDITION_PROGRESSING, True, "ScalingDown", "removing idle exporters")
    if draft.delete or draft.recycle or draft.disable:
        return make_condition(c.CONDITION_PROGRESSING, True, "Replacing", "replacing exporters")
    if backoff:
        return make_condition(
            c.CONDITION_PROGRESSING, True, "BackOff",
            f"waiting before replacing failed instances: {backoff['attempts']} failure(s) in a "
            f"row, next attempt at {backoff['nextAttemptTime']} "
            f"(after {backoff['delaySeconds']}s)")
    if provisioning:
        return make_condition(c.CONDITION_PROGRESSING, True, "Provisioning",
                              "waiting for exporters to become ready")
    if waiting_for_cooldown:
        return make_condition(c.CONDITION_PROGRESSING, True, "WaitingForCooldown",
                              "surplus exporters are removed after scaleDownCooldown")
    return make_condition(c.CONDITION_PROGRESSING, False, "Stable", "pool is at its target")


def degraded(wanted, label_conflicts, controller_ca, failures, options, draft):
    """Degraded: refused labels, credential redirects, invalid parameters, an
    unavailable controller CA, or a streak of failures, the first that holds."""
    if label_conflicts:
        return make_condition(c.CONDITION_DEGRADED, True, REASON_LABEL_CONFLICT,
                              "; ".join(label_conflicts) + "; nothing is created for this set")
    if wanted.redirects:
        # CredentialRedirect, or NotAllowedByClass for the class's other rules.
        return make_condition(c.CONDITION_DEGRADED, True, wanted.redirect_reason,
                              "; ".join(wanted.redirects + wanted.errors))
    if wanted.errors:
        return make_condition(c.CONDITION_DEGRADED, True, c.REASON_INVALID_PARAMETERS,
                              "; ".join(wanted.errors))
    if controller_ca is not None and not controller_ca.get("available"):
        return make_condition(c.CONDITION_DEGRADED, True, c.REASON_CONTROLLER_CA_UNAVAILABLE,
                              controller_ca.get("message") or "the controller CA is unavailable")
    if failures.degraded(options, draft):
        return make_condition(
            c.CONDITION_DEGRADED, True, c.REASON_REPLICA_FAILURE,
            f"{failures.count} consecutive instance failure(s); last: {failures.last_message}",
        )
    return make_condition(c.CONDITION_DEGRADED, False, "AsExpected", "")


def scaling_limited(limits, ceiling, target_unclamped):
    """ScalingLimited: a ceiling held creates back, or the target is beyond the set's ceiling."""
    max_replicas, ceiling_bites = ceiling
    reason, message = limits.reason, limits.message
    if reason is None and max_replicas > 0 and target_unclamped > max_replicas:
        if ceiling_bites:
            reason = REASON_REPLICA_CEILING
            message = (f"need {target_unclamped} replicas, the operator's ceiling is "
                       f"{max_replicas} per set (--max-replicas-per-set)")
        else:
            reason = c.REASON_MAX_REPLICAS_REACHED
            message = f"need {target_unclamped} replicas, maxReplicas is {max_replicas}"
    if reason:
        return make_condition(c.CONDITION_SCALING_LIMITED, True, reason, message)
    return make_condition(c.CONDITION_SCALING_LIMITED, False, "WithinLimits", "")


def fields_ignored(warnings):
    """FieldsIgnored: what takes no effect, each message naming its field."""
    if warnings:
        return make_condition(CONDITION_FIELDS_IGNORED, True, REASON_FIELDS_IGNORED, "; ".join(warnings))
    return make_condition(CONDITION_FIELDS_IGNORED, False, "NoneIgnored", "")


def rollout_held_by(rolling, strategy, waiting, limits):
    """Why a rollout cannot go on, or None."""
    if not rolling and strategy != rollout.ROLLOUT_NONE:
        return "the set's parameters or images are invalid (Degraded)"
    if waiting and limits.allowed < limits.wanted:
        return ("no replacement can be made while the warm buffer is kept"
                + (f" ({limits.message})" if limits.message else ""))
    return None


def finish(exporter_set, counters, now, draft, target, conditions, parameters, images, warnings,
           backoff=None, sizing=None, service=None):
    """The Plan, with a Warning Event for each condition that turns bad."""
    previous_status = exporter_set.get("status") or {}
    previous_conditions = {x.get("type"): x for x in previous_status.get("conditions") or ()}
    for condition in conditions:
        was = previous_conditions.get(condition["type"]) or {}
        turned_bad = condition["status"] == "True" and condition["type"] in _TURN_BAD
        told = (was.get("status"), was.get("reason")) + (
            (was.get("message"),) if condition["type"] in _TOLD_BY_MESSAGE else ())
        now_bad = ("True", condition["reason"]) + (
            (condition["message"],) if condition["type"] in _TOLD_BY_MESSAGE else ())
        if turned_bad and told != now_bad:
            draft.event("Warning", condition["reason"], condition["message"])
    status = pool_status(exporter_set, None, now=now, conditions=conditions, counters=counters)
    if backoff:
        status["backoff"] = backoff
    if sizing:
        status["sizing"] = sizing
    if service:
        status["serviceLevel"] = service
    status = operator_state.rebased(status, previous_status, draft.set_state)
    return draft.finish(previous_status, status, target, parameters, images, warnings)
