"""The typed plan (pool/phases/model.py): the dict modules return reads back
the same, ``changed`` has one definition, and ``split`` hands the backends
only what needs them."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import operator_state
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.model import (
    Event,
    NewExporter,
    Plan,
    Removal,
    Reset,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import (
    make_plan,
    scale_plan,
)
from pool_builders import NOW, exporter, exporter_set, target_class

STATUS = {"replicas": 3, "conditions": []}


def a_plan(**actions):
    return Plan(previous_status=STATUS, status=dict(STATUS), **actions)


def test_the_plan_as_a_dict_reads_back_the_same():
    the_set = exporter_set(min_available=3)
    timed_out = exporter("rpi4-0", ready=False, created=-3600, first_ready=False)
    retired = exporter("rpi4-1", enabled=False, annotations={c.ANNOTATION_RETIRING: c.DELETE_RECYCLE})
    retired["metadata"]["uid"] = "uid-rpi4-1"
    plan = make_plan(the_set, target_class(), [timed_out, retired], [], NOW)
    as_dict = plan.to_dict()
    assert as_dict == scale_plan(the_set, target_class(), [timed_out, retired], [], NOW)
    assert as_dict["disable"] == ["rpi4-0"] and as_dict["create_dormant"] and as_dict["events"]
    assert as_dict["delete"] == [{"name": "rpi4-1", "reason": c.DELETE_RECYCLE, "uid": "uid-rpi4-1"}]
    assert Plan.from_dict(as_dict, the_set).to_dict() == as_dict
    # Keys others add to the dict after the planner are kept.
    extended = {**as_dict, "adopt": [{"name": "stray-0", "uid": "u"}], "paused": False}
    assert Plan.from_dict(extended, the_set).to_dict() == extended


def test_events_alone_are_no_change_and_a_new_status_is():
    quiet = a_plan(events=[Event("Normal", "Noted", "nothing to do")])
    assert not quiet.changed() and not quiet.to_dict()["changed"]
    quiet.status = {**STATUS, "replicas": 4}
    assert quiet.changed()
    assert a_plan(adopt=[{"name": "stray-0"}]).changed()
    assert a_plan(set_state={operator_state.SURPLUS_SINCE: None}).changed()


def _mixed():
    return a_plan(
        create=[NewExporter("rpi4-9", {}, {})],
        enable=["rpi4-2"],
        disable=["rpi4-3"],
        delete=[Removal("rpi4-0", c.DELETE_FAILED, "u0")],
        recycle=[Reset("rpi4-1", c.RECYCLE_IN_PLACE_REUSE, "u1")],
        exporter_annotations={name: {c.ANNOTATION_RETIRING: None}
                              for name in ("rpi4-0", "rpi4-1", "rpi4-2", "rpi4-3")},
        events=[Event("Warning", "ReplicaFailed", "failed", "rpi4-0"),
                Event("Normal", "Recycling", "lease ended", "rpi4-1"),
                Event("Normal", "ScaledUp", "creating 1 exporter(s): rpi4-9")],
    )


def test_a_backend_removes_what_it_must_remove_first_and_resets_in_place():
    pool, backend = _mixed().split(removed_with_exporter=False)
    assert backend.to_dict() == {
        "delete": [{"name": "rpi4-0", "reason": c.DELETE_FAILED, "uid": "u0"}],
        "recycle": [{"name": "rpi4-1", "strategy": c.RECYCLE_IN_PLACE_REUSE, "uid": "u1"}],
        "exporter_annotations": {"rpi4-0": {c.ANNOTATION_RETIRING: None},
                                 "rpi4-1": {c.ANNOTATION_RETIRING: None}},
        "events": [{"type": "Warning", "reason": "ReplicaFailed", "message": "failed", "exporter": "rpi4-0"},
                   {"type": "Normal", "reason": "Recycling", "message": "lease ended", "exporter": "rpi4-1"}],
    }
    assert (pool.delete, pool.recycle) == ([], [])
    assert sorted(pool.exporter_annotations) == ["rpi4-2", "rpi4-3"]
    assert [e.reason for e in pool.events] == ["ScaledUp"]
    assert pool.changed() and [e.name for e in pool.create] == ["rpi4-9"]


def test_an_exporter_whose_instance_goes_with_it_is_deleted_by_the_pool():
    pool, backend = _mixed().split(removed_with_exporter=True)
    assert [d.name for d in pool.delete] == ["rpi4-0"] and backend.names() == ["rpi4-1"]
    assert "rpi4-0" in pool.exporter_annotations and "rpi4-1" not in pool.exporter_annotations


def test_exporters_a_backend_run_works_on_are_in_neither_part():
    pool, backend = _mixed().split(removed_with_exporter=False, acting={"rpi4-0", "rpi4-1", "rpi4-2"})
    assert backend is None
    assert (pool.delete, pool.recycle, pool.enable, pool.disable) == ([], [], [], ["rpi4-3"])
    assert sorted(pool.exporter_annotations) == ["rpi4-3"]
    assert [e.reason for e in pool.events] == ["ScaledUp"]


def test_a_pool_part_with_nothing_left_is_no_change():
    plan = a_plan(recycle=[Reset("rpi4-1", c.RECYCLE_IN_PLACE_REUSE)],
                  exporter_annotations={"rpi4-1": {c.ANNOTATION_RETIRING: None}})
    pool, backend = plan.split(removed_with_exporter=True)
    assert plan.changed() and not pool.changed() and backend.names() == ["rpi4-1"]
