"""The refusal record of an API-backed provisioner and how the plan shows it."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import backend_refusal as refusal_log
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    parse_time,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def exporter_set(state=None, conditions=(), annotations=None):
    status = {"conditions": list(conditions)}
    if state:
        status["operatorState"] = dict(state)
    return {"metadata": {"name": "pool", "namespace": "lab", "generation": 3,
                         "annotations": dict(annotations or {})},
            "status": status}


def with_record(fragment):
    return exporter_set(fragment["set_state"])


def retry_delay(fragment, now):
    record = json.loads(fragment["set_state"][refusal_log.KEY])
    return (parse_time(record["retryAt"]) - now).total_seconds()


def test_refusals_in_a_row_double_the_wait_up_to_the_ceiling():
    current = exporter_set()
    delays = []
    for _ in range(8):
        fragment = refusal_log.record(current, refusal_log.REASON_CREDENTIALS_REJECTED, "no", NOW)
        delays.append(retry_delay(fragment, NOW))
        current = with_record(fragment)
    assert delays == [10, 20, 40, 80, 160, 320, 600, 600]
    assert json.loads(current["status"]["operatorState"][refusal_log.KEY])["count"] == 8


def test_another_reason_starts_counting_again():
    first = with_record(refusal_log.record(exporter_set(), refusal_log.REASON_CREDENTIALS_REJECTED,
                                           "bad token", NOW))
    again = with_record(refusal_log.record(first, refusal_log.REASON_CREDENTIALS_REJECTED,
                                           "bad token", NOW + timedelta(seconds=30)))
    quota = refusal_log.record(again, refusal_log.REASON_QUOTA_EXCEEDED, "quota", NOW)
    record = json.loads(quota["set_state"][refusal_log.KEY])
    assert (record["count"], record["since"]) == (1, "2026-03-01T12:00:00Z")
    assert refusal_log.read(again)["since"] == "2026-03-01T12:00:00Z"


def test_event_carries_the_message_and_the_next_try():
    fragment = refusal_log.record(exporter_set(), refusal_log.REASON_QUOTA_EXCEEDED,
                                  "Not enough quota", NOW)
    (event,) = fragment["events"]
    assert (event["type"], event["reason"]) == ("Warning", "QuotaExceeded")
    assert event["message"].startswith("Not enough quota") and "10s" in event["message"]


def test_holds_until_retry_at_then_lets_one_try_through():
    refusal = refusal_log.read(with_record(refusal_log.record(
        exporter_set(), refusal_log.REASON_QUOTA_EXCEEDED, "quota", NOW)))
    assert refusal_log.holds(refusal, NOW + timedelta(seconds=9))
    assert not refusal_log.holds(refusal, NOW + timedelta(seconds=10))
    assert refusal_log.capacity(refusal, NOW, None) == {
        "limit": 0, "reason": "QuotaExceeded", "message": "quota"}
    assert refusal_log.capacity(refusal, NOW + timedelta(seconds=11), {"limit": 3}) == {"limit": 3}


@pytest.mark.parametrize("text", ["", "{", "[]", '{"reason": "Other", "retryAt": "2026-03-01T12:00:00Z"}',
                                  '{"reason": "QuotaExceeded"}'])
def test_unreadable_records_are_ignored(text):
    assert refusal_log.read(exporter_set({refusal_log.KEY: text})) is None


def test_an_annotation_of_the_former_name_is_never_read():
    """A set's author writes its annotations, never its status: a refusal
    forged, or a real one moved, into the former annotation is no refusal,
    and clearing finds nothing to clear."""
    recorded = refusal_log.record(exporter_set(), refusal_log.REASON_CREDENTIALS_REJECTED, "no", NOW)
    text = recorded["set_state"][refusal_log.KEY]
    forged = exporter_set(annotations={"virtualtarget.jumpstarter.dev/backend-refusal": text})
    assert refusal_log.read(forged) is None
    assert refusal_log.cleared(forged) == {}
    # Deleting the annotations of a set in back-off leaves the back-off.
    kept = exporter_set({refusal_log.KEY: text})
    assert refusal_log.holds(refusal_log.read(kept), NOW + timedelta(seconds=9))


def test_cleared_only_when_something_is_recorded():
    assert refusal_log.cleared(exporter_set()) == {}
    recorded = with_record(refusal_log.record(exporter_set(), refusal_log.REASON_QUOTA_EXCEEDED,
                                              "q", NOW))
    assert refusal_log.cleared(recorded) == {"set_state": {refusal_log.KEY: None}}


def plan_with(conditions, requeue_after=None):
    return {"status": {"conditions": conditions}, "changed": False, "requeue_after": requeue_after}


PLAIN_CONDITIONS = [
    {"type": "Degraded", "status": "False", "reason": "AsExpected", "message": ""},
    {"type": "ScalingLimited", "status": "False", "reason": "WithinLimits", "message": ""},
]


@pytest.mark.parametrize(("reason", "condition_type"), [
    (refusal_log.REASON_CREDENTIALS_REJECTED, "Degraded"),
    (refusal_log.REASON_QUOTA_EXCEEDED, "ScalingLimited"),
])
def test_plan_shows_the_refusal_and_requeues_for_the_retry(reason, condition_type):
    current = with_record(refusal_log.record(exporter_set(), reason, "the API said no", NOW))
    plan = plan_with([dict(c) for c in PLAIN_CONDITIONS], requeue_after=300.0)
    later = NOW + timedelta(seconds=4)
    refusal_log.apply_to_plan(plan, current, refusal_log.read(current), later)
    shown = {c["type"]: c for c in plan["status"]["conditions"]}
    assert shown[condition_type]["status"] == "True"
    assert (shown[condition_type]["reason"], shown[condition_type]["message"]) == (reason, "the API said no")
    assert shown[condition_type]["observedGeneration"] == 3
    other = "ScalingLimited" if condition_type == "Degraded" else "Degraded"
    assert shown[other]["status"] == "False"
    assert plan["changed"] is True
    assert plan["requeue_after"] == 6.0


def test_plan_keeps_showing_an_expired_refusal_without_requeue():
    current = with_record(refusal_log.record(exporter_set(), refusal_log.REASON_QUOTA_EXCEEDED, "q", NOW))
    plan = plan_with([dict(c) for c in PLAIN_CONDITIONS])
    refusal_log.apply_to_plan(plan, current, refusal_log.read(current), NOW + timedelta(minutes=5))
    assert {c["type"]: c["status"] for c in plan["status"]["conditions"]}["ScalingLimited"] == "True"
    assert plan["requeue_after"] is None
