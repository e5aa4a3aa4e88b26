"""The operator's command line: the leader election's timings, checked with
the flags' own names before the election library would exit on them."""

import pytest
from exporterset_operator.__main__ import parse_args


def election(*flags):
    args = parse_args(list(flags))
    return (args.leader_election_lease_duration, args.leader_election_renew_deadline,
            args.leader_election_retry_period)


def test_the_defaults_are_fifteen_ten_and_two_seconds():
    assert election() == (15, 10.0, 2.0)
    # The Lease holds whole seconds: the library writes int(str(duration)).
    assert isinstance(election()[0], int)


def test_timings_given_as_go_durations_or_seconds():
    assert election("--leader-election-lease-duration", "1m", "--leader-election-renew-deadline", "40s",
                    "--leader-election-retry-period", "5") == (60, 40.0, 5.0)


def test_timings_from_the_environment(monkeypatch):
    monkeypatch.setenv("LEADER_ELECTION_LEASE_DURATION", "4s")
    monkeypatch.setenv("LEADER_ELECTION_RENEW_DEADLINE", "3s")
    monkeypatch.setenv("LEADER_ELECTION_RETRY_PERIOD", "1s")
    assert election() == (4, 3.0, 1.0)


@pytest.mark.parametrize("flags, message", [
    (("--leader-election-lease-duration", "5", "--leader-election-renew-deadline", "6"),
     "--leader-election-lease-duration (5s) must be longer than --leader-election-renew-deadline (6s)"),
    (("--leader-election-renew-deadline", "2"),
     "--leader-election-renew-deadline (2s) must be longer than 1.2 times --leader-election-retry-period (2s)"),
    (("--leader-election-retry-period", "500ms"), "--leader-election-retry-period must be at least 1s"),
    (("--leader-election-lease-duration", "2.5"), "--leader-election-lease-duration must be whole seconds"),
    (("--leader-election-lease-duration", "soon"), "--leader-election-lease-duration"),
])
def test_impossible_timings_are_refused_naming_the_flags(flags, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(list(flags))
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_fork_server_is_on_unless_turned_off(monkeypatch):
    assert parse_args([]).fork_server is True
    assert parse_args(["--no-fork-server"]).fork_server is False
    monkeypatch.setenv("FORK_SERVER", "false")
    assert parse_args([]).fork_server is False
    assert parse_args(["--fork-server"]).fork_server is True
