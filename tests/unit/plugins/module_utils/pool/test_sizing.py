"""pool/sizing.py: the warm buffer of a lease-wait target."""

import heapq
import math
import random

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import sizing
from hypothesis import given, settings
from hypothesis import strategies as st

TARGET = sizing.Target(95.0, 5.0)
COLD = [30.0] * 10


def poisson_cdf(k, mean):
    return sum(math.exp(-mean) * mean ** i / math.factorial(i) for i in range(k + 1))


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.001, max_value=60.0), st.floats(min_value=50.0, max_value=99.9))
def test_the_poisson_quantile_is_the_least_k_reaching_the_percentile(mean, percentile):
    k = sizing.poisson_quantile(mean, percentile)
    assert poisson_cdf(k, mean) >= percentile / 100 - 1e-9
    assert k == 0 or poisson_cdf(k - 1, mean) < percentile / 100


arrival_lists = st.lists(st.floats(min_value=0.0, max_value=3 * sizing.DAY), max_size=200)


@settings(max_examples=150, deadline=None)
@given(arrival_lists, st.lists(st.floats(min_value=1.0, max_value=600.0), max_size=20),
       st.floats(min_value=0.0, max_value=3 * sizing.DAY), st.integers(0, 5),
       st.one_of(st.none(), st.integers(0, 8)))
def test_the_buffer_stays_within_floor_and_ceiling_whatever_the_history(arrivals, cold, now, floor,
                                                                        ceiling):
    target = sizing.Target(95.0, 5.0, ceiling)
    decision = sizing.decide(target, arrivals, cold, now, since=0.0, floor=floor)
    assert decision.buffer >= floor
    if ceiling is not None:
        assert decision.buffer <= max(ceiling, floor)
    # Only what the API holds decides: the order it is listed in does not.
    again = sizing.decide(target, list(reversed(arrivals)), list(reversed(cold)), now, 0.0, floor)
    assert again == decision


def test_no_buffer_when_a_cold_start_meets_the_target():
    busy = [float(t) for t in range(0, 3600, 10)]
    decision = sizing.decide(sizing.Target(95.0, 60.0), busy, [20.0, 40.0], 3600.0, 0.0)
    assert (decision.buffer, decision.reason) == (0, sizing.REASON_COLD_START_MEETS_TARGET)
    # The same history with a cold start longer than the target asks for one.
    assert sizing.decide(sizing.Target(95.0, 5.0), busy, [20.0, 40.0], 3600.0, 0.0).buffer > 0


def test_no_buffer_where_nobody_comes_but_the_floor():
    decision = sizing.decide(TARGET, [], COLD, sizing.DAY, 0.0, floor=2)
    assert decision.buffer == 2
    assert sizing.decide(TARGET, [], COLD, sizing.DAY, 0.0).reason == sizing.REASON_QUIET


def base_stock_waits(arrivals, buffer, lead):
    """Waits of a pool that starts with ``buffer`` ready instances and makes
    a replacement, ready ``lead`` later, for each lease that arrives."""
    ready, stock, waits, queue = [], buffer, [], []
    for a in arrivals:
        while ready and ready[0] <= a:
            heapq.heappop(ready)
            stock += 1
        heapq.heappush(ready, a + lead)
        queue.append(a)
        while queue and stock:
            stock -= 1
            waits.append(0.0)
            queue.pop(0)
        while queue and not stock:
            # Served, in order, by the replacements under way.
            done = heapq.heappop(ready)
            waits.append(done - queue.pop(0))
    return waits


def share_late(waits, target):
    return sum(w > target for w in waits) / len(waits)


@pytest.mark.parametrize("rate", [1 / 60, 1 / 10, 1 / 2])
def test_the_buffer_meets_the_percentile_in_a_base_stock_pool_and_is_at_most_one_over(rate):
    rng = random.Random(7)
    t, arrivals = 0.0, []
    while t < 40 * sizing.HOUR:
        t += rng.expovariate(rate)
        arrivals.append(t)
    history, future = [a for a in arrivals if a < sizing.HOUR], arrivals
    decision = sizing.decide(TARGET, history, COLD, sizing.HOUR, 0.0)
    assert decision.reason == sizing.REASON_FORECAST
    least = next(b for b in range(50)
                 if share_late(base_stock_waits(future, b, COLD[0]), TARGET.wait) <= 0.05)
    # An hour of history estimates the percentile; it may err one high.
    assert least <= decision.buffer <= least + 1


