"""One condition merge, used by the pool's status, the class status and the
outcome conditions the operator and the playbook write."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import (
    make_condition,
    merge_condition,
    merge_conditions,
    pool_status,
)
from pool_builders import NOW, at, exporter_set

EARLIER = at(-600)


def _previous(status="True", kind="Available", generation=2):
    return {"type": kind, "status": status, "reason": "Before", "message": "m",
            "lastTransitionTime": EARLIER, "observedGeneration": generation}


def test_a_condition_whose_status_holds_keeps_its_transition_time():
    merged = merge_condition([_previous()], make_condition("Available", True, "Now", "x"), 3, NOW)
    assert merged == {"type": "Available", "status": "True", "reason": "Now", "message": "x",
                      "lastTransitionTime": EARLIER, "observedGeneration": 3}


def test_a_condition_whose_status_moves_takes_now():
    merged = merge_condition([_previous()], make_condition("Available", False, "Now", ""), 3, NOW)
    assert merged["lastTransitionTime"] == NOW and merged["status"] == "False"


def test_a_new_condition_takes_its_own_time_else_now():
    fresh = make_condition("Degraded", False, "AsExpected", "")
    assert merge_condition([_previous()], fresh, None, NOW)["lastTransitionTime"] == NOW
    stamped = {**fresh, "lastTransitionTime": EARLIER}
    assert merge_condition([], stamped, None, NOW)["lastTransitionTime"] == EARLIER


def test_observed_generation_is_the_given_one_else_the_conditions_own():
    assert merge_condition([], make_condition("A", True, "r", ""), 7, NOW)["observedGeneration"] == 7
    own = {**make_condition("A", True, "r", ""), "observedGeneration": 4}
    assert merge_condition([], own, None, NOW)["observedGeneration"] == 4
    assert "observedGeneration" not in merge_condition([], make_condition("A", True, "r", ""), None, NOW)


def test_merge_keeps_other_types_sorted_and_a_later_update_wins():
    previous = [_previous(kind="Successful"), _previous(kind="Available")]
    merged = merge_conditions(previous, [make_condition("Available", False, "Down", ""),
                                         make_condition("Available", True, "Up", "")], NOW)
    assert [c["type"] for c in merged] == ["Available", "Successful"]
    assert merged[1] == _previous(kind="Successful")
    # False then True again: the second update moved the status back.
    assert merged[0]["status"] == "True" and merged[0]["lastTransitionTime"] == NOW


def test_pool_status_and_outcome_merge_the_same_way():
    """The planner's status and the outcome write agree on the time a
    condition moved: a held status keeps it on both paths."""
    the_set = exporter_set(status={"conditions": [_previous(kind="Available"),
                                                  _previous(kind="Successful", generation=3)]})
    status = pool_status(the_set, [], now=NOW,
                         conditions=[make_condition("Available", True, "MinimumAvailable", "")])
    assert status["conditions"][0]["lastTransitionTime"] == EARLIER
    assert status["conditions"][0]["observedGeneration"] == 3
    outcome = k8s_status.outcome_condition("Successful", "LastReconcileSucceeded", "", 3)
    written = k8s_status.status_with_outcome(status, the_set["status"], outcome)
    by_type = {c["type"]: c for c in written["conditions"]}
    assert by_type["Available"]["lastTransitionTime"] == EARLIER
    assert by_type["Successful"]["lastTransitionTime"] == EARLIER
    assert by_type["Failure"]["status"] == "False" and by_type["Failure"]["observedGeneration"] == 3
    assert not k8s_status.status_differs(written, k8s_status.status_with_outcome(written, written, outcome))
