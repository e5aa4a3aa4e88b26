"""molecule/lab_bootstrap and molecule/qemu_baremetal against the test lab hosts
(and, for the provisioner, the test bed's API server)."""

from __future__ import annotations

import re

import pytest
from molecule_runs import molecule_command, molecule_test


def test_lab_bootstrap_scenario(lab_hosts, tmp_path):
    # The lab_hosts fixture has bootstrapped the hosts with the scenario's
    # inputs: what they share (/opt, the packages) is in place, so the
    # scenario's runs may reach the three at once. Its converge is then a
    # second run, which must change nothing: what its idempotence step would
    # check with a third run (molecule test), checked on the converge itself.
    env = {"JVE_LAB_BOOTSTRAP_FORKS": "3"}
    output = molecule_command("lab_bootstrap", tmp_path, env, command=("converge",))
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    recap = dict(re.findall(r"^(lab\d+)\s+:.*\bchanged=(\d+)", plain, re.MULTILINE))
    assert recap == dict.fromkeys(lab_hosts.hosts, "0"), output[-4000:]
    molecule_command("lab_bootstrap", tmp_path, env, command=("verify",))


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
