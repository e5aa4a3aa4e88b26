"""The operator's JSON logs: one object per line, routine retries kept out of INFO."""

import json
import logging

import pytest
from exporterset_operator import logs


@pytest.fixture
def captured(capsys):
    saved = logging.getLogger().handlers[:], logging.getLogger().level
    yield capsys
    logging.getLogger().handlers[:], level = saved
    logging.getLogger().setLevel(level)
    logging.getLogger("leaderelection").filters[:] = []


def lines(capsys):
    return [json.loads(line) for line in capsys.readouterr().err.splitlines()]


def test_each_renewal_of_the_leader_lease_is_debug_not_info(captured):
    """The client's leader election says INFO on every renewal (every retry
    period): at INFO it is not written, at DEBUG it is, as DEBUG; its
    warnings stay warnings."""
    logs.configure("INFO")
    election = logging.getLogger("leaderelection")
    election.info("leader host_1 has successfully acquired lease")
    election.warning("a warning of the election")
    logging.getLogger("exporterset_operator").info("leading: reconciling once the caches are synced", extra={"n": 1})
    written = lines(captured)
    assert [(e["logger"], e["level"], e["msg"]) for e in written] == [
        ("leaderelection", "warning", "a warning of the election"),
        ("exporterset_operator", "info", "leading: reconciling once the caches are synced"),
    ]
    assert written[1]["n"] == 1

    logs.configure("DEBUG")
    election.info("leader host_1 has successfully acquired lease")
    [renewal] = lines(captured)
    assert renewal["level"] == "debug" and renewal["msg"].endswith("successfully acquired lease")


def test_the_console_encoder_writes_the_same_fields_as_one_line_of_text(captured):
    """--zap-encoder=console: time, level, logger and message tab separated,
    then the extra fields as JSON; a traceback on the lines after."""
    logs.configure("INFO", "console")
    log = logging.getLogger("exporterset_operator")
    log.info("starting", extra={"workers": 2})
    log.warning("plain")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    first, second, third, *trace = captured.readouterr().err.splitlines()
    ts, level, logger, msg, extra = first.split("\t")
    assert (level, logger, msg, json.loads(extra)) == ("info", "exporterset_operator", "starting", {"workers": 2})
    assert ts.endswith("+00:00")
    assert second.split("\t")[1:] == ["warning", "exporterset_operator", "plain"]
    assert third.split("\t")[1:] == ["error", "exporterset_operator", "failed"]
    assert trace[0] == "Traceback (most recent call last):" and trace[-1] == "ValueError: boom"
