"""The one backoff: capped exponential, with full or floored jitter."""

import random

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import backoff_delay
from exporterset_operator.workqueue import ExponentialBackoff


@pytest.mark.parametrize(("failures", "wait"), [(1, 10), (2, 20), (3, 40), (5, 160), (6, 300), (60, 300)])
def test_doubles_from_base_up_to_the_cap(failures, wait):
    assert backoff_delay(failures, 10, 300) == wait


def test_without_a_cap_it_keeps_doubling_and_never_overflows():
    assert backoff_delay(4, 0.05) == pytest.approx(0.4)
    assert backoff_delay(10_000, 0.5, 30.0) == 30.0


@pytest.mark.parametrize(("jitter", "floor", "wait"), [
    (0.0, 0.0, 0.0), (0.25, 0.0, 10.0), (1.0, 0.0, 40.0),   # full jitter: [0, ceiling]
    (0.0, 0.5, 20.0), (0.5, 0.5, 30.0), (1.0, 0.5, 40.0),   # at least half: [ceiling/2, ceiling]
])
def test_jitter_spreads_the_wait_below_the_ceiling(jitter, floor, wait):
    assert backoff_delay(3, 10, 300, jitter=jitter, floor=floor) == pytest.approx(wait)


def test_the_work_queue_waits_by_it():
    backoff = ExponentialBackoff(base=0.5, cap=4.0, rng=random.Random(7))
    draws = random.Random(7)
    for failures in range(1, 7):
        ceiling = min(4.0, 0.5 * 2 ** (failures - 1))
        assert backoff.when("key") == pytest.approx(ceiling * (0.5 + 0.5 * draws.random()))
