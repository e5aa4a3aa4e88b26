"""Every VirtualTargetClass and ExporterSet example of JEP-0014 is valid as
written: the class's parameters, and each set's parameters merged over the
class it names, pass the provisioner's validation with no error. (The API
server's side, a server-side dry-run of each example, is in
tests/controller/test_crds.py.)"""

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s.exporter_config import (
    render_exporter_config,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
    validate_parameters,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.set_overrides import (
    resolve,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    named_drivers,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    VIRTUAL_QEMU_DRIVER_TYPE,
    qemu_driver_overrides,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    guest_arch,
)
from jep_examples import (
    API_VERSION,
    SEED_API_VERSION,
    class_for,
    flatten,
    jep_examples,
    require_jep,
    seed_blocks,
    seed_copies,
    seed_examples,
    with_our_api_version,
    with_real_digests,
)

EXAMPLES = jep_examples()
CLASSES = [e for e in EXAMPLES if e["kind"] == "VirtualTargetClass"]
SETS = [e for e in EXAMPLES if e["kind"] == "ExporterSet"]


def test_the_jep_gives_examples_of_every_provisioner():
    require_jep()
    assert {c["spec"]["provisioner"] for c in CLASSES} == set(provisioners.names())
    assert len(SETS) >= 4


@pytest.mark.parametrize("vclass", CLASSES, ids=[c["_example"] for c in CLASSES])
def test_class_example_parameters_are_valid(vclass):
    """Valid once its placeholder digest is a real one; as written, the
    placeholder is refused by name (an image it names could never be fetched)."""
    spec = with_real_digests(vclass)["spec"]
    assert validate_parameters(spec["provisioner"], spec.get("parameters"))["errors"] == []
    placeholder = (vclass["spec"].get("parameters") or {}).get("firmware", {}).get("digest")
    if placeholder is not None:
        errors = validate_parameters(spec["provisioner"], vclass["spec"]["parameters"])["errors"]
        assert errors == [f"parameters.firmware.digest: {placeholder!r} is not sha256:<64 lowercase hex digits> "
                          "(a placeholder fetches nothing; give the image's real digest)"]


@pytest.mark.parametrize("exporter_set", SETS, ids=[s["_example"] for s in SETS])
def test_set_example_parameters_over_their_class_are_valid(exporter_set):
    vclass = class_for(EXAMPLES, exporter_set)
    vclass = vclass and with_real_digests(vclass)
    if vclass is None:
        # The JEP names a class it does not show (android-pixel7): only the set's
        # own shape can be checked, by the API server (tests/controller/test_crds.py).
        assert exporter_set["spec"]["virtualTargetClassName"] == "android-pixel7"
        return
    resolved = resolve(vclass, exporter_set)
    assert resolved["violations"] == []
    result = validate_parameters(vclass["spec"]["provisioner"], resolved["parameters"])
    assert result["errors"] == []


def test_the_arm_examples_run_aarch64_guests():
    """The JEP's rpi4 classes say machineType: virt and its SA8295 hosts say
    arch: aarch64, without parameters.arch."""
    for vclass in CLASSES:
        parameters = vclass["spec"].get("parameters") or {}
        if vclass["spec"]["provisioner"] != "corellium.jumpstarter.dev":
            assert "arch" not in parameters
            assert guest_arch(parameters) == "aarch64", vclass["_example"]


# The seed revision (shared/spec/seed-000-...), read through the copies in
# tests/data/jep-0014-seed (tests/jep_examples.py).
SEED = seed_examples()
SEED_CLASSES = {e["metadata"]["name"]: e for e in SEED if e["kind"] == "VirtualTargetClass"}
SEED_SETS = [e for e in SEED if e["kind"] == "ExporterSet"]
QEMU_POWER = "jumpstarter_driver_power.driver.QemuPower"
QEMU_SERIAL = "jumpstarter_driver_serial.driver.QemuSerial"


def test_every_seed_example_is_copied_as_the_jep_writes_it():
    """Where the seed JEP is beside the checkout, each of its YAML blocks that
    holds a class or set has its copy, equal once flattened, and there is no
    other copy; without it the copies are what there is, and they are read."""
    copies = seed_copies()
    blocks = seed_blocks()
    if blocks is not None:
        assert sorted(copies) == sorted(blocks)
        for index, block in blocks.items():
            assert flatten(copies[index]) == block, f"copy of block {index} differs from the JEP"
    assert len(SEED_CLASSES) == 3 and len(SEED_SETS) == 4
    assert {e["apiVersion"] for e in SEED} == {SEED_API_VERSION}


def test_the_only_change_is_the_api_version():
    for example in SEED:
        ours = with_our_api_version(example)
        assert ours["apiVersion"] == API_VERSION
        assert {k: v for k, v in ours.items() if k != "apiVersion"} == {
            k: v for k, v in example.items() if k not in ("apiVersion", "_example")}


@pytest.mark.parametrize("vclass", list(SEED_CLASSES.values()), ids=list(SEED_CLASSES))
def test_seed_class_parameters_are_valid(vclass):
    spec = with_real_digests(vclass)["spec"]
    assert validate_parameters(spec["provisioner"], spec.get("parameters"))["errors"] == []


ALL_SETS = [s for s in SEED_SETS + SETS if s["spec"]["virtualTargetClassName"] != "android-pixel7"]


@pytest.mark.parametrize("exporter_set", ALL_SETS, ids=[s["_example"] for s in ALL_SETS])
def test_every_jep_set_resolves_its_driver_types_to_the_virtual_qemu_driver(exporter_set):
    """Both revisions' driver types as written: QemuPower and QemuSerial
    become refs to the power and console of the instance's virtual QEMU
    driver (one is added where the template lists none), TcpNetwork is
    pointed at the forward to the guest; no entry is refused and no entry
    of a type no package has reaches the exporter."""
    classes = SEED_CLASSES if exporter_set in SEED_SETS else {
        c["metadata"]["name"]: c for c in CLASSES}
    vclass = with_real_digests(classes[exporter_set["spec"]["virtualTargetClassName"]])
    resolved = resolve(vclass, exporter_set)
    assert resolved["violations"] == [] and resolved["errors"] == []
    # On lab hosts the guest has no NIC: the TcpNetwork entry is named (tests/unit/.../test_guest_network.py).
    lab = vclass["spec"]["provisioner"] == "qemu-baremetal.jumpstarter.dev"
    assert [w.split(":", 1)[0] for w in resolved["warnings"]] == (["spec.template.spec.drivers[1]"] if lab else [])
    assert validate_parameters(vclass["spec"]["provisioner"], resolved["parameters"])["errors"] == []
    drivers = exporter_set["spec"]["template"]["spec"]["drivers"]
    overrides = qemu_driver_overrides(drivers, "/run/jve")
    export = render_exporter_config("x", "ns", drivers, endpoint="e", token="t", driver_overrides=overrides)["export"]
    (qemu,) = [name for name, entry in export.items() if entry.get("type") == VIRTUAL_QEMU_DRIVER_TYPE]
    by_type = dict(zip((d["type"] for d in drivers), named_drivers(drivers), strict=True))
    for kind, child in ((QEMU_POWER, "power"), (QEMU_SERIAL, "console")):
        if kind in by_type:
            assert export[by_type[kind]["name"]] == {"ref": f"{qemu}.{child}"}
    assert {entry.get("type") for entry in export.values()} <= {
        None, VIRTUAL_QEMU_DRIVER_TYPE, "jumpstarter_driver_network.driver.TcpNetwork"}


def test_a_class_that_names_its_types_is_named_as_their_source():
    vclass = {"metadata": {"name": "c", "annotations": {
        "virtualtarget.jumpstarter.dev/set-overridable": "drivers=jumpstarter_driver_qemu.driver.Qemu"}},
        "spec": {"provisioner": "qemu.jumpstarter.dev", "parameters": {}}}
    the_set = {"metadata": {"name": "s"}, "spec": {"template": {"spec": {"drivers": [{"type": QEMU_POWER}]}}}}
    violation, = resolve(vclass, the_set)["violations"]
    assert "supported types: jumpstarter_driver_qemu.driver.Qemu (named by the class's annotation)" in violation
