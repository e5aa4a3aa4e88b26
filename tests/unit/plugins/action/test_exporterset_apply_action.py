"""exporterset_apply's action: the outcome task of a run the operator
records for is answered on the controller, no module started (so no
cluster is needed); with the run recording, the module runs (and, with no
cluster to reach here, fails saying so)."""

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[4]


def test_the_outcome_of_a_run_the_operator_records_starts_no_module(tmp_path):
    the_set = {"metadata": {"name": "pool", "namespace": "ns", "uid": "u1"}}
    task = {"jumpstarter.virtual_exporters.exporterset_apply": {
        "exporterset": the_set, "plan": {}, "provisioner": "qemu.jumpstarter.dev", "outcome": "Successful",
        "kubeconfig": str(tmp_path / "none")}}
    playbook = tmp_path / "outcome.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"name": "operator", **{k: {**v, "records": "operator"} for k, v in task.items()}, "register": "skipped_run"},
        {"name": "run", **task, "register": "module_run", "ignore_errors": True},
        {"name": "results", "ansible.builtin.debug": {"msg": "{{ skipped_run.changed }} {{ module_run.failed }}"}},
    ]}]))
    result = subprocess.run(
        [f"{sys.prefix}/bin/ansible-playbook", "-i", "localhost,", str(playbook),
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert '"msg": "False True"' in result.stdout, result.stdout[-3000:]
    assert "kubeconfig" in result.stdout, result.stdout[-3000:]
