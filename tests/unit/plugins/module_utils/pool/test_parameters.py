import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
    describe_parameters,
    json_schema,
    validate_parameters,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import argv as qemu_argv
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    DEFAULT_MEMORY,
    guest_arch,
    guest_memory,
)

QEMU = "qemu.jumpstarter.dev"
BAREMETAL = "qemu-baremetal.jumpstarter.dev"
CORELLIUM = "corellium.jumpstarter.dev"
GOOD_QEMU = {"arch": "aarch64", "machineType": "virt", "resources": {"cpu": 4, "memory": "4Gi"}}
GOOD_BAREMETAL = {
    "resources": {"memory": "2Gi"},
    "hosts": [{"name": "bench-01.example.com", "slots": 2},
              {"name": "10.0.0.7", "address": "10.0.0.7", "port": 2222, "slots": 1}],
    "runtime": {"binary": "/usr/bin/qemu-system-aarch64", "kvm": False},
    "board": {"soc": "sa8295"},
    "reconnectTimeout": "30s",
}
GOOD_CORELLIUM = {
    "api": {"host": "app.corellium.com", "projectId": "778f00af-5e9b-40e6-8e7f-c4f14b632e9c"},
    "device": {"flavor": "kronos", "os": "1.1.1", "build": "Critical Application Monitor"},
}


@pytest.mark.parametrize(
    ("provisioner", "parameters"),
    [
        (QEMU, GOOD_QEMU),
        (QEMU, {"resources": {"memory": "64Mi", "cpu": "2", "storage": "10Gi"}, "kvm": True,
                "bootTimeout": "2m", "kernel": {"path": "/boot/vmlinuz"}, "cpuModel": "max"}),
        (BAREMETAL, GOOD_BAREMETAL),
        (CORELLIUM, GOOD_CORELLIUM),
        (CORELLIUM, {**GOOD_CORELLIUM, "api": {**GOOD_CORELLIUM["api"], "host": "h.example:8443"}}),
    ],
)
def test_valid_parameters(provisioner, parameters):
    assert validate_parameters(provisioner, parameters) == {"errors": [], "warnings": []}