def burst_history(weeks, at, size=10):
    return sorted(week * sizing.WEEK + at + i * 2.0 for week in range(weeks) for i in range(size))


def test_a_weekly_burst_is_prepared_for_one_cold_start_ahead_and_not_hours_before():
    at = 2 * sizing.DAY + 9 * sizing.HOUR
    history = burst_history(3, at)
    now_week = 3 * sizing.WEEK
    ahead = sizing.decide(TARGET, history, COLD, now_week + at - 20.0, 0.0)
    assert ahead.source == "weekly x3"
    # Ten leases two seconds apart: each finds the 9 before it within 25 s.
    assert ahead.buffer >= 10
    early = sizing.decide(TARGET, history, COLD, now_week + at - 3 * sizing.HOUR, 0.0)
    assert early.buffer == 0


def test_a_day_of_history_is_read_daily_before_a_week_is_known():
    at = 9 * sizing.HOUR
    history = sorted(day * sizing.DAY + at + i * 2.0 for day in range(2) for i in range(6))
    decision = sizing.decide(TARGET, history, COLD, 2 * sizing.DAY + at - 10.0, 0.0)
    assert decision.source == "daily x2"
    assert decision.buffer >= 6


@pytest.mark.parametrize("spec, field", [
    ("fast", "spec.leaseWait"),
    ({"target": "5s", "percentile": 100}, "spec.leaseWait.percentile"),
    ({"target": "soon"}, "spec.leaseWait.target"),
    ({"target": "5s", "maxBuffer": -1}, "spec.leaseWait.maxBuffer"),
    ({"target": "5s", "burst": 3}, "spec.leaseWait.burst"),
])
def test_a_bad_target_names_its_field(spec, field):
    target, error = sizing.parse_target(spec)
    assert target is None
    assert error.startswith(field + ":")


def test_a_target_reads_its_defaults():
    assert sizing.parse_target({"target": "1m"}) == (sizing.Target(95.0, 60.0, None), None)
    assert sizing.parse_target(None) == (None, None)


def planned(policy_spec, leases, exporters=(), min_available=0):
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
    from pool_builders import NOW, exporter_set, target_class

    the_set = exporter_set(min_available=min_available)
    the_set["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"
    return scale_plan(the_set, target_class(), list(exporters), [], NOW, leases=leases,
                      options={"policy": policy.normalize(policy_spec)})


def busy_hour(count, selector=None):
    from pool_builders import lease

    # One lease every 20 s over the hour before NOW, all ended.
    return [lease(f"h{i}", created=-3600 + 20 * i, ended=True, selector=selector) for i in range(count)]


def test_a_policy_target_sizes_the_buffer_the_plan_creates_and_says_why():
    plan = planned({"exporterSetName": "rpi4", "leaseWait": {"target": "5s"}}, busy_hour(180))
    sized = plan["status"]["sizing"]
    # Each lease found the two before it within the 55 s window (the default
    # cold start of 60 s less 5 s); Poisson of mean 2 reaches 95% at 5
    # (P(N <= 4) = 0.947, P(N <= 5) = 0.983): one more, 6.
    assert (sized["buffer"], sized["reason"], sized["forecast"]) == (6, sizing.REASON_FORECAST, "recent")
    assert len(plan["create"]) == 6
    assert any(e["reason"] == "WarmBufferSized" for e in plan["events"])
    assert plan["requeue_after"] <= sizing.RESIZE
    # Leases for other boards are no demand of this set.
    other = planned({"exporterSetName": "rpi4", "leaseWait": {"target": "5s"}},
                    busy_hour(180, selector={"matchLabels": {"board": "other"}}))
    assert other["status"]["sizing"]["reason"] == sizing.REASON_QUIET
    assert other["create"] == []


def test_without_a_target_the_buffer_is_minavailable_and_no_sizing_is_shown():
    plan = planned(None, busy_hour(180), min_available=2)
    assert "sizing" not in plan["status"]
    assert len(plan["create"]) == 2


def test_a_policy_with_a_bad_target_is_refused_naming_the_field():
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy

    errors = policy.validate({"exporterSetName": "rpi4", "leaseWait": {"target": "5s", "percentile": 120}})
    assert errors == ["spec.leaseWait.percentile: 120 is not a number from 50 to below 100"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2 ** 40), max_size=300))
