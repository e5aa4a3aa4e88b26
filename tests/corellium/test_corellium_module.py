"""corellium_instance through real ansible-playbook runs against the fake API."""

import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import module_base

MODULE = "jumpstarter.virtual_exporters.corellium_instance"
INFO_MODULE = "jumpstarter.virtual_exporters.corellium_info"


def ansible_env(extra=None):
    env = dict(os.environ)
    env.update({
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        # The venv's Python runs the module, as it runs in the operator image.
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
    })
    env.update(extra or {})
    return env


def tool(name):
    found = shutil.which(name, path=os.path.dirname(sys.executable) + os.pathsep
                         + os.environ.get("PATH", ""))
    assert found, f"{name} is not installed; scripts/bootstrap-python installs it"
    return found


def run_playbook(tmp_path, tasks, *args, env=None, json_output=True):
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(
        [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}]
    ))
    callback = {"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"} if json_output else {}
    return subprocess.run(
        [tool("ansible-playbook"), "-i", "localhost,", str(playbook), *args],
        env=ansible_env({**callback, **(env or {})}), capture_output=True, text=True,
        timeout=180,
    )


def task_results(completed):
    """Each task's result for localhost, in play order."""
    report = json.loads(completed.stdout)
    return [task["hosts"]["localhost"] for task in report["plays"][0]["tasks"]]


def instance_task(fake, **args):
    return {MODULE: {"api_host": fake.host, "api_token": fake.token, "ca_path": fake.ca_path,
                     "project": "Default Project", "poll_interval": 0.05, **args}}


CREATE = {"name": "kronos-0", "flavor": "kronos", "os": "1.1.1",
          "osbuild": "Critical Application Monitor (Baremetal)"}


def test_create_twice_changes_once(corellium_fake, tmp_path):
    task = instance_task(corellium_fake, state="on", **CREATE)

    completed = run_playbook(tmp_path, [task, task], "--diff")

    assert completed.returncode == 0, completed.stdout + completed.stderr
    first, second = task_results(completed)
    assert first["changed"] is True and second["changed"] is False
    assert first["diff"]["before"]["state"] == "absent"
    assert first["instance"]["state"] == second["instance"]["state"] == "on"
    existing = corellium_fake.instances()
    assert [(i["id"], i["name"], i["state"]) for i in existing] == [
        (first["instance"]["id"], "kronos-0", "on")
    ]
    assert corellium_fake.count("POST", "/v1/instances") == 1


def test_check_mode_creates_nothing(corellium_fake, tmp_path):
    completed = run_playbook(tmp_path, [instance_task(corellium_fake, state="on", **CREATE)],
                             "--check", "--diff")

    assert completed.returncode == 0, completed.stdout + completed.stderr
    (result,) = task_results(completed)
    assert result["changed"] is True
    assert result["diff"]["before"] == {"name": "kronos-0", "state": "absent"}
    assert corellium_fake.instances() == []
    writes = [r for r in corellium_fake.requests if r.method != "GET"]
    assert writes == []


def test_off_then_on_moves_the_power_state(corellium_fake, default_project, tmp_path):
    completed = run_playbook(tmp_path, [
        instance_task(corellium_fake, state="off", **CREATE),
        instance_task(corellium_fake, state="off", name="kronos-0"),
        instance_task(corellium_fake, state="on", name="kronos-0"),
    ])

    assert completed.returncode == 0, completed.stdout + completed.stderr
    off, off_again, on = task_results(completed)
    assert (off["changed"], off_again["changed"], on["changed"]) == (True, False, True)
    assert off["instance"]["state"] == "off"
    assert [i["state"] for i in corellium_fake.instances()] == ["on"]
    assert corellium_fake.count("PUT") == 2


def test_absent_twice_deletes_once(corellium_fake, default_project, tmp_path):
    task = instance_task(corellium_fake, state="absent", name="kronos-0")

    completed = run_playbook(tmp_path, [instance_task(corellium_fake, **CREATE), task, task])

    assert completed.returncode == 0, completed.stdout + completed.stderr
    created, deleted, deleted_again = task_results(completed)
    assert (created["changed"], deleted["changed"], deleted_again["changed"]) == (True, True, False)
    assert deleted["instance"] == {"name": "kronos-0", "state": "absent"}
    assert corellium_fake.instances() == []
    assert corellium_fake.count("DELETE") == 1


