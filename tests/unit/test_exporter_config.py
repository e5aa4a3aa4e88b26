"""ExporterConfig rendering, checked field by field and against jumpstarter's own models."""

import copy
import dataclasses
import os

import pytest
import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.exporter_config import (
    exits_on_lease_end,
    qemu_driver_config,
    render_exporter_config,
)
from jumpstarter.config.exporter import ExporterConfigV1Alpha1
from jumpstarter_driver_qemu.driver import Qemu

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
        ([{"type": "a.B"}], r"drivers\[0\]\.name: required"),
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


QEMU_PARAMETERS = {
    "arch": "aarch64",
    "machineType": "virt",
    "cpuModel": "cortex-a72",
    "resources": {"cpu": 4, "memory": "4Gi", "storage": "16Gi"},
    "firmware": {"path": "/usr/share/AAVMF/AAVMF_CODE.fd"},
}


def test_qemu_driver_config_fields():
    assert qemu_driver_config(QEMU_PARAMETERS, "/run/vt/pool-a-0") == {
        "arch": "aarch64",
        "cpu": "cortex-a72",
        "smp": 4,
        "mem": "4G",
        "disk_size": "16G",
        "default_partitions": {"root": "/run/vt/pool-a-0/disk.qcow2",
                               "bios": "/usr/share/AAVMF/AAVMF_CODE.fd"},
    }


@pytest.mark.parametrize(
    ("resources", "mem", "disk_size"),
    [
        ({"memory": "1536Mi"}, "1536M", None),
        ({"memory": "1G", "storage": "10G"}, "954M", "9765625K"),
        ({"memory": "512Mi", "storage": "1000"}, "512M", "1000"),
    ],
)
def test_qemu_driver_sizes_use_binary_suffixes(resources, mem, disk_size):
    config = qemu_driver_config({"resources": resources}, "/r")
    assert config["mem"] == mem
    assert config.get("disk_size") == disk_size
    assert config["arch"] == "x86_64"
    assert "cpu" not in config


def test_qemu_driver_config_without_disk_or_firmware_has_no_partitions():
    assert "default_partitions" not in qemu_driver_config({"resources": {"memory": "1Gi"}}, "/r")


def test_qemu_driver_config_names_real_driver_fields_and_sizes_it_parses():
    config = qemu_driver_config(QEMU_PARAMETERS, "/run/vt/pool-a-0")
    field_names = {field.name for field in dataclasses.fields(Qemu) if field.init}
    assert set(config) <= field_names
    driver = Qemu(**config)
    try:
        assert driver._parse_size(driver.mem) == 4 * 2**30
        assert driver._parse_size(driver.disk_size) == 16 * 2**30
        assert driver.validate_partition("bios", use_default_partitions=True).as_posix() == (
            "/usr/share/AAVMF/AAVMF_CODE.fd")
    finally:
        driver._tmp_dir.cleanup()
