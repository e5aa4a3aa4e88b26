"""The corellium.jumpstarter.dev provisioner end to end on the test bed.

The real operator process reconciles ExporterSets of a Corellium class; the
Corellium API is the fake server on loopback (its CA reaches the operator
through the class's caBundleConfigMapRef, as a private CA would), and the
Jumpstarter controller's part is played by the stand-in.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import identity
from corellium_fake.server import Delays, FakeCorellium
from jumpstarter_standin import wait_for
from jumpstarter_standin.pytest_plugin import serve_namespace
from kubernetes import client
from molecule_runs import scenario_namespace
from operator_process import ROOT, watches_file
from pool_helpers import GROUP, assert_no_event, condition, get_set, make_class, make_set, no_event

PROVISIONER = "corellium.jumpstarter.dev"
CLASS = "corellium-kronos"
SECRET = "corellium-creds"
CA_CONFIGMAP = "corellium-ca"
DEVICE = {"flavor": "kronos", "os": "1.1.1", "build": "Critical Application Monitor (Baremetal)"}
CORELLIUM_DRIVER = {"name": "corellium", "type": "jumpstarter_driver_corellium.driver.Corellium"}
# Where the refusal is kept: the set's status (pool/operator_state.py), which
# a set's author cannot write; the annotation of its former name is never read.
REFUSAL_KEY = "backendRefusal"
FORMER_REFUSAL_ANNOTATION = "virtualtarget.jumpstarter.dev/backend-refusal"
OVERRIDABLE_ANNOTATION = "virtualtarget.jumpstarter.dev/set-overridable"


def corellium_class(api_client, namespace, fake, token=None, name=CLASS, **spec):
    """The class's Secret, CA ConfigMap and the class itself."""
    core = client.CoreV1Api(api_client)
    if token is not False:
        core.create_namespaced_secret(namespace, client.V1Secret(
            metadata=client.V1ObjectMeta(name=SECRET),
            string_data={"token": fake.token if token is None else token}))
    try:
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=CA_CONFIGMAP),
            data={"ca-bundle.crt": open(fake.ca_path).read()}))
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    parameters = {"api": {"host": fake.host, "projectId": fake.projects[0].id}, "device": DEVICE}
    return make_class(
        client.CustomObjectsApi(api_client), namespace, name=name, parameters=parameters,
        provisioner=PROVISIONER, credentialsSecretRef={"name": SECRET},
        caBundleConfigMapRef={"name": CA_CONFIGMAP}, **spec,
    )


def corellium_set(api_client, namespace, name="pool", board="kronos", vclass=CLASS, **spec):
    template = {"metadata": {"labels": {"board": board, "virtual": "true"}},
                "spec": {"drivers": [CORELLIUM_DRIVER]}}
    spec = {"minReplicas": 0, "maxReplicas": 4, "minAvailableReplicas": 0, **spec}
    return make_set(client.CustomObjectsApi(api_client), namespace, name=name, board=board,
                    virtualTargetClassName=vclass, template=template, **spec)


# Seconds between two state queries of a run that waits on an instance (the
# role's corellium_poll_interval, 5 s by default): the fake's transitions
# take 50 ms, and a deletion or power-off waited on would sit out the rest.
POLL_INTERVAL = 0.1


def start_operator(start, tmp_path):
    """Start the ``operator`` fixture's process for the Corellium provisioner
    only, its runs polling the fake every ``POLL_INTERVAL`` (the ExporterSet
    entry's vars in its watches file, as a deployment sets role variables)."""
    path = watches_file(tmp_path, lambda entry: entry.setdefault("vars", {}).update(
        corellium_poll_interval=POLL_INTERVAL))
    return start("--watches-file", str(path), provisioners=(PROVISIONER,))


def added(event_type, obj):
    return event_type == "ADDED"


def device_names(standin):
    """{Corellium instance name: Exporter name} for the namespace's Exporters."""
    return {identity.exporter_instance_name(e): e["metadata"]["name"] for e in standin.exporters()}


def instances_by_name(fake, standin):
    """The fake's instances by the name of the Exporter each was made for; an
    instance no Exporter of the namespace accounts for keeps its own name."""
    exporters = device_names(standin)
    return {exporters.get(instance["name"], instance["name"]): instance for instance in fake.instances()}


