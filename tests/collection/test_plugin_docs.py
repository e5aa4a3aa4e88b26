"""Every module documents itself through ansible-doc, as users will read it."""

import json
import subprocess

import pytest
import yaml
from operator_process import ROOT

MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", MODULES)
def test_module_has_complete_documentation(module):
    result = subprocess.run(
        ["ansible-doc", "--json", f"jumpstarter.virtual_exporters.{module}"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)[f"jumpstarter.virtual_exporters.{module}"]
    assert doc["doc"]["short_description"]
    assert doc["doc"]["options"], "every module takes options"
    for name, option in doc["doc"]["options"].items():
        assert option.get("description"), f"option {name} has no description"
    assert doc["examples"].strip()
    assert doc["return"] is not None
    attributes = doc["doc"].get("attributes") or {}
    assert attributes.get("check_mode", {}).get("support") in ("full", "partial"), "check mode declared"


# The modules that talk to the Kubernetes API: the module_defaults group of meta/runtime.yml.
RUNTIME = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
KUBERNETES_MODULES = sorted(m for m in RUNTIME["action_groups"]["kubernetes"] if isinstance(m, str))


def _uses_k8s_client(module):
    return "module_utils.api.client import" in (ROOT / "plugins" / "modules" / f"{module}.py").read_text()


def test_every_module_that_talks_to_kubernetes_is_in_the_group():
    assert KUBERNETES_MODULES == [m for m in MODULES if _uses_k8s_client(m)]
    assert RUNTIME["action_groups"]["kubernetes"][0] == {"metadata": {"extend_group": ["kubernetes.core.k8s"]}}


@pytest.mark.parametrize("module", KUBERNETES_MODULES)
def test_module_takes_the_kubernetes_core_auth_options(module):
    """ansible-doc shows each of kubernetes.core's connection options with
    its aliases and environment variables, and the module's argument spec
    takes them all."""
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import client as k8s_client

    result = subprocess.run(["ansible-doc", "--json", f"jumpstarter.virtual_exporters.{module}"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    options = json.loads(result.stdout)[f"jumpstarter.virtual_exporters.{module}"]["doc"]["options"]
    for name, (spec, env) in k8s_client.AUTH_OPTIONS.items():
        assert name in options, f"{module} does not document {name}"
        assert options[name]["type"] == spec["type"]
        assert sorted(options[name].get("aliases") or []) == sorted(spec.get("aliases") or [])
        text = " ".join(options[name]["description"])
        assert all(variable in text for variable in env), (name, env)
    assert set(k8s_client.AUTH_OPTIONS) == {"host", "api_key", "validate_certs", "ca_cert", "client_cert",
                                            "client_key", "kubeconfig", "context"}
