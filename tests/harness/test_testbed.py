"""The test bed is a real control plane and our CRDs behave on it as the
operator and the upstream controller expect (defaults, scale and status
subresources, printer columns), and kwok gives Pods a lifecycle."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from jumpstarter_standin import wait_for, wait_gone
from kubernetes import client
from kubernetes.client.rest import ApiException
from operator_process import ROOT
from testbed import namespace_name

pytestmark = pytest.mark.testbed

GROUP = "virtualtarget.jumpstarter.dev"
VERSION = "v1alpha1"


def exporter_set_body(name: str, **spec) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ExporterSet",
        "metadata": {"name": name},
        "spec": {
            "virtualTargetClassName": "qemu-rpi4",
            "selector": {"matchLabels": {"board": "rpi4"}},
            "template": {"metadata": {"labels": {"board": "rpi4"}}},
            **spec,
        },
    }


def patch_set_status(custom, namespace: str, body: dict) -> dict:
    """Patches the status of the ExporterSet ``pool``."""
    return custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "exportersets", "pool", body)


def create_exporter(custom, namespace: str, metadata: dict, spec: dict) -> dict:
    return custom.create_namespaced_custom_object(
        "jumpstarter.dev", "v1alpha1", namespace, "exporters",
        {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter", "metadata": metadata, "spec": spec},
    )


def full_status(**counters) -> dict:
    names = [
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "unavailableReplicas",
        "leasedReplicas",
    ]
    return {"status": {**dict.fromkeys(names, 0), **counters}}


@pytest.fixture
def api(testbed):
    with testbed.api_client() as api_client:
        yield api_client


@pytest.fixture
def custom(api):
    return client.CustomObjectsApi(api)


def kubectl(testbed, *args: str) -> str:
    result = subprocess.run(["kubectl", *args], env=testbed.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_exporterset_defaults_are_applied(custom, namespace):
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", exporter_set_body("pool"))
    spec = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", "pool")["spec"]
    # Defaults of JEP-0014 / the upstream CRD.
    assert spec["maxReplicas"] == 4
    assert spec["minReplicas"] == 0
    assert spec["minAvailableReplicas"] == 0
    assert spec["scaleDownCooldown"] == "5m"
    assert spec["recycleStrategy"] == "ExitAndReplace"


def test_virtualtargetclass_defaults_are_applied(custom, namespace):
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "VirtualTargetClass",
        "metadata": {"name": "qemu"},
        "spec": {"provisioner": "qemu.jumpstarter.dev", "caBundleConfigMapRef": {"name": "ca"}},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "virtualtargetclasses", body)
    spec = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "virtualtargetclasses", "qemu")["spec"]
    assert spec["bindingMode"] == "Immediate"
    assert spec["reclaimPolicy"] == "Delete"
    assert spec["caBundleConfigMapRef"] == {"name": "ca", "key": "ca-bundle.crt"}


def test_scale_subresource_drives_max_replicas(testbed, custom, namespace):
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "exportersets", exporter_set_body("pool", minReplicas=2)
    )
    patch_set_status(custom, namespace, {"status": {**full_status(replicas=3)["status"], "selector": "board=rpi4"}})

    custom.patch_namespaced_custom_object_scale(
        GROUP, VERSION, namespace, "exportersets", "pool", {"spec": {"replicas": 7}}
    )
    assert (
        custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", "pool")["spec"]["maxReplicas"]
        == 7
    )
    scale = custom.get_namespaced_custom_object_scale(GROUP, VERSION, namespace, "exportersets", "pool")
    assert scale["spec"]["replicas"] == 7
    assert scale["status"]["replicas"] == 3
    assert scale["status"]["selector"] == "board=rpi4"

    kubectl(testbed, "scale", "-n", namespace, "exporterset/pool", "--replicas=9")
    assert (
        custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", "pool")["spec"]["maxReplicas"]
        == 9
    )

    # The CEL rules guard writes through the scale subresource too.
    with pytest.raises(ApiException) as rejected:
        custom.patch_namespaced_custom_object_scale(
            GROUP, VERSION, namespace, "exportersets", "pool", {"spec": {"replicas": 1}}
        )
    assert rejected.value.status == 422
    assert "minReplicas" in rejected.value.body


def test_status_is_written_only_through_its_subresource(custom, namespace):
    body = exporter_set_body("pool")
    body["status"] = full_status(replicas=5)["status"]
    created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", body)
    assert "status" not in created

    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", "pool", full_status(replicas=5))
    assert "status" not in custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", "pool")

    condition = {
        "type": "Available",
        "status": "True",
        "reason": "WarmPoolReady",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 1,
    }
    patch_set_status(
        custom,
        namespace,
        {
            "status": {
                "replicas": 2,
                "readyReplicas": 1,
                "observedGeneration": 1,
                "conditions": [condition],
            }
        },
    )
    status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", "pool")["status"]
    assert status["replicas"] == 2
    assert status["readyReplicas"] == 1
    assert status["observedGeneration"] == 1
    assert status["conditions"] == [condition]
    # Counters nobody wrote read as 0, as upstream (which requires them) would have them.
    assert status["leasedReplicas"] == 0
    assert status["podsRunning"] == 0

    # A spec write leaves the status alone.
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "exportersets", "pool", {"spec": {"minAvailableReplicas": 1}}
    )
    assert custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", "pool")["status"] == status


def test_pods_are_scheduled_and_run_on_kwok_nodes(api, namespace):
    core = client.CoreV1Api(api)
    for name, arch in (("amd", "amd64"), ("arm", "arm64")):
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": name},
                "spec": {
                    "nodeSelector": {"kubernetes.io/arch": arch},
                    "containers": [{"name": "main", "image": "registry.invalid/none:1"}],
                },
            },
        )
    for name, arch in (("amd", "amd64"), ("arm", "arm64")):
        pod = wait_for(
            lambda n=name: (p := core.read_namespaced_pod(n, namespace)).status.phase == "Running" and p,
            timeout=30,
            message=f"pod {name} Running",
        )
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels["kubernetes.io/arch"] == arch
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
        assert pod.status.pod_ip

    # No kubelet runs: kwok finalizes deleted Pods, or they would stay
    # Terminating forever.
    core.delete_namespaced_pod("amd", namespace)

    wait_gone(lambda: core.read_namespaced_pod("amd", namespace), timeout=30, message="the deleted pod to disappear")


def test_deployments_roll_out(api, namespace):
    apps = client.AppsV1Api(api)
    labels = {"app": "operator"}
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "operator"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "main", "image": "registry.invalid/op:1"}]},
                },
            },
        },
    )
    wait_for(
        lambda: apps.read_namespaced_deployment("operator", namespace).status.available_replicas == 2,
        timeout=30,
        message="two available replicas",
    )


def test_exporter_status_is_patched_like_the_jumpstarter_controller(custom, namespace):
    create_exporter(custom, namespace, {"name": "rpi4-0", "labels": {"board": "rpi4"}}, {"enabled": True})
    now = "2026-01-01T00:00:00Z"
    conditions = [
        {
            "type": "Registered",
            "status": "True",
            "reason": "Register",
            "message": "",
            "lastTransitionTime": now,
        },
        {
            "type": "Online",
            "status": "True",
            "reason": "Connect",
            "message": "",
            "lastTransitionTime": now,
        },
    ]
    custom.patch_namespaced_custom_object_status(
        "jumpstarter.dev",
        "v1alpha1",
        namespace,
        "exporters",
        "rpi4-0",
        {
            "status": {
                "conditions": conditions,
                "leaseRef": {"name": "lease-1"},
                "exporterStatus": "LeaseReady",
                "endpoint": "grpc.example:443",
            },
        },
    )
    exporter = custom.get_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters", "rpi4-0")
    assert exporter["status"]["conditions"] == conditions
    assert exporter["status"]["leaseRef"] == {"name": "lease-1"}
    assert exporter["status"]["exporterStatus"] == "LeaseReady"
    assert exporter["spec"] == {"enabled": True}


def test_printer_columns_short_names_and_category(testbed, custom, namespace):
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", exporter_set_body("pool"))
    patch_set_status(custom, namespace, full_status(replicas=6, readyReplicas=5, availableReplicas=2, leasedReplicas=3))
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "virtualtargetclasses",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "VirtualTargetClass",
            "metadata": {"name": "qemu-rpi4"},
            "spec": {"provisioner": "qemu.jumpstarter.dev", "bindingMode": "WaitForFirstConsumer"},
        },
    )

    header, row = kubectl(testbed, "get", "exportersets", "-n", namespace).splitlines()
    assert header.split() == ["NAME", "REPLICAS", "READY", "AVAILABLE", "LEASED", "CLASS", "AGE"]
    assert row.split()[:6] == ["pool", "6", "5", "2", "3", "qemu-rpi4"]

    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "virtualtargetclasses", "qemu-rpi4",
        {"status": {"sets": ["pool"], "setCount": 1, "conditions": [
            {"type": "Valid", "status": "True", "reason": "Valid", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}},
    )
    header, row = kubectl(testbed, "get", "vtc", "-n", namespace).splitlines()
    assert header.split() == ["NAME", "PROVISIONER", "SETS", "VALID", "AGE"]
    assert row.split()[:4] == ["qemu-rpi4", "qemu.jumpstarter.dev", "1", "True"]
    header, row = kubectl(testbed, "get", "vtc", "-n", namespace, "-o", "wide").splitlines()
    assert header.split() == ["NAME", "PROVISIONER", "SETS", "VALID", "BINDING", "RECLAIM", "AGE"]
    assert row.split()[4] == "WaitForFirstConsumer"

    assert (
        kubectl(testbed, "get", "exset", "-n", namespace, "-o", "name")
        == "exporterset.virtualtarget.jumpstarter.dev/pool\n"
    )
    listed = kubectl(testbed, "get", "jumpstarter", "-n", namespace, "-o", "name").split()
    assert "exporterset.virtualtarget.jumpstarter.dev/pool" in listed
    assert "virtualtargetclass.virtualtarget.jumpstarter.dev/qemu-rpi4" in listed


def test_owned_objects_are_garbage_collected(custom, namespace):
    owner = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", exporter_set_body("pool"))
    create_exporter(
        custom,
        namespace,
        {
            "name": "pool-0",
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ExporterSet",
                    "name": "pool",
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        {},
    )
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", "pool")

    wait_gone(
        lambda: custom.get_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters", "pool-0"),
        timeout=30,
        message="garbage collection of the owned Exporter",
    )


def test_deleted_namespaces_are_finalized(api, request):
    core = client.CoreV1Api(api)
    name = namespace_name(request.node.name)
    core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_config_map(name, {"metadata": {"name": "leftover"}})
    core.delete_namespace(name)

    wait_gone(lambda: core.read_namespace(name), timeout=60, message=f"namespace {name} to be finalized")


def test_apiserver_restart_keeps_data_and_port(testbed_factory):
    bed = testbed_factory("restart", controllers=False)
    port = bed.config.apiserver_port
    with bed.api_client() as api:
        client.CoreV1Api(api).create_namespaced_config_map("default", {"metadata": {"name": "survivor"}})
    old_pid = bed.config.pids["kube-apiserver"]

    bed.restart_apiserver()

    assert bed.config.pids["kube-apiserver"] != old_pid
    assert bed.config.apiserver_port == port
    with bed.api_client() as api:
        assert client.CoreV1Api(api).read_namespaced_config_map("survivor", "default").metadata.name == "survivor"
    assert "kube-apiserver" in bed.logs()


def test_kubeconfig_and_env_reach_the_bed(testbed):
    version = json.loads(kubectl(testbed, "version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"].startswith("v1.")
    assert testbed.env["KUBECONFIG"] == str(testbed.kubeconfig)


def test_rbac_is_enforced_for_service_account_tokens(testbed, api, namespace):
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    token = core.create_namespaced_service_account_token(
        "reader", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    configuration = client.Configuration()
    configuration.host = testbed.server
    configuration.ssl_ca_cert = str(testbed.pki_dir / "ca.crt")
    configuration.api_key = {"authorization": f"Bearer {token}"}

    with client.ApiClient(configuration) as reader_api:
        reader = client.CustomObjectsApi(reader_api)

        def list_sets():
            try:
                reader.list_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets")
            except ApiException as error:
                return error.status
            return 200

        assert list_sets() == 403
        rbac = client.RbacAuthorizationV1Api(api)
        rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "read-sets"},
                "rules": [{"apiGroups": [GROUP], "resources": ["exportersets"], "verbs": ["list"]}],
            },
        )
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "reader-reads-sets"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-sets"},
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
            },
        )
        wait_for(lambda: list_sets() == 200, timeout=30, message="the RoleBinding to take effect")
        with pytest.raises(ApiException) as denied:
            reader.create_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", exporter_set_body("pool"))
        assert denied.value.status == 403


def test_audit_log_records_requests_by_verb(testbed_factory):
    bed = testbed_factory("audit", controllers=False, audit=True)
    with bed.api_client() as api:
        client.CoreV1Api(api).create_namespaced_config_map("default", {"metadata": {"name": "audited"}})

    def audited_create():
        if not bed.audit_log.exists():
            return None
        for line in bed.audit_log.read_text().splitlines():
            event = json.loads(line)
            ref = event.get("objectRef", {})
            if event["verb"] == "create" and ref.get("resource") == "configmaps" and (ref.get("name") == "audited"):
                return event
        return None

    event = wait_for(audited_create, timeout=15, message="the audit event of the create")
    assert event["user"]["username"] == "jve-admin"
    assert event["responseStatus"]["code"] == 201


def test_command_line_up_env_status_down(tmp_path):
    script = ROOT / "scripts/testbed"
    env = {**os.environ, "JVE_TESTBED_DIR": str(tmp_path / "bed")}

    def run(*args):
        return subprocess.run([script, *args], env=env, capture_output=True, text=True, timeout=120)

    up = run("up", "--no-controllers")
    assert up.returncode == 0, up.stderr
    try:
        exports = dict(line.removeprefix("export ").split("=", 1) for line in run("env").stdout.splitlines())
        assert exports["KUBECONFIG"] == str(tmp_path / "bed/kubeconfig")
        crds = subprocess.run(
            ["kubectl", "get", "crd", "-o", "name"],
            env={**os.environ, **exports},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "customresourcedefinition.apiextensions.k8s.io/exportersets." in crds.stdout
        assert run("status").returncode == 0
    finally:
        assert run("down").returncode == 0
    assert run("status").returncode == 1
