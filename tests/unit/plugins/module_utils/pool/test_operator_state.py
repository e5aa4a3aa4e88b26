"""The set's operator state (pool/operator_state.py): what the plan decides
from is read from the status, which a set's author cannot write, never from
the set's annotations; and the merge patches that write it leave exactly
the state wanted."""

import json

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import operator_state as state
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
from hypothesis import given, settings
from hypothesis import strategies as st
from pool_builders import NOW, at, exporter, exporter_set, target_class

# The annotations the operator decided from before, as a tenant can write them.
FORMER_ANNOTATIONS = tuple(c.GROUP + "/" + name for name in (
    "surplus-since", "consecutive-failures", "last-failure", "backend-refusal", "host-report",
    "config-synced-at"))

VALUES = st.one_of(st.text(max_size=12), st.integers(0, 10**6).map(str),
                   st.sampled_from([at(-86400), at(0), at(86400), "0", "99",
                                    json.dumps({"time": at(-1), "since": at(-86400), "reason": "Failed",
                                                "message": "forged", "exporters": ["rpi4-0"]})]))
SCALARS = st.one_of(st.text(max_size=8), st.integers(0, 99))
STATES = st.dictionaries(st.sampled_from(state.KEYS), SCALARS, max_size=len(state.KEYS))
PATCHES = st.dictionaries(st.sampled_from(state.KEYS), st.one_of(st.none(), SCALARS), max_size=len(state.KEYS))


def merge_patch(target, patch):
    """RFC 7386, as the API server applies a merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def plan(the_set, exporters=(), **options):
    return scale_plan(the_set, target_class(), list(exporters), [], NOW, options=options or None)


def ready_pool(count):
    return [exporter(f"rpi4-{i}", created=-3600 + i) for i in range(count)]


def failing_pool():
    return [exporter("rpi4-0", ready=False, created=-301)]


# -- the writes ------------------------------------------------------------------------


@given(STATES, STATES, st.booleans())
@settings(max_examples=200, deadline=None)
def test_a_status_write_leaves_exactly_the_state_wanted(before, after, has_before):
    current = {"replicas": 1, **({state.FIELD: before} if has_before else {})}
    desired = {"replicas": 2, **({state.FIELD: after} if after else {})}
    written = merge_patch(current, state.patch_body(current, desired))
    assert state.of({"status": written}) == (after or {})
    assert written["replicas"] == 2
    # An empty state is not left behind as {} (a status compared as changed forever).
    assert state.FIELD not in written or written[state.FIELD]


@given(STATES, PATCHES)
@settings(max_examples=200, deadline=None)
def test_a_state_write_applies_its_patch_and_nothing_else(before, patch):
    body = state.state_patch_body(before, patch)
    wanted = state.merged(before, patch)
    if wanted == before:
        assert body is None
        return
    written = merge_patch({"replicas": 1, state.FIELD: before}, body)
    assert state.of({"status": written}) == wanted
    assert written["replicas"] == 1


@given(STATES, PATCHES)
def test_a_status_planned_on_a_stale_copy_keeps_the_fresh_state(fresh, patch):
    stale = {"replicas": 3, state.FIELD: {state.HOST_REPORT: "stale"}}
    rebased = state.rebased(stale, {state.FIELD: fresh}, patch)
    assert state.of({"status": rebased}) == state.merged(fresh, patch)


# -- the decisions read the status, never the annotations ----------------------------------


POOLS = {
    # Surplus: the cooldown's clock.
    "surplus": (lambda: exporter_set(min_available=1, cooldown="5m"), ready_pool(3)),
    # A failure streak and its backoff.
    "failing": (lambda: exporter_set(min_available=1, state={
        state.CONSECUTIVE_FAILURES: 2,
        state.LAST_FAILURE: json.dumps({"time": at(-5), "since": at(-60), "reason": "Failed",
                                        "message": "boom", "exporters": ["gone-0"]})}), failing_pool()),
    "in-cooldown": (lambda: exporter_set(min_available=1, cooldown="5m",
                                         state={state.SURPLUS_SINCE: at(-100)}), ready_pool(3)),
}


@given(st.sampled_from(sorted(POOLS)),
       st.dictionaries(st.sampled_from(FORMER_ANNOTATIONS), VALUES, min_size=1))
@settings(max_examples=150, deadline=None)
def test_no_annotation_of_the_former_names_changes_the_plan(pool, annotations):
    make_set, exporters = POOLS[pool]
    clean = plan(make_set(), exporters)
    forged_set = make_set()
    forged_set["metadata"]["annotations"].update(annotations)
    assert plan(forged_set, exporters) == clean


def test_a_forged_surplus_clock_does_not_scale_down_early():
    forged = exporter_set(min_available=1, cooldown="5m",
                          annotations={c.GROUP + "/surplus-since": at(-3600)})
    result = plan(forged, ready_pool(3))
    assert result["disable"] == []
    assert result["set_state"] == {state.SURPLUS_SINCE: NOW}
    assert result["status"][state.FIELD] == {state.SURPLUS_SINCE: NOW}
    # The clock the status holds does run out.
    due = exporter_set(min_available=1, cooldown="5m", state={state.SURPLUS_SINCE: at(-300)})
    assert plan(due, ready_pool(3))["disable"] == ["rpi4-1", "rpi4-2"]


def test_deleting_the_annotations_does_not_end_a_failure_backoff():
    last = json.dumps({"time": at(-5), "since": at(-5), "reason": "Failed", "message": "boom",
                       "exporters": ["gone-0"]})
    backing_off = exporter_set(min_available=3, state={state.CONSECUTIVE_FAILURES: 1,
                                                       state.LAST_FAILURE: last})
    result = plan(backing_off)
    assert result["create"] == [] and result["requeue_after"] == 5
    # A forged count of zero and no last failure, where the annotations were.
    backing_off["metadata"]["annotations"].update({c.GROUP + "/consecutive-failures": "0",
                                                   c.GROUP + "/last-failure": "{}"})
    assert plan(backing_off) == result