def test_the_recorded_arrivals_read_back_as_written(seconds):
    text = sizing.encode_arrivals([float(s) for s in seconds])
    assert sizing.decode_arrivals(text) == sorted(float(s) for s in seconds)[-sizing.MAX_RECORDED:]


@pytest.mark.parametrize("text", ["zz.-1", "not base36!", None, 5, "1." * sizing.MAX_RECORD_CHARS])
def test_a_record_that_is_not_one_reads_as_none(text):
    assert sizing.decode_arrivals(text) == []


def test_the_history_survives_the_leases_garbage_collection():
    first = planned({"exporterSetName": "rpi4", "leaseWait": {"target": "5s"}}, busy_hour(180))
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
    from pool_builders import NOW, exporter_set, target_class

    # The same set a pass later, every Lease gone with the Exporters that served them.
    the_set = exporter_set(status=first["status"])
    again = scale_plan(the_set, target_class(), [], [], NOW, leases=[],
                       options={"policy": policy.normalize({"exporterSetName": "rpi4",
                                                            "leaseWait": {"target": "5s"}})})
    assert again["status"]["sizing"]["buffer"] == first["status"]["sizing"]["buffer"] == 6
    assert len(sizing.decode_arrivals(again["status"]["sizing"]["arrivals"])) == 180


def test_cold_starts_are_remembered_when_the_pool_has_no_exporter_left():
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
    from pool_builders import NOW, exporter, exporter_set, target_class

    spec = {"exporterSetName": "rpi4", "leaseWait": {"target": "5s"}}
    # Ready 60 s after its creation (pool_builders), so a window of 55 s.
    slow = exporter("pool-0", created=-600)
    first = planned(spec, busy_hour(180), exporters=[slow])
    assert first["status"]["sizing"]["windowSeconds"] == 55.0
    quick = exporter("pool-1", created=-300)
    quick["metadata"]["annotations"][c.ANNOTATION_FIRST_READY] = "2026-11-21T07:55:10Z"
    the_set = exporter_set(status=first["status"])
    again = scale_plan(the_set, target_class(), [quick], [], NOW, leases=[],
                       options={"policy": policy.normalize(spec)})
    # Both cold starts count, the one of the Exporter gone too: (55 + 5) / 2.
    assert again["status"]["sizing"]["windowSeconds"] == 30.0


def office_mornings(days, start=8 * sizing.HOUR, seed=5):
    """Each weekday after a quiet night, the first lease at a time that moves
    by up to ten minutes from day to day, the next ones from 10:00."""
    rng = random.Random(seed)
    return sorted(day * sizing.DAY + at for day in range(days) if day % 7 < 5
                  for at in (start + rng.uniform(0, 600), 10 * sizing.HOUR, 11 * sizing.HOUR))


def test_one_instance_is_warm_ahead_of_the_days_first_lease_and_none_at_night():
    history = office_mornings(14)
    morning = sizing.decide(TARGET, history, COLD, 14 * sizing.DAY + 8 * sizing.HOUR - 60.0, 0.0)
    assert (morning.buffer, morning.reason) == (1, sizing.REASON_FIRST_ARRIVAL)
    night = sizing.decide(TARGET, history, COLD, 14 * sizing.DAY + 3 * sizing.HOUR, 0.0)
    assert (night.buffer, night.reason) == (0, sizing.REASON_QUIET)


