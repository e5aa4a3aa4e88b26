"""A real node beside the bed's fake ones: Debian's containerd and runc and
a kubelet built from the bed's Kubernetes source, registering with the bed's
API server as ``system:node:<name>``.

Runs as root. Everything it owns is private to its state directory (and,
for sockets, whose paths have a length limit, /run/jve-node-ID and the
kubelet's root /var/lib/jve-node-ID, removed at `down`):
containerd's root, state and socket, runc's state, the CNI configuration and
IP allocations, the kubelet's root, certificates and Pod logs, a cgroup
parent of its own in every cgroup v1 hierarchy (kubelet 1.35 runs on cgroup
v1 only with ``failCgroupV1: false``) and a bridge named after the state
directory. So two runs on the machine do not share anything but the kernel.

Images come from ``scripts/images`` (built from Debian packages and the
sources in images/, never pulled) and are imported with ``ctr``; the pause
image it builds is containerd's ``sandbox_image``.

The Node is tainted ``jumpstarter.dev/real-node:NoSchedule``: only Pods that
tolerate it land there, so the bed's other tests keep their kwok Nodes.

Standard library only, like the bed: ``scripts/realnode`` runs it with any
python3.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from . import processes
from .bed import BIN_DIR, PROJECT_ROOT, TestBed, free_ports, issue_certificate
from .components import Components

TAINT_KEY = "jumpstarter.dev/real-node"
NODE_LABEL = "jumpstarter.dev/real-node"
CNI_BIN_DIR = Path("/usr/lib/cni")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Pod addresses: one /24 out of this range per node, chosen free at `up`.
POD_RANGE = ipaddress.ip_network("10.246.0.0/16")
STARTUP_TIMEOUT = 120.0
# Debian's packages the node runs on (installed by `scripts/realnode build`).
DEBIAN_COMMANDS = {"containerd": "containerd", "runc": "runc", "ctr": "containerd"}


class RealNodeError(RuntimeError):
    pass


@dataclass
class NodeConfig:
    name: str = "real-node-0"
    kubelet_port: int = 0
    healthz_port: int = 0
    subnet: str = ""
    pids: dict[str, int] = field(default_factory=dict)
    # Image reference by short name (pause, busybox), as imported.
    images: dict[str, str] = field(default_factory=dict)


def _short_id(path: Path) -> str:
    return hashlib.sha256(str(path).encode()).hexdigest()[:8]


class RealNode(Components):
    """One kubelet + containerd on the bed ``bed``. ``up()`` reuses a node
    whose processes are alive; ``down()`` stops its Pods, processes and
    containers and removes its Node, network and cgroups."""

    stop_timeout = 15.0
    config_type = NodeConfig
    config_file_name = "node.json"

    def __init__(self, bed: TestBed, state_dir: Path | str | None = None, *, name: str = "real-node-0",
                 images: tuple[str, ...] = ("busybox",), aliases: dict[str, str] | None = None):
        self.bed = bed
        # What `scripts/images` builds and `up` imports besides the pause image.
        self.wanted_images = ("pause", *images)
        # Short name -> another name the imported image also gets (e.g. the
        # provisioner's default image names, provisioners/base.py's DEFAULT_IMAGES).
        self.aliases = dict(aliases or {})
        self.state_dir = Path(state_dir or bed.state_dir / "realnode").resolve()
        self.id = _short_id(self.state_dir)
        # Unix socket paths are limited to 107 bytes: sockets live here.
        self.run_dir = Path(f"/run/jve-node-{self.id}")
        # The kubelet's root holds sockets too (pod-resources, plugins): a
        # short path on disk (Pod volumes live there).
        self.kubelet_dir = Path(f"/var/lib/jve-node-{self.id}")
        self._children: dict[str, subprocess.Popen] = {}
        self.session_wide = False
        self.config = self._load_config() or NodeConfig(name=name)
        self.startup_seconds = 0.0

    # -- names and paths ---------------------------------------------------

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def bridge(self) -> str:
        return f"jve{self.id}"  # at most 15 characters

    @property
    def cgroup_parent(self) -> str:
        return f"/jve-node-{self.id}"

    @property
    def network_name(self) -> str:
        return f"jve-node-{self.id}"

    def _save_config(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        super()._save_config()

    # -- lifecycle -----------------------------------------------------------

    def is_running(self) -> bool:
        return all(self._alive(name) for name in ("containerd", "kubelet"))

    def up(self) -> RealNode:
        if self.is_running():
            return self
        self.down()
        check_host()
        started = time.monotonic()
        for sub in ("logs", "pki", "cni/net.d", "cni/networks", "pod-logs"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.kubelet_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.config.pids = {}
        self.config.kubelet_port, self.config.healthz_port = free_ports(2)
        self.config.subnet = str(self._free_subnet())
        self._save_config()
        try:
            archives = build_images(*self.wanted_images)
            self._write_cni_config()
            self._make_bridge()
            self._start_containerd(sandbox_image=archives["pause"][0])
            self._import_images(archives)
            self._make_cgroups()
            self._start_kubelet()
            self._wait_ready()
        except BaseException:
            self.down()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def __enter__(self) -> RealNode:
        return self.up()

    def __exit__(self, *exc_info) -> None:
        self.down()

    def down(self, *, remove: bool = False) -> None:
        """Stops everything the node started, in order: its Pods (so the
        kubelet tears down their sandboxes and networks), the kubelet, any
        container left, containerd; then unmounts what is left under its
        state directory, deletes its bridge, cgroups and Node object."""
        if self._alive("kubelet") and self._alive("containerd") and self.bed.is_running():
            self._drain()
        self._stop("kubelet")
        self._kill_shims()
        self._stop("containerd")
        self._kill_shims()
        self._unmount_leftovers()
        self._remove_network_namespaces()
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True, check=False)
        self._remove_cgroups()
        if self.bed.is_running():
            self.bed.kubectl("delete", "node", self.name, "--ignore-not-found", "--wait=false", check=False)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        shutil.rmtree(self.kubelet_dir, ignore_errors=True)
        self._save_config_if_present()
        if remove and self.state_dir.exists():
            shutil.rmtree(self.state_dir)

    # -- processes -----------------------------------------------------------

    def _spawned(self, name: str, pid: int) -> None:
        self._save_config()
        processes.track(pid, f"{name} of the real node {self.name} ({self.state_dir})",
                        session_wide=self.session_wide)

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args],
                              capture_output=True, text=True, check=check)

    # -- containerd ----------------------------------------------------------

    def _start_containerd(self, sandbox_image: str) -> None:
        root = self.state_dir / "containerd"
        config = self.state_dir / "containerd.toml"
        config.write_text(CONTAINERD_CONFIG.format(
            root=root / "root",
            state=self.run_dir / "state",
            socket=self.socket,
            sandbox_image=sandbox_image,
            cni_bin=CNI_BIN_DIR,
            cni_conf=self.state_dir / "cni/net.d",
            runc_root=self.run_dir / "runc",
        ))
        self._spawn("containerd", ["containerd", "--config", str(config)])
        deadline = time.monotonic() + 30
        while not (self.socket.exists() and self.ctr("version", check=False).returncode == 0):
            if not self._alive("containerd"):
                raise RealNodeError(self._exit_report("containerd"))
            if time.monotonic() > deadline:
                raise RealNodeError("containerd did not answer in 30 s\n" + self._exit_report("containerd"))
            time.sleep(0.1)

    def _import_images(self, archives: dict[str, tuple[str, Path]]) -> None:
        present = self.ctr("images", "list", "--quiet").stdout.split()
        self.config.images = {}
        for short, (ref, archive) in archives.items():
            if ref not in present:
                self.ctr("images", "import", "--base-name", ref.rsplit(":", 1)[0], str(archive))
            self.config.images[short] = ref
            if short in self.aliases:
                self.ctr("images", "tag", "--force", ref, self.aliases[short])
        self._save_config()

    def _kill_shims(self) -> None:
        """The runc shims of this node's containerd (found by the socket
        address on their command line) and the containers under them."""
        needle = str(self.socket).encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and needle in argv:
                pid = int(proc.name)
                for child in processes.descendants(pid):
                    _kill(child, signal.SIGKILL)
                _kill(pid, signal.SIGKILL)

    def _unmount_leftovers(self) -> None:
        # The kubelet bind-mounts its root onto itself (shared propagation).
        dirs = (self.state_dir, self.run_dir, self.kubelet_dir)
        prefixes = tuple(f"{d}/" for d in dirs)
        for _ in range(3):
            mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
            ours = [m for m in mounts if m.startswith(prefixes) or m in map(str, dirs)]
            if not ours:
                return
            for mount_point in sorted(ours, key=len, reverse=True):
                subprocess.run(["umount", "-l", mount_point], capture_output=True, check=False)

    # -- network -------------------------------------------------------------

    def _remove_network_namespaces(self) -> None:
        """Network namespaces of sandboxes the kubelet did not stop (it died,
        or the drain timed out): containerd names them cni-UUID, so ours are
        those holding an address of the node's subnet."""
        if not self.config.subnet:
            return
        subnet = ipaddress.ip_network(self.config.subnet)
        for netns in Path("/run/netns").glob("cni-*"):
            listed = subprocess.run(["ip", "-n", netns.name, "-4", "-o", "addr"], capture_output=True, text=True,
                                    check=False).stdout
            addresses = [ipaddress.ip_interface(word).ip for line in listed.splitlines()
                         for word in line.split() if "/" in word and word[0].isdigit()]
            if any(address in subnet for address in addresses):
                subprocess.run(["ip", "netns", "delete", netns.name], capture_output=True, check=False)

    def _free_subnet(self) -> ipaddress.IPv4Network:
        used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
        taken = [ipaddress.ip_interface(word).network for line in used.splitlines()
                 for word in line.split() if "/" in word and word[0].isdigit()]
        subnets = list(POD_RANGE.subnets(new_prefix=24))
        start = int(self.id, 16) % len(subnets)
        for offset in range(len(subnets)):
            subnet = subnets[(start + offset) % len(subnets)]
            if not any(subnet.overlaps(t) for t in taken):
                return subnet
        raise RealNodeError(f"no free /24 left in {POD_RANGE}")

    @property
    def ip(self) -> str:
        """The node's address: its bridge's (the Pods' gateway). The kubelet
        refuses a loopback node IP, and the API server reaches the kubelet
        here for logs and exec."""
        return str(ipaddress.ip_network(self.config.subnet)[1])

    def _make_bridge(self) -> None:
        subnet = ipaddress.ip_network(self.config.subnet)
        for command in (["link", "add", self.bridge, "type", "bridge"],
                        ["addr", "add", f"{self.ip}/{subnet.prefixlen}", "dev", self.bridge],
                        ["link", "set", self.bridge, "up"]):
            subprocess.run(["ip", *command], check=True, capture_output=True)

    def _write_cni_config(self) -> None:
        conf_dir = self.state_dir / "cni/net.d"
        for old in conf_dir.glob("*"):
            old.unlink()
        subnet = ipaddress.ip_network(self.config.subnet)
        (conf_dir / "10-jve.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0",
            "name": self.network_name,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": True,
                    # No NAT: Pods reach the host (the bed's API on its
                    # address) and each other, nothing beyond.
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.state_dir / "cni/networks"),
                        "ranges": [[{"subnet": str(subnet), "gateway": self.ip}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "loopback"},
            ],
        }, indent=2))

    # -- cgroups -------------------------------------------------------------

    def _hierarchies(self) -> list[Path]:
        """Every mounted cgroup hierarchy (v1 controllers and the unified one)."""
        found = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            fstype = fields[fields.index("-") + 1]
            if fstype in ("cgroup", "cgroup2") and fields[4].startswith(str(CGROUP_ROOT)):
                found.append(Path(fields[4]))
        return found

    def _make_cgroups(self) -> None:
        for hierarchy in self._hierarchies():
            (hierarchy / self.cgroup_parent.lstrip("/")).mkdir(exist_ok=True)

    def _remove_cgroups(self) -> None:
        for hierarchy in self._hierarchies():
            top = hierarchy / self.cgroup_parent.lstrip("/")
            if not top.exists():
                continue
            for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                                    reverse=True) + [top]:
                try:
                    directory.rmdir()
                except OSError:
                    pass

    # -- kubelet -------------------------------------------------------------

    def _start_kubelet(self) -> None:
        pki = self.state_dir / "pki"
        certificate, key = issue_certificate(
            self.bed.pki_dir, pki, "kubelet-client", f"/O=system:nodes/CN=system:node:{self.name}",
            "client.ext")
        kubeconfig = self.state_dir / "kubelet.kubeconfig"
        self.bed.write_kubeconfig(kubeconfig, f"system:node:{self.name}", certificate, key)
        config = self.state_dir / "kubelet.yaml"
        # JSON is YAML: the kubelet reads it as its KubeletConfiguration.
        config.write_text(json.dumps(self._kubelet_configuration(), indent=2))
        self._spawn("kubelet", [
            str(BIN_DIR / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.kubelet_dir}",
            f"--cert-dir={pki}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.ip}",
            f"--node-labels={NODE_LABEL}=true",
            "--v=1",
        ])

    def _kubelet_configuration(self) -> dict:
        c = self.config
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine's kernel mounts cgroup v1, which kubelet 1.35
            # refuses unless told.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_parent,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.ip,
            "port": c.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": c.healthz_port,
            # Only the bed's API server (its client certificate, signed by the
            # bed's CA) may read logs or exec, and only as RBAC allows.
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.bed.pki_dir / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "failSwapOn": False,
            # The kubelet would add machine-wide iptables chains (KUBE-FIREWALL
            # in INPUT and OUTPUT) that outlive it; nothing here needs them.
            "makeIPTablesUtilChains": False,
            "podLogsDir": str(self.state_dir / "pod-logs"),
            "registerWithTaints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
            # A shared build machine's disk is often nearly full: eviction
            # and image garbage collection would remove the test's Pods and
            # the imported images.
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%", "imagefs.available": "0%",
                             "nodefs.inodesFree": "0%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "maxPods": 30,
            "resolvConf": "",
            "syncFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
            "shutdownGracePeriod": "0s",
        }

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        url = f"http://127.0.0.1:{self.config.healthz_port}/healthz"
        while True:
            for name in ("containerd", "kubelet"):
                if not self._alive(name):
                    raise RealNodeError(self._exit_report(name))
            if _answers(url) and self._node_ready():
                return
            if time.monotonic() > deadline:
                raise RealNodeError(f"the real node {self.name} was not Ready in {STARTUP_TIMEOUT:.0f} s\n"
                                    + self._exit_report("kubelet"))
            time.sleep(0.25)

    def node(self) -> dict | None:
        result = self.bed.kubectl("get", "node", self.name, "-o", "json", check=False)
        return json.loads(result.stdout) if result.returncode == 0 else None

    def _node_ready(self) -> bool:
        node = self.node()
        conditions = (node or {}).get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _drain(self, timeout: float = 60.0) -> None:
        """Deletes every Pod bound to the node and waits for the kubelet to
        stop them (their sandboxes, network namespaces and addresses go with
        them)."""
        selector = f"spec.nodeName={self.name}"
        self.bed.kubectl("delete", "pods", "--all-namespaces", f"--field-selector={selector}",
                         "--wait=false", check=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            listed = self.bed.kubectl("get", "pods", "--all-namespaces", f"--field-selector={selector}",
                                      "-o", "name", check=False)
            sandboxes = self.ctr("containers", "list", "--quiet", check=False).stdout.split()
            if listed.returncode == 0 and not listed.stdout.strip() and not self._running_tasks(sandboxes):
                return
            time.sleep(0.5)

    def _running_tasks(self, containers: list[str]) -> bool:
        if not containers:
            return False
        tasks = self.ctr("tasks", "list", check=False).stdout.splitlines()[1:]
        return any(line.split()[2] == "RUNNING" for line in tasks if len(line.split()) >= 3)


# -- helpers -------------------------------------------------------------------


def check_host() -> None:
    """What the node needs from the machine, each missing piece named."""
    problems = []
    if os.geteuid() != 0:
        problems.append("it runs as root (containerd, runc, the kubelet's cgroups and mounts)")
    for command, package in DEBIAN_COMMANDS.items():
        if shutil.which(command) is None:
            problems.append(f"`{command}` (Debian package {package})")
    for plugin in ("bridge", "host-local", "loopback"):
        if not (CNI_BIN_DIR / plugin).exists():
            problems.append(f"CNI plugin {CNI_BIN_DIR / plugin} (Debian package containernetworking-plugins)")
    if not (BIN_DIR / "kubelet").exists():
        problems.append(f"{BIN_DIR / 'kubelet'} (scripts/testbed-build kubelet)")
    if problems:
        raise RealNodeError("the real node needs: " + "; ".join(problems) + ". `scripts/realnode build` installs "
                            "and builds them.")


def build_images(*names: str) -> dict[str, tuple[str, Path]]:
    """Builds (or reuses) the project's images ``names`` (scripts/images);
    short name → (reference, OCI archive)."""
    result = subprocess.run([str(PROJECT_ROOT / "scripts/images"), "build", *names], capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise RealNodeError(f"scripts/images build failed:\n{result.stderr}")
    images = {}
    for line in result.stdout.splitlines():
        ref, archive = line.split()
        images[ref.rsplit("/", 1)[1].rsplit(":", 1)[0]] = (ref, Path(archive))
    return images


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _kill(pid: int, signo: int) -> None:
    try:
        os.kill(pid, signo)
    except ProcessLookupError:
        pass


CONTAINERD_CONFIG = """\
version = 2
root = "{root}"
state = "{state}"
# Plugins that would reach outside the state directories (/opt/containerd)
# or need filesystems this machine does not have.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # Without CAP_SYS_RESOURCE (these machines' root lacks it) no process may
  # lower its OOM score: sandboxes (-998) and Guaranteed Pods (-997) keep
  # containerd's own instead of failing in runc.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{runc_root}"
"""


def main(argv: list[str] | None = None) -> int:
    """Command line (`scripts/realnode`): up, down [--remove], status."""
    import argparse
    import sys

    from .bed import DEFAULT_STATE_DIR, TestBedError

    parser = argparse.ArgumentParser(prog="scripts/realnode")
    parser.add_argument("--bed-dir", default=str(DEFAULT_STATE_DIR),
                        help="the bed's state directory (default: $JVE_TESTBED_DIR or %(default)s)")
    parser.add_argument("--state-dir", help="the node's state directory (default: BED_DIR/realnode)")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up")
    up.add_argument("--image", action="append", default=[], dest="images",
                    help="also build and import this image of scripts/images (e.g. qemu-runtime); repeatable")
    down = commands.add_parser("down")
    down.add_argument("--remove", action="store_true", help="also delete the node's state directory")
    commands.add_parser("status")
    args = parser.parse_args(argv)
    bed = TestBed(args.bed_dir)
    node = RealNode(bed, args.state_dir, images=("busybox", *getattr(args, "images", [])))
    try:
        if args.command == "up":
            if not bed.is_running():
                raise RealNodeError(f"no bed runs in {bed.state_dir}: `scripts/testbed up` first")
            reused = node.is_running()
            node.up()
            how = "reused" if reused else f"started in {node.startup_seconds:.1f} s"
            print(f"# real node {node.name} {how}; logs in {node.state_dir / 'logs'}", file=sys.stderr)
            for short, ref in node.config.images.items():
                print(f"{short} {ref}")
        elif args.command == "down":
            node.down(remove=args.remove)
        else:
            for name in ("containerd", "kubelet"):
                print(f"{name:12} {'running' if node._alive(name) else 'stopped'}")
            print(f"{'state':12} {node.state_dir}")
            return 0 if node.is_running() else 1
    except (RealNodeError, TestBedError) as error:
        print(f"realnode: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
