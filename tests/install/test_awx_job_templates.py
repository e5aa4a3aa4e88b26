"""The AWX job templates as code (awx/job_templates.yml, awx/configure.yml):
every survey follows AWX's survey rules and asks for exactly the playbook's
inputs, configure.yml uses only options the awx.awx modules document, and
every playbook runs through ansible-runner with the survey's default answers
as extra vars, the way AWX launches a job, against the test bed and the test
lab hosts."""

import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import ansible_runner
import pytest
import yaml
from jinja2 import Environment, meta
from kubernetes import client
from operator_process import ROOT

BIN = Path(sys.executable).parent
TEMPLATES = yaml.safe_load((ROOT / "awx" / "job_templates.yml").read_text())["awx_job_templates"]
BY_PLAYBOOK = {Path(t["playbook"]).stem: t for t in TEMPLATES}
GROUP = ("virtualtarget.jumpstarter.dev", "v1alpha1")

# What AWX accepts in a survey (awx/api/views: survey spec validation).
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}
SURVEY_REQUIRED_KEYS = {"type", "question_name", "variable", "required"}


def _choices(question):
    choices = question.get("choices")
    return choices.split("\n") if isinstance(choices, str) else list(choices or [])


def survey_problems(survey):
    """Every way ``survey`` breaks AWX's rules, as messages."""
    problems = []
    if not isinstance(survey, list) or not survey:
        return ["the survey spec must be a non-empty list"]
    seen = set()
    for index, question in enumerate(survey):
        where = f"question {index} ({question.get('variable')})"
        missing = SURVEY_REQUIRED_KEYS - set(question)
        if missing:
            problems.append(f"{where}: missing {sorted(missing)}")
            continue
        kind = question["type"]
        if kind not in SURVEY_TYPES:
            problems.append(f"{where}: type {kind!r} is not one of {sorted(SURVEY_TYPES)}")
        if question["variable"] in seen:
            problems.append(f"{where}: variable is not unique")
        seen.add(question["variable"])
        if not isinstance(question["required"], bool):
            problems.append(f"{where}: required must be a boolean")
        default = question.get("default")
        if kind in ("multiplechoice", "multiselect"):
            choices = _choices(question)
            if not choices:
                problems.append(f"{where}: a {kind} question needs choices")
            defaults = [] if default in (None, "") else (
                default.split("\n") if isinstance(default, str) else list(default))
            if kind == "multiplechoice" and len(defaults) > 1:
                problems.append(f"{where}: a multiplechoice default is one choice")
            if not set(defaults) <= set(choices):
                problems.append(f"{where}: default {defaults} is not among the choices {choices}")
        limits = [question.get(bound) for bound in ("min", "max") if question.get(bound) is not None]
        if any(not isinstance(limit, int | float) or isinstance(limit, bool) for limit in limits):
            problems.append(f"{where}: min and max must be numbers")
        elif len(limits) == 2 and limits[0] > limits[1]:
            problems.append(f"{where}: min is greater than max")
        elif default not in (None, "") and len(limits) == 2:
            if kind in ("integer", "float"):
                if not isinstance(default, int | float) or not limits[0] <= default <= limits[1]:
                    problems.append(f"{where}: default {default!r} is outside min..max")
            elif kind in ("text", "textarea", "password") and not limits[0] <= len(default) <= limits[1]:
                problems.append(f"{where}: default length is outside min..max")
        if kind in ("text", "textarea", "password") and question.get("min", 0) < 0:
            problems.append(f"{where}: a negative minimum length")
    return problems


def default_answers(survey):
    """Extra vars as AWX sends them when every default answer is taken."""
    answers = {}
    for question in survey:
        default = question.get("default")
        if default in (None, "") and question["required"]:
            continue  # AWX refuses the launch until someone answers
        if question["type"] == "multiselect":
            answers[question["variable"]] = default.split("\n") if isinstance(default, str) else default
        else:
            answers[question["variable"]] = default
    return answers


# --- the survey rules themselves must be able to fail ----------------------

