"""Hostile tenant: template syntax in every field a set author (or an
exporter process, which runs the tenant's image) controls that reaches
Ansible. Nothing it names runs, and each value arrives as it was written.

Ansible-core treats the strings of an extra vars file as templates; the
operator writes each string it hands a run marked unsafe
(operator/exporterset_operator/runner.py), and run by hand the reconcile role
reads the same objects through modules, whose results ansible-core never
templates. Both paths run here for real: the operator's reconciler and
PlaybookRunner (ansible-runner) on the bed, and ``ansible-playbook
playbooks/reconcile.yml``.

Not in the table, because the API refuses template syntax there: object
names, label keys and values (so ``metadata.labels`` and
``spec.template.metadata.labels`` of a set, which become Exporter labels),
annotation keys.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys

from exporterset_operator.__main__ import playbook_env
from exporterset_operator.controller import Controller
from exporterset_operator.metrics import Metrics
from exporterset_operator.reconciler import Reconciler
from exporterset_operator.runner import PlaybookRunner
from exporterset_operator.watches import SERVED, load_watches
from jumpstarter_standin import wait_for
from kubernetes import client
from operator_process import ROOT
from pool_helpers import GROUP, QEMU_PARAMETERS, condition, get_set, make_class, make_set

EXPORTERS = ("jumpstarter.dev", "v1alpha1")
MATH = "{{ 7*7 }}"


# The class boots a kernel, so the set's kernel command line reaches QEMU.
DIRECT_BOOT = {**QEMU_PARAMETERS, "kernel": {"path": "/var/lib/guest/vmlinuz"}}


def hostile_strings(touched):
    """An expression that would run a command, a statement block that
    would, and one whose evaluation would show (49)."""
    return {
        "pipe": f"{{{{ lookup('pipe', 'touch {touched}') }}}}",
        "block": f"{{% set _ = lookup('pipe', 'touch {touched}') %}}block",
        "math": MATH,
    }


def make_hostile_set(custom, namespace, hostile):
    annotations = {f"example.com/{key}": value for key, value in hostile.items()}
    body = {
        "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1",
        "kind": "ExporterSet",
        "metadata": {"name": "pool", "namespace": namespace, "annotations": annotations},
        "spec": {
            "virtualTargetClassName": "qemu-small",
            "minReplicas": 0,
            "maxReplicas": 1,
            "minAvailableReplicas": 1,
            "scaleDownCooldown": "2s",
            "selector": {"matchLabels": {"board": "hostile"}},
            # Free text that reaches QEMU's command line as one argument
            # (-append); a machine or CPU model has a grammar of its own.
            "parameters": {"kernelArgs": hostile["pipe"]},
            "template": {
                "metadata": {"labels": {"board": "hostile"}, "annotations": annotations},
                "spec": {"drivers": [{
                    "name": MATH,
                    "type": "jumpstarter_driver_qemu.driver.Qemu",
                    "config": {MATH: hostile["pipe"], "block": hostile["block"], "math": MATH},
                }]},
            },
        },
    }
    return custom.create_namespaced_custom_object(*GROUP, namespace, "exportersets", body)


def make_exporter_hostile(custom, namespace, name, hostile):
    """What an exporter process reports (its devices) and what a writer of
    Exporters may annotate, on the set's own Exporter. (``statusMessage``
    is the controller's while the exporter was never seen.)"""
    custom.patch_namespaced_custom_object(*EXPORTERS, namespace, "exporters", name, {
        "metadata": {"annotations": {f"example.com/exporter-{key}": value for key, value in hostile.items()}}})
    custom.patch_namespaced_custom_object_status(*EXPORTERS, namespace, "exporters", name, {"status": {
        "devices": devices(hostile)}})


def devices(hostile):
    return [{"uuid": hostile["block"], "parent_uuid": MATH, "labels": {"note": hostile["pipe"]}}]


