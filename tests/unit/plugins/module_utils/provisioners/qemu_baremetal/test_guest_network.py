"""A lab-host guest has no NIC: the TcpNetwork entry JEP-0014's sa8295 set
lists without a host (``port: 22``, the host side of QEMU's forward in
upstream's reading) is left out of the exporter's config, which jumpstarter's
TcpNetwork could not load without a host, and the set names it under
FieldsIgnored; one that names a host is kept as written."""

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s.exporter_config import (
    render_exporter_config,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal.hosts import (
    driver_overrides,
)
from jumpstarter.config.exporter import ExporterConfigV1Alpha1
from pool_builders import NOW, exporter_set, target_class

TCP = "jumpstarter_driver_network.driver.TcpNetwork"
SEED = [{"type": "jumpstarter_driver_power.driver.QemuPower"}, {"type": TCP, "config": {"port": 22}},
        {"type": "jumpstarter_driver_serial.driver.QemuSerial"}]
LATER = [{"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu"},
         {"name": "tcp", "type": TCP, "config": {"port": 22}},
         {"name": "serial", "type": "jumpstarter_driver_serial.driver.QemuSerial"}]
LAB = {"hosts": [{"name": "bench-01", "arch": "aarch64", "slots": 2}],
       "runtime": {"binary": "/usr/bin/qemu-system-aarch64", "kvm": True}}


def export_of(drivers):
    config = render_exporter_config("x-0", "lab", drivers, endpoint="grpc.test:443", token="t",
                                    driver_overrides=driver_overrides(drivers, LAB, "/var/lib/jv/links/0"))
    ExporterConfigV1Alpha1.model_validate(config)
    return config["export"]


@pytest.mark.parametrize(("drivers", "names"), [(SEED, {"qemupower", "qemuserial", "qemu"}),
                                                 (LATER, {"qemu", "serial"})], ids=["seed", "later"])
def test_the_jeps_hostless_tcp_network_is_left_out_and_named(drivers, names):
    # The seed's power and serial get a VirtualQemu "qemu" to be children of.
    assert set(export_of(drivers)) == names
    the_set = exporter_set(min_available=1, max_replicas=1)
    the_set["spec"]["template"]["spec"]["drivers"] = drivers
    plan = scale_plan(the_set, target_class(parameters=LAB, provisioner="qemu-baremetal.jumpstarter.dev"), [], 0,
                      NOW)
    (ignored,) = [c for c in plan["status"]["conditions"] if c["type"] == "FieldsIgnored"]
    assert ignored["status"] == "True" and "spec.template.spec.drivers[1]: a TcpNetwork without config.host" in (
        ignored["message"])
    assert len(plan["create"]) == 1


def test_a_tcp_network_that_names_a_host_is_kept_and_not_named():
    drivers = [{"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu"},
               {"name": "bench", "type": TCP, "config": {"host": "10.0.0.7", "port": 22}}]
    assert export_of(drivers)["bench"] == {"type": TCP, "config": {"host": "10.0.0.7", "port": 22}}
    the_set = exporter_set(min_available=1, max_replicas=1)
    the_set["spec"]["template"]["spec"]["drivers"] = drivers
    plan = scale_plan(the_set, target_class(parameters=LAB, provisioner="qemu-baremetal.jumpstarter.dev"), [], 0,
                      NOW)
    (ignored,) = [c for c in plan["status"]["conditions"] if c["type"] == "FieldsIgnored"]
    assert ignored["status"] == "False"
