"""The user documentation stays true to the code: the generated parameter
reference is current, operations.md names every metric, condition and
reason, and every relative link points at a file that exists."""

import re
import subprocess
import sys

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from exporterset_operator.metrics import Metrics
from operator_process import ROOT

DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_parameter_reference_is_generated_from_the_current_schemas():
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "parameters_doc.py"), "--check"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout[-4000:] + check.stderr


def _metric_names():
    names = set()
    for family in Metrics().registry.collect():
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    return sorted(names)


@pytest.mark.parametrize("name", _metric_names())
def test_operations_names_every_metric(name):
    assert f"`{name}`" in (DOCS / "operations.md").read_text()


@pytest.mark.parametrize("name", sorted(
    getattr(constants, attr) for attr in dir(constants)
    if attr.startswith(("REASON_", "CONDITION_", "DELETE_"))))
def test_operations_explains_every_condition_and_reason(name):
    assert f"`{name}`" in (DOCS / "operations.md").read_text()


@pytest.mark.parametrize("page", sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"],
                         ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = [target for target in LINK.findall(page.read_text())
              if "://" not in target and not (page.parent / target).exists()]
    assert broken == []