@pytest.mark.parametrize(
    ("provisioner", "parameters", "error"),
    [
        (QEMU, {"resources": {"memory": "8Gx"}},
         'parameters.resources.memory: "8Gx" is not a quantity'),
        (QEMU, {"resources": {"memory": "32Mi"}},
         'parameters.resources.memory: "32Mi" is below the minimum 64Mi'),
        (QEMU, {"resources": "4Gi"}, "parameters.resources: '4Gi' is not an object"),
        (QEMU, {"resources": {"memory": "1Gi", "cpu": 0}},
         "parameters.resources.cpu: 0 must be a whole number of CPUs >= 1"),
        (QEMU, {"resources": {"memory": "1Gi", "cpu": "500m"}},
         'parameters.resources.cpu: "500m" must be a whole number of CPUs >= 1'),
        (QEMU, {"arch": "riscv64", "resources": {"memory": "1Gi"}},
         "parameters.arch: 'riscv64' is not one of x86_64, aarch64, arm"),
        (QEMU, {"arch": "x86_64", "machineType": "virt"},
         "parameters.machineType: 'virt' does not fit arch x86_64 (use q35, pc)"),
        (QEMU, {"arch": "aarch64", "machineType": "q35", "resources": {"memory": "1Gi"}},
         "parameters.machineType: 'q35' does not fit arch aarch64 (use virt)"),
        (QEMU, {"kvm": "yes", "resources": {"memory": "1Gi"}},
         "parameters.kvm: 'yes' is not a boolean"),
        (QEMU, {"bootTimeout": "soon", "resources": {"memory": "1Gi"}},
         'parameters.bootTimeout: "soon" is not a duration (e.g. 30s, 5m, 1h)'),
        (QEMU, {"disk": {}, "resources": {"memory": "1Gi"}},
         "parameters.disk: needs url or path"),
        (QEMU, {"kernel": {"path": "vmlinuz"}, "resources": {"memory": "1Gi"}},
         'parameters.kernel.path: "vmlinuz" is not an absolute path'),
        (QEMU, {"firmware": "blob", "resources": {"memory": "1Gi"}},
         "parameters.firmware: 'blob' is not an object"),
        (BAREMETAL, {"resources": {"memory": "1Gi"}}, "parameters.hosts: required"),
        (BAREMETAL, {**GOOD_BAREMETAL, "hosts": []}, "parameters.hosts: must not be empty"),
        (BAREMETAL, {**GOOD_BAREMETAL, "hosts": [{"name": "a", "slots": 1},
                                                 {"name": "a", "slots": 1}]},
         "parameters.hosts[1].name: duplicate host 'a'"),
        (BAREMETAL, {**GOOD_BAREMETAL, "hosts": [{"name": "a"}]},
         "parameters.hosts[0].slots: required"),
        (BAREMETAL, {**GOOD_BAREMETAL, "hosts": [{"name": "a", "slots": 0}]},
         "parameters.hosts[0].slots: 0 is below the minimum 1"),
        (BAREMETAL, {**GOOD_BAREMETAL, "hosts": [{"name": "a", "slots": 1, "port": 0}]},
         "parameters.hosts[0].port: 0 is below the minimum 1"),
        (BAREMETAL, {**GOOD_BAREMETAL, "hosts": [{"name": "bad_name!", "slots": 1}]},
         'parameters.hosts[0].name: "bad_name!" is not a DNS name or IP address'),
        (BAREMETAL, {**GOOD_BAREMETAL, "reconnectTimeout": "500ms"},
         'parameters.reconnectTimeout: "500ms" is below the minimum 1s'),
        (BAREMETAL, {**GOOD_BAREMETAL, "reconnectTimeout": "2h"},
         'parameters.reconnectTimeout: "2h" is above the maximum 3600s'),
        (BAREMETAL, {**GOOD_BAREMETAL, "workDir": "relative"},
         'parameters.workDir: "relative" is not an absolute path'),
        (BAREMETAL, {**GOOD_BAREMETAL, "runtime": {"binary": "qemu"}},
         'parameters.runtime.binary: "qemu" is not an absolute path'),
        (CORELLIUM, {"device": GOOD_CORELLIUM["device"]}, "parameters.api: required"),
        (CORELLIUM, {**GOOD_CORELLIUM, "api": {"host": "h", "projectId": "nope"}},
         'parameters.api.projectId: "nope" is not a UUID'),
        (CORELLIUM, {**GOOD_CORELLIUM, "api": {**GOOD_CORELLIUM["api"], "host": "h:99999"}},
         'parameters.api.host: "h:99999" has an invalid port'),
        (CORELLIUM, {**GOOD_CORELLIUM, "device": {"flavor": "kronos"}},
         "parameters.device.os: required"),
        ("nope.example.com", {}, 'spec.provisioner: unknown provisioner "nope.example.com"; known: '
         "corellium.jumpstarter.dev, qemu-baremetal.jumpstarter.dev, qemu.jumpstarter.dev"),
    ],
)
def test_one_error_names_its_path(provisioner, parameters, error):
    assert validate_parameters(provisioner, parameters)["errors"] == [error]


def test_all_errors_are_listed_at_once():
    result = validate_parameters(QEMU, {"arch": "x86_64", "machineType": "virt",
                                        "resources": {"memory": "8Gx", "cpu": -1}})
    assert len(result["errors"]) == 3
    assert {e.split(":")[0] for e in result["errors"]} == {
        "parameters.machineType", "parameters.resources.memory", "parameters.resources.cpu"}


def test_unknown_keys_are_warnings():
    result = validate_parameters(QEMU, {**GOOD_QEMU, "colour": "blue",
                                        "resources": {**GOOD_QEMU["resources"], "gpu": 1}})
    assert result["errors"] == []
    assert sorted(result["warnings"]) == ["parameters.colour: unknown key, ignored",
                                  "parameters.resources.gpu: unknown key, ignored"]


