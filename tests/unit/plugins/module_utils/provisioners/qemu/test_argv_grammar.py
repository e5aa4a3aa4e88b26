"""The grammar of what reaches QEMU's command line (qemu/argv.py
``value_problems``): the argv builder refuses a value outside it, naming the
field, and validating the merged parameters refuses the same values, so a
set never gets as far as a backend with one. The properties run over
generated strings, separators and control characters included."""

import string

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
    validate_parameters,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    qemu_argv,
    value_problems,
)
from hypothesis import given, settings
from hypothesis import strategies as st

RUN_DIR = "/run/vt/pool-a-0"
MINIMAL = {"arch": "x86_64", "resources": {"cpu": 1, "memory": "1Gi"}}
TOKEN = string.ascii_letters + string.digits + "._-"
# Machine types and CPU models of QEMU's own lists (qemu-system-* -machine help, -cpu help).
MACHINE_TYPES = ["q35", "pc", "virt", "pc-q35-8.2", "pc-i440fx-9.0", "virt-9.2", "microvm"]
CPU_MODELS = ["max", "host", "qemu64", "kvm64", "486", "Skylake-Client-v4", "EPYC-Rome",
              "Haswell-noTSX-IBRS", "Icelake-Server-noTSX", "cortex-a57", "neoverse-n1", "a64fx"]

# Any text, weighted towards what QEMU's option parser and a shell read specially.
hostile_text = st.text(alphabet=st.sampled_from(TOKEN + ",=+: /?\\\"'\n\t\x00\x7f\u00e9"), max_size=80) | st.text()
# One name of the grammar, as QEMU spells its machine types and CPU models.
token = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z").filter(lambda v: v != "help")


def argv_or_error(parameters, name="x", run_dir=RUN_DIR):
    try:
        return qemu_argv(parameters, run_dir=run_dir, name=name), None
    except ValueError as error:
        return None, str(error)


def flag_value(argv, flag):
    return argv[argv.index(flag) + 1]


def errors(parameters):
    return validate_parameters(c.PROVISIONER_QEMU, parameters)["errors"]


@settings(max_examples=300, deadline=None)
@given(hostile_text)
def test_a_cpu_model_reaches_cpu_whole_or_is_refused_naming_it(value):
    argv, error = argv_or_error({**MINIMAL, "cpuModel": value})
    separator = any(char in value for char in ",= ") or value == "help"
    if argv is None:
        assert error.startswith("parameters.cpuModel: ")
        assert any(e.startswith("parameters.cpuModel: ") for e in errors({**MINIMAL, "cpuModel": value}))
    elif value:
        assert not separator
        assert flag_value(argv, "-cpu") == value
        assert errors({**MINIMAL, "cpuModel": value}) == []
    if separator:
        assert argv is None


@settings(max_examples=300, deadline=None)
@given(hostile_text)
def test_a_machine_type_with_an_option_in_it_never_reaches_machine(value):
    parameters = {**MINIMAL, "machineType": value}
    argv, error = argv_or_error(parameters)
    if argv is not None:
        # Exactly the machine type, then the accelerator the builder chose.
        assert flag_value(argv, "-machine") == f"{value or 'q35'},accel=tcg"
        assert not any(char in value for char in ",=")
    else:
        assert error.startswith("parameters.machineType: ")
    if value:
        # Validation names the field for anything but the machine types it offers.
        named = any(e.startswith("parameters.machineType: ") for e in errors(parameters))
        assert named == (value not in ("q35", "pc"))


@settings(deadline=None)
@given(token)
def test_every_name_of_the_grammar_is_accepted_as_machine_type_and_cpu_model(value):
    argv, error = argv_or_error({**MINIMAL, "machineType": value, "cpuModel": value})
    assert error is None
    assert flag_value(argv, "-machine") == f"{value},accel=tcg"
    assert flag_value(argv, "-cpu") == value
    assert not any(e.startswith("parameters.cpuModel") for e in errors({**MINIMAL, "cpuModel": value}))


