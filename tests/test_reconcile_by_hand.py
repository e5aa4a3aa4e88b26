"""The reconcile role run by hand, more than once in one play (an admin's or
an AWX job's playbook over several sets): each run observes and plans for
its own set, never for the one a previous run left in the host's facts."""

from __future__ import annotations

import subprocess
import sys

import yaml
from kubernetes import client
from operator_process import ROOT
from pool_helpers import SET_LABEL, make_class, make_set


def test_two_sets_in_one_play_each_get_their_own_plan(api, namespace, standin, tmp_path):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, name="alpha", board="alpha", minAvailableReplicas=1)
    make_set(custom, namespace, name="beta", board="beta", minAvailableReplicas=2)
    playbook = tmp_path / "two-sets.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{"name": f"Reconcile {name}", "ansible.builtin.include_role": {
            "name": "jumpstarter.virtual_exporters.reconcile"},
            "vars": {"exporterset_name": name, "exporterset_namespace": namespace}}
            for name in ("alpha", "beta", "alpha")],
    }]))
    result = subprocess.run(
        [f"{sys.prefix}/bin/ansible-playbook", "-i", "localhost,", str(playbook),
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    for name, count in (("alpha", 1), ("beta", 2)):
        names = sorted(e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}={name}"))
        assert names == [f"{name}-{i}" for i in range(count)], (name, names)
        assert all(e["metadata"]["labels"]["board"] == name for e in standin.exporters(f"{SET_LABEL}={name}"))