def provision(standin, fake, count):
    """Until ``count`` instances exist; return them by Exporter name."""

    def step():
        found = instances_by_name(fake, standin)
        return found if len(found) >= count else None

    return wait_for(step, timeout=60, message=f"{count} Corellium instance(s)")


def assert_token_nowhere(api_client, namespace, token, *texts):
    """The API token is in the class's Secret and nowhere else we can read."""
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    dumps = [json.dumps(obj) for obj in (
        custom.list_namespaced_custom_object(*GROUP, namespace, "exportersets"),
        custom.list_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters"),
        api_client.sanitize_for_serialization(core.list_namespaced_pod(namespace)),
        api_client.sanitize_for_serialization(core.list_namespaced_event(namespace)),
        api_client.sanitize_for_serialization(core.list_namespaced_config_map(namespace)),
    )]
    for secret in core.list_namespaced_secret(namespace).items:
        if secret.metadata.name != SECRET:
            dumps.extend(base64.b64decode(v).decode(errors="replace")
                         for v in (secret.data or {}).values())
    leaks = [text[:200] for text in [*dumps, *texts] if token in text]
    assert not leaks, f"the API token leaked into: {leaks}"


def test_wait_for_first_consumer_creates_for_leases_through_a_rate_limit_storm(
        api, namespace, standin, operator, corellium_fake, tmp_path):
    custom = client.CustomObjectsApi(api)
    corellium_class(api, namespace, corellium_fake, bindingMode="WaitForFirstConsumer")
    # A warm buffer is asked for, but the class binds on first consumer: no buffer.
    corellium_set(api, namespace, minAvailableReplicas=2)
    proc = start_operator(operator, tmp_path)

    wait_for(lambda: (get_set(custom, namespace).get("status") or {}).get("replicas") == 0
             and condition(get_set(custom, namespace), "Available"), message="status of an empty set")
    # A lease that only another board's set could serve is no demand for this one.
    with no_event(api, "Exporter", added, 1.5, namespace, what="Exporter for another board's lease"):
        standin.create_lease("other-board", {"board": "rpi4"})
    # Only the dormant Exporter, which leases wait on; it has no instance.
    assert [e["metadata"]["name"] for e in standin.exporters()] == ["pool-dormant-0"]
    assert corellium_fake.instances() == [] and corellium_fake.requests == []

    # Two leases arrive while the API rate-limits every request four times in a
    # row (with Retry-After), then answers one creation with a gateway error
    # after making the instance.
    corellium_fake.inject(429, times=4, retry_after="1")
    corellium_fake.inject(502, times=1, method="POST", path="/v1/instances", after_commit=True)
    standin.create_lease("lease-a", {"board": "kronos"})
    standin.create_lease("lease-b", {"board": "kronos"})
    made = provision(standin, corellium_fake, 2)
    assert sorted(made) == ["pool-0", "pool-1"]
    for instance in made.values():
        assert (instance["flavor"], instance["os"], instance["osbuild"]) == (
            DEVICE["flavor"], DEVICE["os"], DEVICE["build"])
        assert instance["project"] == corellium_fake.projects[0].id
    statuses = [r.status for r in corellium_fake.requests]
    assert statuses.count(429) == 4 and statuses.count(502) == 1
    # One creation per name, the lost answer included; no reconcile failed.
    devices = device_names(standin)
    posted = [devices.get(r.body["name"], r.body["name"]) for r in corellium_fake.requests
              if (r.method, r.path) == ("POST", "/v1/instances") and r.status in (200, 502)]
    assert sorted(posted) == ["pool-0", "pool-1"]
    assert proc.metric("jumpstarter_exporterset_playbook_runs_total", 'result="failed"') == 0

    pods = wait_for(lambda: (p := standin.pods()) and len(p) == 2 and p, message="exporter Pods")
    for pod in pods:
        name = pod.metadata.name
        assert [c.name for c in pod.spec.containers] == ["exporter"] and not pod.spec.init_containers
        env = {e.name: e for e in pod.spec.containers[0].env}
        assert env["CORELLIUM_API_HOST"].value == corellium_fake.host
        token_ref = env["CORELLIUM_API_TOKEN"].value_from.secret_key_ref
        assert (token_ref.name, token_ref.key, env["CORELLIUM_API_TOKEN"].value) == (SECRET, "token", None)
        config = client.CoreV1Api(api).read_namespaced_secret(f"{name}-config", namespace)
        driver = json.loads(base64.b64decode(config.data[f"{name}.yaml"]))["export"]["corellium"]
        assert driver["config"]["device_name"] == made[name]["name"]
        assert devices[made[name]["name"]] == name
        assert driver["config"]["project_id"] == corellium_fake.projects[0].id

    # Only the leases' instances: nothing more, and nothing twice, while they wait.
    assert_no_event(api, "Exporter", added, 1.0, namespace, what="Exporter beyond the leases'")
    assert sorted(instances_by_name(corellium_fake, standin)) == ["pool-0", "pool-1"]
    assert_token_nowhere(api, namespace, corellium_fake.token, proc.log_path.read_text())