def credential(custom, namespace, name):
    exporter = custom.get_namespaced_custom_object(*EXPORTERS, namespace, "exporters", name)
    return ((exporter.get("status") or {}).get("credential") or {}).get("name")


def assert_arrived_verbatim(custom, core, namespace, hostile):
    """The backend the run made carries the set's values as written."""
    secret = core.read_namespaced_secret("pool-0-config", namespace)
    config = json.loads(base64.b64decode(secret.data["pool-0.yaml"]))
    # The driver's name is its key; its config is the provisioner's own
    # (the virtual QEMU driver's sockets).
    assert MATH in config["export"], config["export"]
    pod = core.read_namespaced_pod("pool-0", namespace)
    argv = [arg for c in pod.spec.containers for arg in (c.command or []) + (c.args or [])]
    assert any(hostile["pipe"] in arg for arg in argv), argv
    annotations = custom.get_namespaced_custom_object(
        *EXPORTERS, namespace, "exporters", "pool-0")["metadata"]["annotations"]
    for key, value in hostile.items():
        assert annotations[f"example.com/{key}"] == value, annotations


def module_args(artifact_dir, module):
    """The arguments Ansible handed ``module`` in a run, from its events."""
    for path in sorted((artifact_dir / "job_events").glob("*.json")):
        event = json.loads(path.read_text())
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and str(data.get("task_action", "")).endswith(module):
            return data["res"]["invocation"]["module_args"]
    raise AssertionError(f"no {module} task in {artifact_dir}")


@contextlib.contextmanager
def operator_in_process(testbed, api, namespace, artifacts):
    """The operator's reconciler on its informers, with its PlaybookRunner;
    the test calls its reconcile and backend run itself."""
    watch = load_watches(ROOT / "operator" / "watches.yaml", root=ROOT).entry(*SERVED)
    runner = PlaybookRunner(str(ROOT), str(artifacts), env=playbook_env(str(testbed.kubeconfig)))
    controller = Controller(
        api, lambda caches: Reconciler(caches, api, runner, Metrics(), {"qemu.jumpstarter.dev"},
                                       plan_options=watch.vars.get("reconcile_plan_options"), watch=watch),
        Metrics(), workers=1, namespace=namespace)
    controller.start_informers()
    try:
        assert controller.wait_synced(30)
        yield controller
    finally:
        controller.stop()
        runner.close()


def make_pool_0(controller, custom, namespace):
    """pool-0 made (in process) and given its credential: its backend is next."""
    cache = controller.caches["Exporter"]
    wait_for(lambda: controller.reconciler.reconcile((namespace, "pool")) and cache.get(namespace, "pool-0"),
             timeout=30, message="pool-0 made")
    wait_for(lambda: credential(custom, namespace, "pool-0"), timeout=30, message="pool-0's credential")


