"""``molecule`` scenarios run as a test runs them: the collection's root as
the working directory, this run's cache for the lab hosts' keys."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from jumpstarter_standin.pytest_plugin import serve_namespace
from labhosts import ROOT
from testbed.bed import CACHE_DIR

BIN = os.path.dirname(sys.executable)


def scenario_namespace(scenario):
    """The namespace a scenario works in (``molecule_namespace`` in its molecule.yml), if any."""
    text = (ROOT / "molecule" / scenario / "molecule.yml").read_text()
    found = re.search(r"^\s*molecule_namespace:\s*(\S+)\s*$", text, re.MULTILINE)
    return found.group(1) if found else None


def molecule_test(scenario, tmp_path, **env):
    """``molecule test`` of a scenario; one that works in a namespace of the
    bed gets the Jumpstarter controller serving it, as a cluster would."""
    namespace = scenario_namespace(scenario)
    if namespace is None:
        return molecule_command(scenario, tmp_path, env)
    with serve_namespace(os.environ["KUBECONFIG"], namespace):
        return molecule_command(scenario, tmp_path, env)


def molecule_command(scenario, tmp_path, extra_env, command=("test", "--destroy", "never")):
    molecule = shutil.which("molecule", path=BIN + os.pathsep + os.environ.get("PATH", ""))
    assert molecule, "molecule is not installed; scripts/bootstrap-python installs it"
    env = {
        **os.environ,
        "PATH": BIN + os.pathsep + os.environ.get("PATH", ""),
        "MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "molecule"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "NO_COLOR": "1",
        "ANSIBLE_NOCOLOR": "1",
        # The scenarios' lab_dir: the lab hosts' keys in this run's cache.
        "CACHE_DIR": str(CACHE_DIR),
        **extra_env,
    }
    completed = subprocess.run(
        [molecule, command[0], "--scenario-name", scenario, *command[1:]],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    output = completed.stdout + completed.stderr
    with open(tmp_path / "molecule.log", "a") as log:
        log.write(output)
    failure = max(output.find("[ERROR]"), output.find("FAILED!"), 0)
    assert completed.returncode == 0, output[max(failure - 3000, 0):failure + 4000]
    return output
