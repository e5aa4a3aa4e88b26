"""Runs tasks through a real ``ansible-playbook`` on localhost and returns each task's result."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

BIN = Path(sys.executable).parent


def ansible_env(**extra):
    env = dict(os.environ)
    assert env.get("ANSIBLE_COLLECTIONS_PATH"), "run through scripts/test or link_collection"
    env.update(
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
        # The venv's Python runs the modules, as in the operator image.
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        **extra,
    )
    return env


def run_tasks(work_dir, tasks, *args, timeout=300):
    """Results of ``tasks`` (one play on localhost), in play order.

    Fails the calling test with the output if ansible-playbook itself fails
    for another reason than a task that ignores its errors.
    """
    playbook = Path(work_dir) / "play.yml"
    playbook.write_text(yaml.safe_dump(
        [{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks}]
    ))
    completed = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook), *args],
        env=ansible_env(), capture_output=True, text=True, timeout=timeout,
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
    report = json.loads(completed.stdout)
    return [task["hosts"]["localhost"] for task in report["plays"][0]["tasks"]]
