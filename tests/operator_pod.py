"""The operator installed as a user installs it, with ``kubectl apply -k``,
and run as a Pod on a real node (tests/testbed/node.py).

``tests/overlays/realnode-operator`` (config/rbac and config/manager, the
image scripts/images builds from operator/Containerfile) is built once more
by an overlay of the test's own: the operator's objects in a namespace of
their own with a name prefix (so that several tests, and the cluster-wide
objects of each, never meet on a shared bed), the Deployment limited to the
test's pool namespace. The pool namespace is bound with config/rbac/pool,
pointed at that service account. The operator then runs as config/manager
describes it: its ServiceAccount's projected token, its probes, a read-only
root filesystem.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from image_servers import ImageServer
from testbed.bed import free_ports
from testbed.node import RealNode

ROOT = Path(__file__).resolve().parents[1]
OVERLAY = ROOT / "tests" / "overlays" / "realnode-operator"
DEPLOYMENT = "exporterset-operator-qemu"
# The image the overlay names (its `images` entry): the node's containerd
# must hold the operator image under this name.
OPERATOR_IMAGE = "jve.local/operator:local"


@contextlib.contextmanager
def pod_node(bed, workdir: Path, name: str, *, session_wide: bool = False):
    """A real node of ``bed`` holding the project's images under the names
    the Pods and the operator's overlay give them, with the node's image
    cache made as docs/install.md tells a node's admin (a hostPath the
    kubelet would create root's own, where the images init container, uid
    1001, could not write) and a server of the guest's files on its address."""
    node = RealNode(bed, workdir / "node", name=name, images=("qemu-runtime", "exporter", "operator"),
                    aliases={"exporter": k8s_pod.DEFAULT_IMAGES["exporter"]["image"],
                             "qemu-runtime": k8s_pod.DEFAULT_IMAGES["runtime"]["image"],
                             "operator": OPERATOR_IMAGE})
    # tests/conftest.py's fixture-setup hook is not called for a session
    # fixture (its node is the session): its node's processes outlive tests.
    node.session_wide = session_wide
    node.up()
    print(f"real node {node.name} ready in {node.startup_seconds:.1f} s")
    cache = Path(k8s_pod.NODE_IMAGE_CACHE)
    cache.mkdir(parents=True, exist_ok=True)
    os.chown(cache, k8s_pod.IMAGE_FETCH_UID, k8s_pod.IMAGE_FETCH_UID)
    node.images = ImageServer(workdir / "images", address=node.ip)
    try:
        yield node
    finally:
        node.images.close()
        node.down()


