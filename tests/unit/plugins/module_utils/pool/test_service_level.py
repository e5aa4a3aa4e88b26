"""pool/service_level.py: lease waits, cold starts and idle instances as the
API holds them, the rolling status.serviceLevel, and what a process observes
of them once."""

import copy

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import service_level as sl
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status_compare import (
    status_differs,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import parse_time
from hypothesis import given, settings
from hypothesis import strategies as st
from pool_builders import NOW, at, exporter, exporter_set, lease, target_class

T0 = parse_time(NOW).timestamp()


def begun(name, on, created, begin, asked=None, ended=False):
    obj = lease(name, assigned=on, created=created, begin=asked, ended=ended)
    obj["metadata"]["uid"] = f"uid-{name}"
    obj["status"]["beginTime"] = at(begin)
    return obj


def test_a_wait_runs_from_creation_or_the_asked_begin_to_the_begin_and_says_who_served_it():
    warm = exporter("warm-0", created=-3600)            # ready at -3540
    cold = exporter("cold-0", created=-100)             # ready at -40
    waits = sl.lease_waits([
        begun("a", "warm-0", created=-300, begin=-299),
        begun("b", "cold-0", created=-90, begin=-38),
        begun("c", "warm-0", created=-600, begin=-200, asked=-210),
    ], [warm, cold])
    assert [(w.key, w.seconds, w.served) for w in waits] == [
        ("uid-a", 1.0, sl.WARM), ("uid-c", 10.0, sl.WARM), ("uid-b", 52.0, sl.COLD)]


def test_a_lease_not_begun_or_on_another_sets_exporter_or_with_bad_times_is_no_wait():
    mine = exporter("mine-0")
    theirs = begun("t", "theirs-0", created=-60, begin=-50)
    pending = lease("p", created=-60)
    backwards = begun("x", "mine-0", created=-10, begin=-60)
    garbage = begun("g", "mine-0", created=-60, begin=-50)
    garbage["status"]["beginTime"] = "yesterday"
    assert sl.lease_waits([theirs, pending, backwards, garbage], [mine]) == []


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=30), st.integers(), st.sampled_from(
    [at(-60), at(-30), "2026-13-01T00:00:00Z", "0001-01-01T00:00:00Z"])), min_size=4, max_size=4))
def test_whatever_a_lease_and_an_exporter_carry_no_wait_is_negative_and_nothing_raises(times):
    holder = exporter("e-0")
    holder["metadata"]["annotations"][c.ANNOTATION_FIRST_READY] = times[0]
    obj = lease("l", assigned="e-0")
    obj["metadata"]["creationTimestamp"] = times[1]
    obj["status"]["beginTime"] = times[2]
    obj["spec"]["beginTime"] = times[3]
    for wait in sl.lease_waits([obj], [holder]):
        assert wait.seconds >= 0 and wait.served in (sl.WARM, sl.COLD)
    for start in sl.cold_starts([holder]):
        assert start.seconds >= 0


def test_the_summary_gives_the_percentiles_the_warm_share_and_the_cold_starts():
    exporters = [exporter(f"e-{i}", created=-7200 + i * 100) for i in range(4)]
    leases = [begun(f"l{i}", "e-0", created=-3000 + i * 10, begin=-3000 + i * 10 + i) for i in range(20)]
    leases.append(begun("old", "e-0", created=-2 * 86400, begin=-2 * 86400 + 500))
    status = sl.summary(exporter_set(), {"replicas": 4, "leasedReplicas": 0},
                        sl.lease_waits(leases, exporters), sl.cold_starts(exporters), T0)
    # The waits of the last day: 0..19 s; the one of two days ago is out.
    assert status["leases"] == 20
    assert (status["leaseWaitP50Seconds"], status["leaseWaitP95Seconds"]) == (9.0, 18.0)
    assert status["servedWarmRatio"] == 1.0
    assert status["coldStartP50Seconds"] == status["coldStartP95Seconds"] == 60.0


def planned(exporter_set_obj, exporters, leases, now):
    return scale_plan(exporter_set_obj, target_class(), exporters, [], now, leases=leases)


def test_a_steady_pool_writes_no_new_status_and_idle_time_accrues_when_the_counters_move():
    exporters = [exporter("e-0"), exporter("e-1")]
    first = planned(exporter_set(min_available=2), exporters, [], NOW)
    service = first["status"]["serviceLevel"]
    assert service["idleInstanceSeconds"] == 0 and service["accruedAt"] == NOW
    # An hour on, nothing changed: the same status, no write (the fast path).
    settled = exporter_set(min_available=2, status=first["status"])
    later = planned(settled, exporters, [], at(3600))
    assert not status_differs(first["status"], later["status"])
    # A lease takes one: the two idle instances' hour is counted then.
    exporters[0]["status"]["leaseRef"] = {"name": "l1"}
    taken = planned(settled, exporters, [begun("l1", "e-0", created=3590, begin=3591)], at(3600))
    service = taken["status"]["serviceLevel"]
    assert service["idleInstanceSeconds"] == 2 * 3600 and service["accruedAt"] == at(3600)
    assert service["leases"] == 1 and service["servedWarmRatio"] == 1.0