def test_quota_refusal_fails_with_its_kind_and_message(corellium_fake, default_project, tmp_path):
    corellium_fake.set_quota(default_project, 0)

    completed = run_playbook(tmp_path, [instance_task(corellium_fake, **CREATE)])

    assert completed.returncode != 0
    (result,) = task_results(completed)
    assert result["failed"] is True
    assert result["corellium_error"]["kind"] == "QuotaError"
    assert "quota" in result["msg"].lower()
    assert corellium_fake.instances() == []


@pytest.mark.parametrize("via_environment", [False, True])
def test_token_never_appears_in_verbose_output(corellium_fake, tmp_path, via_environment):
    task = instance_task(corellium_fake, state="on", **CREATE)
    process_env = {}
    if via_environment:
        # As in an operator Pod whose environment comes from the class's Secret.
        del task[MODULE]["api_host"], task[MODULE]["api_token"]
        process_env = {"CORELLIUM_API_HOST": corellium_fake.host,
                       "CORELLIUM_API_TOKEN": corellium_fake.token}
    failing = {**task, MODULE: {**task[MODULE], "name": "over-quota"}, "ignore_errors": True}
    corellium_fake.set_quota(corellium_fake.projects[0].id, 1)

    completed = run_playbook(tmp_path, [task, task, failing], "-vvv", "--diff",
                             env=process_env, json_output=False)

    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "QuotaError" in output  # the failing task did run and report
    assert corellium_fake.count("POST", "/v1/instances") == 2
    assert corellium_fake.token not in output


def test_info_lists_a_pool_and_the_quota(corellium_fake, default_project, tmp_path):
    corellium_fake.set_quota(default_project, 5)
    info = {INFO_MODULE: {"api_host": corellium_fake.host, "api_token": corellium_fake.token,
                          "ca_path": corellium_fake.ca_path, "project": default_project,
                          "name_prefix": "pool-a-"}}

    tasks = [instance_task(corellium_fake, **{**CREATE, "name": name})
             for name in ("pool-a-1", "pool-b-0", "pool-a-0")] + [info]

    completed = run_playbook(tmp_path, tasks, "--check")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert task_results(completed)[-1]["instances"] == []  # check mode only predicted them

    completed = run_playbook(tmp_path, tasks)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result = task_results(completed)[-1]
    assert [i["name"] for i in result["instances"]] == ["pool-a-0", "pool-a-1"]
    assert {i["id"] for i in result["instances"]} == {
        i["id"] for i in corellium_fake.instances() if i["name"].startswith("pool-a-")
    }
    assert result["project"]["instance_quota"] == 5
    assert result["project"]["instances_used"] == 3


@pytest.mark.parametrize("module_name", [MODULE, INFO_MODULE])
def test_ansible_doc_documents_exactly_the_argument_spec(monkeypatch, module_name):
    completed = subprocess.run([tool("ansible-doc"), "--json", module_name], env=ansible_env(),
                               capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    doc = json.loads(completed.stdout)[module_name]
    assert doc["examples"] and doc["return"]

    module = importlib.import_module(
        "ansible_collections.jumpstarter.virtual_exporters.plugins.modules."
        + module_name.rsplit(".", 1)[1]
    )

    class SpecCaptured(Exception):
        pass

    def capture(argument_spec, **_):
        raise SpecCaptured(argument_spec)

    monkeypatch.setattr(module_base, "AnsibleModule", capture)
    with pytest.raises(SpecCaptured) as captured:
        module.main()
    spec = captured.value.args[0]

    documented = doc["doc"]["options"]
    assert set(documented) == set(spec)
    for name, option in spec.items():
        assert documented[name]["type"] == option["type"], name
        assert documented[name].get("default") == option.get("default"), name
        assert documented[name].get("choices") == option.get("choices"), name
        assert documented[name].get("required", False) == option.get("required", False), name
