"""bench/bench_sizing.py's bound: the cheapest buffer schedule by part of
the week that the fixed runs' figures allow."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

import bench_sizing  # noqa: E402

A, B = "weekday 0-8", "weekday 9-12"


def run(buffer, parts):
    """A fixed run's figures: ``parts`` maps a part to (leases, late, idle hours)."""
    by_period = {name: {"leases": 0, "late": 0, "idle_within_h": 0.0, "idle_beyond_h": 0.0}
                 for name in bench_sizing.PERIODS}
    for name, (leases, late, idle) in parts.items():
        by_period[name] = {"leases": leases, "late": late, "idle_within_h": idle - 1.0, "idle_beyond_h": 1.0}
    return {"buffer": buffer, "by_period": by_period}


def test_the_bound_spends_the_misses_where_each_saves_most():
    # 200 leases at p95: 10 may wait. Part B's step from 2 to 1 saves 5 h a
    # late lease, part A's from 1 to 0 1 h, B's from 1 to 0 about 0.56 h.
    fixed = [run(0, {A: (100, 10, 1.0), B: (100, 20, 2.0)}),
             run(1, {A: (100, 0, 11.0), B: (100, 2, 12.0)}),
             run(2, {A: (100, 0, 21.0), B: (100, 0, 22.0)})]
    found = bench_sizing.schedule_bound(fixed, 95)
    assert found["allowed_late"] == 10
    assert found["late"] == pytest.approx(10.0)
    # B at 1 (2 late, 12 h); A 80 % of its hours at 0 (8 late, 1 + 0.2 * 10 h).
    assert found["idle_instance_hours"] == pytest.approx(15.0)
    assert found["parts"][B]["buffers"] == "1"
    assert found["parts"][A]["buffers"] == "1/0 0.20/0.80"


def test_a_dominated_buffer_is_never_chosen():
    # Buffer 1 costs more than 2 and lets more wait: the 5 misses of 100
    # leases go to half the hours at 0, the rest at 2.
    fixed = [run(0, {A: (100, 10, 1.0)}), run(1, {A: (100, 6, 30.0)}), run(2, {A: (100, 0, 21.0)})]
    found = bench_sizing.schedule_bound(fixed, 95)
    assert found["parts"][A]["buffers"] == "2/0 0.50/0.50"
    assert found["idle_instance_hours"] == pytest.approx(11.0)


def test_no_bound_where_the_largest_buffer_lets_too_many_wait():
    fixed = [run(0, {A: (100, 60, 1.0)}), run(1, {A: (100, 30, 11.0)})]
    assert bench_sizing.schedule_bound(fixed, 95) is None
