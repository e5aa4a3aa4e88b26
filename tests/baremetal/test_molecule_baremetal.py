"""molecule/lab_bootstrap and molecule/qemu_baremetal against the test lab hosts
(and, for the provisioner, the test bed's API server)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
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
        return _molecule_test(scenario, tmp_path, env)
    with serve_namespace(os.environ["KUBECONFIG"], namespace):
        return _molecule_test(scenario, tmp_path, env)


def _molecule_test(scenario, tmp_path, extra_env, command=("test", "--destroy", "never")):
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


def test_lab_bootstrap_scenario(lab_hosts, tmp_path):
    # The lab_hosts fixture has bootstrapped the hosts with the scenario's
    # inputs: what they share (/opt, the packages) is in place, so the
    # scenario's runs may reach the three at once. Its converge is then a
    # second run, which must change nothing: what its idempotence step would
    # check with a third run (molecule test), checked on the converge itself.
    env = {"JVE_LAB_BOOTSTRAP_FORKS": "3"}
    output = _molecule_test("lab_bootstrap", tmp_path, env, command=("converge",))
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    recap = dict(re.findall(r"^(lab\d+)\s+:.*\bchanged=(\d+)", plain, re.MULTILINE))
    assert recap == dict.fromkeys(lab_hosts.hosts, "0"), output[-4000:]
    _molecule_test("lab_bootstrap", tmp_path, env, command=("verify",))


@pytest.fixture
def clean_namespace(testbed):
    from kubernetes import client

    with testbed.api_client() as api:
        yield
        try:
            client.CoreV1Api(api).delete_namespace("molecule-baremetal")
        except client.ApiException as exc:
            assert exc.status == 404


def test_qemu_baremetal_scenario(testbed, lab_hosts, clean_namespace, tmp_path):
    molecule_test("qemu_baremetal", tmp_path)
    # The scenario's cleanup removed every instance it made.
    for host in lab_hosts.hosts:
        assert not list((lab_hosts.work_dir(host) / "instances").glob("molecule-baremetal.*"))