def test_the_operators_runs_take_tenant_values_as_data(testbed, api, namespace, standin, tmp_path):
    """The operator's reconciler on its informers and its PlaybookRunner
    (the run that makes pool-0's config Secret and Pod) with template syntax
    in the set's annotations, parameters, template annotations and drivers,
    and in pool-0's annotations and status."""
    touched = tmp_path / "touched"
    hostile = hostile_strings(touched)
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    make_class(custom, namespace, parameters=DIRECT_BOOT)
    make_hostile_set(custom, namespace, hostile)
    artifacts = tmp_path / "artifacts"
    key = (namespace, "pool")
    with operator_in_process(testbed, api, namespace, artifacts) as controller:
        reconciler, cache = controller.reconciler, controller.caches["Exporter"]
        make_pool_0(controller, custom, namespace)
        make_exporter_hostile(custom, namespace, "pool-0", hostile)

        def hostile_in_cache():
            stored = custom.get_namespaced_custom_object(*EXPORTERS, namespace, "exporters", "pool-0")
            if (stored.get("status") or {}).get("devices") != devices(hostile):
                # The stand-in controller rewrites the status it owns; the
                # report is made again, as an exporter would.
                make_exporter_hostile(custom, namespace, "pool-0", hostile)
                return False
            status = cache.get(namespace, "pool-0").get("status") or {}
            return status.get("devices") == devices(hostile) and (status.get("credential") or {}).get("name")

        wait_for(hostile_in_cache, timeout=30, message="the cache sees pool-0's status")

        reconciler.run_backends(key)
        assert not touched.exists(), "a value from the API ran as a template in the operator"
        assert key not in reconciler._backend_failure, reconciler._backend_failure.get(key)
    assert_arrived_verbatim(custom, core, namespace, hostile)
    runs = [p for p in artifacts.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    args = module_args(runs[0], "exporter_pods")
    exporter = next(e for e in args["owned_exporters"] if e["metadata"]["name"] == "pool-0")
    assert exporter["status"]["devices"] == devices(hostile)
    assert {k: exporter["metadata"]["annotations"][f"example.com/exporter-{k}"] for k in hostile} == hostile
    assert args["exporterset"]["metadata"]["annotations"] == {
        f"example.com/{k}": v for k, v in hostile.items()}
    assert args["parameters"]["kernelArgs"] == hostile["pipe"]
    assert args["exporterset"]["spec"]["template"]["spec"]["drivers"][0]["config"] == {
        MATH: hostile["pipe"], "block": hostile["block"], "math": MATH}


def test_a_key_reserved_by_ansibles_loader_is_refused_naming_the_field(testbed, api, namespace, standin, tmp_path):
    """``__ansible_unsafe`` as a key of a set's parameters would be read by
    ansible-core's loader as its own marking: the backend run is refused
    before it starts, the set says so (Failure, Warning Event, the field
    named), and no backend is made."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    make_class(custom, namespace, parameters=DIRECT_BOOT)
    make_set(custom, namespace, minAvailableReplicas=1, maxReplicas=1,
             parameters={"notes": {"__ansible_unsafe": MATH}})
    artifacts = tmp_path / "artifacts"
    field = "parameters.notes.__ansible_unsafe"
    with operator_in_process(testbed, api, namespace, artifacts) as controller:
        make_pool_0(controller, custom, namespace)
        controller.reconciler.run_backends((namespace, "pool"))
        assert field in controller.reconciler._backend_failure.get((namespace, "pool"), "")
    failure = condition(get_set(custom, namespace), "Failure")
    assert (failure["status"], failure["reason"]) == ("True", "ReconcileFailed"), failure
    assert f"not handed to Ansible: {field}: " in failure["message"], failure
    events = [e for e in core.list_namespaced_event(namespace).items
              if e.involved_object.name == "pool" and e.reason == "ReconcileFailed"]
    assert events and events[0].type == "Warning" and field in events[0].message, events
    assert not core.list_namespaced_pod(namespace).items
    assert not [p for p in artifacts.iterdir() if p.is_dir()]


def _reconcile_by_hand(namespace):
    return subprocess.run(
        [f"{sys.prefix}/bin/ansible-playbook", "playbooks/reconcile.yml",
         "-e", "exporterset_name=pool", "-e", f"exporterset_namespace={namespace}",
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_reconcile_run_by_hand_takes_tenant_values_as_data(api, namespace, standin, tmp_path):
    """``ansible-playbook playbooks/reconcile.yml``: the role reads the set,
    its class and its Exporters through modules; the same hostile values
    make pool-0 and its backend and run nothing."""
    touched = tmp_path / "touched"
    hostile = hostile_strings(touched)
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    make_class(custom, namespace, parameters=DIRECT_BOOT)
    make_hostile_set(custom, namespace, hostile)
    first = _reconcile_by_hand(namespace)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    wait_for(lambda: credential(custom, namespace, "pool-0"), timeout=30, message="pool-0's credential")
    make_exporter_hostile(custom, namespace, "pool-0", hostile)
    second = _reconcile_by_hand(namespace)
    assert not touched.exists(), "a value from the API ran as a template in the playbook"
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-2000:]
    assert_arrived_verbatim(custom, core, namespace, hostile)