class OperatorPod:
    """The operator of pool namespace ``namespace``, as a Pod of ``node``."""

    def __init__(self, node, namespace: str, workdir: Path):
        self.node = node
        self.bed = node.bed
        self.namespace = namespace
        self.prefix = f"{namespace[:40]}-"
        self.operator_namespace = f"{namespace[:50]}-op"
        self.deployment = self.prefix + DEPLOYMENT
        self.dir = workdir / "operator-install"
        self.pool_dir = workdir / "operator-pool-rbac"
        self.started = None

    def _write(self) -> None:
        container = yaml.safe_load((ROOT / "config/manager/qemu.yaml").read_text())["spec"]["template"]["spec"][
            "containers"][0]
        metrics_arg = next(i for i, arg in enumerate(container["args"])
                           if arg.startswith("--metrics-bind-address="))
        # On the host's network: free ports of the host for its metrics and
        # its probes server (the Pod's probes ask there).
        port, health_port = free_ports(2)
        base = "/spec/template/spec/containers/0"
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "kustomization.yaml").write_text(json.dumps({
            "resources": [os.path.relpath(OVERLAY, self.dir)],
            "namespace": self.operator_namespace,
            "namePrefix": self.prefix,
            "patches": [{"target": {"kind": "Deployment", "name": DEPLOYMENT}, "patch": json.dumps([
                {"op": "add", "path": f"{base}/env/-",
                 "value": {"name": "KUBERNETES_SERVICE_PORT", "value": str(self.bed.config.apiserver_port)}},
                {"op": "replace", "path": f"{base}/args/{metrics_arg}",
                 "value": f"--metrics-bind-address=0.0.0.0:{port}"},
                {"op": "add", "path": f"{base}/args/-", "value": f"--namespace={self.namespace}"},
                {"op": "add", "path": f"{base}/args/-",
                 "value": f"--health-probe-bind-address=0.0.0.0:{health_port}"},
                {"op": "replace", "path": f"{base}/ports/1/containerPort", "value": health_port},
                {"op": "add", "path": f"{base}/args/-", "value": "--log-level=DEBUG"},
                {"op": "replace", "path": f"{base}/ports/0/containerPort", "value": port},
            ])}],
        }))
        # config/rbac/pool in the pool namespace: the qemu Deployment's binding
        # alone, its subject the prefixed account.
        self.pool_dir.mkdir(parents=True, exist_ok=True)
        others = [{"patch": json.dumps({"$patch": "delete", "apiVersion": "rbac.authorization.k8s.io/v1",
                                        "kind": "RoleBinding", "metadata": {"name": f"exporterset-operator-pool-{o}"}})}
                  for o in ("qemu-baremetal", "corellium")]
        (self.pool_dir / "kustomization.yaml").write_text(json.dumps({
            "resources": [os.path.relpath(ROOT / "config/rbac/pool", self.pool_dir)],
            "namespace": self.namespace,
            "patches": [{"target": {"kind": "RoleBinding", "name": "exporterset-operator-pool-qemu"},
                         "patch": json.dumps([
                {"op": "replace", "path": "/roleRef/name", "value": f"{self.prefix}exporterset-operator-pool-qemu"},
                {"op": "replace", "path": "/subjects", "value": [
                    {"kind": "ServiceAccount", "name": self.deployment, "namespace": self.operator_namespace}]},
            ])}, *others],
        }))

    def start(self) -> OperatorPod:
        self._write()
        self.started = time.monotonic()
        self.bed.kubectl("apply", "--server-side", "-k", str(self.pool_dir))
        self.bed.kubectl("apply", "--server-side", "-k", str(self.dir))
        return self

    def wait_ready(self, timeout: float = 180) -> None:
        rollout = self.bed.kubectl("rollout", "status", "-n", self.operator_namespace,
                                   f"deployment/{self.deployment}", f"--timeout={int(timeout)}s", check=False)
        assert rollout.returncode == 0, (rollout.stdout + rollout.stderr, self.log_tail(40))
        print(f"operator Pod Ready {time.monotonic() - self.started:.1f} s after kubectl apply -k")

    def pod(self) -> dict:
        pods = json.loads(self.bed.kubectl("get", "pods", "-n", self.operator_namespace, "-o", "json").stdout)
        running = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
        assert len(running) == 1, [p["metadata"]["name"] for p in pods["items"]]
        return running[0]

    def scale(self, replicas: int, timeout: float = 120) -> None:
        """The Deployment scaled to ``replicas`` (0 or 1), waited for: no
        operator Pod left, or the new one Ready."""
        self.bed.kubectl("scale", "-n", self.operator_namespace, f"deployment/{self.deployment}",
                         f"--replicas={replicas}")
        if replicas:
            self.started = time.monotonic()
            self.wait_ready(timeout)
            return
        deadline = time.monotonic() + timeout
        while json.loads(self.bed.kubectl("get", "pods", "-n", self.operator_namespace, "-o", "json").stdout)["items"]:
            assert time.monotonic() < deadline, "the operator's Pod still there"
            time.sleep(0.2)

    def log_tail(self, lines: int = 30) -> str:
        result = self.bed.kubectl("logs", "-n", self.operator_namespace, f"deployment/{self.deployment}",
                                  f"--tail={lines}", check=False)
        return result.stdout + result.stderr

    def stop(self) -> None:
        """Uninstalls it as it was installed (``kubectl delete -k``): its
        namespace and cluster-wide objects go, and the Pod with them."""
        self.bed.kubectl("delete", "-k", str(self.dir), "--wait=false", "--ignore-not-found", check=False)