@pytest.mark.parametrize("broken, message", [
    ([{"type": "text", "question_name": "a", "variable": "a"}], "missing ['required']"),
    ([{"type": "list", "question_name": "a", "variable": "a", "required": True}], "is not one of"),
    ([{"type": "text", "question_name": "a", "variable": "a", "required": True}] * 2, "not unique"),
    ([{"type": "multiplechoice", "question_name": "a", "variable": "a", "required": True}], "needs choices"),
    ([{"type": "multiselect", "question_name": "a", "variable": "a", "required": True,
       "choices": ["x"], "default": "y"}], "not among the choices"),
    ([{"type": "integer", "question_name": "a", "variable": "a", "required": True, "min": 5, "max": 1}],
     "min is greater than max"),
    ([{"type": "integer", "question_name": "a", "variable": "a", "required": True, "min": 0, "max": 3,
       "default": 9}], "outside min..max"),
])
def test_survey_rules_catch(broken, message):
    assert any(message in problem for problem in survey_problems(broken))


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: Path(t["playbook"]).stem)
def test_survey_follows_awx_rules(template):
    assert survey_problems(template["survey"]) == []


# --- the survey asks for exactly the playbook's inputs --------------------

def _templated_strings(node):
    if isinstance(node, str):
        if "{{" in node or "{%" in node:
            yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _templated_strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _templated_strings(value)


def _tasks(play):
    for section in ("pre_tasks", "tasks", "post_tasks"):
        for task in play.get(section) or []:
            yield task
            for nested in ("block", "rescue", "always"):
                yield from task.get(nested) or []


class _EveryName(dict):
    """Filters and tests by any name: only which variables a template reads matters."""

    def __contains__(self, name):
        return True

    def get(self, name, default=None):
        return super().get(name) or (lambda *args, **kwargs: None)


def playbook_inputs(playbook):
    """(inputs, required inputs) of a playbook: the options of the roles it
    runs (their argument specs) and the variables its own templates read
    that nothing inside the playbook defines."""
    plays = yaml.safe_load((ROOT / playbook).read_text())
    inputs, required = set(), set()
    environment = Environment()
    environment.filters = _EveryName(environment.filters)
    environment.tests = _EveryName(environment.tests)
    environment.globals.clear()  # a variable may be called namespace or range
    for play in plays:
        for role in play.get("roles") or []:
            name = role["role"].split(".")[-1] if isinstance(role, dict) else role.split(".")[-1]
            specs = yaml.safe_load((ROOT / "roles" / name / "meta" / "argument_specs.yml").read_text())
            for option, spec in specs["argument_specs"]["main"]["options"].items():
                inputs.add(option)
                if spec.get("required"):
                    required.add(option)
        defined = set(play.get("vars") or {})
        for task in _tasks(play):
            defined.update(filter(None, [task.get("register"), (task.get("loop_control") or {}).get("loop_var")]))
        read = set()
        for text in _templated_strings({key: value for key, value in play.items() if key != "roles"}):
            read |= meta.find_undeclared_variables(environment.parse(text))
        read = {name for name in read if not name.startswith("ansible_") and name not in ("item", "role_path")}
        inputs |= read | (set(play.get("vars") or {}) & read)
        required |= read - defined
    return inputs, required


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: Path(t["playbook"]).stem)
def test_survey_asks_for_exactly_the_playbook_inputs(template):
    inputs, required = playbook_inputs(template["playbook"])
    asked = {question["variable"]: question for question in template["survey"]}
    assert set(asked) - inputs == set(), "the survey asks for variables the playbook never reads"
    assert required - set(asked) == set(), "the playbook needs variables the survey does not ask for"
    assert all(asked[name]["required"] for name in required)


# --- configure.yml uses the awx.awx modules as documented -----------------