def test_board_is_free_form():
    parameters = {**GOOD_BAREMETAL, "board": {"anything": {"nested": [1, 2]}}}
    assert validate_parameters(BAREMETAL, parameters)["warnings"] == []


@pytest.mark.parametrize("provisioner", provisioners.names())
def test_describe_parameters_rows(provisioner):
    rows = describe_parameters(provisioner)
    assert rows and len({row["path"] for row in rows}) == len(rows)
    for row in rows:
        assert set(row) == {"path", "type", "required", "default", "description", "enum"}
        assert row["description"]


def test_describe_parameters_covers_nested_lists():
    rows = {row["path"]: row for row in describe_parameters(BAREMETAL)}
    assert rows["hosts[].slots"]["required"] is True
    assert rows["hosts[].port"]["default"] == 22
    assert rows["reconnectTimeout"]["default"] == "5m"
    assert rows["resources.memory"]["type"] == "quantity"


def test_describe_unknown_provisioner():
    with pytest.raises(KeyError):
        describe_parameters("nope")


@pytest.mark.parametrize(
    ("parameters", "arch"),
    [
        ({}, "x86_64"),
        ({"machineType": "virt"}, "aarch64"),
        ({"machineType": "q35"}, "x86_64"),
        ({"machineType": "pc"}, "x86_64"),
        ({"arch": "aarch64"}, "aarch64"),
        ({"arch": "x86_64", "machineType": "virt"}, "x86_64"),  # given wins; validation objects
        ({"hosts": [{"name": "a", "arch": "aarch64"}, {"name": "b", "arch": "aarch64"}]}, "aarch64"),
        ({"hosts": [{"name": "a", "arch": "aarch64"}, {"name": "b", "arch": "x86_64"}]}, "x86_64"),
        ({"machineType": "q35", "hosts": [{"name": "a", "arch": "aarch64"}]}, "x86_64"),
    ],
)
def test_guest_arch_is_given_or_inferred(parameters, arch):
    assert guest_arch(parameters) == arch
    assert qemu_argv.arch_of(parameters) == arch


def test_machine_type_alone_fits_the_arch_it_implies():
    for machine in ("virt", "q35", "pc"):
        assert validate_parameters(QEMU, {"machineType": machine})["errors"] == []


def test_resources_default_when_absent():
    for provisioner, parameters in ((QEMU, {}), (BAREMETAL, {"hosts": [{"name": "a", "slots": 1}]})):
        assert validate_parameters(provisioner, parameters) == {"errors": [], "warnings": []}
    assert guest_memory({}) == DEFAULT_MEMORY == "1Gi"
    assert qemu_argv.memory_mib({}) == 1024
    assert qemu_argv.memory_mib({"resources": {"cpu": 2}}) == 1024
    assert qemu_argv.memory_mib({"resources": {"memory": "2Gi"}}) == 2048
    argv = qemu_argv.qemu_argv({"machineType": "virt"}, run_dir="/run/x", name="x")
    assert argv[0] == "qemu-system-aarch64"
    assert argv[argv.index("-m") + 1].startswith("1024")


@pytest.mark.parametrize("provisioner", provisioners.names())
def test_each_schema_is_json_schema(provisioner):
    import jsonschema

    schema = json_schema(provisioners.get(provisioner).schema)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object" and schema["properties"]


def test_the_json_schema_carries_bounds_formats_and_our_keywords():
    schema = json_schema(provisioners.get(BAREMETAL).schema)
    host = schema["properties"]["hosts"]["items"]
    assert host["required"] == ["name", "slots"]
    assert host["properties"]["port"] == {"description": "SSH port.", "type": "integer",
                                          "minimum": 1, "maximum": 65535}
    assert host["properties"]["name"]["format"] == "hostname"
    assert schema["properties"]["hosts"]["minItems"] == 1
    assert schema["properties"]["reconnectTimeout"]["x-duration"] == {"minimum": 1.0, "maximum": 3600.0}
    assert schema["properties"]["resources"]["properties"]["memory"]["x-quantity"] is True


