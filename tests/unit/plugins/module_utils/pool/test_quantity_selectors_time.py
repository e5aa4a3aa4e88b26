from datetime import UTC, datetime
from decimal import Decimal

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.selectors import (
    selector_matches,
    selector_to_string,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.quantity import (
    is_quantity,
    parse_quantity,
    quantity_to_bytes,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    format_time,
    parse_duration,
    parse_time,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4Gi", Decimal(4 * 1024**3)),
        ("500m", Decimal("0.5")),
        ("1.5G", Decimal(1_500_000_000)),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        ("64Mi", Decimal(64 * 1024**2)),
        ("2", Decimal(2)),
        (".5", Decimal("0.5")),
        (3, Decimal(3)),
        ("10k", Decimal(10000)),
    ],
)
def test_parse_quantity(text, expected):
    assert parse_quantity(text) == expected
    assert is_quantity(text)


@pytest.mark.parametrize("text", ["8Gx", "", "Gi", "1.2.3", "4 Gi", "1e", True, None, [1]])
def test_not_a_quantity(text):
    assert not is_quantity(text)
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_quantity_to_bytes_rounds_up():
    assert quantity_to_bytes("1500m") == 2
    assert quantity_to_bytes("1Ki") == 1024


LABELS = {"board": "rpi4", "virtual": "true", "arch": "aarch64"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        (None, True),
        ({}, True),
        ({"matchLabels": {"board": "rpi4"}}, True),
        ({"matchLabels": {"board": "rpi5"}}, False),
        ({"matchLabels": {"missing": "x"}}, False),
        ({"matchExpressions": [{"key": "arch", "operator": "In",
                                "values": ["aarch64", "x86_64"]}]}, True),
        ({"matchExpressions": [{"key": "arch", "operator": "In", "values": ["x86_64"]}]}, False),
        ({"matchExpressions": [{"key": "arch", "operator": "NotIn", "values": ["x86_64"]}]},
         True),
        ({"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["a"]}]}, True),
        ({"matchExpressions": [{"key": "virtual", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "board", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "board", "operator": "Gt", "values": ["1"]}]}, False),
        ({"matchLabels": {"board": "rpi4"},
          "matchExpressions": [{"key": "virtual", "operator": "In", "values": ["false"]}]},
         False),
    ],
)
def test_selector_matches(selector, matches):
    assert selector_matches(selector, LABELS) is matches


@pytest.mark.parametrize(
    ("selector", "text"),
    [
        (None, ""),
        ({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2"),
        ({"matchLabels": {"board": "rpi4"},
          "matchExpressions": [
              {"key": "arch", "operator": "In", "values": ["x86_64", "aarch64"]},
              {"key": "gpu", "operator": "DoesNotExist"},
              {"key": "virtual", "operator": "Exists"},
              {"key": "zone", "operator": "NotIn", "values": ["b"]}]},
         "arch in (aarch64,x86_64),board=rpi4,!gpu,virtual,zone notin (b)"),
    ],
)
def test_selector_to_string(selector, text):
    assert selector_to_string(selector) == text


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("0", 0), ("1.5h", 5400), ("90s", 90),
     (45, 45)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5", "m", "5 m", "1d", "", "5m3", True])
def test_bad_duration(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_time_round_trip():
    assert parse_time("2026-11-21T08:00:00Z") == datetime(2026, 11, 21, 8, tzinfo=UTC)
    assert parse_time(datetime(2026, 11, 21, 8)) == datetime(2026, 11, 21, 8, tzinfo=UTC)
    assert format_time(parse_time("2026-11-21T09:00:00+01:00")) == "2026-11-21T08:00:00Z"
