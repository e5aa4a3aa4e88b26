"""config/tenancy's admission policies say what the Python rules say: the
driver types each provisioner allows by default (``default_driver_types``,
which ``pool/set_overrides`` applies on every pass) and the digest the
image fetch takes (``provisioners/qemu/images.py``). On the bed's API server:
tests/hostile/test_admission_set_policy.py."""

import re
from pathlib import Path

import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants, provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import qemu

TENANCY = Path(__file__).resolve().parents[5] / "config/tenancy"


def _variables(name):
    policy = yaml.safe_load((TENANCY / name).read_text())
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def _cel_map_of_lists(text):
    """The CEL map literal {'key': ['a', 'b'], ...} as a dict (the policy's own)."""
    return {key: re.findall(r"'([^']*)'", values)
            for key, values in re.findall(r"'([^']+)':\s*\[([^\]]*)\]", text)}


def test_the_driver_type_policy_lists_every_provisioners_defaults():
    defaults = _cel_map_of_lists(_variables("set_policy.yaml")["defaults"])
    assert defaults == {name: list(provisioners.get(name).default_driver_types) for name in provisioners.names()}


def test_the_driver_type_policy_reads_the_annotation_the_operator_reads():
    expression = _variables("set_policy.yaml")["driverEntries"]
    assert f"'{constants.ANNOTATION_SET_OVERRIDABLE}'" in expression


def test_the_digest_policy_checks_every_image_the_qemu_schema_has():
    variables = _variables("image_digest_policy.yaml")
    checked = re.findall(r"'(\w+)'", variables["refused"].split("]", 1)[0])
    with_digest = sorted(name for name, field in qemu.QEMU_PROPERTIES.items() if "digest" in field.properties)
    assert sorted(checked) == with_digest
    assert "'^sha256:[0-9a-f]{64}$'" in variables["refused"]


def test_validation_refuses_the_digests_admission_refuses():
    """Where the policy is not installed (a playbook run), the provisioner's
    validation names the same field before any fetch."""
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
        validate_parameters,
    )
    real = "sha256:" + "ab" * 32
    for digest, refused in (("sha256:abc...", True), (real.upper().replace("SHA256", "sha256"), True),
                            (7, True), (real, False)):
        parameters = {"machineType": "q35", "firmware": {"url": "https://images.example/fw", "digest": digest}}
        errors = validate_parameters("qemu.jumpstarter.dev", parameters)["errors"]
        assert any(e.startswith("parameters.firmware.digest: ") for e in errors) == refused, (digest, errors)