def test_configure_playbook_uses_only_documented_module_options():
    play = yaml.safe_load((ROOT / "awx" / "configure.yml").read_text())[0]
    assert play["vars_files"] == ["job_templates.yml"]
    actions = {key: task[key] for task in play["tasks"] for key in task if key.startswith("awx.awx.")}
    assert set(actions) == {"awx.awx.execution_environment", "awx.awx.project", "awx.awx.job_template"}
    docs = json.loads(subprocess.run([str(BIN / "ansible-doc"), "--json", *actions], check=True,
                                     capture_output=True, text=True).stdout)
    for action, arguments in actions.items():
        options = docs[action]["doc"]["options"]
        assert set(arguments) <= set(options), (action, set(arguments) - set(options))
        for name, value in arguments.items():
            choices = options[name].get("choices")
            if choices and "{{" not in str(value):
                assert value in choices, (action, name, value, choices)


# --- every job runs as AWX runs it -----------------------------------------

def _run_job(template, tmp_path, inventory, answers, credential_env=None, expect="successful", **runner_options):
    """ansible-runner with the project checked out and the survey's answers
    as extra vars, as an AWX job; returns the runner. ``credential_env`` is
    what the job's credential injects (default: the bed's kubeconfig)."""
    extravars = {**default_answers(template["survey"]), **answers}
    asked = {question["variable"] for question in template["survey"]}
    assert set(answers) <= asked, "the test answers only questions the survey asks"
    (tmp_path / "runner").mkdir(exist_ok=True)
    if credential_env is None:
        credential_env = {"KUBECONFIG": os.environ.get("KUBECONFIG", "")}
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"),
        project_dir=str(ROOT),
        playbook=template["playbook"],
        inventory=str(inventory),
        extravars=extravars,
        envvars={
            "ANSIBLE_COLLECTIONS_PATH": os.environ["ANSIBLE_COLLECTIONS_PATH"],
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
            "ANSIBLE_LOCALHOST_WARNING": "false",
            **credential_env,
        },
        quiet=True,
        timeout=600,
        **runner_options,
    )
    failed = [event["event_data"].get("res") for event in runner.events
              if event.get("event") in ("runner_on_failed", "runner_on_unreachable")]
    assert runner.status == expect, (runner.status, failed, runner.stdout.read()[-4000:])
    return runner


def _cluster_inventory(tmp_path):
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}))
    return path


def _qemu_class_and_set(custom, namespace):
    custom.create_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", {
        "apiVersion": "/".join(GROUP), "kind": "VirtualTargetClass",
        "metadata": {"name": "qemu-small", "namespace": namespace},
        "spec": {"provisioner": "qemu.jumpstarter.dev",
                 "parameters": {"arch": "x86_64", "resources": {"cpu": 1, "memory": "256Mi"}}},
    })
    custom.create_namespaced_custom_object(*GROUP, namespace, "exportersets", {
        "apiVersion": "/".join(GROUP), "kind": "ExporterSet",
        "metadata": {"name": "pool", "namespace": namespace},
        "spec": {"virtualTargetClassName": "qemu-small", "minReplicas": 0, "maxReplicas": 4,
                 "minAvailableReplicas": 2, "selector": {"matchLabels": {"board": "awx"}},
                 "template": {"metadata": {"labels": {"board": "awx"}},
                              "spec": {"drivers": [{"name": "qemu",
                                                    "type": "jumpstarter_driver_qemu.driver.Qemu"}]}}},
    })


@pytest.mark.testbed
@pytest.mark.slow
def test_reconcile_job(api, namespace, tmp_path):
    _qemu_class_and_set(client.CustomObjectsApi(api), namespace)
    _run_job(BY_PLAYBOOK["reconcile"], tmp_path, _cluster_inventory(tmp_path),
             {"exporterset_name": "pool", "exporterset_namespace": namespace})
    exporters = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "jumpstarter.dev", "v1alpha1", namespace, "exporters")["items"]
    assert sorted(e["metadata"]["name"] for e in exporters) == ["pool-0", "pool-1"]


