"""The command line upstream's Jumpstarter operator gives an exporter-set
controller (its slot): the zap logging flags, NAMESPACE, and an unknown
provisioner refused with the supported list."""

import logging

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners
from exporterset_operator.__main__ import ZAP_LEVELS, election_leases, parse_args
from hypothesis import given
from hypothesis import strategies as st

SLOT_ARGS = ["--provisioner=qemu.jumpstarter.dev", "--leader-elect", "--health-probe-bind-address=:8081",
             "--metrics-bind-address=0", "--zap-log-level=info"]


@pytest.fixture(autouse=True)
def no_namespace_env(monkeypatch):
    for name in ("NAMESPACE", "WATCH_NAMESPACE", "LEADER_ELECTION_NAMESPACE", "LOG_LEVEL", "PROVISIONERS"):
        monkeypatch.delenv(name, raising=False)


def test_the_slots_args_and_env_are_taken_as_they_are(monkeypatch):
    monkeypatch.setenv("NAMESPACE", "jumpstarter-lab")
    args = parse_args(SLOT_ARGS)
    assert args.provisioners == ["qemu.jumpstarter.dev"]
    assert args.leader_elect is True
    assert (args.metrics_bind_address, args.health_probe_bind_address) == (None, ("0.0.0.0", 8081))
    assert (args.log_level, args.log_encoder) == ("INFO", "json")
    assert args.namespace == "jumpstarter-lab"
    assert election_leases(args) == [("exporter-set-controller-qemu.jumpstarter.dev", "jumpstarter-lab",
                                      ("qemu.jumpstarter.dev",))]


@pytest.mark.parametrize("flag, value", [("--zap-log-level", "debug"), ("--zap-encoder", "console"),
                                         ("--zap-devel", "true"), ("--zap-stacktrace-level", "panic"),
                                         ("--zap-time-encoding", "rfc3339nano")])
def test_each_zap_flag_in_both_forms_means_the_same(flag, value):
    assert vars(parse_args([f"{flag}={value}"])) == vars(parse_args([flag, value]))


@pytest.mark.parametrize("value, level", [*ZAP_LEVELS.items(), ("0", "INFO"), ("1", "DEBUG"), ("5", "DEBUG"),
                                          ("DEBUG", "DEBUG")])
def test_the_zap_level_is_the_operators_level(value, level):
    assert parse_args(["--zap-log-level", value]).log_level == level
    assert isinstance(logging.getLevelName(level), int)


@given(st.integers(min_value=1, max_value=10**6))
def test_any_verbosity_above_zero_is_debug(verbosity):
    assert parse_args([f"--zap-log-level={verbosity}"]).log_level == "DEBUG"


@pytest.mark.parametrize("flags, message", [
    (["--zap-log-level=loud"], "--zap-log-level: 'loud' is not one of debug"),
    (["--zap-log-level=-1"], "--zap-log-level: '-1' is not one of"),
    (["--zap-encoder=xml"], "--zap-encoder: invalid choice: 'xml'"),
    (["--zap-devel=maybe"], "--zap-devel: 'maybe' is not true or false"),
])
def test_a_bad_zap_value_is_refused_naming_the_flag(flags, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(flags)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_devel_means_debug_and_console_unless_they_are_given(monkeypatch):
    assert (parse_args(["--zap-devel"]).log_level, parse_args(["--zap-devel"]).log_encoder) == ("DEBUG", "console")
    given_too = parse_args(["--zap-devel", "--zap-log-level=error", "--zap-encoder=json"])
    assert (given_too.log_level, given_too.log_encoder) == ("ERROR", "json")
    off = parse_args(["--zap-devel=false"])
    assert (off.log_level, off.log_encoder) == ("INFO", "json")
    monkeypatch.setenv("LOG_LEVEL", "WARNING")
    assert parse_args([]).log_level == "WARNING"
    assert parse_args(["--zap-log-level=debug"]).log_level == "DEBUG"


def test_the_last_of_log_level_and_zap_log_level_wins():
    assert parse_args(["--log-level=ERROR", "--zap-log-level=debug"]).log_level == "DEBUG"
    assert parse_args(["--zap-log-level=debug", "--log-level=ERROR"]).log_level == "ERROR"


def test_namespace_comes_from_the_flag_then_watch_namespace_then_namespace(monkeypatch):
    assert parse_args([]).namespace is None
    assert {lease[1] for lease in election_leases(parse_args(["--leader-elect"]))} == {"default"}
    monkeypatch.setenv("NAMESPACE", "slot")
    assert parse_args([]).namespace == "slot"
    monkeypatch.setenv("WATCH_NAMESPACE", "watched")
    assert parse_args([]).namespace == "watched"
    assert parse_args(["--namespace=given"]).namespace == "given"
    assert [lease[:2] for lease in election_leases(
        parse_args(["--leader-election-namespace=lock", "--leader-election-id=x"]))] == [("x", "lock")]


@given(st.text(min_size=1, max_size=40).filter(lambda name: not provisioners.known(name)
                                                 and "\x00" not in name and "," not in name and name.strip()))
def test_an_unknown_provisioner_is_refused_with_the_supported_list(name):
    for argv, env in (([f"--provisioner={name}"], None), ([], name)):
        with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit) as exited:
            if env is not None:
                patch.setenv("PROVISIONERS", f"qemu.jumpstarter.dev,{env}")
            parse_args(argv)
        assert exited.value.code == 2


def test_the_refusal_names_the_unknown_and_every_supported_provisioner(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--provisioner=nope", "--provisioner=qemu.jumpstarter.dev"])
    err = capsys.readouterr().err
    assert "unknown provisioner 'nope'; supported: " + ", ".join(provisioners.names()) in err
    assert len(provisioners.names()) == 3
