"""The real node (tests/testbed/node.py): a Pod scheduled there runs a real
container from an image the project built (scripts/images), its output is
read back through the API server and the kubelet, and deleting it stops the
container and frees its sandbox.

Select with `-m realnode`; `scripts/realnode build` installs and builds what
it needs (root, containerd, runc, the CNI plugins, the kubelet, the images).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.constants import PROVISIONER_QEMU
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
    disk_create_argv,
    qemu_argv,
)
from exporterset_operator import election
from kubernetes import client
from operator_pod import OPERATOR_IMAGE
from operator_process import ROOT
from pool_helpers import SET_LABEL, make_class, make_set
from qemu_vm import GUEST_BANNER, GUEST_DIR, guest_parameters
from testbed.bed import free_ports
from testbed.node import NODE_LABEL, TAINT_KEY, RealNode

pytestmark = [pytest.mark.realnode, pytest.mark.testbed]

# The overlay installing the operator on the real node (the image name it uses: OPERATOR_IMAGE).
OPERATOR_OVERLAY = ROOT / "tests" / "overlays" / "realnode-operator"


@pytest.fixture(scope="module")
def real_node(testbed_factory):
    bed = testbed_factory("realnode")
    # The operator image also under the name the kustomize overlay gives it.
    node = RealNode(bed, images=("busybox", "qemu-runtime", "exporter", "operator"),
                    aliases={"operator": OPERATOR_IMAGE})
    node.up()
    print(f"real node {node.name} ready in {node.startup_seconds:.1f} s")
    yield node
    node.down()


def _pod(bed, namespace: str, name: str) -> dict | None:
    result = bed.kubectl("get", "pod", "-n", namespace, name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def _create_pod(bed, namespace: str, name: str, spec: dict, node_selector: dict | None = None) -> None:
    """Creates the Pod ``name`` with ``spec``, tolerating the real nodes'
    taint; through the scheduler, the real-node label (or ``node_selector``)
    brings it to a real node, not to a kwok one."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": node_selector or {NODE_LABEL: "true"},
            "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            **spec,
        },
    }
    bed.kubectl("apply", "-f", "-", input=json.dumps(pod))


def _wait_phase(bed, namespace: str, name: str, phases: tuple[str, ...], what: str, timeout: float) -> dict:
    """The Pod once its phase is one of ``phases``."""
    def reached():
        current = _pod(bed, namespace, name)
        return current if current and current["status"].get("phase") in phases else None

    return _wait(what, reached, timeout=timeout)