def test_no_instance_is_warm_on_a_weekend_morning_once_the_weeks_are_known():
    history = office_mornings(14)
    # Day 12 is a Saturday of the office weeks: five of the last seven days
    # had a lease at 8:00, the Saturday a week before none.
    saturday = sizing.decide(TARGET, history, COLD, 12 * sizing.DAY + 8 * sizing.HOUR - 60.0, 0.0)
    assert (saturday.buffer, saturday.reason) == (0, sizing.REASON_QUIET)
    # Less than a week known: the days are all there is to go by.
    early = sizing.decide(TARGET, history, COLD, 5 * sizing.DAY + 8 * sizing.HOUR - 60.0, 0.0)
    assert (early.buffer, early.reason) == (1, sizing.REASON_FIRST_ARRIVAL)


def test_the_pass_that_marks_exporters_first_ready_sizes_as_the_next_pass_does():
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status_compare import (
        status_differs,
    )
    from pool_builders import NOW, at, exporter, exporter_set, target_class

    options = {"policy": policy.normalize({"exporterSetName": "rpi4", "leaseWait": {"target": "5s"}})}
    # Ready, not yet marked: this pass stamps them, and its model reads the
    # cold starts those stamps make (100 s and 70 s), as the next pass will.
    exporters = [exporter("e-0", first_ready=False, created=-100),
                 exporter("e-1", first_ready=False, created=-70)]
    first = scale_plan(exporter_set(), target_class(), exporters, [], NOW, leases=busy_hour(180),
                       options=options)
    assert set(first["exporter_annotations"]) == {"e-0", "e-1"}
    assert first["status"]["sizing"]["windowSeconds"] == (95 + 65) / 2
    for obj in exporters:
        obj["metadata"]["annotations"].update(first["exporter_annotations"][obj["metadata"]["name"]])
    again = scale_plan(exporter_set(status=first["status"]), target_class(), exporters, [], at(5),
                       leases=busy_hour(180), options=options)
    assert not status_differs(first["status"], again["status"]), (first["status"], again["status"])


def test_a_replica_ceiling_below_leased_and_buffer_caps_the_buffer_and_never_the_floor():
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
    from pool_builders import NOW, at, exporter, exporter_set, lease, target_class

    options = {"policy": policy.normalize({"exporterSetName": "rpi4", "leaseWait": {"target": "5s"}})}
    exporters = [exporter("rpi4-0", lease="l0"), exporter("rpi4-1", lease="l1")] + [
        exporter(f"rpi4-{i}") for i in range(2, 7)]
    leases = busy_hour(180) + [lease("l0", assigned="rpi4-0"), lease("l1", assigned="rpi4-1")]
    # An autoscaler wrote 3 through /scale; the surplus has waited out its cooldown.
    capped = exporter_set(max_replicas=3, min_available=1, state={"surplusSince": at(-3600)})
    plan = scale_plan(capped, target_class(), exporters, [], NOW, leases=leases, options=options)
    sized = plan["status"]["sizing"]
    assert (sized["buffer"], sized["reason"], sized["modelBuffer"]) == (1, sizing.REASON_REPLICA_CEILING, 6)
    # The idle beyond the ceiling goes; the leased stay, and so does the floor.
    assert sorted(plan["disable"]) == ["rpi4-3", "rpi4-4", "rpi4-5", "rpi4-6"]
    assert plan["create"] == []
    # A ceiling the leased already fill: the floor still stands.
    full = exporter_set(max_replicas=2, min_available=1, state={"surplusSince": at(-3600)})
    plan = scale_plan(full, target_class(), exporters, [], NOW, leases=leases, options=options)
    assert (plan["status"]["sizing"]["buffer"], plan["status"]["sizing"]["reason"]) == (1, sizing.REASON_FLOOR)
    assert not {"rpi4-0", "rpi4-1"} & set(plan["disable"])


