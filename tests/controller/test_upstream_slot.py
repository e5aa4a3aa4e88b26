"""Our operator image in the slot upstream's Jumpstarter operator gives an
exporter-set controller, on the real node, under exactly that slot's Role.

The ServiceAccount, Role, RoleBinding and Deployment are written from the
slot's description (tests/upstream_slot.py, docs/install.md): the image
scripts/images builds from operator/Containerfile, its command, args and
NAMESPACE as upstream's operator gives them. What the bed needs beside
them, and nothing else: the Pod on the node's host network with the API
server's loopback address and the account's projected token (the bed runs
without the ServiceAccount admission plugin), and its node selector and
toleration. One pool of real QEMU Pods (InPlaceReuse, warm buffer 1) goes
through its warm buffer, a lease (a second instance made), the lease's end
(the used instance reset by a fresh Pod: the Role has no pods/exec) and the
surplus's scale-down (its Exporter deleted, its Secrets left to the garbage
collector: the Role has no Secret deletion). The API server's audit log then
shows that the operator's account sent nothing the Role does not grant, not
even once, and the set says what is off, naming each missing grant.

Select with ``-m realnode`` (root; ``scripts/realnode build`` installs what
it needs); run under ``flock /tmp/jve-realnode.lock``.
"""

from __future__ import annotations

import json
import socket
import time
from datetime import UTC, datetime

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import permissions
from audit_log import SELF_REVIEWS, audited, written_after
from jumpstarter_standin import condition_true, wait_for
from jumpstarter_standin.pytest_plugin import serve_namespace
from kubernetes import client
from operator_pod import OPERATOR_IMAGE
from pool_helpers import GROUP, SET_LABEL, condition, get_set, make_set
from realnode_guest import BOARD, guest_class
from testbed.node import NODE_LABEL, TAINT_KEY
from upstream_slot import granted, slot_name, slot_objects

pytestmark = [pytest.mark.testbed, pytest.mark.slow]

JUMPSTARTER = "jumpstarter"
NAMESPACE = "jumpstarter-lab"
PROVISIONER = "qemu.jumpstarter.dev"
HEALTH_PORT = 8081


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def bed_placement(deployment: dict, apiserver_port: int) -> dict:
    """The slot's Deployment as the bed can run it (see the module's text);
    the slot's own fields are left as they are."""
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    spec.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet", nodeSelector={NODE_LABEL: "true"},
                tolerations=[{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}])
    container["env"] += [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                         {"name": "KUBERNETES_SERVICE_PORT", "value": str(apiserver_port)}]
    container["volumeMounts"] = [{"name": "service-account", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    spec["volumes"] = [{"name": "service-account", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]}}]
    if not _free(HEALTH_PORT):
        # On the host's network the probes' port is the host's: another
        # process there has it.
        port = next(p for p in range(18081, 18181) if _free(p))
        container["args"] = [a.replace(f":{HEALTH_PORT}", f":{port}") for a in container["args"]]
        for probe in ("livenessProbe", "readinessProbe"):
            container[probe]["httpGet"]["port"] = port
        container["ports"][0]["containerPort"] = port
    return deployment


@pytest.fixture
def slot_bed(testbed, pod_real_node):
    """The session's bed, whose audit log keeps the slot account's requests
    and those in its namespace (tests/testbed's SHARED_AUDIT_USERS), and its
    real node holding the project's images; the namespace goes afterwards."""
    yield testbed, pod_real_node
    testbed.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)


class View:
    """What guest_class asks of a pool: its API, namespace and image server."""

    def __init__(self, api_client, node):
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace = NAMESPACE
        self.images = node.images


