"""The ``standin`` fixture: the Jumpstarter controller stand-in serving the
test's namespace for the whole test, as a real controller would.

``--real-controller=PATH`` (or ``JVE_REAL_CONTROLLER=PATH``) runs the real
controller binary (``controller/cmd`` of the jumpstarter repository, built
outside this checkout) for the test's namespace instead, to check the
stand-in against it: one process per test, stopped at teardown, its log
added to the report of a failed test.

The real controller listens on fixed ports (gRPC 8082, dashboard 8084, OIDC
127.0.0.1:8085, login 8086), so only one can run on a machine at a time: the
fixture holds a lock file for as long as its process lives, which makes
parallel workers take turns.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from kubernetes import client, config

from . import JumpstarterStandIn
from .controller import StandInController
from .grpc_services import GrpcStandIn
from .pod_exporters import PodExporters

REAL_CONTROLLER_ENV = "JVE_REAL_CONTROLLER"
SERVICE_CA_CONFIGMAP = "jumpstarter-service-ca-cert"
# Ports the real controller binds whatever it is told.
REAL_CONTROLLER_PORTS = (8082, 8084, 8085, 8086)
REAL_CONTROLLER_LOCK = Path(tempfile.gettempdir()) / "jve-real-jumpstarter-controller.lock"
# The ConfigMap the real controller reads at start (controller/internal/config):
# the same shape as the one the jumpstarter operator writes.
REAL_CONTROLLER_CONFIG = """\
authentication:
  internal:
    prefix: "internal:"
  jwt: []
provisioning:
  enabled: false
grpc:
  keepalive:
    minTime: 1s
    permitWithoutStream: true
"""
REAL_CONTROLLER_ROUTER = """\
default:
  endpoint: localhost:8083
"""
_LOG_KEY = pytest.StashKey[Path]()


def pytest_addoption(parser):
    parser.addoption(
        "--real-controller", metavar="PATH", default=os.environ.get(REAL_CONTROLLER_ENV) or None,
        help="run the real Jumpstarter controller binary at PATH for the `standin` fixture instead of the "
             f"stand-in (default: ${REAL_CONTROLLER_ENV})")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    log_path = item.stash.get(_LOG_KEY, None)
    if report.failed and log_path is not None and log_path.exists():
        text = log_path.read_text(errors="replace")
        report.sections.append(("real Jumpstarter controller log", text[-60000:]))
    return report


@pytest.fixture
def standin(testbed, namespace, request):
    """The Jumpstarter controller serving ``namespace`` for the whole test
    (the stand-in, or the real binary with ``--real-controller``), and a
    user's view of it."""
    marker = request.node.get_closest_marker("standin")
    options = dict(marker.kwargs) if marker else {}
    with serve_namespace(testbed.kubeconfig, namespace, real=request.config.getoption("--real-controller"),
                         node=request.node, **options) as view:
        yield view


