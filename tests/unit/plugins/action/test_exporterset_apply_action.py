"""exporterset_apply's action: the outcome and records options went with
the reconcile role's outcome task (exporterset_pass records the outcome),
so a task that still passes them is refused naming them, whoever records;
no result is made up for it on the controller."""

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[4]


def test_the_retired_outcome_options_are_refused_whoever_records(tmp_path):
    the_set = {"metadata": {"name": "pool", "namespace": "ns", "uid": "u1"}}
    task = {"jumpstarter.virtual_exporters.exporterset_apply": {
        "exporterset": the_set, "plan": {}, "provisioner": "qemu.jumpstarter.dev", "outcome": "Successful",
        "kubeconfig": str(tmp_path / "none")}}
    playbook = tmp_path / "outcome.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"name": "operator", **{k: {**v, "records": "operator"} for k, v in task.items()}, "register": "operator_run",
         "ignore_errors": True},
        {"name": "run", **task, "register": "module_run", "ignore_errors": True},
        {"name": "results", "ansible.builtin.debug": {
            "msg": "{{ operator_run.failed }} {{ module_run.failed }} {{ operator_run.msg }}"}},
    ]}]))
    result = subprocess.run(
        [f"{sys.prefix}/bin/ansible-playbook", "-i", "localhost,", str(playbook),
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert '"msg": "True True Unsupported parameters' in result.stdout, result.stdout[-3000:]
    assert "outcome, records" in result.stdout, result.stdout[-3000:]