def _wait(what: str, condition, timeout: float = 60.0, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def test_node_registers_itself_ready_and_tainted(real_node):
    node = real_node.node()
    assert node is not None
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True"
    # The kubelet, not kwok, owns this Node.
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})
    # The kubelet is built from the API server's source and version.
    server = json.loads(real_node.bed.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert node["status"]["nodeInfo"]["kubeletVersion"] == server["gitVersion"]
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.6")
    # The controller-manager's own taints (not-ready) may still be there
    # for a moment after the kubelet reports Ready.
    assert {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]


def test_kubelet_admits_only_the_bed_s_certificates(real_node):
    """The kubelet serves logs and exec on the node's bridge address: a client
    without a certificate of the bed's CA is refused before authorization."""
    bed = real_node.bed
    url = f"https://{real_node.ip}:{real_node.config.kubelet_port}/pods"
    # The kubelet serves a certificate it signed itself; the client's is what
    # is checked here.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, context=context, timeout=10)
    assert refused.value.code == 401
    context.load_cert_chain(bed.pki_dir / "admin.crt", bed.pki_dir / "admin.key")
    with urllib.request.urlopen(url, context=context, timeout=10) as response:
        assert response.status == 200
        assert json.load(response)["kind"] == "PodList"


def test_pod_runs_a_real_container_and_is_deleted_cleanly(real_node):
    bed = real_node.bed
    namespace, name = "default", "busybox-echo"
    image = real_node.config.images["busybox"]
    marker = f"hello from the real node {time.time_ns()}"
    started = time.monotonic()
    _create_pod(bed, namespace, name, {
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": "echo",
                "image": image,
                "imagePullPolicy": "Never",
                # Writes the marker and what only a real container sees
                # (its own hostname, PID 1 being the shell), then waits
                # for SIGTERM.
                "command": ["/bin/sh", "-c",
                            # "$$$$" is the shell's "$$" once Kubernetes has expanded
                            # its own $(VAR) references in the command.
                            f'echo "{marker}"; echo "hostname=$(hostname) pid=$$$$"; '
                            "trap 'echo stopping; exit 0' TERM; while true; do sleep 1; done"],
            }
        ],
    })
    current = _wait_phase(bed, namespace, name, ("Running",), "the Pod to run", timeout=90)
    assert current["spec"]["nodeName"] == real_node.name
    pod_ip = current["status"]["podIP"]
    assert pod_ip.startswith(real_node.config.subnet.rsplit(".", 2)[0])
    print(f"Pod Running {time.monotonic() - started:.1f} s after it was created, IP {pod_ip}")

    logs = _wait("the container's output", lambda: (
        out if marker in (out := bed.kubectl("logs", "-n", namespace, name, check=False).stdout) else None))
    assert f"hostname={name} pid=1" in logs, logs

    # The container really runs under containerd, in the node's own cgroup parent.
    tasks = real_node.ctr("tasks", "list").stdout
    assert tasks.count("RUNNING") >= 2, tasks  # the sandbox (pause) and the container

    deleted = time.monotonic()
    bed.kubectl("delete", "pod", "-n", namespace, name, "--wait=true", "--timeout=60s")
    print(f"Pod deleted in {time.monotonic() - deleted:.1f} s")
    assert _pod(bed, namespace, name) is None
    _wait("the node's containers to stop", lambda: "RUNNING" not in real_node.ctr("tasks", "list").stdout,
          timeout=30)


def test_qemu_runtime_image_boots_the_guest_in_a_pod(real_node):
    """The runtime image scripts/images builds from Debian's QEMU runs the
    provisioner's own disk and QEMU command lines (TCG) in a Pod with the
    provisioner's restricted security context, as the image's non-root user,
    and the guest reaches userspace on its serial console."""
    bed = real_node.bed
    namespace, name = "default", "qemu-guest"
    run_dir = "/run/jumpstarter"
    # The cache's guest files, mounted read-only where the image's user may
    # read them (its /root is closed).
    guest = "/guest"
    parameters = guest_parameters(kernel={"path": f"{guest}/vmlinuz"}, initrd={"path": f"{guest}/initramfs.cpio.gz"})
    restricted = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsNonRoot": True,
    }
    image = real_node.config.images["qemu-runtime"]
    mounts = [{"name": "run", "mountPath": run_dir},
              {"name": "guest", "mountPath": guest, "readOnly": True}]
    started = time.monotonic()
    _create_pod(bed, namespace, name, {
        "terminationGracePeriodSeconds": 2,
        "volumes": [{"name": "run", "emptyDir": {}},
                    {"name": "guest", "hostPath": {"path": str(GUEST_DIR), "type": "Directory"}}],
        "initContainers": [{
            "name": "disk", "image": image, "imagePullPolicy": "Never",
            "command": disk_create_argv(parameters, run_dir),
            "securityContext": restricted, "volumeMounts": mounts,
        }],
        "containers": [{
            "name": "qemu", "image": image, "imagePullPolicy": "Never",
            "command": qemu_argv(parameters, run_dir=run_dir, name=name, accel="tcg"),
            "securityContext": restricted, "volumeMounts": mounts,
        }],
    })

    def serial_log():
        result = bed.kubectl("exec", "-n", namespace, name, "-c", "qemu", "--", "cat", f"{run_dir}/serial.log",
                             check=False)
        return result.stdout if GUEST_BANNER.decode() in result.stdout else None

    current = _wait_phase(bed, namespace, name, ("Running",), "the QEMU Pod to run", timeout=120)
    assert current["spec"]["nodeName"] == real_node.name
    try:
        _wait("the guest's banner on its serial console", serial_log, timeout=120, interval=1)
    except AssertionError as error:
        logs = bed.kubectl("logs", "-n", namespace, name, "-c", "qemu", check=False)
        raise AssertionError(f"{error}; QEMU's output: {logs.stdout}{logs.stderr}") from None
    print(f"guest in a Pod reached userspace {time.monotonic() - started:.1f} s after the Pod was created")
    user = bed.kubectl("exec", "-n", namespace, name, "-c", "qemu", "--", "id", "-u").stdout.strip()
    assert user == "1000"
    bed.kubectl("delete", "pod", "-n", namespace, name, "--wait=true", "--timeout=60s")
    assert _pod(bed, namespace, name) is None


