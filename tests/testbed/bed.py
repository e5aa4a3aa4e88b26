"""A real Kubernetes control plane on loopback: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok with fake Nodes.

Standard library only, so `scripts/testbed` runs it with any python3. The
binaries come from `scripts/testbed build` ($CACHE_DIR/bin), the
certificates from openssl. Everything a bed owns lives in its state directory: PKI,
kubeconfig, etcd data, one log per process and `bed.json` (ports, pids).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import processes
from .components import Components
from .jumpstarter_crds import write_core_crds

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = Path(
    os.environ.get("JVE_CACHE_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jumpstarter-virtual-exporters"
)
BIN_DIR = CACHE_DIR / "bin"
DEFAULT_STATE_DIR = Path(os.environ.get("JVE_TESTBED_DIR") or CACHE_DIR / "testbed")
# Upstream's own files, beside the checkout when ../shared is there: used
# only to compare ours with them and to try upstream's ExporterSet schema.
UPSTREAM_CRD_DIR = Path(
    os.environ.get("JVE_UPSTREAM_CRD_DIR") or PROJECT_ROOT.parent / "shared/anchors/jumpstarter/crds"
)
# The Jumpstarter core CRDs the bed installs are written by the project
# (tests/testbed/jumpstarter_crds.py) into the cache.
CORE_CRD_DIR = CACHE_DIR / "jumpstarter-crds"
UPSTREAM_CORE_CRDS = tuple(
    f"jumpstarter.dev_{plural}.yaml" for plural in ("exporters", "leases", "clients", "exporteraccesspolicies")
)
UPSTREAM_VIRTUALTARGET_CRDS = tuple(
    f"virtualtarget.jumpstarter.dev_{plural}.yaml" for plural in ("exportersets", "virtualtargetclasses")
)
PROJECT_CRD_DIR = PROJECT_ROOT / "config/crd"
PROJECT_CRDS = ("exportersets.yaml", "virtualtargetclasses.yaml", "exportersetpolicies.yaml")

ADMIN_USER = "jve-admin"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
# How long a fake Node's Lease lasts; kwok renews it well before (as a kubelet does).
NODE_LEASE_SECONDS = 40
# The controller-manager's controllers the tests rely on, and no more (each
# one runs its informers and resyncs for the bed's whole life): deleting a
# namespace, the garbage collector (owner references), each namespace's
# default account, the kube-root-ca.crt ConfigMap a Pod's projected token
# mounts, the node lifecycle (a registering kubelet's not-ready taint taken
# off once it is Ready), the Pods of a deleted Node, Deployments and their
# ReplicaSets (the install tests), ResourceQuotas (a quota no controller
# computed lets everything in), the aggregated admin/edit/view roles and the
# Service CIDRs.
CONTROLLERS = (
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "node-lifecycle-controller",
    "pod-garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "resourcequota-controller",
    "clusterrole-aggregation-controller",
    "service-cidr-controller",
)
STARTUP_TIMEOUT = 90.0
# (bed directory name, seconds) of every bed this process started, in order:
# what the run's profile (tests/conftest.py) counts as bed start-up.
STARTUPS: list[tuple[str, float]] = []


def upstream_core_crd_files() -> list[Path]:
    """Upstream Exporter/Lease/Client/ExporterAccessPolicy: a Jumpstarter
    cluster before this project is installed."""
    return write_core_crds(CORE_CRD_DIR)


def default_crd_files() -> list[Path]:
    """The upstream core CRDs plus our own ExporterSet/VirtualTargetClass:
    what a cluster running this project has."""
    return upstream_core_crd_files() + [PROJECT_CRD_DIR / name for name in PROJECT_CRDS]


def upstream_crd_files() -> list[Path]:
    """Every upstream Jumpstarter CRD the project interoperates with,
    including upstream's own ExporterSet/VirtualTargetClass."""
    return upstream_core_crd_files() + [UPSTREAM_CRD_DIR / name for name in UPSTREAM_VIRTUALTARGET_CRDS]


def upstream_release_crd_files() -> list[Path]:
    """Upstream's own files for the core CRDs (only where ../shared is)."""
    return [UPSTREAM_CRD_DIR / name for name in UPSTREAM_CORE_CRDS]


class TestBedError(RuntimeError):
    pass


def binary(name: str) -> str:
    """Path of a bed binary. Only the pinned builds are used: a system etcd
    or kubectl of another version would change what the tests exercise."""
    built = BIN_DIR / name
    if not built.is_file():
        raise TestBedError(f"{built} missing; run scripts/testbed build")
    return str(built)


