"""``molecule test`` for the scenarios that need only the test bed: prepare,
converge, idempotence, verify (objects in the API server) and cleanup.

The scenarios of the lab host and Corellium roles run from their own test
modules, which bring up the lab hosts and the Corellium fake they need.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
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
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "molecule"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "NO_COLOR": "1",
        "ANSIBLE_NOCOLOR": "1",
    }
    completed = subprocess.run(
        [str(BIN / "molecule"), "test", "--scenario-name", scenario, "--destroy", "never"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    output = completed.stdout + completed.stderr
    (tmp_path / "molecule.log").write_text(output)
    failure = max(output.find("fatal:"), output.find("CRITICAL Idempotence"), 0)
    assert completed.returncode == 0, output[failure:failure + 5000] or output[-5000:]
