"""A warm pool on this machine, live: the test bed's control plane, the
operator, a sample QEMU class and set, and a table of the pool as it fills.

The Jumpstarter controller serving the namespace is the test stand-in
(``tests/jumpstarter_standin/``; the controller's Go module cannot be fetched
on these machines): its reconcile loops issue the credentials and assign
leases on their own, it serves its gRPC services over TLS and publishes its
CA, and it plays the ``jmp run`` process of every running exporter Pod (kwok
runs no containers), which registers with the config the operator wrote.

    scripts/demo [--available 2] [--max 6] [--seconds N] [--real-node]

With ``--real-node`` (as root) the Pods run for real on a node of their own
(containerd and a kubelet, tests/testbed/node.py) from the images the
project builds: QEMU boots the test guest in each, the exporter sidecar's
own ``jmp run`` registers with the stand-in over TLS, and the demo prints
each guest's console line. ``scripts/demo`` builds what either mode needs
first (the bed's binaries; the node's packages, kubelet, images and the
test guest).

It prints how to lease a target with ``jmp`` (a client config of its own
for a Client ``demo-user``) and how the lease ends.

Ctrl-C stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from jumpstarter_standin.pytest_plugin import serve_namespace  # noqa: E402
from kubernetes import client  # noqa: E402
from operator_process import OperatorProcess  # noqa: E402
from pool_helpers import get_set, make_class, make_set  # noqa: E402
from testbed import CACHE_DIR, TestBed  # noqa: E402

NAMESPACE = "demo"
LESSEE = "demo-user"
# The label selector of the sample set's exporters (pool_helpers.make_set).
BOARD = "board=qemu-x86"


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def row(status: dict) -> str:
    fields = ("replicas", "readyReplicas", "availableReplicas", "leasedReplicas")
    return "  ".join(f"{f}={status.get(f, 0)}" for f in fields)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--available", type=int, default=2, help="warm buffer of the sample set")
    parser.add_argument("--max", type=int, default=6, help="maxReplicas of the sample set")
    parser.add_argument("--seconds", type=float, default=0,
                        help="stop by itself after this long (0: run until Ctrl-C)")
    parser.add_argument("--real-node", action="store_true",
                        help="run the Pods on a real node (root): QEMU boots the test guest in each")
    args = parser.parse_args()

    state = CACHE_DIR / "demo"
    say("starting etcd, kube-apiserver, controller-manager, scheduler and kwok")
    bed = TestBed(state / "bed")
    # Every run starts from a fresh bed: the controller stand-in's CA,
    # endpoint and token keys are new each run, so Exporters configured for
    # an earlier run's controller could never register with this one.
    if bed.is_running():
        bed.stop_processes()
    shutil.rmtree(bed.state_dir, ignore_errors=True)
    bed.up()
    stop = {"now": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    operator = None
    node = images = None
    try:
        grpc_host = None
        if args.real_node:
            node, images = real_node(bed, state)
            grpc_host = node.ip
        say("starting the Jumpstarter controller stand-in for namespace demo")
        with bed.api_client() as api, serve_namespace(bed.kubeconfig, NAMESPACE, grpc_host=grpc_host,
                                                      pod_exporters=node is None) as standin:
            custom = client.CustomObjectsApi(api)
            if node is None:
                make_class(custom, NAMESPACE)
            else:
                make_guest_class(custom, node, images)
            make_set(custom, NAMESPACE, minAvailableReplicas=args.available, maxReplicas=args.max,
                     scaleDownCooldown="30s")
            say("starting the operator (provisioner qemu.jumpstarter.dev)")
            operator = OperatorProcess(str(bed.kubeconfig), NAMESPACE, state).start()
            operator.wait_ready()
            say(f"operator log: {operator.log_path}")
            config = lessee_config(standin, state)
            say("to use it from another shell (the controller stand-in assigns leases as the controller does):")
            for line in usage(bed.env, config, shell=node is not None):
                print(line)
            say("the pool (ExporterSet demo/pool), refreshed every second:")
            started = time.monotonic()
            last = ""
            status = {}
            reported: set[tuple[str, str]] = set()
            while not stop["now"]:
                for lease in standin.leases():
                    lease_status = lease.get("status") or {}
                    exporter = (lease_status.get("exporterRef") or {}).get("name")
                    key = (lease["metadata"]["uid"], exporter)
                    if exporter and key not in reported:
                        reported.add(key)
                        say(f"lease {lease['metadata']['name']} assigned to {exporter}")
                if node is not None:
                    show_consoles(bed, reported)
                status = get_set(custom, NAMESPACE).get("status") or {}
                line = row(status)
                if line != last:
                    print(f"  {time.monotonic() - started:6.1f}s  {line}", flush=True)
                    last = line
                if args.seconds and time.monotonic() - started > args.seconds:
                    break
                time.sleep(1)
            # The operator stops before the controller it talks to.
            operator.stop()
            operator = None
            return 0 if status.get("availableReplicas", 0) >= args.available else 1
    finally:
        say("stopping")
        if operator is not None:
            operator.stop()
        if images is not None:
            images.close()
        if node is not None:
            node.down()
        bed.down(remove=True)


def lessee_config(standin, state: Path) -> Path:
    """A Client of the demo's controller and its ``jmp`` client config."""
    standin.custom.create_namespaced_custom_object(
        "jumpstarter.dev", "v1alpha1", NAMESPACE, "clients",
        {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Client", "metadata": {"name": LESSEE}, "spec": {}})
    return standin.grpc.write_client_config(state / "client.yaml", LESSEE)


def usage(env: dict, config: Path, shell: bool) -> list[str]:
    """The commands to watch the pool and to lease from it, as jmp 0.9.0 spells them."""
    def jmp(command):
        return f"  jmp {command} --client-config {config}"
    lines = [f"  export {key}={value}" for key, value in env.items()]
    lines += [f"  kubectl -n {NAMESPACE} get exportersets,exporters,pods",
              "  # a lease takes one warm exporter; the pool refills:",
              jmp(f"create lease -l {BOARD} --duration 1h -o name"),
              jmp("get leases")]
    if shell:
        lines += [jmp("shell --lease LEASE") + "   # j power on, j serial ...; exit leaves the lease",
                  jmp(f"shell -l {BOARD} --duration 30m") + "   # a lease of its own, ended on exit"]
    lines += ["  # the lease ends, and the pool recycles its exporter:",
              jmp("delete leases LEASE") + "   # or --all"]
    return lines


def real_node(bed, state):
    """The real node, its images under the provisioner's default names, the
    node's image cache made as docs/install.md says, and a server of the
    test guest's kernel and initramfs on the node's address."""
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
    from image_servers import ImageServer
    from testbed.node import RealNode

    say("starting a real node (containerd and a kubelet) with the project's images")
    node = RealNode(bed, state / "node", name="demo-node", images=("qemu-runtime", "exporter"), aliases={
        "exporter": k8s_pod.DEFAULT_IMAGES["exporter"]["image"],
        "qemu-runtime": k8s_pod.DEFAULT_IMAGES["runtime"]["image"]})
    node.up()
    cache = Path(k8s_pod.NODE_IMAGE_CACHE)
    cache.mkdir(parents=True, exist_ok=True)
    os.chown(cache, k8s_pod.IMAGE_FETCH_UID, k8s_pod.IMAGE_FETCH_UID)
    return node, ImageServer(state / "images", address=node.ip)


def make_guest_class(custom, node, images):
    """The sample class, booting the test guest (scripts/guest-image) on the real node."""
    from qemu_vm import GUEST_DIR, guest_parameters
    from testbed.node import NODE_LABEL, TAINT_KEY

    kernel_url, kernel_digest = images.add("vmlinuz", GUEST_DIR / "vmlinuz")
    initrd_url, initrd_digest = images.add("initramfs.cpio.gz", GUEST_DIR / "initramfs.cpio.gz")
    parameters = guest_parameters(kvm=False, kernel={"url": kernel_url, "digest": kernel_digest},
                                  initrd={"url": initrd_url, "digest": initrd_digest})
    make_class(custom, NAMESPACE, parameters=parameters, scheduling={
        "nodeSelector": {NODE_LABEL: "true"},
        "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]})


def show_consoles(bed, reported):
    """Each running Pod's guest banner, once, read from its serial log."""
    from qemu_vm import GUEST_BANNER

    listed = bed.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json", check=False).stdout or "{}"
    running = [(pod["metadata"]["name"], pod["metadata"]["uid"]) for pod in json.loads(listed).get("items", [])
               if (pod.get("status") or {}).get("phase") == "Running"]
    for name, uid in running:
        if (uid, "console") in reported:
            continue
        log = bed.kubectl("exec", "-n", NAMESPACE, name, "-c", "qemu", "--", "cat", "/run/jumpstarter/serial.log",
                          check=False).stdout
        line = next((text for text in log.splitlines() if GUEST_BANNER.decode() in text), None)
        if line:
            reported.add((uid, "console"))
            say(f"{name}: the guest's console says {line.strip()!r}")


if __name__ == "__main__":
    sys.exit(main())