def answers_ok(url: str, timeout: float, context: ssl.SSLContext | None = None) -> bool:
    """Whether a GET of ``url`` answers 200; False while nothing answers."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports: all sockets stay bound until every port
    is chosen, so the kernel cannot hand out one twice."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class BedConfig:
    """What `up` recorded, so `down`, `status` and other processes (pytest
    workers) can find the same bed again."""

    etcd_client_port: int = 0
    etcd_peer_port: int = 0
    apiserver_port: int = 0
    nodes: int = 2
    controllers: bool = True
    audit: bool = False
    # With ``audit`` off: an audit log of these users' requests alone, and
    # of every request in these namespaces (a test's own requests there
    # show the log flushed), so that a test can check what an account sent
    # on a bed others share, at no cost to their requests.
    audit_users: list[str] = field(default_factory=list)
    audit_namespaces: list[str] = field(default_factory=list)
    crd_files: list[str] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)


class TestBed(Components):
    """One control plane. `up()` is idempotent: a bed whose processes are all
    alive is reused as it is."""

    __test__ = False  # not a pytest test class despite the name
    report_lines = 15
    config_type = BedConfig
    config_file_name = "bed.json"

    def __init__(
        self,
        state_dir: Path | str = DEFAULT_STATE_DIR,
        *,
        crd_files: list[Path] | None = None,
        nodes: int = 2,
        controllers: bool = True,
        audit: bool = False,
        audit_users: tuple[str, ...] = (),
        audit_namespaces: tuple[str, ...] = (),
    ):
        self.state_dir = Path(state_dir).resolve()
        self._children: dict[str, subprocess.Popen] = {}
        # The run's shared bed may outlive this process's tests (another
        # process of the run still uses it); extra beds may not. Every
        # process of a bed belongs to the test or fixture that made the bed,
        # an API server restarted by a later test too.
        self.session_wide = False
        self.owner = processes.current_owner()
        self._wanted = BedConfig(
            nodes=nodes,
            controllers=controllers,
            audit=audit,
            audit_users=list(audit_users),
            audit_namespaces=list(audit_namespaces),
            crd_files=[str(p) for p in (default_crd_files() if crd_files is None else crd_files)],
        )
        self.config = self._load_config() or self._wanted

    # -- paths -------------------------------------------------------------

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.state_dir / "logs/audit.log"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.config.apiserver_port}"

    @property
    def env(self) -> dict[str, str]:
        """Environment for subprocesses (kubectl, ansible-runner, the operator)."""
        path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != str(BIN_DIR)]
        return {"KUBECONFIG": str(self.kubeconfig), "PATH": os.pathsep.join([str(BIN_DIR), *path])}

    def api_client(self):
        """A `kubernetes.client.ApiClient` for the admin identity (imported
        lazily: the command line runs without the kubernetes package)."""
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=configuration)
        return client.ApiClient(configuration)

    # -- lifecycle ---------------------------------------------------------

    def up(self) -> TestBed:
        if self.is_running():
            return self
        self.down()
        started = time.monotonic()
        self.config = BedConfig(**{**asdict(self._wanted), "pids": {}})
        (self.state_dir / "logs").mkdir(parents=True, exist_ok=True)
        self._make_pki()
        (
            self.config.etcd_client_port,
            self.config.etcd_peer_port,
            self.config.apiserver_port,
        ) = free_ports(3)
        self._write_kubeconfig()
        self._save_config()
        try:
            self._start_etcd()
            self._wait_etcd()
            self._start_apiserver()
            self._wait_ready()
            self._bootstrap_cluster()
            self._save_config()
        except BaseException:
            self.stop_processes()
            raise
        self.startup_seconds = time.monotonic() - started
        STARTUPS.append((self.state_dir.name, self.startup_seconds))
        return self

    def __enter__(self) -> TestBed:
        return self.up()

    def __exit__(self, *exc_info) -> None:
        self.stop_processes()

    def down(self, *, remove: bool = False) -> None:
        self.stop_processes()
        if remove and self.state_dir.exists():
            shutil.rmtree(self.state_dir)

    def stop_processes(self) -> None:
        for name in reversed(list(self.config.pids)):
            self._stop(name)
        self._save_config_if_present()

    def is_running(self) -> bool:
        saved = self._load_config()
        if not saved or not saved.pids:
            return False
        self.config = saved
        return all(self._alive(name) for name in self._expected_components()) and self._ready()

    def status(self) -> dict[str, str]:
        self.config = self._load_config() or self.config
        report = {name: ("running" if self._alive(name) else "stopped") for name in self._expected_components()}
        report["apiserver-ready"] = "yes" if self.config.pids and self._ready() else "no"
        return report

    def restart_apiserver(self) -> None:
        """Stop and start kube-apiserver on the same port with the same etcd
        data; returns once it serves again. Clients must reconnect."""
        self._stop("kube-apiserver")
        self._start_apiserver()
        self._wait_ready()
        self._save_config()

    def _expected_components(self) -> list[str]:
        names = ["etcd", "kube-apiserver"]
        if self.config.controllers:
            names += ["kube-controller-manager", "kube-scheduler", "kwok"]
        return names

    # -- processes ---------------------------------------------------------

    def _spawned(self, name: str, pid: int) -> None:
        processes.track(pid, f"{name} of the bed {self.state_dir.name} ({self.state_dir})",
                        session_wide=self.session_wide, owner=self.owner)

    def _start_etcd(self) -> None:
        c = self.config
        client = f"http://127.0.0.1:{c.etcd_client_port}"
        peer = f"http://127.0.0.1:{c.etcd_peer_port}"
        self._spawn(
            "etcd",
            [
                binary("etcd"),
                "--name=testbed",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=testbed={peer}",
                "--log-level=warn",
                # Throwaway test data: durability is not worth an fsync per
                # write on a disk shared with other builds.
                "--unsafe-no-fsync",
            ],
        )

    def _start_apiserver(self) -> None:
        c = self.config
        pki = self.pki_dir
        argv = [
            binary("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{c.etcd_client_port}",
            f"--secure-port={c.apiserver_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # The `kubernetes` Service cannot point at a loopback address and
            # nothing in the bed routes to it.
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            # A real node's kubelet (tests/testbed/node.py) serves logs and
            # exec on 127.0.0.1 and authenticates the API server by this cert.
            f"--kubelet-client-certificate={pki / 'admin.crt'}",
            f"--kubelet-client-key={pki / 'admin.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # RBAC so the install playbook's least-privilege roles are really
            # enforced; the admin identity is in system:masters.
            "--authorization-mode=Node,RBAC",
            # No kubelet creates token volumes here and a Pod created right
            # after its namespace would race the "default" ServiceAccount.
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            "--profiling=false",
            # On SIGTERM, watches still open (a test's clients, informers)
            # are ended within a second; otherwise the API server waits on
            # them until it is killed, 10 s for each bed that stops.
            "--shutdown-watch-termination-grace-period=1s",
            "--v=1",
        ]
        if c.audit or c.audit_users or c.audit_namespaces:
            policy = self.state_dir / "audit-policy.yaml"
            policy.write_text(AUDIT_POLICY if c.audit else audit_policy(c.audit_users, c.audit_namespaces))
            argv += [
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=batch",
                "--audit-log-batch-max-wait=1s",
            ]
        self._spawn("kube-apiserver", argv)

    def _start_controllers(self) -> None:
        kubeconfig = str(self.kubeconfig)
        pki = self.pki_dir
        self._spawn(
            "kube-controller-manager",
            [
                binary("kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                f"--controllers={','.join(CONTROLLERS)}",
                "--concurrent-gc-syncs=5",
                "--v=1",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                binary("kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                "--v=1",
            ],
        )
        self._spawn(
            "kwok",
            [
                binary("kwok"),
                f"--kubeconfig={kubeconfig}",
                # Only the fake Nodes: a real kubelet's Node (tests/testbed/node.py)
                # reports its own status and runs its own Pods.
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                # Each fake Node's Lease renewed, as a kubelet renews its own: the
                # node controller takes a renewal for a heartbeat. Without it a
                # fake Node's status is written once, and 50 s later (the node
                # monitor's grace period) the controller marks every Node
                # NotReady and its Pods not ready, until kwok writes Ready again.
                f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
                f"--cidr={POD_CIDR}",
                "--node-ip=127.0.0.1",
                "--server-address=",
                "--v=WARN",
            ],
        )

    # -- bootstrap ---------------------------------------------------------

    def _bootstrap_cluster(self) -> None:
        # CRDs first: the controller-manager's garbage collector and
        # namespace controller discover resource types at start and then only
        # every 30 s, so CRDs installed later are not collected for a while.
        self._install_crds()
        if self.config.controllers:
            self._start_controllers()
            self.kubectl("apply", "--server-side", "-f", "-", input=self._node_manifests())

    def _install_crds(self) -> None:
        if self.config.crd_files:
            args = ["apply", "--server-side", "--force-conflicts"]
            for path in self.config.crd_files:
                if not Path(path).is_file():
                    raise TestBedError(f"CRD file missing: {path}")
                args += ["-f", path]
            self.kubectl(*args)
            self.kubectl(
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                *(f"crd/{name}" for name in self._crd_names()),
            )

    def _crd_names(self) -> list[str]:
        names = []
        for path in self.config.crd_files:
            for line in Path(path).read_text().splitlines():
                # CRD files hold one CRD each; its name is the only
                # two-space-indented `name:` under metadata.
                if line.startswith("  name: "):
                    names.append(line.split(":", 1)[1].strip())
                    break
        return names

    def _node_manifests(self) -> str:
        nodes = []
        for index in range(self.config.nodes):
            name = f"kwok-node-{index}"
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": {
                            "kwok.x-k8s.io/node": "fake",
                            "node.alpha.kubernetes.io/ttl": "0",
                        },
                        "labels": {
                            "type": "kwok",
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64" if index % 2 == 0 else "arm64",
                        },
                    },
                    "status": {
                        "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                        "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                    },
                }
            )
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes})

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [binary("kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
        )
        if check and result.returncode != 0:
            raise TestBedError(f"kubectl {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
        return result

    # -- readiness ---------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        context.load_cert_chain(self.pki_dir / "admin.crt", self.pki_dir / "admin.key")
        return context

    def _ready(self) -> bool:
        return answers_ok(f"{self.server}/readyz", 2, self._ssl_context())

    def _wait_etcd(self) -> None:
        """kube-apiserver started before etcd listens backs off between
        retries; waiting here is quicker than its backoff."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        url = f"http://127.0.0.1:{self.config.etcd_client_port}/health"
        while time.monotonic() < deadline:
            if not self._alive("etcd"):
                raise TestBedError(self._exit_report("etcd"))
            if answers_ok(url, 2):
                return
            time.sleep(0.05)
        raise TestBedError(f"etcd not healthy after {STARTUP_TIMEOUT:.0f} s; see {self.state_dir}/logs")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            for name in ("etcd", "kube-apiserver"):
                if not self._alive(name):
                    raise TestBedError(self._exit_report(name))
            if self._ready():
                return
            time.sleep(0.1)
        raise TestBedError(f"kube-apiserver not ready after {STARTUP_TIMEOUT:.0f} s; see {self.state_dir}/logs")

    # -- certificates ------------------------------------------------------

    def _make_pki(self) -> None:
        """A CA, the API server's serving cert, an admin client cert in
        system:masters and the service-account key pair. Kept across restarts
        of the same state directory so existing kubeconfigs stay valid."""
        pki = self.pki_dir
        if (pki / "admin.crt").exists():
            return
        pki.mkdir(parents=True, exist_ok=True)

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True)

        openssl(
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "3650",
            "-subj",
            "/CN=jve-testbed-ca",
        )
        (pki / "apiserver.ext").write_text(
            "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
            "extendedKeyUsage=serverAuth\n"
        )
        (pki / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
        for name, subject, ext in (
            ("apiserver", "/CN=kube-apiserver", "apiserver.ext"),
            ("admin", f"/O=system:masters/CN={ADMIN_USER}", "client.ext"),
        ):
            issue_certificate(pki, pki, name, subject, ext)
        openssl("genrsa", "-out", "sa.key", "2048")
        openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")

    def _write_kubeconfig(self) -> None:
        self.write_kubeconfig(self.kubeconfig, ADMIN_USER, self.pki_dir / "admin.crt", self.pki_dir / "admin.key")

    def write_kubeconfig(self, path: Path, user: str, certificate: Path, key: Path) -> None:
        """A kubeconfig for this bed that authenticates with a client certificate."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "testbed",
                            "cluster": {
                                "server": self.server,
                                "certificate-authority": str(self.pki_dir / "ca.crt"),
                            },
                        }
                    ],
                    "users": [{"name": user, "user": {"client-certificate": str(certificate),
                                                      "client-key": str(key)}}],
                    "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": user}}],
                    "current-context": "testbed",
                },
                indent=2,
            )
        )


def issue_certificate(pki: Path, out_dir: Path, name: str, subject: str, extensions: str,
                      days: int = 3650) -> tuple[Path, Path]:
    """An EC key and a certificate for ``subject`` signed by the CA in ``pki``;
    ``extensions`` is an openssl extension file (relative to ``pki``).
    Returns (certificate, key)."""
    key, csr, certificate = (out_dir / f"{name}.{suffix}" for suffix in ("key", "csr", "crt"))

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True)

    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", subject)
    openssl("x509", "-req", "-in", str(csr), "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", str(certificate), "-days", str(days), "-extfile", extensions)
    return certificate, key


# Metadata for every request is enough to count API calls by verb and user;
# the health probes would only drown them.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version"]
  - level: Metadata
"""


def audit_policy(users, namespaces) -> str:
    """``AUDIT_POLICY`` for the requests of ``users`` and those in ``namespaces`` alone."""
    rules = [{"level": "None", "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*", "/version"]}]
    rules += [{"level": "Metadata", "users": list(users)}] if users else []
    rules += [{"level": "Metadata", "namespaces": list(namespaces)}] if namespaces else []
    return json.dumps({"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                       "rules": rules + [{"level": "None"}]}) + "\n"