def refusal_of(exporter_set):
    return ((exporter_set.get("status") or {}).get("operatorState") or {}).get(REFUSAL_KEY)


def _quiet_count(fake, quiet=1.0, timeout=15.0):
    """How many requests the fake has had, once none came for ``quiet`` seconds."""
    count, since = len(fake.requests), time.monotonic()
    deadline = since + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = len(fake.requests)
        if now != count:
            count, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return count
    raise AssertionError(f"requests to the Corellium API never stopped: {fake.requests[-5:]}")


def test_rejected_token_gives_condition_and_backs_off(api, namespace, standin, operator, corellium_fake, tmp_path):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    bad_token = "not-the-corellium-token-4711"
    corellium_class(api, namespace, corellium_fake, token=bad_token)
    corellium_set(api, namespace, minAvailableReplicas=1)
    proc = start_operator(operator, tmp_path)

    def degraded():
        cond = condition(get_set(custom, namespace), "Degraded")
        return cond if cond and cond["reason"] == "CredentialsRejected" else None

    cond = wait_for(degraded, message="Degraded/CredentialsRejected")
    assert cond["status"] == "True"
    assert CLASS in cond["message"] and f"{namespace}/{SECRET}" in cond["message"]
    events = wait_for(lambda: [e for e in core.list_namespaced_event(namespace).items
                               if e.reason == "CredentialsRejected"], message="Event")
    assert CLASS in events[0].message and SECRET in events[0].message
    assert events[0].involved_object.name == "pool"
    assert corellium_fake.instances() == []

    # No retry storm: nothing is asked of the API until the backoff ends (a
    # new refusal would be recorded on the set). The refused run may still
    # be finishing its last request when the condition shows: counted once
    # the requests have been quiet for a second.
    refused_requests = _quiet_count(corellium_fake)
    refusal = refusal_of(get_set(custom, namespace))
    assert refusal and json.loads(refusal)["reason"] == "CredentialsRejected"
    with no_event(api, "Pod", added, 4.0, namespace, what="Pod while the backend refuses"):
        # The set's author clears the refusal where it was once kept, then
        # forges one whose backoff is over: neither sends the token sooner.
        for forged in (None, json.dumps({**json.loads(refusal), "retryAt": "2000-01-01T00:00:00Z"})):
            custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool", {
                "metadata": {"annotations": {FORMER_REFUSAL_ANNOTATION: forged}}})
        assert_no_event(api, "ExporterSet", lambda t, o: refusal_of(o) != refusal,
                        4.0, namespace, what="retry before the backoff ended")
    assert len(corellium_fake.requests) == refused_requests
    assert standin.pods() == []
    assert proc.metric("jumpstarter_exporterset_playbook_runs_total", 'result="failed"') == 0

    # The token is fixed in the Secret: the next try after the backoff makes
    # the instance and the condition clears.
    core.patch_namespaced_secret(SECRET, namespace, {"stringData": {"token": corellium_fake.token}})
    made = provision(standin, corellium_fake, 1)
    assert list(made) == ["pool-0"]
    wait_for(lambda: condition(get_set(custom, namespace), "Degraded")["status"] == "False",
             message="Degraded cleared")
    assert refusal_of(get_set(custom, namespace)) is None
    assert_token_nowhere(api, namespace, bad_token, proc.log_path.read_text())
    assert_token_nowhere(api, namespace, corellium_fake.token, proc.log_path.read_text())


