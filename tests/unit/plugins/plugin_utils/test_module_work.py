"""The action plugins that do a module's work in the task's worker process
(plugins/plugin_utils/module_work.py), every one through one
ansible-playbook run: a local task gets the result the module gives (the
same registered result, no secret in it), with its
connection options from the play's ``module_defaults`` groups
(meta/runtime.yml), and only the tasks that set ``environment:`` start the
module. No cluster and no Corellium here: the API server the tasks name is
a closed loopback port, and the Corellium CA file does not exist, so the
work fails saying so, the same way in both."""

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[4]
COLLECTION = "jumpstarter.virtual_exporters"
SECRET = "s3cr3t-bearer-token"
THE_SET = {"metadata": {"name": "pool", "namespace": "ns", "uid": "u1"}, "spec": {}}
THE_CLASS = {"metadata": {"name": "c"}, "spec": {"provisioner": "qemu.jumpstarter.dev"}}
KUBERNETES = {
    "exporterset_info": {"name": "pool", "namespace": "ns"},
    "exporterset_pass": {"name": "pool", "namespace": "ns"},
    "virtualtargetclass_sync": {"name": "c", "namespace": "ns"},
    "exporterset_apply": {"exporterset": THE_SET, "plan": {}, "provisioner": "qemu.jumpstarter.dev"},
    "exporter_pods": {"exporterset": THE_SET, "virtual_target_class": THE_CLASS, "owned_exporters": [],
                      "exporters": [], "state": "absent"},
    "baremetal_report": {"namespace": "ns", "exporterset": "pool", "results": {}},
    "baremetal_drain": {"lab_host": "h1", "namespace": "ns"},
    "baremetal_targets": {"exporterset": THE_SET, "virtual_target_class": THE_CLASS, "owned_exporters": [],
                          "exporters": [], "action": "probe"},
}
CORELLIUM = {
    "corellium_info": {},
    "corellium_instance": {"name": "i1"},
    "corellium_instances": {"names": ["i1"]},
}


@pytest.fixture(scope="module")
def closed_port():
    """A loopback port nothing listens on while the tests run."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def test_every_action_does_the_modules_work_in_process_as_the_module_does(closed_port, tmp_path):
    url = f"https://127.0.0.1:{closed_port}"
    missing_ca = str(tmp_path / "no-ca.pem")
    tasks = []
    for name, args in {**KUBERNETES, **CORELLIUM}.items():
        for how, extra in (("here", {}), ("module", {"environment": {"JVE_AS_MODULE": "1"}})):
            tasks.append({"name": f"{name} {how}", f"{COLLECTION}.{name}": args, "register": f"{name}_{how}",
                          "ignore_errors": True, **extra})
    names = [*KUBERNETES, *CORELLIUM]
    results = "{{ {" + ", ".join(f"'{n}': [{n}_here, {n}_module]" for n in names) + "} | to_json }}"
    tasks.append({"ansible.builtin.copy": {"dest": str(tmp_path / "results.json"), "content": results}})
    play = {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks,
            "module_defaults": {
                f"group/{COLLECTION}.kubernetes": {"host": url, "api_key": SECRET, "validate_certs": False},
                f"group/{COLLECTION}.corellium": {"api_host": f"127.0.0.1:{closed_port}", "api_token": SECRET,
                                                  "project": "p", "ca_path": missing_ca}}}
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([play]))
    completed = subprocess.run(
        [f"{sys.prefix}/bin/ansible-playbook", "-vvv", "-i", "localhost,", str(playbook),
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-2000:]
    started = sorted(re.findall(r"^Using module file .*/plugins/modules/(\w+)\.py$", completed.stdout, re.M))
    assert started == sorted(names), "only the tasks with environment: start the module"
    assert SECRET not in completed.stdout

    for name, (here, module) in json.loads((tmp_path / "results.json").read_text()).items():
        expected = f"cannot reach the API server at {url}" if name in KUBERNETES else "No such file or directory"
        assert here["failed"] and expected in here["msg"], (name, here)
        assert here == module, name
        assert SECRET not in json.dumps(here), name


def test_the_result_carries_invocation_as_the_cores_modules_do():
    """Before ansible-core 2.21 a module's result always has ``invocation``;
    from 2.21 on only with INJECT_INVOCATION (off by default)."""
    import ansible
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import ansible_compat

    always = tuple(int(part) for part in ansible.__version__.split(".")[:2]) < (2, 21)
    assert ansible_compat.inject_invocation({}) is always
    assert ansible_compat.inject_invocation({"ansible_inject_invocation": True}) is True
