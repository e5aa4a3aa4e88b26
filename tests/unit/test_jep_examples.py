"""Every VirtualTargetClass and ExporterSet example of JEP-0014 is valid as
written: the class's parameters, and each set's parameters merged over the
class it names, pass the provisioner's validation with no error. (The API
server's side, a server-side dry-run of each example, is in
tests/test_crds.py.)"""

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
    PROVISIONER_SCHEMAS,
    guest_arch,
    validate_parameters,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.set_overrides import (
    resolve,
)
from jep_examples import class_for, jep_examples, require_jep

EXAMPLES = jep_examples()
CLASSES = [e for e in EXAMPLES if e["kind"] == "VirtualTargetClass"]
SETS = [e for e in EXAMPLES if e["kind"] == "ExporterSet"]


def test_the_jep_gives_examples_of_every_provisioner():
    require_jep()
    assert {c["spec"]["provisioner"] for c in CLASSES} == set(PROVISIONER_SCHEMAS)
    assert len(SETS) >= 4


@pytest.mark.parametrize("vclass", CLASSES, ids=[c["_example"] for c in CLASSES])
def test_class_example_parameters_are_valid(vclass):
    spec = vclass["spec"]
    assert validate_parameters(spec["provisioner"], spec.get("parameters"))["errors"] == []


@pytest.mark.parametrize("exporter_set", SETS, ids=[s["_example"] for s in SETS])
def test_set_example_parameters_over_their_class_are_valid(exporter_set):
    vclass = class_for(EXAMPLES, exporter_set)
    if vclass is None:
        # The JEP names a class it does not show (android-pixel7): only the set's
        # own shape can be checked, by the API server (tests/test_crds.py).
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