# The driver classes the collection's exporter configs and the samples name.
EXPORTER_DRIVERS = (
    "jumpstarter_driver_virtual_qemu.driver.VirtualQemu",
    "jumpstarter_driver_qemu.driver.Qemu",
    "jumpstarter_driver_corellium.driver.Corellium",
    "jumpstarter_driver_network.driver.TcpNetwork",
)
IMPORT_DRIVERS = """
import importlib, sys
for path in sys.argv[1:]:
    module, _, name = path.rpartition(".")
    getattr(importlib.import_module(module), name)
print("drivers:", len(sys.argv) - 1)
"""


def test_exporter_image_runs_jmp_with_the_collection_s_driver(real_node):
    """The exporter image scripts/images builds (jumpstarter 0.9.0 from PyPI and
    the collection's driver, installed offline) runs `jmp` and loads every
    driver class the rendered configs name, as its non-root user, in a Pod
    with the provisioner's restricted security context."""
    bed = real_node.bed
    namespace, name = "default", "exporter-image"
    script = (f"id -u; jmp --help >/dev/null && echo jmp ok; "
              f"python3 -c '{IMPORT_DRIVERS}' {' '.join(EXPORTER_DRIVERS)}")
    _create_pod(bed, namespace, name, {
        "restartPolicy": "Never",
        "containers": [{
            "name": "exporter", "image": real_node.config.images["exporter"], "imagePullPolicy": "Never",
            "command": ["/bin/sh", "-c", script],
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                "seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": True},
        }],
    })
    current = _wait_phase(bed, namespace, name, ("Succeeded", "Failed"), "the exporter image's Pod to finish",
                          timeout=120)
    logs = bed.kubectl("logs", "-n", namespace, name).stdout
    assert current["status"]["phase"] == "Succeeded", logs
    assert logs.split() == ["1000", "jmp", "ok", "drivers:", str(len(EXPORTER_DRIVERS))], logs
    bed.kubectl("delete", "pod", "-n", namespace, name, "--wait=true", "--timeout=60s")


# What the operator image is checked for in config/manager's Pod: its user, its
# entry point, the pool logic imported from the installed collection, and an
# Ansible run (which writes its temporary files) under a read-only root.
OPERATOR_CHECKS = """
id -u
python3 -m exporterset_operator --help >/dev/null && echo operator ok
python3 -c 'import exporterset_operator.__main__ as m; print(m._collection_root())'
ansible localhost -c local -m ansible.builtin.ping 2>&1 | grep -q SUCCESS && echo ansible ok
ansible-doc jumpstarter.virtual_exporters.exporter_pods >/dev/null && echo collection ok
"""


def test_operator_image_runs_in_the_manager_s_pod(real_node):
    """The operator image scripts/images builds from operator/Containerfile (on
    a Python base of Debian's packages) runs in the Pod config/manager
    describes: its pod and container security contexts (non-root, read-only
    root filesystem, no capabilities) and its emptyDir at /tmp, the only
    writable place."""
    bed = real_node.bed
    namespace, name = "default", "operator-image"
    manager = yaml.safe_load((ROOT / "config/manager/qemu.yaml").read_text())
    template = manager["spec"]["template"]["spec"]
    container = template["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    _create_pod(bed, namespace, name, {
        "restartPolicy": "Never",
        "securityContext": template["securityContext"],
        "volumes": template["volumes"],
        "containers": [{
            "name": "operator", "image": real_node.config.images["operator"], "imagePullPolicy": "Never",
            "command": ["/bin/sh", "-c", OPERATOR_CHECKS],
            "securityContext": container["securityContext"],
            "volumeMounts": container["volumeMounts"],
        }],
    })
    current = _wait_phase(bed, namespace, name, ("Succeeded", "Failed"), "the operator image's Pod to finish",
                          timeout=120)
    logs = bed.kubectl("logs", "-n", namespace, name).stdout
    assert current["status"]["phase"] == "Succeeded", logs
    assert logs.split() == ["1001", "operator", "ok",
                            "/usr/share/ansible/collections/ansible_collections/jumpstarter/virtual_exporters",
                            "ansible", "ok", "collection", "ok"], logs
    bed.kubectl("delete", "pod", "-n", namespace, name, "--wait=true", "--timeout=60s")


