"""Expectations: what a set's next reconcile waits to see in the cache
after its own writes. Satisfied once the created names are there (or taken
by a namesake a create met as 409) and the deleted ones are gone; given up
after their TTL; dropped by forget. The TTL runs on a clock the test moves."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from exporterset_operator import expectations as expectations_module
from exporterset_operator.expectations import Expectations

KEY = ("ns", "pool")
OTHER = ("ns", "other")


@pytest.fixture
def clock(monkeypatch):
    now = SimpleNamespace(value=1000.0)
    monkeypatch.setattr(expectations_module, "time", SimpleNamespace(monotonic=lambda: now.value))
    return now


def test_no_expectation_is_satisfied_at_once():
    assert Expectations().satisfied(KEY, set(), set())


def test_created_names_are_waited_for_until_the_cache_shows_every_one():
    expectations = Expectations()
    expectations.expect(KEY, ["pool-0", "pool-1"], [])
    assert not expectations.satisfied(KEY, set(), set())
    assert not expectations.satisfied(KEY, {"pool-0"}, {"pool-0"})
    assert expectations.satisfied(KEY, {"pool-0", "pool-1"}, {"pool-0", "pool-1"})


def test_a_created_name_taken_by_a_namesake_counts_as_seen():
    expectations = Expectations()
    expectations.expect(KEY, ["pool-0", "pool-1"], [])
    # pool-1's create met a 409: another object holds the name, not the set.
    assert expectations.satisfied(KEY, {"pool-0"}, {"pool-0", "pool-1"})


def test_deleted_names_are_waited_for_until_the_set_no_longer_has_them():
    expectations = Expectations()
    expectations.expect(KEY, [], ["pool-2", "pool-3"])
    assert not expectations.satisfied(KEY, {"pool-2", "pool-3"}, {"pool-2", "pool-3"})
    assert not expectations.satisfied(KEY, {"pool-3"}, {"pool-3"})
    assert expectations.satisfied(KEY, {"pool-4"}, {"pool-4"})


def test_creations_and_deletions_are_waited_for_together():
    expectations = Expectations()
    expectations.expect(KEY, ["pool-5"], ["pool-2"])
    # Created seen, deleted still there.
    assert not expectations.satisfied(KEY, {"pool-2", "pool-5"}, {"pool-2", "pool-5"})
    # Deleted gone, created not yet seen.
    assert not expectations.satisfied(KEY, set(), set())
    assert expectations.satisfied(KEY, {"pool-5"}, {"pool-5"})


def test_a_satisfied_expectation_is_dropped():
    expectations = Expectations()
    expectations.expect(KEY, ["pool-0"], [])
    assert expectations.satisfied(KEY, {"pool-0"}, {"pool-0"})
    # Once met, the set is no longer held back, whatever the cache says next.
    assert expectations.satisfied(KEY, set(), set())


def test_expectations_are_kept_per_set():
    expectations = Expectations()
    expectations.expect(KEY, ["pool-0"], [])
    expectations.expect(OTHER, ["other-0"], [])
    assert expectations.satisfied(KEY, {"pool-0"}, {"pool-0"})
    assert not expectations.satisfied(OTHER, {"pool-0"}, {"pool-0"})


def test_a_new_expectation_replaces_the_one_before():
    expectations = Expectations()
    expectations.expect(KEY, ["pool-0"], [])
    expectations.expect(KEY, ["pool-1"], [])
    assert not expectations.satisfied(KEY, {"pool-0"}, {"pool-0"})
    assert expectations.satisfied(KEY, {"pool-1"}, {"pool-1"})


def test_an_expectation_never_met_is_given_up_after_its_ttl(clock):
    expectations = Expectations()
    expectations.expect(KEY, ["pool-0"], ["pool-1"])
    clock.value += expectations_module.EXPECTATION_TTL
    assert not expectations.satisfied(KEY, {"pool-1"}, {"pool-1"})
    clock.value += 0.001
    assert expectations.satisfied(KEY, {"pool-1"}, {"pool-1"})
    # Given up means dropped: it does not come back.
    clock.value -= 10
    assert expectations.satisfied(KEY, {"pool-1"}, {"pool-1"})


def test_the_ttl_counts_from_the_latest_expect(clock):
    expectations = Expectations()
    expectations.expect(KEY, ["pool-0"], [])
    clock.value += expectations_module.EXPECTATION_TTL - 1
    expectations.expect(KEY, ["pool-0"], [])
    clock.value += 2
    assert not expectations.satisfied(KEY, set(), set())


def test_forget_drops_the_expectation_of_one_set():
    expectations = Expectations()
    expectations.expect(KEY, ["pool-0"], [])
    expectations.expect(OTHER, ["other-0"], [])
    expectations.forget(KEY)
    assert expectations.satisfied(KEY, set(), set())
    assert not expectations.satisfied(OTHER, set(), set())
    expectations.forget(("ns", "never-expected"))


@pytest.mark.parametrize(("waits_at", "passes_at"), [
    # The cache still holds the version we read: the next pass would plan
    # the same disable and Event again.
    ("41", "57"),
    # The controller wrote the Exporter (its status) between our read and our
    # patch: that version differs from what we read but precedes our write.
    ("49", "63"),
])
def test_a_patched_exporter_is_waited_for_until_the_cache_shows_our_version(waits_at, passes_at):
    """A disable (or any patch) the pool loop wrote (read at 41, written at
    57): the next pass waits until the cache holds the Exporter at the
    version the write left, or a later one."""
    expectations = Expectations()
    expectations.expect(KEY, [], [], {"pool-0": ("41", "57")})
    assert not expectations.satisfied(KEY, {"pool-0"}, versions={"pool-0": waits_at})
    assert expectations.satisfied(KEY, {"pool-0"}, versions={"pool-0": passes_at})


def test_an_exporter_gone_from_the_cache_does_not_hold_the_set():
    expectations = Expectations()
    expectations.expect(KEY, [], [], {"pool-0": ("41", "57")})
    assert expectations.satisfied(KEY, set(), versions={})


def test_versions_that_are_not_numbers_fall_back_to_differing():
    expectations = Expectations()
    expectations.expect(KEY, [], [], {"pool-0": ("a1", "c3")})
    assert not expectations.satisfied(KEY, {"pool-0"}, versions={"pool-0": "a1"})
    assert expectations.satisfied(KEY, {"pool-0"}, versions={"pool-0": "b2"})
