"""A cloud backend that refuses to make instances, and how the pool takes it.

An API-backed provisioner (Corellium) can be told "no" for reasons that a
quick retry cannot fix: the API token is rejected, or the project's quota is
used up. The provisioner role records the refusal in the ExporterSet's
operator state (``status.operatorState.backendRefusal``, which a set author
cannot write); every later reconcile reads it back (``k8s_observe``) and

* shows it as a condition: ``Degraded``/``CredentialsRejected`` for a token,
  ``ScalingLimited``/``QuotaExceeded`` with the API's own message for quota;
* makes no new Exporters and calls the API for none of the waiting ones
  until ``retryAt``, then tries once more. Each refusal in a row doubles the
  wait, so a bad token costs a few requests an hour, not a storm;
* forgets it as soon as the provisioner makes an instance again.

Pure: no I/O. The record holds the API's message, never a credential.
"""

import json
from datetime import timedelta

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import operator_state
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import (
    merge_condition,
    with_set_healthy,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    backoff_delay,
    format_time,
    parse_time,
)

# JSON {"reason", "message", "since", "count", "retryAt"}.
KEY = operator_state.BACKEND_REFUSAL

REASON_CREDENTIALS_REJECTED = constants.REASON_CREDENTIALS_REJECTED
REASON_QUOTA_EXCEEDED = constants.REASON_QUOTA_EXCEEDED

# Seconds before the first retry after a refusal; doubled for each refusal in a row.
RETRY_BASE = 10.0
RETRY_MAX = 600.0

_CONDITION_OF = {
    REASON_CREDENTIALS_REJECTED: constants.CONDITION_DEGRADED,
    REASON_QUOTA_EXCEEDED: constants.CONDITION_SCALING_LIMITED,
}


def read(exporter_set):
    """The refusal recorded on the set, or None (also for an unreadable record)."""
    text = operator_state.get(exporter_set, KEY)
    if not text:
        return None
    try:
        refusal = json.loads(text)
        parse_time(refusal["retryAt"])
    except (ValueError, TypeError, KeyError):
        return None
    if refusal.get("reason") not in _CONDITION_OF:
        return None
    return refusal


def retry_in(refusal, now):
    """Seconds until the backend may be asked again; 0 when it may be now."""
    if refusal is None:
        return 0.0
    return max((parse_time(refusal["retryAt"]) - parse_time(now)).total_seconds(), 0.0)


def holds(refusal, now):
    """Whether the refusal still stops creations at ``now``."""
    return retry_in(refusal, now) > 0


def record(exporter_set, reason, message, now, retry_base=RETRY_BASE, retry_max=RETRY_MAX):
    """Plan fragment (``set_state``, ``events``) that records a refusal.

    ``message`` is what users read in the condition and the Event; a refusal
    with the same reason as the one already recorded counts as one more in a
    row and waits twice as long before the next try.
    """
    if reason not in _CONDITION_OF:
        raise ValueError(f"unknown refusal reason {reason!r}")
    now = parse_time(now)
    previous = read(exporter_set)
    in_a_row = previous is not None and previous["reason"] == reason
    count = int(previous.get("count") or 1) + 1 if in_a_row else 1
    wait = backoff_delay(count, retry_base, retry_max)
    refusal = {
        "reason": reason,
        "message": message,
        "since": previous["since"] if in_a_row else format_time(now),
        "count": count,
        "retryAt": format_time(now + timedelta(seconds=wait)),
    }
    return {
        "set_state": {KEY: json.dumps(refusal, sort_keys=True)},
        "events": [{"type": "Warning", "reason": reason,
                    "message": f"{message} (refusal {count} in a row; next try in {wait:g}s)"}],
    }


def cleared(exporter_set):
    """Plan fragment that forgets a recorded refusal; empty when there is none."""
    if KEY not in operator_state.of(exporter_set):
        return {}
    return {"set_state": {KEY: None}}


def capacity(refusal, now, capacity_option):
    """The plan's ``capacity`` option while the refusal holds: no new instances."""
    if not holds(refusal, now):
        return capacity_option
    return {"limit": 0, "reason": refusal["reason"], "message": refusal["message"]}


def apply_to_plan(plan, exporter_set, refusal, now):
    """Show the refusal in the plan's status and come back when it may be retried.

    The refusal's condition replaces the plan's condition of the same type;
    the condition stays until the refusal is cleared, so a fixed token shows
    only once an instance was made with it.
    """
    if refusal is None or not plan.get("status"):
        return plan
    previous_status = exporter_set.get("status") or {}
    previous_conditions = previous_status.get("conditions") or []
    generation = exporter_set["metadata"].get("generation")
    wanted = {"type": _CONDITION_OF[refusal["reason"]], "status": "True",
              "reason": refusal["reason"], "message": refusal["message"]}
    plan["status"]["conditions"] = with_set_healthy([
        merge_condition(previous_conditions, wanted, generation, now)
        if condition["type"] == wanted["type"] else condition
        for condition in plan["status"]["conditions"]
    ], now, generation)
    plan["changed"] = bool(plan.get("changed") or plan["status"] != previous_status)
    wait = retry_in(refusal, now)
    if wait > 0:
        plan["requeue_after"] = min(filter(None, (plan.get("requeue_after"), wait)))
    return plan
