"""One leader election Lease per provisioner, named as upstream's controller
names it (``election.lease_name``, ``election_leases``), what a standby says
(``election.StandbyNotices``): a log line per holder it reads, an Event per
set and holder, whatever the order of reads and failures; and how long it
waits on another's Lease (``election.Config``)."""

import logging

import pytest
from exporterset_operator import election
from exporterset_operator.__main__ import election_leases, parse_args
from hypothesis import given, settings
from hypothesis import strategies as st

PROVISIONERS = ["qemu.jumpstarter.dev", "qemu-baremetal.jumpstarter.dev", "corellium.jumpstarter.dev"]


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    for name in ("NAMESPACE", "WATCH_NAMESPACE", "LEADER_ELECTION_NAMESPACE", "LEADER_ELECTION_ID", "PROVISIONERS"):
        monkeypatch.delenv(name, raising=False)


@given(st.lists(st.sampled_from(PROVISIONERS), min_size=1, unique=True))
def test_each_provisioner_has_the_lease_upstreams_controller_holds_for_it(served):
    args = parse_args(["--leader-elect", "--namespace=lab", *(f"--provisioner={p}" for p in served)])
    assert election_leases(args) == [(f"exporter-set-controller-{p}", "lab", (p,)) for p in sorted(served)]


def test_a_leader_election_id_is_one_lease_for_every_provisioner():
    args = parse_args(["--leader-elect", "--leader-election-id=pool", *(f"--provisioner={p}" for p in PROVISIONERS)])
    assert election_leases(args) == [("pool", "default", tuple(sorted(PROVISIONERS)))]


def a_set(number):
    return {"metadata": {"name": f"set-{number}", "uid": f"uid-{number}"}}


# One read of the Lease by a standby: the holder it names, the sets the cache
# holds then, and whether the Event writes fail at that read.
READ = st.tuples(st.sampled_from(["theirs_1", "theirs_2", "ours_3"]),
                 st.sets(st.integers(0, 4)), st.booleans())


@settings(max_examples=80, deadline=None)
@given(st.lists(READ, max_size=12))
def test_a_standby_tells_each_set_once_per_holder_and_logs_each_change_of_holder(reads):
    emitted, cache, failing = [], [], [False]

    def emit(exporter_set, message):
        if failing[0]:
            raise OSError("API server unreachable")
        emitted.append((exporter_set["metadata"]["uid"], message))

    notices = election.StandbyNotices("qemu.jumpstarter.dev", "exporter-set-controller-qemu.jumpstarter.dev",
                                      lambda: list(cache), emit)
    logged = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append((record.getMessage(), getattr(record, "holder", None)))
    election.log.addHandler(handler)
    try:
        expected, told, failed, changes, last = [], set(), set(), [], None
        for holder, numbers, fails in reads:
            cache[:] = [a_set(n) for n in sorted(numbers)]
            failing[0] = fails
            notices(holder)
            if holder != last:
                changes.append(holder)
                last = holder
            if fails:
                failed |= {(f"uid-{n}", holder) for n in numbers} - told
            else:
                for n in sorted(numbers):
                    if (f"uid-{n}", holder) not in told:
                        told.add((f"uid-{n}", holder))
                        expected.append((f"uid-{n}", election.standby_message(
                            "qemu.jumpstarter.dev", "exporter-set-controller-qemu.jumpstarter.dev", holder)))
    finally:
        election.log.removeHandler(handler)
    assert emitted == expected
    assert [holder for message, holder in logged if message.startswith("standing by")] == changes
    # A failed write is logged once per set and holder, however often it fails.
    assert sum(message.startswith("cannot record") for message, _ in logged) == len(failed)


def test_the_message_names_the_holder_the_lease_and_the_provisioner():
    message = election.standby_message("qemu.jumpstarter.dev", "exporter-set-controller-qemu.jumpstarter.dev",
                                       "node-1_8d3f")
    assert "node-1_8d3f" in message and "exporter-set-controller-qemu.jumpstarter.dev" in message
    assert "qemu.jumpstarter.dev in this namespace" in message


class _Lock:
    holder_duration = None


@given(ours=st.integers(2, 60), theirs=st.one_of(st.none(), st.integers(1, 120)))
def test_a_standby_waits_the_longer_of_its_lease_duration_and_the_holders(ours, theirs):
    lock = _Lock()
    config = election.Config(lock, ours, 1.5, 1, onstarted_leading=lambda: None, onstopped_leading=None)
    assert config.lease_duration == ours
    lock.holder_duration = theirs
    assert config.lease_duration == max(ours, theirs or 0)
