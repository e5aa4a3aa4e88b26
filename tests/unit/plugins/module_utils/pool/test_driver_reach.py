"""The class's ``reach`` holds whatever the nesting of a driver's config
(``set_overrides.driver_reach_targets`` through ``reach_violations``): a
host named under a nested key, in a list, in a url, as ``host:port`` or as
an IP address anywhere is refused unless the class lists it, naming the
path of the value. A ``port`` with a host elsewhere in the config is that
host's port."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_set_overrides import lab_class, qemu_class, reaching, resolve

FIELD = "spec.template.spec.drivers[1].config"
REFUSED = "is not a host:port the class lets a set reach"


def refused(klass, config):
    """The fields of the reach refusals (the TcpNetwork's other rules aside)."""
    return [v.split(": ", 1)[0] for v in resolve(klass, reaching(config))["violations"] if REFUSED in v]


@pytest.mark.parametrize("config, path, shown", [
    ({"nested": {"config": {"host": "10.0.0.5", "port": 22}}}, ".nested.config.host", "10.0.0.5:22"),
    ({"backends": [{"url": "http://10.0.0.9:8080/x"}]}, ".backends[0].url", "10.0.0.9:8080"),
    ({"address": "db.internal", "opts": {"port": 5432}}, ".address", "db.internal:5432"),
    ({"hostname": "Metadata"}, ".hostname", "metadata"),
    ({"peers": ["10.1.1.1"]}, ".peers[0]", "10.1.1.1"),
    ({"target": "[fd00::1]:443"}, ".target", "[fd00::1]:443"),
    ({"remote_host": 2130706433}, ".remote_host", "2130706433"),
    ({"server": {"ip": "fd00::7"}}, ".server.ip", "[fd00::7]"),
    ({"links": {"ws://169.254.169.254/latest": "meta"}}, ".links.ws://169.254.169.254/latest", "169.254.169.254"),
    ({"url": "socket://user@10.0.0.1:23"}, ".url", "user@10.0.0.1:23"),
    ({"port": {"host": "10.0.0.2"}}, ".port.host", "10.0.0.2"),
])
@pytest.mark.parametrize("klass", [qemu_class, lab_class])
def test_a_host_at_any_depth_is_refused_naming_its_path_unless_the_class_lists_it(klass, config, path, shown):
    resolved = resolve(klass(), reaching(config))
    assert refused(klass(), config) == [FIELD + path]
    assert any(v.startswith(f"{FIELD}{path}: '{shown}' {REFUSED}") for v in resolved["violations"])
    assert refused(klass(f"reach=other:1|{shown}"), config) == []


def test_a_port_elsewhere_is_the_hosts_port_every_one_of_them():
    config = {"host": "10.0.0.5", "a": {"port": 22}, "b": [{"port": 80}]}
    assert refused(qemu_class("reach=10.0.0.5:22"), config) == [FIELD + ".host"]
    assert refused(qemu_class("reach=10.0.0.5:22|10.0.0.5:80"), config) == []
    # Its own port is the one that counts.
    assert refused(qemu_class("reach=10.0.0.5:23"), {**config, "port": 23}) == []


@pytest.mark.parametrize("config", [
    {"port": 22},  # JEP-0014's TcpNetwork: QEMU's forward to the guest
    {"host": None, "port": 22},
    {"hostfwd": {"ssh": {"hostport": 2222, "guestport": 22}}, "smp": 2, "mem": "512M"},
    {"path": "/run/x.sock", "baudrate": 115200, "name": "console", "mac_address": "52:54:00:12:34:56"},
    {"version": "1.1.1", "ref": "qemu.power", "enable_address": True},
])
def test_a_config_naming_no_host_needs_no_entry(config):
    assert refused(qemu_class(), config) == []


# Generated configs: mappings and lists of harmless scalars, with one host
# put somewhere in one of the forms a driver reads it.
FILLER_KEYS = st.sampled_from(["name", "mode", "timeout", "options", "items", "console", "size"])
FILLER = st.one_of(st.integers(0, 99999), st.booleans(), st.none(),
                   st.text(alphabet="abcdefghijklmnopqrstuvwxyz/-", max_size=12))
CONFIGS = st.recursive(FILLER, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(FILLER_KEYS, inner, max_size=3)), max_leaves=12)
HOSTS = st.sampled_from(["10.0.0.7", "fd00::7", "jenkins.lab.example", "metadata", "169.254.169.254"])


def _v6(host):
    return f"[{host}]" if ":" in host else host


FORMS = {
    "host key": lambda host, port: ({"host": host, "port": port}, ".host", f"{_v6(host)}:{port}"),
    "nested key": lambda host, port: ({"remote_address": host}, ".remote_address", _v6(host)),
    "url": lambda host, port: ({"endpoint": f"https://{_v6(host)}:{port}/x"}, ".endpoint", f"{_v6(host)}:{port}"),
    "host:port": lambda host, port: ({"to": f"{_v6(host)}:{port}"}, ".to", f"{_v6(host)}:{port}"),
}


def _embed(config, piece, choices):
    """``config`` with ``piece`` (a mapping) as an entry somewhere in it, and
    the path to that entry."""
    if isinstance(config, dict) and config and choices.draw(st.booleans()):
        key = choices.draw(st.sampled_from(sorted(config)))
        if isinstance(config[key], (dict, list)):
            inner, path = _embed(config[key], piece, choices)
            return {**config, key: inner}, f".{key}{path}"
    if isinstance(config, list) and config and choices.draw(st.booleans()):
        index = choices.draw(st.integers(0, len(config) - 1))
        if isinstance(config[index], (dict, list)):
            inner, path = _embed(config[index], piece, choices)
            return [*config[:index], inner, *config[index + 1:]], f"[{index}]{path}"
    return {"piece": piece, "rest": config}, ".piece"


@settings(max_examples=300, deadline=None)
@given(config=CONFIGS, host=HOSTS, port=st.integers(1, 65535), form=st.sampled_from(sorted(FORMS)),
       choices=st.data())
def test_a_host_anywhere_in_a_generated_config_is_refused_and_allowed_only_as_listed(config, host, port, form,
                                                                                     choices):
    assert refused(qemu_class(), {"rest": config}) == []
    piece, tail, shown = FORMS[form](host, port)
    nested, path = _embed(config, piece, choices)
    assert refused(qemu_class(), nested) == [FIELD + path + tail]
    assert any(v.startswith(f"{FIELD}{path}{tail}: '{shown}' {REFUSED}")
               for v in resolve(qemu_class(), reaching(nested))["violations"])
    assert refused(qemu_class(f"reach={shown}"), nested) == []