@pytest.mark.parametrize(("parameters", "errors"), [
    # A whole float is not an integer; a bool is neither.
    ({**GOOD_BAREMETAL, "hosts": [{"name": "a", "slots": 1.0}]},
     ["parameters.hosts[0].slots: 1.0 is not an integer"]),
    ({**GOOD_BAREMETAL, "hosts": [{"name": "a", "slots": True}]},
     ["parameters.hosts[0].slots: True is not an integer"]),
    # A value of the wrong type gets that one error, not its enum's too.
    ({**GOOD_BAREMETAL, "arch": 5}, ["parameters.arch: 5 is not a string"]),
    # null is an absent field: a default applies, a required one is missing.
    ({**GOOD_BAREMETAL, "arch": None, "kvm": None}, []),
    ({**GOOD_BAREMETAL, "hosts": [{"name": "a", "slots": None}]}, ["parameters.hosts[0].slots: required"]),
    ({**GOOD_BAREMETAL, "hosts": [None]}, ["parameters.hosts[0]: None is not an object"]),
])
def test_json_schema_errors_read_as_the_field_at_fault(parameters, errors):
    assert validate_parameters(BAREMETAL, parameters)["errors"] == errors


@pytest.mark.parametrize("provisioner", [QEMU, BAREMETAL])
def test_the_paths_qemu_reads_are_in_the_schema(provisioner):
    """firmware.path and disk.format reach QEMU (provisioners/qemu/argv.py): they are
    checked like any field, not warned about as unknown and ignored."""
    base = {} if provisioner == QEMU else GOOD_BAREMETAL
    fine = validate_parameters(provisioner, {**base, "firmware": {"path": "/usr/share/OVMF.fd"},
                                             "disk": {"path": "/srv/d.img", "format": "raw"}})
    assert fine == {"errors": [], "warnings": []}
    bad = validate_parameters(provisioner, {**base, "firmware": {"path": "OVMF.fd"},
                                            "disk": {"path": "/srv/d.img", "format": "vmdk"}})
    assert bad["errors"] == ['parameters.firmware.path: "OVMF.fd" is not an absolute path',
                             "parameters.disk.format: 'vmdk' is not one of qcow2, raw"]
    assert qemu_argv.qemu_argv({"firmware": {"path": "/usr/share/OVMF.fd"}}, run_dir="/run/i",
                               name="i")[-2:] == ["-bios", "/usr/share/OVMF.fd"]


def test_class_only_fields_say_so_in_the_reference():
    rows = {row["path"]: row["description"] for row in describe_parameters(BAREMETAL)}
    for path in ("disk.path", "kernel.path", "initrd.path", "firmware.path", "disk.format",
                 "runtime.binary", "workDir"):
        assert "Set by the class only" in rows[path], path


@pytest.mark.parametrize(("provisioner", "field", "at_bound", "over"), [
    (QEMU, "kernelArgs", "a" * 4096, "a" * 4097),
    (BAREMETAL, "hosts", [{"name": f"h{i}.example.com"} for i in range(256)],
     [{"name": f"h{i}.example.com"} for i in range(257)]),
    (BAREMETAL, "board", {f"k{i}": "v" for i in range(256)}, {f"k{i}": "v" for i in range(257)}),
])
def test_every_string_list_and_object_of_the_parameters_is_bounded(provisioner, field, at_bound, over):
    """A set's parameters are free-form in the CRD; their schema bounds them,
    naming the field, and an object over its bound earns no warning per key."""
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import parameters as engine

    assert (engine.MAX_STRING, engine.MAX_ITEMS, engine.MAX_KEYS) == (4096, 256, 256)
    base = dict(GOOD_BAREMETAL) if provisioner == BAREMETAL else {}
    assert not [e for e in validate_parameters(provisioner, {**base, field: at_bound})["errors"]
                if e.startswith(f"parameters.{field}:")]
    result = validate_parameters(provisioner, {**base, field: over})
    unit = {str: "characters", list: "items", dict: "keys"}[type(over)]
    assert f"parameters.{field}: more than {len(at_bound)} {unit}" in result["errors"]
    assert len(result["warnings"]) < 10
