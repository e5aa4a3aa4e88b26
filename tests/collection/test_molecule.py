"""``molecule test`` for the scenarios that need only the test bed: prepare,
converge, idempotence, verify (objects in the API server) and cleanup.

The scenarios of the lab host and Corellium roles run from their own test
modules, which bring up the lab hosts and the Corellium fake they need.
"""


import pytest
from molecule_runs import molecule_test
from operator_process import ROOT

SCENARIOS = ["operator_install", "qemu_pod", "reconcile"]


def test_every_bed_only_scenario_is_listed():
    bed_only = sorted(
        path.parent.name for path in (ROOT / "molecule").glob("*/molecule.yml")
        if "${KUBECONFIG}" in path.read_text()
    )
    assert bed_only == SCENARIOS


@pytest.mark.testbed
@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(testbed, scenario, tmp_path):
    molecule_test(scenario, tmp_path)


def test_every_scenario_runs_in_the_suite():
    """molecule test --all, spread over the modules that own the scenarios' prerequisites."""
    runners = [path.read_text() for path in (ROOT / "tests").glob("*/test_*.py")
               if "molecule" in path.read_text()]
    scenarios = sorted(path.parent.name for path in (ROOT / "molecule").glob("*/molecule.yml"))
    assert [name for name in scenarios if not any(f'"{name}"' in text for text in runners)] == []