@pytest.mark.testbed
@pytest.mark.slow
def test_install_job(api, namespace, tmp_path):
    template = BY_PLAYBOOK["install"]
    # The operator's namespace is the test's; every other answer is the default.
    # The admission policy (not asked by the survey) is cluster-wide and would
    # outlive the namespace on the shared bed; test_install_kustomize.py has it.
    _run_job(template, tmp_path, _cluster_inventory(tmp_path), {"operator_install_namespace": namespace,
                                                                 "operator_install_tenancy": "false"})
    deployments = client.AppsV1Api(api).list_namespaced_deployment(namespace).items
    provisioners = next(q for q in template["survey"] if q["variable"] == "operator_install_provisioners")
    assert sorted(arg for d in deployments for arg in d.spec.template.spec.containers[0].args
                  if arg.startswith("--provisioner=")) == sorted(
        f"--provisioner={name}" for name in provisioners["default"].split("\n"))
    assert {d.spec.replicas for d in deployments} == {
        next(q for q in template["survey"] if q["variable"] == "operator_install_replicas")["default"]}


@pytest.mark.slow
def test_lab_bootstrap_job(lab_hosts, tmp_path):
    keys = (lab_hosts.directory / "operator.pub").read_text().strip()
    # The test hosts share this machine's /opt and /etc, which the lab_hosts
    # fixture has bootstrapped already: each host only reads what they share,
    # so the job reaches the three at once (as molecule's scenario does).
    runner = _run_job(BY_PLAYBOOK["lab_bootstrap"], tmp_path, lab_hosts.inventory,
                      {"lab_bootstrap_authorized_keys": keys}, forks=len(lab_hosts.hosts))
    assert set(runner.stats["ok"]) == set(lab_hosts.hosts)
    # The session's lab hosts were bootstrapped with the same inputs already.
    assert sum(runner.stats.get("changed", {}).values()) == 0, runner.stats


@pytest.mark.testbed
@pytest.mark.slow
def test_drain_host_job(api, namespace, lab_hosts, tmp_path):
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", {
        "apiVersion": "/".join(GROUP), "kind": "VirtualTargetClass",
        "metadata": {"name": "lab-x86", "namespace": namespace},
        "spec": {"provisioner": "qemu-baremetal.jumpstarter.dev", "parameters": {
            "arch": "x86_64", "resources": {"cpu": 1, "memory": "256Mi"},
            "hosts": [{"name": name, "address": address, "slots": 2}
                      for name, address in sorted(lab_hosts.hosts.items())]}},
    })
    host = sorted(lab_hosts.hosts)[1]
    _run_job(BY_PLAYBOOK["drain_host"], tmp_path, _cluster_inventory(tmp_path),
             {"lab_host": host, "drain_namespace": namespace})
    drained = custom.get_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "lab-x86")
    assert host in drained["metadata"]["annotations"]["virtualtarget.jumpstarter.dev/drained-hosts"]


# --- the jobs with only AWX's Kubernetes bearer token credential -----------

# What the job's token may do: everything on the objects of its namespace,
# nothing outside it (no cluster-scoped read, no kubeconfig).
JOB_RULES = [client.V1PolicyRule(api_groups=["virtualtarget.jumpstarter.dev", "jumpstarter.dev", ""],
                                 resources=["*"], verbs=["*"])]


def _service_account_token(api, namespace, name="awx-job"):
    """A ServiceAccount allowed JOB_RULES in ``namespace`` and a TokenRequest token for it."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name=name)))
    rbac.create_namespaced_role(namespace, client.V1Role(metadata=client.V1ObjectMeta(name=name), rules=JOB_RULES))
    rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name=name),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=namespace)]))
    request = core.create_namespaced_service_account_token(name, namespace, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)))
    return request.status.token


def _bearer_token_credential(testbed, tmp_path, token):
    """The environment AWX's "OpenShift or Kubernetes API Bearer Token"
    credential type injects (awx/main/models/credential/injectors.py,
    kubernetes_bearer_token) with verify_ssl on and the CA certificate given:
    the CA goes into a 0600 file of the job's private data directory."""
    runner_dir = tmp_path / "runner"
    runner_dir.mkdir(exist_ok=True)
    descriptor, ca_path = tempfile.mkstemp(dir=runner_dir)
    with os.fdopen(descriptor, "w") as ca_file:
        os.chmod(ca_path, stat.S_IRUSR | stat.S_IWUSR)
        ca_file.write((testbed.pki_dir / "ca.crt").read_text())
    return {"K8S_AUTH_HOST": testbed.server, "K8S_AUTH_API_KEY": token,
            "K8S_AUTH_VERIFY_SSL": "True", "K8S_AUTH_SSL_CA_CERT": ca_path}


