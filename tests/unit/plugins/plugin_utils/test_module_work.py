"""The action plugins that do a module's work in the task's worker process
(plugins/plugin_utils/module_work.py), every one through one
ansible-playbook run: a local task gets the result the module gives (the
same registered result, no secret in it), with its
connection options from the play's ``module_defaults`` groups
(meta/runtime.yml), and only the tasks that set ``environment:`` start the
module. No cluster and no Corellium here: the API server the tasks name is
a closed loopback port, and the Corellium CA file does not exist, so the
work fails saying so, the same way in both; or a loopback server that
refuses every call, so the work fails on the API server's answer, through
the module's ``ERRORS``, the same way in both."""

import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
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


class Refusing(http.server.BaseHTTPRequestHandler):
    """An API server that refuses every call (GET /version too, which
    the client takes as credentials accepted), naming it in its Status."""

    protocol_version = "HTTP/1.1"

    def _refuse(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
                           "code": 403, "message": f"{self.command} {self.path.split('?')[0]} is forbidden"}).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

    def log_message(self, *args):
        pass


@pytest.fixture
def refusing_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def run_both_ways(tmp_path, modules, module_defaults):
    """Each of ``modules`` ({name: args}) in process and as a module, in one
    ansible-playbook run: ``({name: (here, module)}, its stdout)``."""
    tasks = []
    for name, args in modules.items():
        for how, extra in (("here", {}), ("module", {"environment": {"JVE_AS_MODULE": "1"}})):
            tasks.append({"name": f"{name} {how}", f"{COLLECTION}.{name}": args, "register": f"{name}_{how}",
                          "ignore_errors": True, **extra})
    results = "{{ {" + ", ".join(f"'{n}': [{n}_here, {n}_module]" for n in modules) + "} | to_json }}"
    tasks.append({"ansible.builtin.copy": {"dest": str(tmp_path / "results.json"), "content": results}})
    play = {"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": tasks,
            "module_defaults": module_defaults}
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([play]))
    completed = subprocess.run(
        [f"{sys.prefix}/bin/ansible-playbook", "-vvv", "-i", "localhost,", str(playbook),
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-2000:]
    started = sorted(re.findall(r"^Using module file .*/plugins/modules/(\w+)\.py$", completed.stdout, re.M))
    assert started == sorted(modules), "only the tasks with environment: start the module"
    return json.loads((tmp_path / "results.json").read_text()), completed.stdout


def test_every_action_does_the_modules_work_in_process_as_the_module_does(closed_port, tmp_path):
    url = f"https://127.0.0.1:{closed_port}"
    missing_ca = str(tmp_path / "no-ca.pem")
    results, stdout = run_both_ways(tmp_path, {**KUBERNETES, **CORELLIUM}, {
        f"group/{COLLECTION}.kubernetes": {"host": url, "api_key": SECRET, "validate_certs": False},
        f"group/{COLLECTION}.corellium": {"api_host": f"127.0.0.1:{closed_port}", "api_token": SECRET,
                                          "project": "p", "ca_path": missing_ca}})
    assert SECRET not in stdout

    for name, (here, module) in results.items():
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


# What each module fails with when the API server refuses its first call
# (exporterset_apply's: the read of the set it adds the finalizer to);
# baremetal_targets stops at the class (it has no SSH key Secret), and
# exporter_pods with no exporters makes no call.
REFUSED = {
    "exporterset_info": "403 Forbidden: GET /apis/",
    "exporterset_pass": "ExporterSet pass: 403 Forbidden: GET /apis/",
    "virtualtargetclass_sync": "403 Forbidden",
    "exporterset_apply": "403 Forbidden: GET /apis/",
    "baremetal_report": "reading ExporterSet ns/pool: 403 Forbidden",
    "baremetal_drain": "403 Forbidden: GET /apis/",
    "baremetal_targets": "spec.credentialsSecretRef",
}


def test_an_api_servers_refusal_fails_the_work_in_process_as_the_module(refusing_server, tmp_path):
    apply = {**KUBERNETES["exporterset_apply"], "finalizer": "jumpstarter.dev/teardown"}
    results, _ = run_both_ways(tmp_path, {**KUBERNETES, "exporterset_apply": apply}, {
        f"group/{COLLECTION}.kubernetes": {"host": refusing_server, "api_key": SECRET}})
    for name, (here, module) in results.items():
        assert here == module, name
        assert here.get("failed", False) is (name in REFUSED), (name, here)
        assert here.get("msg", "").startswith(REFUSED.get(name, "")), (name, here["msg"])


# Run in a fresh interpreter: once ansible's collection finder is installed
# (another test's plugin loader), importing an action plugin by name fails.
ERRORS_OF_ACTIONS = """
import ast, importlib, json, sys
from pathlib import Path
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import errors as api_errors

def main_errors(module):
    tree = ast.parse(Path(module.__file__).read_text())
    main = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main")
    call = next(node for node in ast.walk(main) if isinstance(node, ast.Call))
    keyword = next((k for k in call.keywords if k.arg == "errors"), None)
    return None if keyword is None else eval(ast.unparse(keyword.value), vars(module))

plugins = "ansible_collections.jumpstarter.virtual_exporters.plugins"
seen = {}
for name in sys.argv[1:]:
    errors = main_errors(importlib.import_module(f"{plugins}.modules.{name}"))
    action = importlib.import_module(f"{plugins}.action.{name}")
    seen[name] = {"same": bool(errors) and action.ActionModule.WORK.errors is errors,
                  "api_first": [kinds for kinds, _ in (errors or ())[:2]] == [api_errors.ApiError,
                                                                             api_errors.CLIENT_ERRORS]}
print(json.dumps(seen))
"""


def test_every_action_fails_on_the_errors_its_module_passes_to_module_base():
    completed = subprocess.run([sys.executable, "-c", ERRORS_OF_ACTIONS, *KUBERNETES, *CORELLIUM],
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                               cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-3000:]
    seen = json.loads(completed.stdout)
    assert {name: seen[name]["same"] for name in seen} == dict.fromkeys([*KUBERNETES, *CORELLIUM], True)
    assert {name for name in seen if seen[name]["api_first"]} == set(KUBERNETES)