@contextmanager
def serve_namespace(kubeconfig, namespace: str, real: str | None = None, node=None, publish_ca: bool = True,
                    grpc_host: str | None = None, pod_exporters: bool = True, exporter_start_delay: float = 0.0):
    """What a Jumpstarter installation runs for one namespace (made if it does
    not exist yet): the controller (reconcile loops and gRPC services over TLS
    with a private CA), the CA published as the ConfigMap
    ``jumpstarter-service-ca-cert`` as the Jumpstarter operator publishes it
    (unless ``publish_ca`` is false: a test that publishes it itself, from
    ``view.grpc.ca_pem``), and the exporter processes of the Pods that kwok
    runs without containers.

    ``grpc_host``: the address the gRPC services are reached at (default:
    ``default_host``), e.g. a real node's bridge address for its Pods.
    ``pod_exporters=False``: no exporter processes are played, for Pods that
    run their own ``jmp run`` on a real node. ``exporter_start_delay``: the
    seconds a played exporter waits after its Pod runs, as a container's
    start takes (a cold start of known length on kwok).

    In a test, ``@pytest.mark.standin(publish_ca=False)`` passes options to
    the ``standin`` fixture."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    # Six watches, the reconcile loop and the gRPC handlers share the client.
    configuration.connection_pool_maxsize = 32
    api_client = client.ApiClient(configuration)
    view = JumpstarterStandIn(api_client, namespace)
    stack = ExitStack()
    core = client.CoreV1Api(api_client)
    try:
        try:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        if real:
            controller = RealController(real, kubeconfig, namespace, api_client)
            if node is not None:
                node.stash[_LOG_KEY] = controller.log_path
            stack.callback(controller.stop)
            controller.start()
            ca_pem = ssl.get_server_certificate(("127.0.0.1", 8082))
        else:
            controller = StandInController(api_client, namespace)
            # Serving makes its endpoint the controller's (Exporters' status.endpoint).
            services = GrpcStandIn(controller, host=grpc_host)
            services.start()
            stack.callback(services.stop)
            view.grpc = services
            ca_pem = services.ca_pem
            controller.start()
            stack.callback(controller.stop)
        view.controller = controller
        view.ca_pem = ca_pem
        if publish_ca:
            publish_controller_ca(core, namespace, ca_pem)
        if pod_exporters:
            view.pod_exporters = PodExporters(api_client, namespace, exporter_start_delay).start()
            stack.callback(view.pod_exporters.stop)
        yield view
    finally:
        stack.close()
        api_client.close()
    assert not controller.errors, f"controller stand-in errors: {controller.errors}"


def publish_controller_ca(core: client.CoreV1Api, namespace: str, ca_pem: str) -> None:
    """The controller's CA where the Jumpstarter operator puts it."""
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=SERVICE_CA_CONFIGMAP, namespace=namespace),
                              data={"ca.crt": ca_pem})
    try:
        core.create_namespaced_config_map(namespace, body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map(SERVICE_CA_CONFIGMAP, namespace, body)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class RealController:
    """The real controller binary serving one namespace, as a process."""

    def __init__(self, binary: str, kubeconfig: Path, namespace: str, api_client: client.ApiClient,
                 start_timeout: float = 90.0, controller_key: str | None = None, router_key: str | None = None):
        self.binary = str(Path(binary).resolve())
        if not os.access(self.binary, os.X_OK):
            raise pytest.UsageError(f"--real-controller: {self.binary} is not an executable")
        self.kubeconfig = str(kubeconfig)
        self.namespace = namespace
        self.api_client = api_client
        self.start_timeout = start_timeout
        self.log_dir = Path(tempfile.mkdtemp(prefix=f"real-controller-{namespace}-"))
        self.log_path = self.log_dir / "controller.log"
        self.health_port = _free_port()
        # The token signing seed; a restarted controller must be given the
        # same one to accept the tokens it issued before, as a deployment's
        # Secret keeps it.
        self.controller_key = controller_key or secrets.token_hex(32)
        self.router_key = router_key or secrets.token_hex(32)
        self.process: subprocess.Popen | None = None
        self._lock = None
        # What the fixture's teardown checks, as for the stand-in: a process
        # that ended on its own is an error.
        self.errors: list[str] = []

    # The stand-in's knobs that tests may touch; the real one reacts to watches.
    def poke(self) -> None:
        pass

    def _write_config_map(self) -> None:
        core = client.CoreV1Api(self.api_client)
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="jumpstarter-controller", namespace=self.namespace),
            data={"config": REAL_CONTROLLER_CONFIG, "router": REAL_CONTROLLER_ROUTER})
        try:
            core.create_namespaced_config_map(self.namespace, body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            core.replace_namespaced_config_map("jumpstarter-controller", self.namespace, body)

    def start(self) -> RealController:
        self._lock = open(REAL_CONTROLLER_LOCK, "w")  # noqa: SIM115 - held until stop()
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        deadline = time.monotonic() + 30
        while busy := [p for p in REAL_CONTROLLER_PORTS if _port_in_use(p)]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"ports {busy} are in use: the real controller cannot start")
            time.sleep(0.5)
        self._write_config_map()
        env = {
            **os.environ,
            "KUBECONFIG": self.kubeconfig,
            "NAMESPACE": self.namespace,
            "CONTROLLER_KEY": self.controller_key,
            "ROUTER_KEY": self.router_key,
            "GRPC_ENDPOINT": "localhost:8082",
            "GRPC_ROUTER_ENDPOINT": "localhost:8083",
            "GIN_MODE": "release",
        }
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(  # noqa: S603
                [self.binary, f"--kubeconfig={self.kubeconfig}", "--metrics-bind-address=0",
                 f"--health-probe-bind-address=127.0.0.1:{self.health_port}", "--leader-elect=false"],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Until its probe answers, its three reconcilers have synced caches
        and its gRPC port takes TLS connections."""
        deadline = time.monotonic() + self.start_timeout
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"real controller exited with {self.process.returncode} while starting; "
                                   f"log: {self.log_path}\n{self.log_path.read_text(errors='replace')[-5000:]}")
            log = self.log_path.read_text(errors="replace")
            if log.count("Starting workers") >= 3 and self._probe_ready():
                try:
                    with socket.create_connection(("127.0.0.1", 8082), timeout=1) as raw, \
                            context.wrap_socket(raw, server_hostname="localhost"):
                        return
                except OSError:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"real controller not ready after {self.start_timeout}s; log: {self.log_path}")

    def wait_authenticator(self, timeout: float = 40.0) -> None:
        """Until the gRPC service can authenticate tokens. Its internal OIDC
        authenticator fetches its discovery document from its own endpoint
        (127.0.0.1:8085), which is not up on the first try, and retries about
        10 s later: a gRPC call made before then fails. Only tests that talk
        gRPC to the real controller need to wait."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self.log_path.read_text(errors="replace")
            if any("| 200 |" in line and "/.well-known/openid-configuration" in line for line in log.splitlines()):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"real controller's authenticator not ready after {timeout}s; log: {self.log_path}")

    def _probe_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        try:
            if self.process is not None:
                if self.process.poll() is not None:
                    self.errors.append(f"real controller exited with {self.process.returncode} during the test; "
                                       f"log: {self.log_path}")
                else:
                    # SIGTERM stops its reconcilers at once, but its gRPC and
                    # HTTP listeners ignore the shutdown and the manager would
                    # wait out its 30 s grace period: killed after 2 s.
                    self.process.send_signal(signal.SIGTERM)
                    try:
                        self.process.wait(timeout=2)
                    except subprocess.TimeoutExpired:
                        self.process.kill()
                        self.process.wait(timeout=10)
                self.process = None
        finally:
            if self._lock is not None:
                fcntl.flock(self._lock, fcntl.LOCK_UN)
                self._lock.close()
                self._lock = None
