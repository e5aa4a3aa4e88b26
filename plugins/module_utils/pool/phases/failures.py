"""Failures: members whose instance failed or stayed unready too long, and the
set's streak of consecutive failures (kept in its annotations), which spaces
the next creates and makes the set Degraded."""

import json
from dataclasses import dataclass
from datetime import timedelta

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import operator_state
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    find_condition,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    backoff_delay,
    format_time,
    parse_time,
)


@dataclass(frozen=True, slots=True)
class Failed:
    """A member that failed in this plan, with the reason and message of its failure."""

    member: object
    reason: str
    message: str


def instance_failure(member):
    """(reason, message) when the backend reports the instance failed, else None."""
    instance = member.instance
    if instance is not None and instance.get("phase") == c.INSTANCE_FAILED:
        detail = instance.get("message") or instance.get("reason") or "instance failed"
        return c.DELETE_FAILED, f"{member.name}: {detail}"
    return None


def timeout_failure(member, now, options, draft):
    """(reason, message) when a member that is not ready has been so for too
    long, else None.

    Also asks for a requeue at the moment a timeout would expire.
    """
    if c.ANNOTATION_FIRST_READY not in member.annotations:
        age = (now - member.created).total_seconds()
        if age >= options["startup_timeout"]:
            return (c.DELETE_STARTUP_TIMEOUT,
                    f"{member.name}: not ready {options['startup_timeout']:g}s after creation")
        draft.requeue_at(options["startup_timeout"] - age)
        return None
    online = find_condition(member.exporter, "Online") or find_condition(
        member.exporter, "Registered")
    since = (online or {}).get("lastTransitionTime")
    if since is None:
        return None
    offline_for = (now - parse_time(since)).total_seconds()
    if offline_for >= options["offline_timeout"]:
        return c.DELETE_FAILED, f"{member.name}: offline since {since}"
    draft.requeue_at(options["offline_timeout"] - offline_for)
    return None


class FailureLog:
    """Consecutive failures kept in the set's operator state."""

    def __init__(self, state, now):
        self.now = now
        try:
            self.count = int(state.get(operator_state.CONSECUTIVE_FAILURES) or 0)
        except (TypeError, ValueError):
            self.count = 0
        try:
            self.last = json.loads(state.get(operator_state.LAST_FAILURE) or "{}")
        except (TypeError, ValueError):
            self.last = {}
        if not isinstance(self.last, dict):
            self.last = {}

    @property
    def last_message(self):
        return self.last.get("message", "")

    def exhausted(self, options):
        """At the threshold, or the last failure cannot be cured by a retry."""
        return self.count >= options["failure_threshold"] or bool(self.last.get("unrecoverable"))

    def degraded(self, options, draft):
        """Exhausted, and failing for ``min_failing_duration`` since the
        streak's first failure (at once when a retry cannot cure it); asks
        for a requeue when that moment is still to come."""
        if not self.exhausted(options) or self.last.get("unrecoverable"):
            return self.exhausted(options)
        since = self.last.get("since") or self.last.get("time")
        if not since:
            return True
        remaining = options["min_failing_duration"] - (self.now - parse_time(since)).total_seconds()
        if remaining > 0:
            draft.requeue_at(remaining)
            return False
        return True

    def settle(self, failed, became_ready, draft):
        """The streak after this plan: reset when a member became ready, then
        this plan's failures (``Failed``, by member name) counted."""
        if became_ready:
            self.reset(draft)
        self.record(sorted(failed, key=lambda entry: entry.member.name), draft)

    def reset(self, draft):
        self.count = 0
        self.last = {}
        draft.remember(operator_state.CONSECUTIVE_FAILURES, None)
        draft.remember(operator_state.LAST_FAILURE, None)

    def record(self, failed, draft):
        already_counted = set(self.last.get("exporters") or ())
        for entry in failed:
            draft.event("Warning", "ReplicaFailed" if entry.reason == c.DELETE_FAILED else entry.reason,
                        entry.message, entry.member.name)
        fresh = [entry for entry in failed if entry.member.name not in already_counted]
        if not fresh:
            return
        since = (self.last.get("since") or self.last.get("time")) if self.count > 0 else None
        self.count += len(fresh)
        self.last = {
            "time": format_time(self.now),
            "since": since or format_time(self.now),
            "reason": fresh[-1].reason,
            "message": fresh[-1].message,
            "exporters": sorted(entry.member.name for entry in failed),
        }
        if all(c.ANNOTATION_FIRST_READY not in entry.member.annotations for entry in fresh):
            # Never became ready (unschedulable, or could not start): the
            # unschedulable backoff spaces the attempts.
            self.last["start"] = True
        if any((entry.member.instance or {}).get("reason") in provisioners.UNRECOVERABLE_REASONS for entry in fresh):
            # A wrong image digest fails every retry alike: degraded at once.
            self.last["unrecoverable"] = True
        draft.remember(operator_state.CONSECUTIVE_FAILURES, self.count)
        draft.remember(operator_state.LAST_FAILURE,
                       json.dumps(self.last, sort_keys=True, separators=(",", ":")))

    def delay(self, options):
        """Seconds the create after the last failure waits: instances that
        never became ready back off exponentially (``unschedulable_backoff_*``);
        other failures by ``failure_backoff_*``, the maximum from the threshold on."""
        if self.last.get("start") and not self.last.get("unrecoverable"):
            return backoff_delay(self.count, options["unschedulable_backoff_base"],
                                 options["unschedulable_backoff_max"])
        delay = options["failure_backoff_max"]
        if not self.exhausted(options):
            delay = backoff_delay(self.count, options["failure_backoff_base"], delay)
        return delay

    def backoff_remaining(self, options):
        """Seconds until the next create is allowed (0 when it is allowed now)."""
        if self.count <= 0 or not self.last.get("time"):
            return 0.0
        elapsed = (self.now - parse_time(self.last["time"])).total_seconds()
        return max(self.delay(options) - elapsed, 0.0)

    def backoff_status(self, options):
        """``status.backoff`` while a create waits: the failures in a row, the
        wait, and when the next attempt is made."""
        delay = self.delay(options)
        next_time = parse_time(self.last["time"]) + timedelta(seconds=delay)
        return {"attempts": self.count, "delaySeconds": int(round(delay)),
                "nextAttemptTime": format_time(next_time)}
