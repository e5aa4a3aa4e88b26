"""The product side of the Jumpstarter controller's contract, on the real API
server with its garbage collector: Exporters go without their Leases and
with their own Secrets and Pod, a stale credential Secret keeps its name
from being reused, and the controller CA is read from its ConfigMap."""

from __future__ import annotations

import base64
import json
import subprocess
import time

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import apply as k8s_apply
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import controller_ca
from jumpstarter_standin import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from operator_process import ROOT
from pool_helpers import GROUP, SET_LABEL, condition, get_set, make_class, make_set, no_event

JUMPSTARTER = ("jumpstarter.dev", "v1alpha1")
QEMU = "qemu.jumpstarter.dev"


def the_set(namespace):
    return {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSet",
            "metadata": {"name": "pool", "namespace": namespace, "uid": "not-used",
                         "annotations": {}},
            "spec": {}}


def owner(obj, kind):
    meta = obj["metadata"]
    return {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": kind, "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def make_exporter(custom, namespace, name, enabled=True):
    return custom.create_namespaced_custom_object(
        *JUMPSTARTER, namespace, "exporters",
        {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
         "metadata": {"name": name}, "spec": {"enabled": enabled}})


def make_lease(custom, namespace, name, exporter):
    """A Lease as the controller leaves it: ended, owned by the Exporter it ran on."""
    return custom.create_namespaced_custom_object(
        *JUMPSTARTER, namespace, "leases",
        {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Lease",
         "metadata": {"name": name, "labels": {"jumpstarter.dev/lease-ended": "true"},
                      "ownerReferences": [owner(exporter, "Exporter")]},
         "spec": {"clientRef": {"name": "ci"}, "selector": {"matchLabels": {"board": "x"}},
                  "duration": "1h"}})


HOLD = "test.virtualtarget.jumpstarter.dev/hold"


def make_secret(core, namespace, name, owners, finalizers=None):
    return core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, owner_references=owners, finalizers=finalizers),
        string_data={"token": "issued"}))


def gone(reader, *args):
    try:
        reader(*args)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_an_exporter_goes_without_its_leases_and_with_its_own_objects(api, namespace):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    # Disabled, as lease safety wants an Exporter before it is deleted.
    exporter = make_exporter(custom, namespace, "pool-0", enabled=False)
    refs = [client.V1OwnerReference(api_version="jumpstarter.dev/v1alpha1", kind="Exporter",
                                    name="pool-0", uid=exporter["metadata"]["uid"], controller=True)]
    make_lease(custom, namespace, "history-1", exporter)
    make_secret(core, namespace, "pool-0-exporter", refs)
    make_secret(core, namespace, "pool-0-config", refs)
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="pool-0", owner_references=refs),
        spec=client.V1PodSpec(containers=[client.V1Container(name="exporter", image="none")])))

    applier = k8s_apply.PlanApplier(api, the_set(namespace))
    applier.apply_plan({"delete": [{"name": "pool-0", "reason": "ScaleDown",
                                    "uid": exporter["metadata"]["uid"]}]}, QEMU)
    assert applier.result["deleted"] == ["pool-0"]

    wait_for(lambda: gone(custom.get_namespaced_custom_object, *JUMPSTARTER, namespace,
                          "exporters", "pool-0"), message="Exporter gone")
    for name in ("pool-0-exporter", "pool-0-config"):
        assert gone(core.read_namespaced_secret, name, namespace)
    wait_for(lambda: gone(core.read_namespaced_pod, "pool-0", namespace), message="Pod gone")
    # The garbage collector had its chance: the orphaned Lease stays, without the owner.
    lease = custom.get_namespaced_custom_object(*JUMPSTARTER, namespace, "leases", "history-1")
    assert not lease["metadata"].get("ownerReferences")


def test_a_leased_or_replaced_exporter_is_not_deleted(api, namespace):
    custom = client.CustomObjectsApi(api)
    exporter = make_exporter(custom, namespace, "pool-0")
    applier = k8s_apply.PlanApplier(api, the_set(namespace))
    applier.apply_plan({"delete": [{"name": "pool-0", "reason": "ScaleDown",
                                    "uid": "an-earlier-pool-0"}]}, QEMU)
    assert applier.result["held"] == ["pool-0"]
    assert custom.get_namespaced_custom_object(*JUMPSTARTER, namespace, "exporters", "pool-0")
    assert exporter