def test_a_burst_is_prepared_for_its_slow_replacements():
    # Each day at 9:00 ten leases 5 s apart, over a trickle every 2 min.
    now = 2 * sizing.DAY + 9 * sizing.HOUR - 30.0
    history = sorted([day * sizing.DAY + 9 * sizing.HOUR + 5.0 * i for day in range(2) for i in range(10)]
                     + [day * sizing.DAY + 9 * sizing.HOUR - 600.0 + 120 * j + 7 for day in range(3)
                        for j in range(10)])
    history = [a for a in history if a <= now]
    # Cold starts of 30 s: a lease waits past 5 s when 6 came in the 25 s before.
    even = sizing.decide(TARGET, history, [30.0] * 10, now, 0.0)
    assert (even.source, even.buffer) == ("daily x2", 7)
    # One in ten takes 60 s: the burst's late leases are those it serves,
    # so the counts span the 55 s of the slow one; the mean window is 28 s.
    slow = sizing.decide(TARGET, history, [30.0] * 9 + [60.0], now, 0.0)
    assert (slow.window, slow.buffer) == (28.0, 10)


def test_the_busy_day_does_not_hold_the_pool_into_a_quiet_evening():
    rng = random.Random(3)
    days = sorted(day * sizing.DAY + 8 * sizing.HOUR + rng.uniform(0, 10 * sizing.HOUR)
                  for day in range(3) for _ in range(200))
    evening = 2 * sizing.DAY + 19 * sizing.HOUR + 1800
    history = [a for a in days if a <= evening]
    decision = sizing.decide(TARGET, history, COLD, evening, 0.0)
    assert (decision.buffer, decision.reason) == (0, sizing.REASON_QUIET)
    # Without a day of history the last three hours are all there is.
    first_day = [a for a in history if a < sizing.DAY]
    assert sizing.decide(TARGET, first_day, COLD, 19 * sizing.HOUR + 1800, 0.0).buffer > 0


def test_leases_created_in_the_same_second_find_each_other():
    # A pipeline's fan-out: five leases in one second, as the record keeps
    # them (whole seconds); each later one found those listed before it.
    history = [1000.0] * 5
    decision = sizing.decide(TARGET, history, COLD, 1010.0, 1000.0)
    assert decision.reason == sizing.REASON_FORECAST
    assert decision.buffer >= 5


