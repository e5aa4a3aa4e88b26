"""The one status comparison (pool/status_compare.py) and the three kinds'
writers that ask it: an ExporterSet's (k8s/status.py), a
VirtualTargetClass's (pool/class_status.py) and an ExporterSetPolicy's
(pool/policy.py) say the same about the same pair of statuses, each with its
knob (the policy compares only the fields it writes)."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import (
    class_status,
    policy,
    status_compare,
)
from hypothesis import given
from hypothesis import strategies as st

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"

# Each kind's writer and the knob it compares with.
KINDS = {
    "set": (k8s_status.status_differs, False),
    "class": (class_status.status_differs, False),
    "policy": (policy.status_differs, True),
}


def cond(kind, status="True", reason="Ok", message="", generation=1, transition=T0):
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "observedGeneration": generation, "lastTransitionTime": transition}


def a_status(**fields):
    return {"observedGeneration": 3, "setCount": 2, "sets": ["a", "b"],
            "conditions": [cond("Valid"), cond("Degraded", "False", "Healthy")], **fields}


def test_the_same_status_is_no_change_for_every_kind():
    for differs, _ in KINDS.values():
        assert not differs(a_status(), a_status())


def test_order_of_conditions_and_transition_times_are_no_change_for_every_kind():
    moved = a_status(conditions=[cond("Degraded", "False", "Healthy", transition=T1), cond("Valid", transition=T1)])
    for name, (differs, _) in KINDS.items():
        assert not differs(a_status(), moved), name


def test_a_condition_or_counter_that_moves_is_a_change_for_every_kind():
    changes = [
        a_status(observedGeneration=4),
        a_status(setCount=3),
        a_status(sets=["a"]),
        a_status(conditions=[cond("Valid", "False"), cond("Degraded", "False", "Healthy")]),
        a_status(conditions=[cond("Valid", reason="Other"), cond("Degraded", "False", "Healthy")]),
        a_status(conditions=[cond("Valid", message="now"), cond("Degraded", "False", "Healthy")]),
        a_status(conditions=[cond("Valid", generation=2), cond("Degraded", "False", "Healthy")]),
        a_status(conditions=[cond("Valid")]),
    ]
    for name, (differs, _) in KINDS.items():
        for wanted in changes:
            assert differs(a_status(), wanted), (name, wanted)


def test_no_status_yet_is_an_empty_one():
    assert not status_compare.status_differs(None, {})
    assert not status_compare.status_differs({}, {"conditions": []})
    assert status_compare.status_differs(None, {"setCount": 0})
    assert status_compare.status_differs(None, {"exporterSet": ""}, wanted_keys_only=True)


def test_a_field_the_writer_does_not_name_is_a_change_unless_only_its_own_fields_count():
    current = a_status(extra="someone else's")
    assert k8s_status.status_differs(current, a_status())
    assert class_status.status_differs(current, a_status())
    assert not policy.status_differs(current, a_status())
    # Without conditions in what it writes, the policy's writer does not
    # compare the current ones either.
    assert not policy.status_differs(current, {"setCount": 2})


# -- properties ----------------------------------------------------------------

texts = st.text(alphabet="abcXYZ:", max_size=4)
times = st.sampled_from([T0, T1, "2026-03-04T05:06:07Z"])
a_condition = st.builds(cond, kind=st.sampled_from(["Valid", "Degraded", "Paused", "Ready"]),
                        status=st.sampled_from(["True", "False", "Unknown"]), reason=texts, message=texts,
                        generation=st.integers(0, 3), transition=times)
conditions = st.lists(a_condition, max_size=4, unique_by=lambda c: c["type"])
statuses = st.fixed_dictionaries(
    {"conditions": conditions},
    optional={"observedGeneration": st.integers(0, 5), "setCount": st.integers(0, 3),
              "sets": st.lists(texts, max_size=2), "exporterSet": texts})


def shuffled_and_retimed(status, order, new_times):
    moved = [dict(c, lastTransitionTime=new_times[i % len(new_times)])
             for i, c in enumerate(status["conditions"])]
    moved.sort(key=lambda c: order.index(c["type"]) if c["type"] in order else len(order))
    return {**status, "conditions": moved}


@given(statuses, st.permutations(["Valid", "Degraded", "Paused", "Ready"]), st.lists(times, min_size=1, max_size=4))
def test_reordered_and_retimed_conditions_are_never_a_change(status, order, new_times):
    again = shuffled_and_retimed(status, order, new_times)
    for name, (differs, _) in KINDS.items():
        assert not differs(status, again), name
        assert not differs(again, status), name


@given(statuses, statuses)
def test_every_kind_asks_the_one_comparison_with_its_knob(current, wanted):
    for name, (differs, wanted_keys_only) in KINDS.items():
        assert differs(current, wanted) == status_compare.status_differs(current, wanted, wanted_keys_only), name


@given(statuses, statuses)
def test_the_comparison_is_symmetric_without_the_knob(one, other):
    assert status_compare.status_differs(one, other) == status_compare.status_differs(other, one)
    assert status_compare.status_differs(one, one) is False


@given(statuses, a_condition)
def test_a_new_condition_type_is_always_a_change(status, extra):
    if any(c["type"] == extra["type"] for c in status["conditions"]):
        return
    wanted = {**status, "conditions": [*status["conditions"], extra]}
    for name, (differs, _) in KINDS.items():
        assert differs(status, wanted), name
