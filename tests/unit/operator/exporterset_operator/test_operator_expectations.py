"""What a reconcile waits for after its writes: only what was really
written, and a name another object took counts as seen."""

from __future__ import annotations

from types import SimpleNamespace

from exporterset_operator.expectations import Expectations
from exporterset_operator.runner import _report

KEY = ("ns", "pool")


def test_a_name_taken_by_another_object_is_not_waited_for():
    expectations = Expectations()
    expectations.expect(KEY, ["pool-1"], [])
    # The cache shows neither the set's pool-1 nor anything named so: wait.
    assert not expectations.satisfied(KEY, {"pool-0"}, {"pool-0"})
    # Another object has the name (our create met a 409): go on.
    assert expectations.satisfied(KEY, {"pool-0"}, {"pool-0", "pool-1"})
    # Satisfied once, forgotten.
    assert expectations.satisfied(KEY, set(), set())


def test_a_deleted_name_is_waited_for_until_the_set_no_longer_has_it():
    expectations = Expectations()
    expectations.expect(KEY, [], ["pool-2"])
    assert not expectations.satisfied(KEY, {"pool-2"}, {"pool-2"})
    # Another object of that name is no Exporter of the set.
    assert expectations.satisfied(KEY, set(), {"pool-2"})


def event(kind, data):
    return {"event": kind, "event_data": data}


def test_what_a_run_wrote_is_its_passs_report_and_nothing_else():
    """The stats event's set_stats data (roles/reconcile/tasks/pass.yml),
    not the results of tasks that look like one."""
    report = {"created": ["pool-4"], "deleted": ["pool-3"], "blocked": ["pool-1"]}
    task = event("runner_on_ok", {"task_action": "jumpstarter.virtual_exporters.exporterset_pass",
                                  "res": {"report": {"created": ["not-this"]}, "created": ["not-this"]}})
    stats = event("playbook_on_stats", {"artifact_data": {"exporterset_pass": report, "other": 1}})
    assert _report(SimpleNamespace(events=[task, stats])) == report
    # A playbook that reports no pass (another watches.yaml entry's): nothing is known.
    assert _report(SimpleNamespace(events=[task, event("playbook_on_stats", {"artifact_data": {}})])) is None
    assert _report(SimpleNamespace(events=[task])) is None
