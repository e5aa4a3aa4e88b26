"""Every field a default driver type may dial is one the reach check reads
as a host, whatever is written in it, read from the real driver classes
(their constructors take nothing else: an unknown ``config`` key fails the
exporter); and a host in any other form than the class lists (decimal,
octal, hex, IPv4-mapped IPv6, a trailing dot, full-width digits, which
``getaddrinfo`` all resolves) is refused, since ``reach`` is a list of the
exact ``host:port`` values allowed, never a list of what is forbidden."""

from __future__ import annotations

import dataclasses
import importlib
import types
import typing

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import set_overrides
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import corellium, qemu
from test_driver_reach import FIELD, refused
from test_set_overrides import lab_class, qemu_class, reaching, resolve

# Fields of a default type's driver that name no connection: what each is.
NOT_DIALED = {
    "port": "the host's port (reach compares host:port)",
    "enable_address": "whether the exporter publishes the address",
    "description": "text",
    "log_level": "a logging level's name",
}


def _driver_class(dotted):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _takes_text(hint):
    """Whether a field of this type takes a string (``str``, ``str | None``...)."""
    return hint is str or (typing.get_origin(hint) in (typing.Union, types.UnionType) and str in typing.get_args(hint))


def _string_fields(cls):
    hints = typing.get_type_hints(cls)
    return sorted(f.name for f in dataclasses.fields(cls)
                  if f.init and not f.name.startswith("_") and _takes_text(hints.get(f.name)))


def test_the_default_types_whose_config_reaches_the_exporter_are_known():
    """QEMU drivers are replaced by the instance's virtual driver, power and
    serial become refs, Corellium's fields are the class's: only TcpNetwork's
    config reaches the exporter as the set wrote it."""
    passed_through = set(qemu.DEFAULT_DRIVER_TYPES) - set(qemu.QEMU_DRIVER_TYPES) \
        - set(qemu.QEMU_COMPANION_CHILDREN)
    assert passed_through == {qemu.TCP_NETWORK_DRIVER_TYPE}
    overrides = corellium.Corellium().driver_overrides(
        [{"name": "c", "type": corellium.DRIVER_TYPE}], {"api": {"projectId": "p"}, "device": {}}, "i")
    assert overrides["c"]["config"]["project_id"] == "p"


@pytest.mark.parametrize("dotted", [qemu.TCP_NETWORK_DRIVER_TYPE])
@pytest.mark.parametrize("klass", [qemu_class, lab_class])
def test_every_string_field_of_a_default_driver_is_read_as_a_host_whatever_its_value(dotted, klass):
    fields = _string_fields(_driver_class(dotted))
    assert fields, f"{dotted} has no string field?"
    for name in fields:
        if name in NOT_DIALED:
            continue
        for value in ("metadata", "svc", "0", "10.0.0.9"):
            assert refused(klass(), {name: value, "port": 22}) == [f"{FIELD}.{name}"], (name, value)


@pytest.mark.parametrize("host", [
    "2130706433", "0177.0.0.1", "0x7f.1", "127.1", "::ffff:127.0.0.1", "[::ffff:7f00:1]",
    "localhost.", "１２７.0.0.1", " 127.0.0.2", "127.0.0.1%lo",
])
def test_a_host_in_another_form_than_the_class_lists_is_refused(host):
    allowed = qemu_class("reach=127.0.0.1:22|localhost:22")
    assert refused(allowed, {"host": host, "port": 22}) == [f"{FIELD}.host"]
    # The listed names themselves pass (without case: DNS has none).
    assert refused(allowed, {"host": "LocalHost", "port": 22}) == []


@pytest.mark.parametrize("port", ["022", "22 ", "22.0", "+22", "0x16", 22.0])
def test_a_port_in_another_form_is_refused(port):
    assert refused(qemu_class("reach=10.0.0.5:22"), {"host": "10.0.0.5", "port": port}) == [f"{FIELD}.host"]


def test_a_config_of_more_values_than_the_bound_is_refused_whole_and_not_walked():
    """200,000 strings cost a second of every pass, GIL held; 5,000 hosts
    made one message each."""
    many = {"port": 22, "x": [{"host": f"10.1.{i // 256 % 256}.{i % 256}"} for i in range(5000)]}
    (message,) = [v for v in resolve(qemu_class(), reaching(many))["violations"] if "drivers[1]" in v]
    assert message.startswith(f"{FIELD}: holds more than {set_overrides.MAX_CONFIG_VALUES} values")
    at_bound = {"x": ["a"] * (set_overrides.MAX_CONFIG_VALUES - 1)}
    assert refused(qemu_class(), at_bound) == []


def test_a_refusal_names_the_first_hosts_and_counts_the_rest():
    hosts = {"port": 22, "x": [{"host": f"10.2.0.{i}"} for i in range(100)]}
    messages = [v for v in resolve(qemu_class(), reaching(hosts))["violations"] if "drivers[1]" in v]
    assert len(messages) == set_overrides.MAX_REACH_MESSAGES + 1
    assert messages[0].startswith(f"{FIELD}.x[0].host: '10.2.0.0:22'")
    assert messages[-1] == f"{FIELD}: and {100 - set_overrides.MAX_REACH_MESSAGES} more hosts the class does not list"


def test_parameters_of_more_values_than_the_bound_are_refused_and_not_carried():
    """Unknown fields are only warned of, so 200,000 strings there were merged,
    checked and echoed into the status (1.8 MB) in every pass."""
    the_set = reaching({"port": 22})
    the_set["spec"]["parameters"] = {"unknownThing": ["a"] * 5000, "cpuModel": "max"}
    result = resolve(qemu_class(), the_set)
    assert [v for v in result["violations"] if v.startswith("spec.parameters: holds more than")]
    assert "unknownThing" not in result["parameters"] and result["parameters"].get("cpuModel") != "max"
    the_set["spec"]["parameters"] = {"unknownThing": ["a"] * 100}
    assert not [v for v in resolve(qemu_class(), the_set)["violations"] if v.startswith("spec.parameters")]