def test_quota_refusal_limits_scaling_with_the_api_message(api, namespace, standin, operator, corellium_fake, tmp_path):
    custom = client.CustomObjectsApi(api)
    corellium_fake.set_quota(corellium_fake.projects[0].id, 1)
    corellium_class(api, namespace, corellium_fake)
    corellium_set(api, namespace, minAvailableReplicas=2)
    start_operator(operator, tmp_path)

    def limited():
        cond = condition(get_set(custom, namespace), "ScalingLimited")
        return cond if cond and cond["reason"] == "QuotaExceeded" else None

    cond = wait_for(limited, message="ScalingLimited/QuotaExceeded")
    assert cond["status"] == "True"
    assert "Not enough quota in project Default Project" in cond["message"]
    assert len(corellium_fake.instances()) == 1
    # The accepted instance's Pod comes with the end of the backend run that
    # met the refusal (the condition is written by the pool loop meanwhile).
    wait_for(lambda: len(standin.pods()) == 1, message="the accepted instance's Pod")
    # The refused Exporter waits without a Pod; no third Exporter is made for it.
    with no_event(api, "Pod", added, 2.0, namespace, what="Pod for the refused Exporter"):
        assert_no_event(api, "Exporter", added, 2.0, namespace, what="third Exporter")
    assert len(standin.exporters()) == 2
    assert len(standin.pods()) == 1


def redirect_refused(api_client, namespace, field):
    """Until the set is Degraded/CredentialRedirect naming ``field``, with its Warning Event."""
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)

    def degraded():
        cond = condition(get_set(custom, namespace), "Degraded")
        return cond if cond and cond["reason"] == "CredentialRedirect" else None

    cond = wait_for(degraded, message="Degraded/CredentialRedirect")
    assert cond["status"] == "True" and cond["message"].startswith(f"{field}: set by the class only")
    events = wait_for(lambda: [e for e in core.list_namespaced_event(namespace).items
                               if e.reason == "CredentialRedirect"], message="Event")
    assert events[0].type == "Warning" and field in events[0].message
    assert events[0].involved_object.name == "pool"


def test_a_set_cannot_send_the_token_to_another_api_host(api, namespace, standin, operator, corellium_fake, tmp_path):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    with FakeCorellium(token=corellium_fake.token, delays=Delays()) as elsewhere:
        corellium_class(api, namespace, corellium_fake)
        # The class's CA bundle trusts both servers, and both take the token:
        # only the rule keeps the token from the set's host.
        bundle = open(corellium_fake.ca_path).read() + open(elsewhere.ca_path).read()
        core.patch_namespaced_config_map(CA_CONFIGMAP, namespace, {"data": {"ca-bundle.crt": bundle}})
        corellium_set(api, namespace, minAvailableReplicas=1,
                      parameters={"api": {"host": elsewhere.host}})
        proc = start_operator(operator, tmp_path)

        redirect_refused(api, namespace, "spec.parameters.api.host")
        with no_event(api, "Pod", added, 2.0, namespace, what="Pod of a redirected set"):
            assert_no_event(api, "Exporter", added, 2.0, namespace, what="Exporter of a redirected set")
        assert elsewhere.requests == [] and corellium_fake.requests == []
        assert standin.pods() == []
        # Nothing but the dormant Exporter, which has no backend.
        assert [e["metadata"]["name"] for e in standin.exporters()] == ["pool-dormant-0"]

        # Without the override the set is served from the class's host.
        custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                              {"spec": {"parameters": None}})
        made = provision(standin, corellium_fake, 1)
        assert list(made) == ["pool-0"]
        wait_for(lambda: condition(get_set(custom, namespace), "Degraded")["status"] == "False",
                 message="Degraded cleared")
        pod = wait_for(lambda: (p := standin.pods()) and p[0], message="exporter Pod")
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["CORELLIUM_API_HOST"] == corellium_fake.host
        assert elsewhere.requests == []
        assert_token_nowhere(api, namespace, corellium_fake.token, proc.log_path.read_text())