def exercise(view, standin, board, started):
    """The pool's life under the slot's Role, from a set of warm buffer 1
    and at most 2 (InPlaceReuse, no scale-down until asked): the warm
    buffer, a lease (a second instance made), the lease's end (the used
    instance reset by a fresh Pod of the same Exporter), the scale-down (an
    Exporter deleted, its Secrets collected); then what the set says."""
    def live():
        return {e["metadata"]["name"]: e for e in standin.exporters(f"{SET_LABEL}=pool")
                if not e["metadata"].get("deletionTimestamp") and "dormant" not in e["metadata"]["name"]}

    def settled(**expected):
        def check():
            status = get_set(view.custom, NAMESPACE).get("status") or {}
            return all(status.get(k) == v for k, v in expected.items()) and status
        return wait_for(check, timeout=180, interval=0.5, message=f"the set at {expected}")

    settled(availableReplicas=1, replicas=1)
    (first,) = live()
    pod_uid = view.core.read_namespaced_pod(first, NAMESPACE).metadata.uid
    print(f"warm buffer reached {time.monotonic() - started:.1f} s after apply")
    standin.create_lease("lease-a", {"board": board})
    assert standin.wait_assigned("lease-a") == first
    settled(availableReplicas=1, replicas=2, leasedReplicas=1)
    standin.release("lease-a")

    def reset():
        exporter = live().get(first)
        try:
            pod = view.core.read_namespaced_pod(first, NAMESPACE)
        except client.ApiException:
            return None
        return (exporter and pod.metadata.uid != pod_uid and condition_true(exporter, "Online")
                and exporter["spec"].get("enabled", True)
                and "reused-after" in str(exporter["metadata"].get("annotations")))
    wait_for(reset, timeout=180, interval=0.5, message=f"{first} reset in a fresh Pod")
    settled(availableReplicas=2, replicas=2, leasedReplicas=0)
    both = set(live())
    view.custom.patch_namespaced_custom_object(*GROUP, NAMESPACE, "exportersets", "pool",
                                               {"spec": {"scaleDownCooldown": "1s"}})
    settled(availableReplicas=1, replicas=1, leasedReplicas=0)
    (removed,) = both - set(live())
    gone = {f"{removed}-config", f"{removed}-exporter"}
    wait_for(lambda: not gone & {s.metadata.name for s in view.core.list_namespaced_secret(NAMESPACE).items},
             timeout=60, message="the removed instance's Secrets collected")
    print(f"warm, lease, reset and scale-down done {time.monotonic() - started:.1f} s after apply")
    # The set says what is off, naming each missing grant, once.
    limited = condition(get_set(view.custom, NAMESPACE), permissions.CONDITION)
    expected = permissions.condition(permissions.Permissions.from_rules(
        [{"apiGroups": [g], "resources": [r], "verbs": [v]} for g, r, v in granted()]))
    assert (limited["status"], limited["reason"], limited["message"]) == (
        "True", "MissingPermission", expected["message"])
    events = [e for e in view.core.list_namespaced_event(NAMESPACE).items
              if e.reason == "MissingPermission" and e.involved_object.name == "pool"]
    assert [(e.type, e.count, e.message) for e in events] == [("Warning", 1, expected["message"])]


def check_audit(bed, account):
    """Not one request of ``account`` outside the Role: each feature that
    needs more was turned off at start-up, not found out by a 403."""
    stopped = datetime.now(UTC)

    def flushed():
        # A request of the test's own in the namespace, audited after the
        # operator's last: once it is in the log, so is everything before it.
        bed.kubectl("get", "configmaps", "-n", NAMESPACE, check=False)
        return written_after(bed.audit_log, stopped)
    wait_for(flushed, timeout=30, message="the audit log flushed")
    used, refused = audited(bed.audit_log, f"system:serviceaccount:{NAMESPACE}:{account}")
    assert refused == [], refused
    assert used - granted() - SELF_REVIEWS == set(), sorted(used - granted())
    assert ("authorization.k8s.io", "selfsubjectrulesreviews", "create") in used


def apply_slot(bed, objects, *more):
    """The slot's ServiceAccount, Role and RoleBinding, and ``more``."""
    bed.kubectl("apply", "--server-side", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "List",
        "items": [objects[k] for k in ("ServiceAccount", "Role", "RoleBinding")] + list(more)}))


def the_set(view, board):
    # No scale-down while the used instance is reset (it would be the first
    # to go): exercise() shortens the cooldown once it serves again.
    make_set(view.custom, NAMESPACE, board=board, virtualTargetClassName="guest", minAvailableReplicas=1,
             maxReplicas=2, recycleStrategy="InPlaceReuse", scaleDownCooldown="1h")


@pytest.mark.realnode
def test_a_pool_under_exactly_the_slots_role(slot_bed):
    bed, node = slot_bed
    objects = slot_objects(JUMPSTARTER, NAMESPACE, PROVISIONER, OPERATOR_IMAGE)
    account = objects["ServiceAccount"]["metadata"]["name"]
    assert account == f"{JUMPSTARTER}-exporterset-{slot_name(PROVISIONER)}" == (
        "jumpstarter-exporterset-qemu-jumpstarter-dev")
    assert f"system:serviceaccount:{NAMESPACE}:{account}" in bed.config.audit_users
    assert NAMESPACE in bed.config.audit_namespaces
    deployment = bed_placement(objects["Deployment"], bed.config.apiserver_port)
    started = time.monotonic()
    with bed.api_client() as api, serve_namespace(bed.kubeconfig, NAMESPACE, grpc_host=node.ip,
                                                  pod_exporters=False) as standin:
        view = View(api, node)
        apply_slot(bed, objects, deployment)
        guest_class(view, "guest")
        the_set(view, BOARD)
        try:
            rollout = bed.kubectl("rollout", "status", "-n", NAMESPACE, f"deployment/{account}", "--timeout=120s",
                                  check=False)
            assert rollout.returncode == 0, rollout.stdout + rollout.stderr
            print(f"operator Ready {time.monotonic() - started:.1f} s after apply")
            exercise(view, standin, BOARD, started)
        finally:
            print(bed.kubectl("logs", "-n", NAMESPACE, f"deployment/{account}", "--tail=40", check=False).stdout)
            bed.kubectl("delete", "deployment", "-n", NAMESPACE, account, "--wait=false", check=False)
        check_audit(bed, account)
        print(f"the slot's pool: {time.monotonic() - started:.1f} s from apply to the audit's check")