def test_leases_of_the_records_last_second_are_counted_once_each():
    from pool_builders import exporter_set, lease

    the_set = exporter_set()
    the_set["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"
    first = [lease("f0", created=-30)]
    arrivals, _, since = sizing.history(the_set, first, [])
    the_set["status"] = {"sizing": {"arrivals": sizing.encode_arrivals(arrivals),
                                    "since": "2026-11-21T07:59:30Z"}}
    # Four more came in that same second, after the pass that recorded one.
    burst = first + [lease(f"f{i}", created=-30) for i in range(1, 5)]
    arrivals, _, _ = sizing.history(the_set, burst, [])
    assert len(arrivals) == 5
    # Recorded again, a later pass counts each of them once.
    the_set["status"]["sizing"]["arrivals"] = sizing.encode_arrivals(arrivals)
    assert len(sizing.history(the_set, burst + [lease("g", created=-10)], [])[0]) == 6


def reset_in_place_waits(arrivals, ends, buffer, lead, cooldown):
    """Waits of a pool reset in place: as ``base_stock_waits``, and each
    lease's end gives its instance back, kept beyond the buffer until the
    surplus has lasted ``cooldown``."""
    events = sorted([(e, 0) for e in ends] + [(a, 1) for a in arrivals])
    ready, under_way, since, waits = buffer, [], None, []
    for at, arrival in events:
        while under_way and under_way[0] <= at:
            heapq.heappop(under_way)
            ready += 1
        if since is not None and at >= since + cooldown:
            ready = min(ready, max(buffer - len(under_way), 0)) if ready > buffer else ready
            since = None
        if not arrival:
            ready += 1
        elif ready:
            ready -= 1
            waits.append(0.0)
        else:
            done = heapq.heappop(under_way) if under_way else at + lead
            waits.append(done - at)
        if arrival:
            while ready + len(under_way) < buffer:
                heapq.heappush(under_way, at + lead)
        if ready + len(under_way) <= buffer:
            since = None
        elif since is None:
            since = at
    return waits


def steady_leases(rate, hours, median, seed=3):
    rng = random.Random(seed)
    t, arrivals, ends = 0.0, [], []
    while t < hours * sizing.HOUR:
        t += rng.expovariate(rate)
        arrivals.append(t)
        ends.append(t + rng.lognormvariate(math.log(median), 0.6))
    return arrivals, sorted(ends)


@pytest.mark.parametrize("rate", [1 / 30, 1 / 10])
def test_a_pool_reset_in_place_counts_the_instances_its_leases_give_back(rate):
    arrivals, ends = steady_leases(rate, 6, 600.0)
    now = 2 * sizing.HOUR
    history = [a for a in arrivals if a <= now]
    cold = [25.0] * 10
    returned = sizing.decide(TARGET, history, cold, now, 0.0, ends=ends, cooldown=300.0)
    model = sizing.decide(TARGET, history, cold, now, 0.0)
    assert returned.reason == sizing.REASON_FORECAST
    # The instances given back serve leases the buffer alone would not.
    assert returned.buffer < model.buffer
    # What comes next meets the target with the buffer chosen.
    future = [a for a in arrivals if a > now]
    later = [e for e in ends if e > now]
    assert share_late(reset_in_place_waits(future, later, returned.buffer, cold[0], 300.0),
                      TARGET.wait) <= 0.05


def test_given_back_instances_count_only_while_the_cooldown_keeps_them():
    # Two leases 10 s apart, each cold start 30 s: with one ready, the
    # second waits 20 s, unless an instance given back is still there.
    arrivals, ends = [1000.0, 1010.0], [800.0]
    held = sizing._late(arrivals, ends, (900.0, 1100.0), 1, COLD, 5.0, 300.0)
    gone = sizing._late(arrivals, ends, (900.0, 1100.0), 1, COLD, 5.0, 60.0)
    assert held == (0, 2)
    assert gone == (1, 2)
    # An end after the second arrival serves nobody.
    assert sizing._late(arrivals, [1020.0], (900.0, 1100.0), 1, COLD, 5.0, 300.0) == (1, 2)


def test_lease_ends_are_recorded_and_counted_once_each():
    from pool_builders import exporter_set, lease

    the_set = exporter_set(recycle=c.RECYCLE_IN_PLACE_REUSE)
    ended = [lease(f"e{i}", created=-900, ended=True) for i in range(3)]
    for i, obj in enumerate(ended):
        obj["status"]["endTime"] = f"2026-11-21T07:59:0{i // 2}Z"
    running = lease("r", created=-30)
    ends = sizing.lease_ends(the_set, ended + [running])
    assert len(ends) == 3
    # Recorded, then its Leases garbage-collected: the record still holds them,
    # and a Lease that ends in the record's last second counts once more.
    the_set["status"] = {"sizing": {"ends": sizing.encode_arrivals(ends)}}
    late = lease("e3", created=-60, ended=True)
    late["status"]["endTime"] = "2026-11-21T07:59:01Z"
    assert sizing.lease_ends(the_set, ended + [late]) == sorted(ends + [ends[-1]])
    assert sizing.lease_ends(the_set, []) == ends
    # A Lease of another board is not the set's.
    other = lease("o", created=-60, ended=True, selector={"matchLabels": {"board": "imx8"}})
    other["status"]["endTime"] = "2026-11-21T07:59:30Z"
    assert sizing.lease_ends(the_set, [other]) == ends


def test_only_a_set_reset_in_place_counts_what_its_leases_give_back():
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
    from pool_builders import NOW, at, exporter_set, lease, target_class

    arrivals, ends = steady_leases(1 / 30, 3, 600.0)
    now = 3 * sizing.HOUR
    leases = []
    for i, (a, e) in enumerate(zip(arrivals, ends, strict=True)):
        if a < now and e < now:
            obj = lease(f"h{i}", created=a - now, ended=True)
            obj["status"]["endTime"] = at(e - now)
            leases.append(obj)
    spec = policy.normalize({"leaseWait": {"percentile": 95, "target": "5s"}})
    buffers = {}
    for recycle in (c.RECYCLE_IN_PLACE_REUSE, c.RECYCLE_EXIT_AND_REPLACE):
        the_set = exporter_set(recycle=recycle)
        the_set["metadata"]["creationTimestamp"] = "2026-11-21T04:00:00Z"
        plan = scale_plan(the_set, target_class(), [], [], NOW, leases=leases, options={"policy": spec})
        buffers[recycle] = plan["status"]["sizing"]["buffer"]
        assert sizing.decode_arrivals(plan["status"]["sizing"]["ends"]) == (
            sorted(sizing.seconds_of(x["status"]["endTime"]) for x in leases)
            if recycle == c.RECYCLE_IN_PLACE_REUSE else [])
    assert buffers[c.RECYCLE_IN_PLACE_REUSE] < buffers[c.RECYCLE_EXIT_AND_REPLACE]


@settings(max_examples=150, deadline=None)
@given(arrival_lists, st.lists(st.floats(min_value=0.0, max_value=3 * sizing.DAY), max_size=200),
       st.lists(st.floats(min_value=1.0, max_value=600.0), min_size=1, max_size=20),
       st.floats(min_value=0.0, max_value=3 * sizing.DAY), st.integers(0, 3),
       st.sampled_from([0.0, 60.0, 300.0]))
def test_what_leases_give_back_only_lowers_the_buffer_to_one_its_replay_meets(arrivals, ends, cold, now, floor,
                                                                             cooldown):
    returned = sizing.decide(TARGET, arrivals, cold, now, 0.0, floor=floor, ends=ends, cooldown=cooldown)
    model = sizing.decide(TARGET, arrivals, cold, now, 0.0, floor=floor)
    assert floor <= returned.buffer <= model.buffer
    assert sizing.decide(TARGET, list(reversed(arrivals)), cold, now, 0.0, floor=floor,
                         ends=list(reversed(ends)), cooldown=cooldown) == returned
    if returned.model_buffer < model.model_buffer:
        # The buffer chosen lets no more than the target's share wait in the
        # replay of the history the forecast read; ends after now are not known.
        history = sorted(a for a in arrivals if a <= now)
        known = sorted(e for e in ends if e <= now)
        samples = sorted(cold)
        window = sum(max(s - TARGET.wait, 0.0) for s in samples) / len(samples)
        cold_start = sizing.quantile(samples, TARGET.percentile)
        found = [d for d in sizing.demand(history, 0.0, now, cold_start + window, window,
                                          max(cold_start - TARGET.wait, window))
                 if d.source == returned.source]
        late = [sizing._late(history, known, span, returned.model_buffer, samples, TARGET.wait, cooldown)
                for span in found[0].spans]
        assert sum(x for x, _ in late) <= 0.05 * sum(n for _, n in late)


def test_the_leases_of_quiet_hours_leave_the_given_back_instances_no_misses_to_spend():
    # Two busy hours after a day of one lease an hour: those 22 leases come
    # when no buffer is kept, over the 5 % the target lets wait.
    arrivals, ends = steady_leases(1 / 30, 2, 600.0)
    quiet = [h * sizing.HOUR + 1800.0 for h in range(-22, 0)]
    start = 22 * sizing.HOUR
    history = [start + t for t in quiet + arrivals]
    ends = [start + e for e in ends]
    now = start + 2 * sizing.HOUR
    cold = [25.0] * 10
    assert sizing.quiet_share(history, now, 45.0) > 0.05
    returned = sizing.decide(TARGET, history, cold, now, 0.0, ends=ends, cooldown=300.0)
    assert returned.buffer == sizing.decide(TARGET, history, cold, now, 0.0).buffer
    # Without those hours the same busy ones count what is given back.
    busy = [a for a in history if a >= start]
    assert sizing.quiet_share(busy, now, 45.0) == 0.0
    assert sizing.decide(TARGET, busy, cold, now, start, ends=ends, cooldown=300.0).buffer \
        < sizing.decide(TARGET, busy, cold, now, start).buffer


@pytest.mark.parametrize(("leases", "buffer"), [(20, 3), (60, 1)])
def test_a_replay_lowers_the_buffer_only_over_arrivals_enough_to_spend_two_misses(leases, buffer):
    # Each lease finds the instance an earlier one gave back 30 s before.
    arrivals = [1000.0 + 60.0 * i for i in range(leases)]
    ends = [a - 30.0 for a in arrivals]
    seen = sizing.Demand((), 0.0, "recent", spans=((1000.0, arrivals[-1] + 1.0),))
    assert sizing.replayed(seen, arrivals, ends, 3, COLD, TARGET, 300.0, 0.05) == buffer


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2 ** 20), max_size=60),
       st.lists(st.integers(min_value=0, max_value=2 ** 20), max_size=60),
       st.lists(st.tuples(st.integers(0, 2 ** 20), st.integers(0, 600)), max_size=64),
       st.lists(st.tuples(st.integers(0, 2 ** 20), st.integers(0, 600)), max_size=64))