def test_the_pass_that_marks_exporters_first_ready_writes_the_status_the_next_pass_computes():
    # Ready, not yet marked: this pass writes their first-ready stamps and
    # counts their cold starts as the next pass will read them.
    exporters = [exporter("e-0", first_ready=False, created=-100), exporter("e-1", first_ready=False, created=-70)]
    first = planned(exporter_set(min_available=2), exporters, [], NOW)
    assert first["exporter_annotations"] == {"e-0": {c.ANNOTATION_FIRST_READY: NOW},
                                             "e-1": {c.ANNOTATION_FIRST_READY: NOW}}
    service = first["status"]["serviceLevel"]
    assert (service["coldStartP50Seconds"], service["coldStartP95Seconds"]) == (70.0, 100.0)
    for obj in exporters:
        obj["metadata"]["annotations"].update(first["exporter_annotations"][obj["metadata"]["name"]])
    again = planned(exporter_set(min_available=2, status=first["status"]), exporters, [], at(5))
    assert not status_differs(first["status"], again["status"]), (first["status"], again["status"])


def test_the_idle_figure_rolls_over_one_day_and_a_forged_one_starts_afresh():
    rolled, since = sl.accrue(0.0, T0, T0, 3, T0 + 2 * sl.WINDOW)
    assert since == T0 + sl.WINDOW and rolled == 3 * sl.WINDOW
    forged = exporter_set(status={"replicas": 1, "leasedReplicas": 0, "serviceLevel": {
        "idleInstanceSeconds": 10 ** 9, "idleSince": at(3600), "accruedAt": at(-3600)}})
    service = sl.summary(forged, {"replicas": 2, "leasedReplicas": 0}, [], [], T0)
    assert service["idleInstanceSeconds"] == 0 and service["idleSince"] == NOW


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(min_value=0, max_value=5 * sl.WINDOW), st.integers(0, 50)), max_size=30))
def test_the_rolling_idle_figure_is_never_more_than_the_window_at_the_most_idle(steps):
    idle, since, at_, count = 0.0, 0.0, 0.0, 0
    peak = 0
    for gap, next_count in steps:
        now = at_ + gap
        idle, since = sl.accrue(idle, since, at_, count, now)
        peak = max(peak, count)
        assert 0 <= idle <= peak * min(now - since, sl.WINDOW) + 1e-6
        assert now - sl.WINDOW - 1e-6 <= since <= now
        at_, count = now, next_count


def test_a_process_observes_each_wait_and_cold_start_once_and_nothing_from_before_it_started():
    exporters = [exporter("e-0", created=-3600), exporter("e-1", created=-100)]
    exporters[1]["metadata"]["uid"] = "uid-e-1"
    before = begun("before", "e-0", created=-500, begin=-400)
    after = begun("after", "e-0", created=-60, begin=-58)
    seen = sl.Observed(c.PROVISIONER_QEMU, started=T0 - 300)
    step = seen.step(exporters, [before, after], {"replicas": 2, "leasedReplicas": 1}, T0)
    assert [w.key for w in step.waits] == ["uid-after"]
    assert [s.key for s in step.cold_starts] == ["uid-e-1"]      # ready at -40; e-0 at -3540
    assert step.idle_seconds == 0
    again = seen.step(exporters, [before, after, begun("next", "e-1", created=5, begin=6)],
                      {"replicas": 2, "leasedReplicas": 2}, T0 + 10)
    assert [w.key for w in again.waits] == ["uid-next"] and again.cold_starts == ()
    assert again.idle_seconds == 10.0      # one idle instance for the 10 s since the last look


def test_the_dormant_exporter_is_neither_a_cold_start_nor_idle_stock():
    dormant = exporter("d-0", annotations={c.ANNOTATION_DORMANT: "true"})
    plan = planned(exporter_set(), [dormant], [], NOW)
    assert "coldStartP50Seconds" not in plan["status"]["serviceLevel"]
    step = sl.Observed("p", started=0).step([copy.deepcopy(dormant)], [], {}, T0)
    assert step.cold_starts == ()


def test_snapshots_of_one_revision_are_read_once_and_a_new_revision_afresh():
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.pool_index import (
        Snapshot,
        SurveyCache,
    )

    surveys = SurveyCache()
    exporters = [exporter(f"e-{i}", created=-7200 + i * 100) for i in range(3)]
    leases = [begun("l1", "e-0", created=-3000, begin=-2990)]
    counters = {"replicas": 3, "leasedReplicas": 1}

    def service(exporters, leases, cache=surveys):
        return sl.for_plan(exporter_set(), exporters, leases, counters, parse_time(NOW), cache)

    fresh = service(exporters, leases, None)
    cached = service(Snapshot(exporters, ("x", 1)), Snapshot(leases, ("y", 1)))
    assert cached == fresh and cached["leases"] == 1
    # The same revisions are the same objects: what they gave stands.
    assert service(Snapshot(exporters, ("x", 1)), Snapshot([], ("y", 1))) == cached
    # A new revision is read again: the Lease is gone, and so is its wait.
    assert service(Snapshot(exporters, ("x", 1)), Snapshot([], ("y", 2)))["leases"] == 0
    # Without a revision, or without the caller's cache, the objects are read.
    assert service(exporters, [])["leases"] == 0
    assert service(Snapshot(exporters, ("x", 1)), Snapshot([], ("y", 1)), None)["leases"] == 0