def test_operator_installed_with_kubectl_apply_k_runs_as_a_pod_and_reconciles_a_set(real_node, tmp_path):
    """`kubectl apply -k` of tests/overlays/realnode-operator (config/rbac and
    config/manager, the image scripts/images built): the operator runs on the
    real node as config/manager's Pod, under its ServiceAccount's projected
    token, passes its readiness probe, takes its leader Lease and reconciles a
    set in a namespace bound with config/rbac/pool: the set's Exporter is made
    and its status written."""
    bed = real_node.bed
    operator_namespace, deployment = "jumpstarter-virtual", "exporterset-operator-qemu"
    # The settings of a run: the bed's API server port, free metrics and
    # probe ports on the host's network (the kubelet probes the latter).
    container = yaml.safe_load((ROOT / "config/manager/qemu.yaml").read_text())["spec"]["template"]["spec"][
        "containers"][0]
    metrics_arg = next(i for i, arg in enumerate(container["args"]) if arg.startswith("--metrics-bind-address="))
    metrics_port, health_port = free_ports(2)
    base = "/spec/template/spec/containers/0"
    (tmp_path / "kustomization.yaml").write_text(json.dumps({
        "resources": [os.path.relpath(OPERATOR_OVERLAY, tmp_path)],
        "patches": [{"target": {"kind": "Deployment", "name": deployment}, "patch": json.dumps([
            {"op": "add", "path": f"{base}/env/-",
             "value": {"name": "KUBERNETES_SERVICE_PORT", "value": str(bed.config.apiserver_port)}},
            {"op": "replace", "path": f"{base}/args/{metrics_arg}",
             "value": f"--metrics-bind-address=0.0.0.0:{metrics_port}"},
            {"op": "replace", "path": f"{base}/ports/0/containerPort", "value": metrics_port},
            {"op": "add", "path": f"{base}/args/-", "value": f"--health-probe-bind-address=0.0.0.0:{health_port}"},
            {"op": "replace", "path": f"{base}/ports/1/containerPort", "value": health_port},
        ])}],
    }))
    started = time.monotonic()
    bed.kubectl("apply", "--server-side", "-k", str(tmp_path))
    namespace = "operator-pod"
    try:
        bed.kubectl("create", "namespace", namespace)
        bed.kubectl("apply", "--server-side", "-k", str(ROOT / "config/rbac/pool"), "-n", namespace)
        rollout = bed.kubectl("rollout", "status", "-n", operator_namespace, f"deployment/{deployment}",
                              "--timeout=180s", check=False)
        pods = json.loads(bed.kubectl("get", "pods", "-n", operator_namespace, "-o", "json").stdout)["items"]
        assert rollout.returncode == 0, (rollout.stdout + rollout.stderr,
                                         [p["status"] for p in pods],
                                         bed.kubectl("logs", "-n", operator_namespace, f"deployment/{deployment}",
                                                     check=False).stdout[-3000:])
        print(f"operator Pod Ready {time.monotonic() - started:.1f} s after kubectl apply -k")
        [pod] = pods
        assert pod["spec"]["nodeName"] == real_node.name
        assert pod["spec"]["serviceAccountName"] == deployment
        assert pod["spec"]["containers"][0]["image"] == OPERATOR_IMAGE

        with bed.api_client() as api:
            custom = client.CustomObjectsApi(api)
            make_class(custom, namespace)
            make_set(custom, namespace, minAvailableReplicas=1)
            reconciled = time.monotonic()

            def reconciled_set():
                found = custom.get_namespaced_custom_object("virtualtarget.jumpstarter.dev", "v1alpha1", namespace,
                                                            "exportersets", "pool")
                conditions = {c["type"]: c for c in (found.get("status") or {}).get("conditions", [])}
                exporters = bed.kubectl("get", "exporters.jumpstarter.dev", "-n", namespace, "-l",
                                        f"{SET_LABEL}=pool", "-o", "name").stdout.split()
                return (exporters and conditions.get("Progressing", {}).get("observedGeneration") == 1
                        and (exporters, conditions))

            try:
                exporters, conditions = _wait("the operator to make the set's Exporter and write its status",
                                              reconciled_set, timeout=120)
            except AssertionError as error:
                found = custom.get_namespaced_custom_object("virtualtarget.jumpstarter.dev", "v1alpha1", namespace,
                                                            "exportersets", "pool")
                logs = bed.kubectl("logs", "-n", operator_namespace, pod["metadata"]["name"], check=False)
                raise AssertionError(f"{error}; the set's status: {found.get('status')}; the operator's log:\n"
                                     f"{(logs.stdout + logs.stderr)[-4000:]}") from None
            # One Exporter for the warm buffer of one; with no controller to
            # issue its credential, it waits for it (no Pod yet).
            assert len(exporters) == 1, exporters
            assert conditions["Progressing"]["status"] == "True", conditions["Progressing"]
            assert conditions["Degraded"]["status"] == "False", conditions["Degraded"]
            print(f"set reconciled by the operator Pod {time.monotonic() - reconciled:.1f} s after it was made")
        lease = json.loads(bed.kubectl("get", "lease", "-n", operator_namespace,
                                       election.lease_name(PROVISIONER_QEMU), "-o", "json").stdout)
        # HOSTNAME_PID of the leader: the host's name (the Pod is on its
        # network, and so in its UTS namespace) and PID 1, the container's
        # own process, not one of the host.
        assert lease["spec"]["holderIdentity"] == f"{socket.gethostname()}_1", lease["spec"]
    finally:
        # Not waited for: the set's deletion (its finalizer, ~30 s) is the
        # host-process operator tests' subject, the private bed goes with the
        # module, and the node's `down` stops whatever Pod is left.
        bed.kubectl("delete", "-k", str(tmp_path), "--wait=false", check=False)
        bed.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_down_leaves_nothing_behind(real_node, tmp_path):
    """A second node on the same bed, stopped while its Pod still runs: `down`
    stops the Pod's containers and removes every trace of the node from the
    machine (mounts, network namespace, bridge, cgroups, socket and kubelet
    directories, shims) and its Node from the API."""
    bed = real_node.bed
    node = RealNode(bed, tmp_path / "second", name="real-node-1", images=())
    node.up()
    try:
        _create_pod(bed, "default", "left-running", {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "pause", "image": node.config.images["pause"], "imagePullPolicy": "Never"}],
        }, node_selector={"kubernetes.io/hostname": node.name})
        _wait_phase(bed, "default", "left-running", ("Running",), "the Pod to run", timeout=90)
        netns = [p.name for p in Path("/run/netns").glob("cni-*")]
        assert netns, "the running Pod has a network namespace"
    finally:
        node.down()

    dirs = (str(node.state_dir), str(node.run_dir), str(node.kubelet_dir))
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    assert [m for m in mounts if m.startswith(dirs)] == []
    assert not node.run_dir.exists() and not node.kubelet_dir.exists()
    subnet = ipaddress.ip_network(node.config.subnet)
    for name in (p.name for p in Path("/run/netns").glob("cni-*")):
        listed = subprocess.run(["ip", "-n", name, "-4", "-o", "addr"], capture_output=True, text=True).stdout
        assert not any(ipaddress.ip_interface(w).ip in subnet for line in listed.splitlines()
                       for w in line.split() if "/" in w and w[0].isdigit()), name
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert f" {node.bridge}:" not in links
    assert list(Path("/sys/fs/cgroup").glob(f"*/{node.cgroup_parent.lstrip('/')}")) == []
    shims = [p for p in Path("/proc").glob("[0-9]*")
             if str(node.socket).encode() in _read(p / "cmdline")]
    assert shims == []
    assert node.node() is None
    # The first node and its Pods are untouched.
    assert real_node.is_running() and real_node.node() is not None


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