@pytest.fixture
def no_kubeconfig(monkeypatch, tmp_path):
    """The job's process has no kubeconfig at all: none in the environment,
    an empty home."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home)}


@pytest.mark.testbed
@pytest.mark.slow
def test_reconcile_job_with_bearer_token_credential(testbed, api, namespace, tmp_path, no_kubeconfig):
    _qemu_class_and_set(client.CustomObjectsApi(api), namespace)
    token = _service_account_token(api, namespace)
    _run_job(BY_PLAYBOOK["reconcile"], tmp_path, _cluster_inventory(tmp_path),
             {"exporterset_name": "pool", "exporterset_namespace": namespace},
             credential_env={**no_kubeconfig, **_bearer_token_credential(testbed, tmp_path, token)})
    custom = client.CustomObjectsApi(api)
    exporters = custom.list_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters")["items"]
    assert sorted(e["metadata"]["name"] for e in exporters) == ["pool-0", "pool-1"]
    status = custom.get_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool")["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Successful"] == "True", status


def _lab_class(custom, namespace, hosts):
    custom.create_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", {
        "apiVersion": "/".join(GROUP), "kind": "VirtualTargetClass",
        "metadata": {"name": "lab-x86", "namespace": namespace},
        "spec": {"provisioner": "qemu-baremetal.jumpstarter.dev", "parameters": {
            "arch": "x86_64", "resources": {"cpu": 1, "memory": "256Mi"},
            "hosts": [{"name": name, "address": address, "slots": 2} for name, address in sorted(hosts.items())]}},
    })


@pytest.mark.testbed
@pytest.mark.slow
def test_drain_host_job_with_bearer_token_credential(testbed, api, namespace, tmp_path, no_kubeconfig):
    # No set has instances on the hosts, so no lab host is reached: the job
    # only needs the API server.
    custom = client.CustomObjectsApi(api)
    _lab_class(custom, namespace, {"lab-a": "192.0.2.10", "lab-b": "192.0.2.11"})
    token = _service_account_token(api, namespace)
    _run_job(BY_PLAYBOOK["drain_host"], tmp_path, _cluster_inventory(tmp_path),
             {"lab_host": "lab-b", "drain_namespace": namespace},
             credential_env={**no_kubeconfig, **_bearer_token_credential(testbed, tmp_path, token)})
    drained = custom.get_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "lab-x86")
    assert drained["metadata"]["annotations"]["virtualtarget.jumpstarter.dev/drained-hosts"] == "lab-b"


@pytest.mark.testbed
@pytest.mark.slow
def test_job_with_a_wrong_token_fails_naming_the_host(testbed, api, namespace, tmp_path, no_kubeconfig):
    _qemu_class_and_set(client.CustomObjectsApi(api), namespace)
    _service_account_token(api, namespace)
    runner = _run_job(BY_PLAYBOOK["reconcile"], tmp_path, _cluster_inventory(tmp_path),
                      {"exporterset_name": "pool", "exporterset_namespace": namespace},
                      credential_env={**no_kubeconfig, **_bearer_token_credential(testbed, tmp_path, "not-a-token")},
                      expect="failed")
    failures = [event["event_data"]["res"] for event in runner.events if event.get("event") == "runner_on_failed"]
    assert len(failures) == 1, failures
    message = failures[0]["msg"]
    assert testbed.server in message and "401 Unauthorized" in message and "K8S_AUTH_API_KEY" in message, message
    assert "not-a-token" not in runner.stdout.read()
    assert client.CustomObjectsApi(api).list_namespaced_custom_object(
        "jumpstarter.dev", "v1alpha1", namespace, "exporters")["items"] == []
