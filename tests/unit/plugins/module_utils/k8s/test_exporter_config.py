"""ExporterConfig rendering, checked field by field and against jumpstarter's own models."""

import copy
import os

import pytest
import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s.exporter_config import (
    exits_on_lease_end,
    render_exporter_config,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    named_drivers,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    VIRTUAL_QEMU_DRIVER_TYPE,
    qemu_driver_overrides,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_pod import (
    guest_port_forwards,
    network_driver_overrides,
)
from jumpstarter.config.exporter import ExporterConfigV1Alpha1
from jumpstarter_driver_virtual_qemu.driver import VirtualQemu

ENDPOINT = "grpc.jumpstarter.example.com:443"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.payload.signature"
TEMPLATE_DRIVERS = [
    {"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu",
     "config": {"arch": "x86_64", "smp": 2, "hostfwd": {"ssh": {"hostport": 2222, "guestport": 22}}}},
    {"name": "tcp", "type": "jumpstarter_driver_network.driver.TcpNetwork",
     "config": {"host": "127.0.0.1", "port": 2222}},
    {"name": "power", "type": "jumpstarter_driver_power.driver.MockPower"},
    {"name": "console", "ref": "qemu.console"},
]


def render(drivers=TEMPLATE_DRIVERS, **kwargs):
    return render_exporter_config("pool-a-0", "lab", drivers, endpoint=ENDPOINT, token=TOKEN,
                                  **kwargs)


def test_envelope():
    config = render()
    assert config["apiVersion"] == "jumpstarter.dev/v1alpha1"
    assert config["kind"] == "ExporterConfig"
    assert config["metadata"] == {"namespace": "lab", "name": "pool-a-0"}
    assert config["endpoint"] == ENDPOINT
    assert config["token"] == TOKEN
    assert "tls" not in config


def test_export_map_keeps_template_order_and_entries():
    export = render()["export"]
    assert list(export) == ["qemu", "tcp", "power", "console"]
    assert export["qemu"] == {
        "type": "jumpstarter_driver_qemu.driver.Qemu",
        "config": {"arch": "x86_64", "smp": 2,
                   "hostfwd": {"ssh": {"hostport": 2222, "guestport": 22}}},
    }
    assert export["tcp"] == {"type": "jumpstarter_driver_network.driver.TcpNetwork",
                             "config": {"host": "127.0.0.1", "port": 2222}}
    assert export["power"] == {"type": "jumpstarter_driver_power.driver.MockPower", "config": {}}
    assert export["console"] == {"ref": "qemu.console"}


def test_tls_ca_is_written_when_given():
    assert render(tls_ca="LS0tLS1CRUdJTi4uLg==")["tls"] == {"ca": "LS0tLS1CRUdJTi4uLg=="}


def test_overrides_merge_into_template_entries_and_win():
    overrides = {
        "qemu": {"config": {"smp": 4, "hostfwd": {"ssh": {"hostport": 3333}},
                            "default_partitions": {"root": "/run/vt/disk.qcow2"}}},
        "tcp": {"config": {"host": None}},
    }
    export = render(driver_overrides=overrides)["export"]
    assert export["qemu"]["config"] == {
        "arch": "x86_64",
        "smp": 4,
        "hostfwd": {"ssh": {"hostport": 3333, "guestport": 22}},
        "default_partitions": {"root": "/run/vt/disk.qcow2"},
    }
    assert export["tcp"]["config"] == {"port": 2222}


def test_overrides_add_missing_drivers_and_replace_refs():
    overrides = {
        "serial": {"type": "jumpstarter_driver_network.driver.UnixNetwork",
                   "config": {"path": "/run/vt/serial.sock"}},
        "console": {"ref": "qemu.power"},
        "power": {"ref": "qemu.power"},
    }
    export = render(driver_overrides=overrides)["export"]
    assert export["serial"] == overrides["serial"]
    assert export["console"] == {"ref": "qemu.power"}
    assert export["power"] == {"ref": "qemu.power"}


def test_inputs_are_not_changed():
    drivers = copy.deepcopy(TEMPLATE_DRIVERS)
    overrides = {"qemu": {"config": {"smp": 8}}}
    config = render(drivers, driver_overrides=overrides)
    config["export"]["qemu"]["config"]["arch"] = "aarch64"
    assert drivers == TEMPLATE_DRIVERS
    assert overrides == {"qemu": {"config": {"smp": 8}}}


@pytest.mark.parametrize(
    ("drivers", "message"),
    [
        ([{"name": 5, "type": "a.B"}], r"drivers\[0\]\.name: required"),
        ([{"name": "", "type": "a.B"}], r"drivers\[0\]\.name: required"),
        ([{"name": "x", "type": "a.B"}, {"name": "x", "type": "a.C"}],
         r"drivers\[1\]\.name: duplicate driver name 'x'"),
        ([{"name": "x"}], r"drivers\[0\]: give exactly one of type or ref"),
        ([{"name": "x", "type": "a.B", "ref": "y.z"}], r"drivers\[0\]: give exactly one"),
        ([{"name": "x", "ref": "y.z", "config": {"a": 1}}], r"drivers\[0\]: a ref entry has no config"),
        ([{"name": "x", "type": "a.B", "config": [1]}], r"drivers\[0\]\.config: must be a mapping"),
        (["x"], r"drivers\[0\]: must be a mapping"),
    ],
)
def test_bad_driver_entries_are_rejected_by_field(drivers, message):
    with pytest.raises(ValueError, match=message):
        render(drivers)


def test_bad_override_is_rejected_by_name():
    with pytest.raises(ValueError, match=r"driver_overrides\['new'\]: give exactly one"):
        render(driver_overrides={"new": {"config": {"a": 1}}})


@pytest.mark.parametrize(("strategy", "exits"), [
    (None, True), ("ExitAndReplace", True), ("InPlaceReuse", False),
])
def test_exit_on_lease_end_follows_the_recycle_strategy(strategy, exits):
    exporter_set = {"spec": {"recycleStrategy": strategy} if strategy else {}}
    assert exits_on_lease_end(exporter_set) is exits
    assert render(exit_on_lease_end=exits_on_lease_end(exporter_set))["exitOnLeaseEnd"] is exits


def test_an_exporter_without_exit_on_lease_end_still_loads_the_config():
    """jumpstarter 0.9.0 does not know exitOnLeaseEnd; its model ignores the field."""
    loaded = ExporterConfigV1Alpha1.model_validate(render(exit_on_lease_end=True, tls_ca="Q0E="))
    assert loaded.tls.ca == "Q0E="


def test_jumpstarter_reads_back_exactly_what_was_rendered(tmp_path):
    """The exporter's own model loads the file without dropping or changing a field."""
    rendered = render(driver_overrides={"serial": {
        "type": "jumpstarter_driver_network.driver.UnixNetwork",
        "config": {"path": "/run/vt/serial.sock"}}}, tls_ca="Q0E=")
    path = tmp_path / "exporter.yaml"
    path.write_text(yaml.safe_dump(rendered))
    os.chmod(path, 0o600)
    loaded = ExporterConfigV1Alpha1.load_path(path)
    dumped = loaded.model_dump(mode="json", by_alias=True, exclude_unset=True,
                               exclude={"alias", "path"})
    assert dumped == rendered
    assert loaded.export["console"].root.ref == "qemu.console"


def test_exporter_instantiates_the_rendered_drivers():
    drivers = [
        {"name": "tcp", "type": "jumpstarter_driver_network.driver.TcpNetwork",
         "config": {"host": "127.0.0.1", "port": 2222}},
        {"name": "serial", "type": "jumpstarter_driver_network.driver.UnixNetwork",
         "config": {"path": "/run/vt/serial.sock"}},
    ]
    loaded = ExporterConfigV1Alpha1.model_validate(render(drivers))
    tcp = loaded.export["tcp"].instantiate()
    serial = loaded.export["serial"].instantiate()
    assert (tcp.host, tcp.port) == ("127.0.0.1", 2222)
    assert serial.path == "/run/vt/serial.sock"


def test_qemu_drivers_of_the_template_become_the_virtual_qemu_driver_of_the_instance():
    """The upstream Qemu driver would start a QEMU of its own: the entry is replaced whole."""
    overrides = qemu_driver_overrides(TEMPLATE_DRIVERS, "/run/vt/pool-a-0/")
    assert overrides == {"qemu": {"type": VIRTUAL_QEMU_DRIVER_TYPE, "config": {
        "run_dir": "/run/vt/pool-a-0", "qmp_socket": "qmp.sock", "serial_socket": "serial.sock",
        "serial_log": "serial.log", "disk_node": "disk0"}}}
    export = render(driver_overrides=overrides)["export"]
    assert export["qemu"] == overrides["qemu"]
    # The other entries, and refs into the QEMU driver's children, stay.
    assert export["console"] == {"ref": "qemu.console"}
    assert export["tcp"]["type"] == "jumpstarter_driver_network.driver.TcpNetwork"


def test_a_template_naming_the_virtual_qemu_driver_keeps_its_own_settings():
    drivers = [{"name": "vm", "type": VIRTUAL_QEMU_DRIVER_TYPE,
                "config": {"qmp_timeout": 60, "run_dir": "/elsewhere"}}]
    export = render(drivers, driver_overrides=qemu_driver_overrides(drivers, "/r"))["export"]
    assert export["vm"]["config"]["qmp_timeout"] == 60
    assert export["vm"]["config"]["run_dir"] == "/r"


def test_templates_without_a_qemu_driver_get_none():
    drivers = [{"name": "power", "type": "jumpstarter_driver_power.driver.MockPower"}]
    assert qemu_driver_overrides(drivers, "/r") == {}


def test_the_exporter_instantiates_the_virtual_qemu_driver_as_rendered(tmp_path):
    """jumpstarter's own config model builds the driver and its power, flasher and console."""
    overrides = qemu_driver_overrides(TEMPLATE_DRIVERS, str(tmp_path))
    path = tmp_path / "exporter.yaml"
    path.write_text(yaml.safe_dump(render(driver_overrides=overrides)))
    os.chmod(path, 0o600)
    driver = ExporterConfigV1Alpha1.load_path(path).export["qemu"].instantiate()
    assert isinstance(driver, VirtualQemu)
    assert driver.path(driver.qmp_socket) == tmp_path / "qmp.sock"
    assert driver.path(driver.serial_log) == tmp_path / "serial.log"
    assert sorted(driver.children) == ["console", "flasher", "power"]
    assert driver.client() == "jumpstarter_driver_composite.client.CompositeClient"
    assert driver.children["power"].client() == "jumpstarter_driver_power.client.PowerClient"
    assert driver.children["flasher"].client() == "jumpstarter.client.flasher.FlasherClient"
    assert driver.children["console"].client() == "jumpstarter_driver_pyserial.client.PySerialClient"


# JEP-0014's rpi4 set, drivers as the JEP lists them: by type alone.
JEP_DRIVERS = [
    {"type": "jumpstarter_driver_power.driver.QemuPower"},
    {"type": "jumpstarter_driver_network.driver.TcpNetwork", "config": {"port": 22}},
    {"type": "jumpstarter_driver_serial.driver.QemuSerial"},
]


def test_drivers_without_name_are_exported_under_their_lowercased_class_name():
    before = copy.deepcopy(JEP_DRIVERS)
    config = render(JEP_DRIVERS)
    assert config["export"] == {
        "qemupower": {"type": "jumpstarter_driver_power.driver.QemuPower", "config": {}},
        "tcpnetwork": {"type": "jumpstarter_driver_network.driver.TcpNetwork", "config": {"port": 22}},
        "qemuserial": {"type": "jumpstarter_driver_serial.driver.QemuSerial", "config": {}},
    }
    assert JEP_DRIVERS == before
    # Stable: the same list names the same way every time.
    assert render(JEP_DRIVERS)["export"] == config["export"]


def test_derived_names_give_way_to_given_ones_and_to_each_other():
    drivers = [
        {"type": "a.driver.Power"},
        {"name": "power", "type": "b.driver.Other"},
        {"type": "c.driver.Power"},
        {"type": "d.driver.Power", "name": None},
        {"ref": "qemu.Console"},
        {"name": "power_3", "type": "e.driver.Thing"},
    ]
    assert [d["name"] for d in named_drivers(drivers)] == [
        "power_2", "power", "power_4", "power_5", "console", "power_3"]
    assert list(render(drivers)["export"]) == [
        "power_2", "power", "power_4", "power_5", "console", "power_3"]


def test_qemu_overrides_reach_an_unnamed_qemu_driver():
    drivers = [{"type": "jumpstarter_driver_qemu.driver.Qemu", "config": {"smp": 2}}]
    overrides = qemu_driver_overrides(drivers, "/run/jve")
    assert list(overrides) == ["qemu"]
    config = render(drivers, driver_overrides=overrides)
    assert list(config["export"]) == ["qemu"]
    assert config["export"]["qemu"]["type"] == VIRTUAL_QEMU_DRIVER_TYPE
    assert config["export"]["qemu"]["config"]["run_dir"] == "/run/jve"


def test_the_jeps_serial_driver_is_the_console_of_the_qemu_driver(tmp_path):
    """The JEP's template (Qemu, TcpNetwork on port 22, QemuSerial) as written:
    no driver package has QemuSerial, so its entry becomes a ref to the
    virtual QEMU driver's console, and jumpstarter's own model loads it."""
    drivers = [
        {"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu"},
        {"name": "tcp", "type": "jumpstarter_driver_network.driver.TcpNetwork", "config": {"port": 22}},
        {"name": "serial", "type": "jumpstarter_driver_serial.driver.QemuSerial"},
    ]
    overrides = qemu_driver_overrides(drivers, str(tmp_path))
    assert overrides["serial"] == {"ref": "qemu.console"}
    export = render(drivers, driver_overrides=overrides)["export"]
    assert export["serial"] == {"ref": "qemu.console"}
    assert export["qemu"]["type"] == VIRTUAL_QEMU_DRIVER_TYPE
    loaded = ExporterConfigV1Alpha1.model_validate(render(drivers, driver_overrides=overrides))
    assert loaded.export["serial"].root.ref == "qemu.console"
    # Unnamed, as the seed revision lists them: the derived names are used.
    unnamed = [{key: value for key, value in d.items() if key != "name"} for d in drivers]
    assert qemu_driver_overrides(unnamed, "/r")["qemuserial"] == {"ref": "qemu.console"}
    # Without a QEMU driver there is no console to point at: one is added (below).
    assert qemu_driver_overrides(drivers[1:], "/r")["serial"] == {"ref": "qemu.console"}


def test_the_seeds_power_and_serial_are_children_of_a_qemu_driver_added_for_them():
    """The seed's template (QemuPower, TcpNetwork, QemuSerial; no QEMU driver):
    the instance's exporter gets the virtual QEMU driver under a free name
    and both entries become refs to its children, which jumpstarter's own
    model loads; no entry imports a class no package has."""
    overrides = qemu_driver_overrides(JEP_DRIVERS, "/r")
    assert overrides["qemupower"] == {"ref": "qemu.power"}
    assert overrides["qemuserial"] == {"ref": "qemu.console"}
    config = render(JEP_DRIVERS, driver_overrides=overrides)
    assert list(config["export"]) == ["qemupower", "tcpnetwork", "qemuserial", "qemu"]
    assert config["export"]["qemu"]["type"] == VIRTUAL_QEMU_DRIVER_TYPE
    assert {entry.get("type") for entry in config["export"].values()} == {
        None, VIRTUAL_QEMU_DRIVER_TYPE, "jumpstarter_driver_network.driver.TcpNetwork"}
    loaded = ExporterConfigV1Alpha1.model_validate(config)
    assert loaded.export["qemupower"].root.ref == "qemu.power"
    # The added driver takes a name no entry has.
    taken = [{"name": "qemu", "type": "jumpstarter_driver_network.driver.TcpNetwork",
              "config": {"host": "h", "port": 1}}, *JEP_DRIVERS]
    overrides = qemu_driver_overrides(taken, "/r")
    assert overrides["qemu_2"]["type"] == VIRTUAL_QEMU_DRIVER_TYPE and "qemu" not in overrides
    assert overrides["qemupower"] == {"ref": "qemu_2.power"}
    # A template without power or serial entries gets no QEMU driver it did not list.
    assert qemu_driver_overrides(JEP_DRIVERS[1:2], "/r") == {}


def test_a_host_less_tcp_network_is_pointed_at_the_forward_to_the_guests_port():
    """JEP-0014's ``TcpNetwork`` with ``port: 22`` alone reaches the guest through QEMU's forward."""
    assert guest_port_forwards(JEP_DRIVERS) == {22000: 22}
    overrides = network_driver_overrides(JEP_DRIVERS)
    assert overrides == {"tcpnetwork": {"config": {"host": "127.0.0.1", "port": 22000}}}
    loaded = ExporterConfigV1Alpha1.model_validate(render(named_drivers(JEP_DRIVERS[:2]),
                                                          driver_overrides=overrides))
    tcp = loaded.export["tcpnetwork"].instantiate()
    assert (tcp.host, tcp.port) == ("127.0.0.1", 22000)


def test_a_host_less_port_is_the_host_side_of_the_forward_to_the_guests_ssh():
    """As upstream reads it: ``port: 2222`` is where the forward listens, and
    it reaches the guest's SSH (22), not a guest port 2222; the Pod's own
    listening port is the provisioner's, and the entry is pointed at it."""
    drivers = [*TEMPLATE_DRIVERS,
               {"name": "alt", "type": "jumpstarter_driver_network.driver.TcpNetwork", "config": {"port": 2222}},
               {"name": "ssh", "type": "jumpstarter_driver_network.driver.TcpNetwork", "config": {"port": 22}}]
    assert guest_port_forwards(drivers) == {22000: 22, 22001: 22}
    # "tcp" names its host (the template's value, kept as it is).
    assert network_driver_overrides(drivers) == {
        "alt": {"config": {"host": "127.0.0.1", "port": 22001}},
        "ssh": {"config": {"host": "127.0.0.1", "port": 22000}},
    }
    # The guest's SSH port is forwarded whatever the template lists.
    assert guest_port_forwards([]) == {22000: 22}


def test_the_qemu_drivers_hostfwd_gives_a_host_port_another_guest_port():
    """The upstream Qemu driver's ``hostfwd`` ({hostport, guestport}) says
    where a host-side port leads; a TcpNetwork entry on that port reaches it."""
    qemu = {"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu",
            "config": {"hostfwd": {"web": {"hostport": 8080, "guestport": 80}}}}
    web = {"name": "web", "type": "jumpstarter_driver_network.driver.TcpNetwork", "config": {"port": 8080}}
    assert guest_port_forwards([qemu, web]) == {22000: 22, 22001: 80}
    assert network_driver_overrides([qemu, web]) == {"web": {"config": {"host": "127.0.0.1", "port": 22001}}}
    broken = {**qemu, "config": {"hostfwd": {"web": {"hostport": 8080}}}}
    with pytest.raises(ValueError, match=r"^drivers\[0\]\.config\.hostfwd\.web: needs hostport and guestport"):
        guest_port_forwards([broken, web])


@pytest.mark.parametrize("port", [None, "22", 0, 65536, True])
def test_a_host_less_tcp_network_needs_a_guest_port(port):
    drivers = [JEP_DRIVERS[0], {"type": "jumpstarter_driver_network.driver.TcpNetwork", "config": {"port": port}}]
    with pytest.raises(ValueError, match=r"^drivers\[1\]\.config\.port: .* host side .* not "):
        guest_port_forwards(drivers)


def test_the_pods_qemu_forwards_the_port_its_exporter_config_names():
    """The config Secret's TcpNetwork and the QEMU container's forward meet on the Pod's loopback."""
    exporter_set = {"metadata": {"name": "rpi4", "namespace": "lab", "uid": "set-uid"},
                    "spec": {"template": {"spec": {"drivers": JEP_DRIVERS}}}}
    exporter = {"metadata": {"name": "rpi4-0", "namespace": "lab", "uid": "exporter-uid"},
                "status": {"endpoint": "grpc.test:443"}}
    parameters = {"arch": "x86_64", "resources": {"cpu": 1, "memory": "1Gi"}}
    secret = k8s_pod.config_secret(exporter_set, exporter, "qemu.jumpstarter.dev", parameters, TOKEN, "")
    tcp = yaml.safe_load(secret["stringData"]["rpi4-0.yaml"])["export"]["tcpnetwork"]
    assert tcp == {"type": "jumpstarter_driver_network.driver.TcpNetwork",
                   "config": {"host": "127.0.0.1", "port": 22000}}
    pod = k8s_pod.instance_pod(exporter_set, {"spec": {}}, exporter, "qemu.jumpstarter.dev", parameters, {})
    command = next(c for c in pod["spec"]["containers"] if c["name"] == "qemu")["command"]
    netdev = command[command.index("-netdev") + 1]
    assert f"hostfwd=tcp:127.0.0.1:{tcp['config']['port']}-:22" in netdev.split(",")
    # Corellium has no QEMU: the entry stays the template's.
    corellium = k8s_pod.config_secret(exporter_set, exporter, "corellium.jumpstarter.dev", {}, TOKEN, "")
    assert yaml.safe_load(corellium["stringData"]["rpi4-0.yaml"])["export"]["tcpnetwork"]["config"] == {"port": 22}