def test_a_stale_credential_keeps_its_name_from_a_new_exporter(api, namespace):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    stale = [client.V1OwnerReference(api_version="jumpstarter.dev/v1alpha1", kind="Exporter",
                                     name="pool-0", uid="a-deleted-uid")]
    # The garbage collector removes a Secret whose owner is gone at a moment
    # of its choosing; a finalizer, set at creation, holds it here until the
    # first apply ran.
    make_secret(core, namespace, "pool-0-exporter", stale, finalizers=[HOLD])
    entry = {"name": "pool-0", "labels": {}, "annotations": {}}

    first = k8s_apply.PlanApplier(api, the_set(namespace))
    first.apply_plan({"create": [entry]}, QEMU)
    assert first.result["blocked"] == ["pool-0"] and first.result["created"] == []
    assert gone(custom.get_namespaced_custom_object, *JUMPSTARTER, namespace, "exporters", "pool-0")
    # Nobody alive owned it, so it goes; the next reconcile may take the name.
    core.patch_namespaced_secret("pool-0-exporter", namespace, {"metadata": {"finalizers": None}})
    wait_for(lambda: gone(core.read_namespaced_secret, "pool-0-exporter", namespace), timeout=60,
             message="the stale Secret collected")
    second = k8s_apply.PlanApplier(api, the_set(namespace))
    second.apply_plan({"create": [entry]}, QEMU)
    assert second.result["created"] == ["pool-0"]


def self_signed_certificate(tmp_path):
    key, cert = tmp_path / "ca.key", tmp_path / "ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
                    "-subj", "/CN=jumpstarter-test-ca"], check=True, capture_output=True)
    return cert.read_text()


def test_the_controller_ca_comes_from_its_configmap(api, namespace, tmp_path):
    core = client.CoreV1Api(api)
    vclass = {"metadata": {"name": "c", "annotations": {}}}

    missing = controller_ca.read_controller_ca(api, namespace, vclass)
    assert not missing["available"]
    assert f"ConfigMap {namespace}/jumpstarter-service-ca-cert key ca.crt" in missing["message"]

    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="jumpstarter-service-ca-cert"), data={"ca.crt": "oops"}))
    invalid = controller_ca.read_controller_ca(api, namespace, vclass)
    assert not invalid["available"] and "holds no PEM certificate" in invalid["message"]

    pem = self_signed_certificate(tmp_path)
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="corp-ca"), data={"bundle.pem": pem}))
    vclass["metadata"]["annotations"]["virtualtarget.jumpstarter.dev/controller-ca-configmap"] = \
        "corp-ca/bundle.pem"
    found = controller_ca.read_controller_ca(api, namespace, vclass)
    assert found["available"] and found["configmap"] == f"{namespace}/corp-ca"
    assert found["tls_ca"]


@pytest.mark.standin(publish_ca=False)
def test_scale_from_zero_waits_on_the_dormant_exporter_and_needs_the_controller_ca(
        api, namespace, standin, operator, tmp_path):
    """A lease for a set at zero waits Pending (never Unsatisfiable) on the dormant
    Exporter, and brings up a real one; its backend waits for the controller CA,
    which then lands in the ExporterConfig as tls.ca."""
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    make_class(custom, namespace, bindingMode="WaitForFirstConsumer")
    make_set(custom, namespace, minAvailableReplicas=0)
    operator()

    def names():
        return sorted(e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}=pool")
                      if not e["metadata"].get("deletionTimestamp"))

    wait_for(lambda: names() == ["pool-dormant-0"], message="the dormant Exporter")
    standin.create_lease("lease-a", {"board": "qemu-x86"})

    def pending():
        status = standin.lease("lease-a").get("status") or {}
        assert not status.get("ended"), f"lease ended: {status.get('conditions')}"
        return names() == ["pool-0"] and status

    # The lease made a real Exporter, which replaced the dormant one.
    status = wait_for(pending, timeout=60, message="pool-0 in place of the dormant Exporter")
    assert not status.get("exporterRef")

    # No CA yet: Degraded and a Warning Event naming the ConfigMap, no Pod.
    where = f"ConfigMap {namespace}/jumpstarter-service-ca-cert key ca.crt"

    def degraded():
        found = condition(get_set(custom, namespace), "Degraded") or {}
        return found.get("reason") == "ControllerCAUnavailable" and found

    assert where in wait_for(degraded, message="Degraded/ControllerCAUnavailable")["message"]
    events = wait_for(lambda: [e for e in core.list_namespaced_event(namespace).items
                               if e.reason == "ControllerCAUnavailable"], message="the Warning Event")
    assert events[0].type == "Warning" and where in events[0].message
    assert standin.pods() == []
    assert not (standin.lease("lease-a").get("status") or {}).get("ended")

    # The controller's installation publishes its CA: the Pod is made with
    # it as tls.ca, its exporter registers over TLS, and the lease is served.
    pem = standin.ca_pem
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="jumpstarter-service-ca-cert"), data={"ca.crt": pem}))
    wait_for(lambda: [p for p in standin.pods() if p.metadata.name == "pool-0"], timeout=60,
             message="the Pod of pool-0 once the CA exists")
    secret = core.read_namespaced_secret("pool-0-config", namespace)
    config = json.loads(base64.b64decode(secret.data["pool-0.yaml"]))
    assert base64.b64decode(config["tls"]["ca"]).decode() == pem
    assert config["exitOnLeaseEnd"] is True
    wait_for(lambda: (condition(get_set(custom, namespace), "Degraded") or {}).get("status") == "False",
             message="Degraded cleared")
    assert standin.wait_assigned("lease-a") == "pool-0"
    assert standin.online("pool-0")