def test_a_set_cannot_give_the_token_to_another_exporter_image(
        api, namespace, standin, operator, corellium_fake, tmp_path):
    custom = client.CustomObjectsApi(api)
    allowed = "quay.io/example/jumpstarter-corellium:1"
    corellium_class(api, namespace, corellium_fake)
    custom.patch_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", CLASS, {
        "metadata": {"annotations": {OVERRIDABLE_ANNOTATION: f"images.exporter={allowed}"}}})
    evil = "registry.example/collects-tokens:1"
    corellium_set(api, namespace, minAvailableReplicas=1, images={"exporter": {"image": evil}})
    start_operator(operator, tmp_path)

    redirect_refused(api, namespace, "spec.images.exporter")
    with no_event(api, "Pod", added, 2.0, namespace, what="Pod with the set's image"):
        assert_no_event(api, "Exporter", added, 2.0, namespace, what="Exporter of a redirected set")
    # No instance, and no Pod at all: none with the set's image gets the token.
    assert corellium_fake.requests == [] and corellium_fake.instances() == []
    assert standin.pods() == []

    # An image the class allows is taken.
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                          {"spec": {"images": {"exporter": {"image": allowed}}}})
    assert list(provision(standin, corellium_fake, 1)) == ["pool-0"]
    pod = wait_for(lambda: (p := standin.pods()) and p[0], message="exporter Pod")
    assert pod.spec.containers[0].image == allowed
    wait_for(lambda: condition(get_set(custom, namespace), "Degraded")["status"] == "False",
             message="Degraded cleared")
    assert all(p.spec.containers[0].image != evil for p in standin.pods())


def test_deleting_sets_deletes_or_retains_instances(api, namespace, standin, operator, corellium_fake, tmp_path):
    custom = client.CustomObjectsApi(api)
    corellium_class(api, namespace, corellium_fake, reclaimPolicy="Delete")
    corellium_class(api, namespace, corellium_fake, token=False, name="corellium-kept",
                    reclaimPolicy="Retain")
    corellium_set(api, namespace, name="gone", board="kronos-a", minAvailableReplicas=1)
    corellium_set(api, namespace, name="kept", board="kronos-b", vclass="corellium-kept",
                  minAvailableReplicas=1)
    start_operator(operator, tmp_path)
    made = provision(standin, corellium_fake, 2)
    assert sorted(made) == ["gone-0", "kept-0"]
    wait_for(lambda: all(i["state"] == "on" for i in corellium_fake.instances()), message="on")
    wait_for(lambda: len(standin.pods()) == 2, message="two Pods")

    for name in ("gone", "kept"):
        custom.delete_namespaced_custom_object(*GROUP, namespace, "exportersets", name)

    def sets_gone():
        return not custom.list_namespaced_custom_object(*GROUP, namespace, "exportersets")["items"]

    wait_for(sets_gone, message="both sets deleted")
    # The set's deletion ends once its Exporter is going (the operator
    # deleted it); with the Orphan policy the garbage collector removes it after.
    going = [e["metadata"]["name"] for e in standin.exporters() if not e["metadata"].get("deletionTimestamp")]
    assert going == ["kept-0"]
    remaining = instances_by_name(corellium_fake, standin)
    assert list(remaining) == ["kept-0"]
    wait_for(lambda: instances_by_name(corellium_fake, standin)["kept-0"]["state"] == "off",
             message="retained instance powered off")
    wait_for(lambda: [e["metadata"]["name"] for e in standin.exporters()] == ["kept-0"],
             message="only the retained Exporter left")
    exporters = {e["metadata"]["name"]: e for e in standin.exporters()}
    assert not exporters["kept-0"]["metadata"].get("ownerReferences")
    assert [p.metadata.name for p in standin.pods()] == ["kept-0"]


def test_molecule_scenario(testbed, corellium_fake, tmp_path):
    """molecule/corellium: converge, idempotence and verify against the fake and the bed."""
    molecule = shutil.which("molecule", path=os.path.dirname(sys.executable) + os.pathsep
                            + os.environ.get("PATH", ""))
    assert molecule, "molecule is not installed; scripts/bootstrap-python installs it"
    env = {
        **os.environ,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        "CORELLIUM_API_HOST": corellium_fake.host,
        "CORELLIUM_API_TOKEN": corellium_fake.token,
        "CORELLIUM_CA_FILE": corellium_fake.ca_path,
        "CORELLIUM_PROJECT_ID": corellium_fake.projects[0].id,
        "MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "molecule"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "NO_COLOR": "1",
        "ANSIBLE_NOCOLOR": "1",
    }
    with serve_namespace(testbed.kubeconfig, scenario_namespace("corellium")):
        completed = subprocess.run(
            [molecule, "test", "--scenario-name", "corellium", "--destroy", "never"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
        )
    output = completed.stdout + completed.stderr
    (tmp_path / "molecule.log").write_text(output)
    failure = max(output.find("[ERROR]"), 0)
    assert completed.returncode == 0, output[failure:failure + 4000]
    assert corellium_fake.instances() == [], "the scenario's cleanup left instances behind"
