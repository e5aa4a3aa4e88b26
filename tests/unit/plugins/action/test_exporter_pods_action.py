"""exporter_pods' action: on a local connection the module's work runs in
the task's worker process, with the arguments, errors, warnings and masked
secrets a module process would give. No cluster here: the API server the
tasks name is a loopback listener that counts the connections it gets and
closes them (so a run that gets as far as connecting fails, saying it
could not reach it). Check mode and the work itself on a real cluster,
both ways side by side: tests/modules/test_exporter_pods_in_process.py."""

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.datatag import deprecate_value
from ansible.template import trust_as_template
from ansible_collections.jumpstarter.virtual_exporters.plugins.action import exporter_pods as action
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import ansible_compat
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.ansible_compat import module_data
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import with_diff
from ansible_collections.jumpstarter.virtual_exporters.plugins.plugin_utils.module_work import Ended, TaskModule

ROOT = Path(__file__).resolve().parents[4]
FQCN = "jumpstarter.virtual_exporters.exporter_pods"
SECRET = "s3cr3t-bearer-token"


@pytest.fixture(scope="module")
def listener():
    """A loopback port that accepts and closes; ``count()`` says how many
    connections it has had."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield type("Listener", (), {"url": f"https://127.0.0.1:{server.getsockname()[1]}",
                                "count": staticmethod(lambda: len(accepted))})
    server.shutdown(socket.SHUT_RDWR)  # wakes the accept
    server.close()


def task_args(listener, **changes):
    args = {
        "exporterset": {"metadata": {"name": "pool", "namespace": "ns", "uid": "u1"}, "spec": {}},
        "virtual_target_class": {"metadata": {"name": "c"}, "spec": {"provisioner": "qemu.jumpstarter.dev"}},
        "owned_exporters": [{"metadata": {"name": "pool-0", "uid": "e1"}}],
        "exporters": ["pool-0"],
        "state": "absent",
        "host": listener.url,
        "api_key": SECRET,
    }
    args.update(changes)
    return args


def test_templated_arguments_reach_the_work_as_plain_json_data():
    def tag(value):  # as templating leaves values: tagged str, dict and list subclasses
        return trust_as_template(value) if isinstance(value, str) else deprecate_value(value, "tagged")
    tagged = tag({"name": tag("pool-0"), "list": tag([tag("a"), 1]), "pair": (1, 2)})
    assert type(tagged) is not dict and type(tagged["list"]) is not list and type(tagged["name"]) is not str
    data = module_data({"top": tagged})

    def types(value):
        if isinstance(value, dict):
            return {type(value).__name__: {k: types(v) for k, v in value.items()}}
        if isinstance(value, list):
            return {type(value).__name__: [types(v) for v in value]}
        return type(value).__name__

    assert data == {"top": {"name": "pool-0", "list": ["a", 1], "pair": [1, 2]}}
    assert types(data) == {"dict": {"top": {"dict": {"name": "str", "list": {"list": ["str", "int"]},
                                                     "pair": {"list": ["int", "int"]}}}}}

    # What the work gets (shown in the result's invocation, as a module's).
    result, _ = action.run_here(tag({"exporterset": tagged, "state": tag("gone")}), check_mode=False)
    assert types(result["invocation"]["module_args"]["exporterset"]) == types(data["top"])


@pytest.mark.parametrize("changes, field", [
    ({"owned_exporters": 5}, "owned_exporters"),
    ({"state": "gone"}, "state"),
    ({"exporters": None}, "exporters"),
    ({"colour": "red"}, f"Unsupported parameters for ({FQCN}) module: colour"),
])
def test_bad_arguments_fail_naming_the_field_and_reach_no_server(listener, changes, field):
    before = listener.count()
    args = {k: v for k, v in task_args(listener, **changes).items() if v is not None}
    result, warnings = action.run_here(args, check_mode=False)
    assert result["failed"] and field in result["msg"], result
    assert warnings == []
    assert listener.count() == before, "a run with bad arguments connected to the API server"


def test_good_arguments_reach_the_server_and_fail_naming_it(listener):
    before = listener.count()
    result, _ = action.run_here(task_args(listener), check_mode=False)
    assert result["failed"] and result["msg"].startswith(f"cannot reach the API server at {listener.url}"), result
    assert listener.count() > before


def test_no_value_of_a_no_log_option_is_returned(listener):
    result, _ = action.run_here(task_args(listener, owned_exporters=[{"metadata": {"name": SECRET}}]),
                                check_mode=False)
    assert result["failed"], result
    assert result["invocation"]["module_args"]["host"] == listener.url
    assert SECRET not in json.dumps(result), result


def test_warnings_are_returned_from_validation_and_from_the_works_threads(listener):
    _, warnings = action.run_here(task_args(listener, validate_certs=False, verify_ssl=False), check_mode=False)
    assert warnings == ["Both option validate_certs and its alias verify_ssl are set."]

    module = TaskModule({}, check_mode=True)
    threads = [threading.Thread(target=module.warn, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(module.warnings) == ["w0", "w1", "w2", "w3"] and module.check_mode is True
    with pytest.raises(Ended) as ended:
        module.fail_json(msg="no", waiting=["pool-0"])
    assert ended.value.result == {"failed": True, "msg": "no", "waiting": ["pool-0"]}


def test_a_local_task_runs_in_process_and_a_task_with_environment_as_the_module(listener, tmp_path):
    """Through ansible-playbook: the same failure and the same warning in
    the registered result both ways; only the task with ``environment:``
    starts the module."""
    args = task_args(listener, validate_certs=False, verify_ssl=False)
    tasks = [{"name": "here", FQCN: args, "register": "here", "ignore_errors": True},
             {"name": "module", FQCN: args, "environment": {"JVE_UNUSED": "1"}, "register": "module",
              "ignore_errors": True},
             {"ansible.builtin.copy": {"dest": str(tmp_path / "results.json"),
                                       "content": "{{ {'here': here, 'module': module} | to_json }}"}}]
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                         "tasks": tasks}]))
    completed = subprocess.run(
        [f"{sys.prefix}/bin/ansible-playbook", "-vvv", "-i", "localhost,", str(playbook),
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-2000:]
    started = [line for line in completed.stdout.splitlines()
               if line.startswith("Using module file") and line.endswith("/exporter_pods.py")]
    assert len(started) == 1, completed.stdout[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    for how in ("here", "module"):
        result = results[how]
        assert result["failed"] and result["msg"].startswith(f"cannot reach the API server at {listener.url}"), result
        assert "Both option validate_certs and its alias verify_ssl are set." in result["warnings"], result
        assert SECRET not in json.dumps(result)
    assert results["here"]["msg"] == results["module"]["msg"]
    assert SECRET not in completed.stdout



@pytest.mark.parametrize("diff", [True, False])
def test_the_work_in_process_sees_the_tasks_diff_as_a_module_does(diff):
    module = TaskModule({}, check_mode=True, diff=diff)
    assert ansible_compat.diff_mode(module) is diff
    result = with_diff(module, {"changed": True}, {"Pod/pool-0": None}, {"Pod/pool-0": {"spec": {}}})
    assert ("diff" in result) is diff
