"""The filter plugins as playbooks use them: a real ansible-playbook run, and
the documentation ansible-doc shows for each filter."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from operator_process import ROOT

BIN = Path(sys.executable).parent
FILTERS = sorted(p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml"))


def _ansible_env(**extra):
    env = dict(os.environ)
    assert env.get("ANSIBLE_COLLECTIONS_PATH"), "run through scripts/test or link_collection"
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false", **extra)
    return env


def test_every_filter_has_a_docs_file():
    assert FILTERS == ["deep_merge", "lease_demand", "pool_status", "scale_plan",
                       "validate_parameters"]


def test_filters_in_a_real_playbook():
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         str(ROOT / "tests" / "playbooks" / "filters.yml")],
        capture_output=True, text=True, timeout=300,
        env=_ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"),
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    tasks = {task["task"]["name"]: task["hosts"]["localhost"]
             for task in report["plays"][0]["tasks"]}
    assert tasks["Check the results"].get("failed") is not True
    results = tasks["Hand the results to the test"]["ansible_facts"]["filter_results"]
    plan = results["plan"]
    assert [entry["name"] for entry in plan["create"]] == ["rpi4-2", "rpi4-3"]
    assert plan["create"][0]["labels"]["virtualtarget.jumpstarter.dev/exporterset"] == "rpi4"
    assert plan["exporter_annotations"] == {
        "rpi4-0": {"virtualtarget.jumpstarter.dev/leased-by": "lease-a"}}
    assert plan["parameters"]["resources"]["memory"] == "8Gi"
    conditions = {c["type"]: c for c in plan["status"]["conditions"]}
    assert conditions["Progressing"]["reason"] == "ScalingUp"
    assert conditions["Available"]["status"] == "False"
    assert results["demand"] == {"rpi4": ["lease-b"]}
    assert results["validation"]["errors"] == [
        'parameters.resources.memory: "8Gx" is not a quantity']


def test_bad_input_fails_the_task_with_the_filter_name():
    result = subprocess.run(
        [str(BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-m",
         "ansible.builtin.debug", "-a",
         "msg={{ [1] | jumpstarter.virtual_exporters.deep_merge({}) }}"],
        capture_output=True, text=True, timeout=300, env=_ansible_env(),
    )
    assert result.returncode != 0
    assert "deep_merge" in result.stdout + result.stderr


@pytest.mark.parametrize("name", FILTERS)
def test_ansible_doc_describes_the_filter(name):
    fqcn = f"jumpstarter.virtual_exporters.{name}"
    result = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "filter", "--json", fqcn],
        capture_output=True, text=True, timeout=120, env=_ansible_env(),
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)[fqcn]
    assert doc["doc"]["name"] == name
    assert doc["doc"]["short_description"]
    assert doc["doc"]["options"]["_input"]["description"]
    for option, spec in doc["doc"]["options"].items():
        assert spec.get("description"), f"{name}: option {option} has no description"
    assert f"jumpstarter.virtual_exporters.{name}" in doc["examples"]
    assert doc["return"]["_value"]["description"]