def reconcile_by_hand(namespace):
    result = subprocess.run(
        ["ansible-playbook", "playbooks/reconcile.yml",
         "-e", "exporterset_name=pool", "-e", f"exporterset_namespace={namespace}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.standin(publish_ca=False)
def test_the_playbook_by_hand_reads_the_controller_ca_as_the_operator_does(
        api, namespace, standin, testbed, tmp_path):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    reconcile_by_hand(namespace)
    wait_for(lambda: (standin.exporter("pool-0").get("status") or {}).get("credential"),
             message="the credential of pool-0")

    reconcile_by_hand(namespace)
    degraded = condition(get_set(custom, namespace), "Degraded")
    assert degraded["reason"] == "ControllerCAUnavailable"
    assert f"ConfigMap {namespace}/jumpstarter-service-ca-cert key ca.crt" in degraded["message"]
    assert standin.pods() == []

    pem = self_signed_certificate(tmp_path)
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="jumpstarter-service-ca-cert"), data={"ca.crt": pem}))
    reconcile_by_hand(namespace)
    assert [p.metadata.name for p in standin.pods()] == ["pool-0"]
    config = json.loads(base64.b64decode(
        core.read_namespaced_secret("pool-0-config", namespace).data["pool-0.yaml"]))
    assert base64.b64decode(config["tls"]["ca"]).decode() == pem


def test_scale_down_to_zero_never_leaves_only_disabled_exporters(api, namespace, standin, operator,
                                                                 tmp_path):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1, scaleDownCooldown="1s")
    operator()
    wait_for(lambda: [p for p in standin.pods() if p.metadata.name == "pool-0"], message="pool-0 up")

    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                          {"spec": {"minAvailableReplicas": 0}})

    def enabled_names():
        return sorted(e["metadata"]["name"] for e in standin.exporters(f"{SET_LABEL}=pool")
                      if not e["metadata"].get("deletionTimestamp")
                      and (e.get("spec") or {}).get("enabled", True) is not False)

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        enabled = enabled_names()
        assert enabled, "the set's selector had no enabled Exporter"
        if enabled == ["pool-dormant-0"] and not [
                e for e in standin.exporters(f"{SET_LABEL}=pool") if e["metadata"]["name"] == "pool-0"]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"not scaled to the dormant Exporter: {enabled_names()}")

    # A lease now waits for the set instead of ending.
    with no_event(api, "Lease", lambda t, o: o["metadata"]["name"] == "after" and (o.get("status") or {}).get("ended"),
                  3.0, namespace, what="end of the waiting lease"):
        standin.create_lease("after", {"board": "qemu-x86"})
    assert not (standin.lease("after").get("status") or {}).get("ended")


def test_draining_the_last_enabled_exporter_creates_the_dormant_one_first(api, namespace, testbed):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace, name="lab", provisioner="qemu-baremetal.jumpstarter.dev",
               parameters={"hosts": [{"name": "lab1", "address": "192.0.2.1", "slots": 1}]})
    the_pool = make_set(custom, namespace, virtualTargetClassName="lab", minAvailableReplicas=1)
    custom.create_namespaced_custom_object(*JUMPSTARTER, namespace, "exporters", {
        "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
        "metadata": {"name": "pool-0", "labels": {SET_LABEL: "pool", "board": "qemu-x86",
                                                  "virtualtarget.jumpstarter.dev/host": "lab1"},
                     "ownerReferences": [owner(the_pool, "ExporterSet") | {
                         "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1"}]},
        "spec": {"enabled": True}})
    result = subprocess.run(
        ["ansible", "localhost", "-m", "jumpstarter.virtual_exporters.baremetal_drain",
         "-a", f"lab_host=lab1 namespace={namespace}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    exporters = {e["metadata"]["name"]: e for e in custom.list_namespaced_custom_object(
        *JUMPSTARTER, namespace, "exporters")["items"]}
    assert exporters["pool-0"]["spec"]["enabled"] is False
    dormant = exporters["pool-dormant-0"]
    assert dormant["spec"]["enabled"] is True
    assert "virtualtarget.jumpstarter.dev/host" not in dormant["metadata"]["labels"]
    # It was there before pool-0 was switched off.
    assert int(dormant["metadata"]["resourceVersion"]) < int(exporters["pool-0"]["metadata"]["resourceVersion"])