def test_a_status_planned_on_an_older_record_keeps_the_current_ones_arrivals(planned_on, current, cold_a, cold_b):
    from collections import Counter

    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s.status import desired_status

    wanted = {"buffer": 2, "reason": sizing.REASON_FORECAST, "arrivals": sizing.encode_arrivals(planned_on),
              "ends": sizing.encode_arrivals(planned_on[:5]), "coldStarts": sizing.encode_cold_starts(cold_a),
              "since": "2026-11-20T00:00:00Z"}
    fresh = {"buffer": 0, "reason": sizing.REASON_QUIET, "arrivals": sizing.encode_arrivals(current),
             "ends": sizing.encode_arrivals(current), "coldStarts": sizing.encode_cold_starts(cold_b),
             "since": "2026-11-19T00:00:00Z"}
    written = desired_status({"sizing": wanted}, {"sizing": fresh})["sizing"]
    # The decision is the plan's; each second is as often in the record as
    # the fuller of the two holds it, nothing from nowhere.
    assert (written["buffer"], written["reason"]) == (2, sizing.REASON_FORECAST)
    for key, first, second in (("arrivals", planned_on, current), ("ends", planned_on[:5], current)):
        assert Counter(sizing.decode_arrivals(written[key])) == Counter(map(float, first)) | Counter(map(float, second))
    assert set(sizing.decode_cold_starts(written["coldStarts"])) == \
        set(sorted(set(cold_a) | set(cold_b))[-sizing.MAX_COLD_STARTS:])
    assert written["since"] == "2026-11-19T00:00:00Z"
    # Over a record that already holds them, writing changes nothing.
    assert desired_status({"sizing": written}, {"sizing": written})["sizing"] == written


@pytest.mark.parametrize("seed", range(5))
def test_a_steady_day_keeps_one_buffer_though_its_week_old_spans_hold_few_arrivals(seed):
    # One week known, 0.3 leases a minute 8:00-18:00 each weekday: a span of
    # the week before holds about six arrivals, seldom two within a window.
    rng = random.Random(seed)
    arrivals = []
    for day in range(5):
        t = day * sizing.DAY + 8 * sizing.HOUR
        while t < day * sizing.DAY + 18 * sizing.HOUR:
            t += rng.expovariate(0.3 / 60)
            arrivals.append(t)
    arrivals += [sizing.WEEK + a for a in arrivals if a < 2 * sizing.HOUR + 12 * sizing.HOUR]
    cold = [25.0] * 20
    buffers = set()
    for minute in range(9 * 60 + 5, 10 * 60, 5):
        now = sizing.WEEK + minute * 60.0
        seen = [a for a in arrivals if a <= now]
        buffers.add(sizing.decide(TARGET, seen, cold, now, 0.0).buffer)
    # 0.3 a minute over a window of 20 s: 0.1 leases, whose 95th percentile
    # is 1; a pair within the window of the last minutes may ask one more.
    assert min(buffers) == 2 and max(buffers) <= 3
