"""What a reconcile waits for after its writes: only what was really
written, and a name another object took counts as seen."""

from __future__ import annotations

from types import SimpleNamespace

from exporterset_operator.expectations import Expectations
from exporterset_operator.runner import _applied

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


def event(action, res, kind="runner_on_ok"):
    return {"event": kind, "event_data": {"task_action": action, "res": res}}


def test_what_a_run_created_is_read_from_its_exporterset_apply_tasks():
    runner = SimpleNamespace(events=[
        event("ansible.builtin.set_fact", {"created": ["not-this"]}),
        event("jumpstarter.virtual_exporters.exporterset_apply", {"created": [], "deleted": ["pool-3"]}),
        event("jumpstarter.virtual_exporters.exporterset_apply", {"created": ["pool-4"], "blocked": ["pool-1"]}),
        event("jumpstarter.virtual_exporters.exporterset_apply", {"created": ["failed"]}, kind="runner_on_failed"),
    ])
    assert _applied(runner) == {"created": ["pool-4"], "deleted": ["pool-3"], "blocked": ["pool-1"]}
    assert _applied(SimpleNamespace(events=[event("ansible.builtin.debug", {})])) is None
