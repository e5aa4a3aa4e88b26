"""Every module documents itself through ansible-doc, as users will read it."""

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