@pytest.mark.parametrize("machine", MACHINE_TYPES)
@pytest.mark.parametrize("cpu", CPU_MODELS)
def test_qemus_own_names_are_accepted(machine, cpu):
    argv, error = argv_or_error({**MINIMAL, "machineType": machine, "cpuModel": cpu})
    assert error is None and flag_value(argv, "-cpu") == cpu


@pytest.mark.parametrize(("field", "value"), [
    ("machineType", "q35,initrd=/var/lib/jumpstarter-virtual/instances/other.pool-0/exporter.yaml"),
    ("machineType", "initrd=/etc/shadow"),
    ("machineType", "help"),
    ("cpuModel", "max,+vmx"),
    ("cpuModel", "host,migratable=off"),
    ("cpuModel", "-smp"),
])
def test_the_issues_values_are_refused_by_validation_and_by_the_builder(field, value):
    parameters = {**MINIMAL, field: value}
    argv, error = argv_or_error(parameters)
    assert argv is None and error.startswith(f"parameters.{field}: ")
    found = [e for e in errors(parameters) if e.startswith(f"parameters.{field}: ")]
    # Once: the schema's enum or the grammar, not both.
    assert len(found) == 1, errors(parameters)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["firmware", "kernel", "initrd"]), hostile_text)
def test_a_file_given_whole_is_an_absolute_printable_path_without_a_comma(key, value):
    if not value:
        return  # no path: the image is fetched by url (its own test)
    # -initrd is given only beside -kernel.
    parameters = {**MINIMAL, "kernel": {"path": "/k"}, key: {"path": value}}
    argv, error = argv_or_error(parameters)
    fine = (value.startswith("/") and "," not in value
            and all(" " <= char and char != "\x7f" for char in value))
    if fine:
        assert flag_value(argv, {"firmware": "-bios", "kernel": "-kernel", "initrd": "-initrd"}[key]) == value
    else:
        assert argv is None and error.startswith(f"parameters.{key}.path: ")
        assert any(e.startswith(f"parameters.{key}.path: ") for e in errors(parameters))


@settings(deadline=None)
@given(hostile_text)
def test_the_kernel_command_line_is_printable_ascii(value):
    parameters = {**MINIMAL, "kernel": {"path": "/k"}, "kernelArgs": value}
    argv, error = argv_or_error(parameters)
    if all(" " <= char <= "~" for char in value):
        assert flag_value(argv, "-append") == (value or "console=ttyS0")
    else:
        assert error.startswith("parameters.kernelArgs: ")
        assert any(e.startswith("parameters.kernelArgs: ") for e in errors(parameters))


@settings(deadline=None)
@given(hostile_text)
def test_the_instance_name_is_one_token(value):
    argv, error = argv_or_error(MINIMAL, name=value)
    if argv is not None:
        assert flag_value(argv, "-name") == value
        assert value and not any(char in value for char in ",= ")
    else:
        assert error.startswith("name: ")


def test_a_run_dir_with_a_comma_is_escaped_in_options_but_refused_for_a_fetched_kernel():
    escaped = {**MINIMAL}
    assert argv_or_error(escaped, run_dir="/run/a,b")[1] is None
    fetched = {**MINIMAL, "kernel": {"url": "https://example.com/k", "digest": "sha256:" + "0" * 64}}
    argv, error = argv_or_error(fetched, run_dir="/run/a,b")
    assert argv is None and error.startswith("run_dir: ")
    assert argv_or_error(fetched, run_dir="/run/ab")[1] is None


def test_values_of_the_wrong_type_are_refused_once():
    parameters = {**MINIMAL, "cpuModel": ["max"], "disk": "a-string"}
    assert value_problems(parameters) == [("parameters.cpuModel", "['max'] is not a string")]
    assert [e for e in errors(parameters) if e.startswith("parameters.cpuModel")] == [
        "parameters.cpuModel: ['max'] is not a string"]
