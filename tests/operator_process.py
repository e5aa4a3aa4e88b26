"""Runs the real operator as a separate process against the test bed, as
its own service account with the project's RBAC (config/rbac): a verb the
operator needs and the Roles lack fails the test that needs it."""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from testbed import processes

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config"
# config/rbac as an overlay would install it for the tests: its own
# namespace and a name prefix, so that it never collides with an install the
# tests make of config/ or the operator_install role (same names, other
# subjects) on the same bed.
OPERATOR_NAMESPACE = "jve-operator"
NAME_PREFIX = "jve-"
# The qemu Deployment's account. An operator runs as the account of its
# provisioner, bound to that provisioner's pool role (account_for).
ACCOUNT = NAME_PREFIX + "exporterset-operator-qemu"
USERNAME = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{ACCOUNT}"
TOKEN_SECONDS = 24 * 3600
_installed: set[tuple[str, str]] = set()
_install_lock = threading.Lock()


def watches_file(tmp_path: Path, edit) -> Path:
    """A copy of the operator's watches.yaml in ``tmp_path``, its ExporterSet
    entry changed by ``edit(entry)``, for ``--watches-file``."""
    watches = yaml.safe_load((ROOT / "operator" / "watches.yaml").read_text())
    edit(next(w for w in watches if w["kind"] == "ExporterSet"))
    path = tmp_path / "watches.yaml"
    path.write_text(yaml.safe_dump(watches))
    return path


def _kubectl(kubeconfig, *args: str, input: str | None = None) -> str:
    from testbed import BIN_DIR

    done = subprocess.run([str(BIN_DIR / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
                          input=input, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def kustomize(kubeconfig, directory: Path) -> list[dict]:
    """The objects ``kubectl kustomize`` builds from ``directory``."""
    return [doc for doc in yaml.safe_load_all(_kubectl(kubeconfig, "kustomize", str(directory))) if doc]


# What kubectl kustomize built, by directory, once per process: every
# operator a test starts is granted the same objects (a build is a kubectl
# run, about 0.15 s).
_built: dict[str, str] = {}


def _built_once(key: str, build) -> list[dict]:
    """``build()``'s objects, built the first time ``key`` is asked for; a fresh copy each time."""
    with _install_lock:
        if key not in _built:
            _built[key] = json.dumps(build())
        return json.loads(_built[key])


def operator_rbac(kubeconfig) -> list[dict]:
    """config/rbac with the tests' namespace and name prefix (a kustomize overlay)."""
    def build():
        with tempfile.TemporaryDirectory() as overlay:
            Path(overlay, "kustomization.yaml").write_text(yaml.safe_dump({
                "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "namespace": OPERATOR_NAMESPACE, "namePrefix": NAME_PREFIX,
                "resources": [os.path.relpath(CONFIG / "rbac", overlay)],
            }))
            return kustomize(kubeconfig, Path(overlay))

    return _built_once("rbac overlay", build)


def _apply(kubeconfig, objects: list[dict]) -> None:
    _kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "--field-manager=jve-tests", "-f", "-",
             input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def _apply_namespaced_rbac(kubeconfig, objects: list[dict]) -> None:
    """``_apply`` of the Roles and RoleBindings an operator's start adds, through ``_admin_api``."""
    from kubernetes import client

    with _admin_api(kubeconfig) as api:
        rbac = client.RbacAuthorizationV1Api(api)
        for obj in objects:
            patch = {"Role": rbac.patch_namespaced_role, "RoleBinding": rbac.patch_namespaced_role_binding}[obj["kind"]]
            patch(obj["metadata"]["name"], obj["metadata"]["namespace"], obj, field_manager="jve-tests", force=True,
                  _content_type="application/apply-patch+yaml")


def account_for(provisioners) -> str:
    """The account an operator of ``provisioners`` runs as: its provisioner's
    (config/rbac/service_account.yaml); one serving several runs as the qemu
    account, bound to the pool role of each."""
    if len(provisioners) == 1:
        return NAME_PREFIX + "exporterset-operator-" + provisioners[0].split(".")[0]
    return ACCOUNT


def _bound(binding: dict, namespace: str, account: str = ACCOUNT) -> dict:
    """A RoleBinding of config/rbac moved to ``namespace``, for ``account``."""
    binding = json.loads(json.dumps(binding))
    binding["metadata"] = {"name": NAME_PREFIX + binding["metadata"]["name"].removeprefix(NAME_PREFIX)
                           + ("" if account == ACCOUNT else "-" + account), "namespace": namespace}
    binding["roleRef"]["name"] = NAME_PREFIX + binding["roleRef"]["name"].removeprefix(NAME_PREFIX)
    binding["subjects"] = [{"kind": "ServiceAccount", "name": account, "namespace": OPERATOR_NAMESPACE}]
    return binding


def grant(kubeconfig, pool_namespaces=(), election_namespaces=(), provisioners=("qemu.jumpstarter.dev",)) -> None:
    """Install config/rbac (once per bed and process), bind the pool
    ClusterRole of each of ``provisioners`` in each pool namespace
    (config/rbac/pool) and the leader election Role in each election
    namespace to their account (``account_for``), and wait until the API
    server's authorizer has seen them."""
    server = json.loads(Path(kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    objects = operator_rbac(kubeconfig)
    account = account_for(provisioners)
    username = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{account}"
    pool_roles = {"exporterset-operator-pool-" + p.split(".")[0] for p in provisioners}
    extra = []
    for namespace in pool_namespaces:
        bindings = _built_once("rbac/pool", lambda: kustomize(kubeconfig, CONFIG / "rbac" / "pool"))
        extra += [_bound(b, namespace, account) for b in bindings if b["roleRef"]["name"] in pool_roles]
    election = [o for o in objects if o["metadata"]["name"] == NAME_PREFIX + "exporterset-operator-leader-election"]
    for namespace in election_namespaces:
        if namespace == OPERATOR_NAMESPACE:
            continue
        for obj in election:
            moved = json.loads(json.dumps(obj))
            moved["metadata"]["namespace"] = namespace
            extra.append(_bound(moved, namespace, account) if moved["kind"] == "RoleBinding" else moved)
    with _install_lock:
        key = (str(kubeconfig), server)
        if key not in _installed:
            _apply(kubeconfig, objects)
            _installed.add(key)
    if extra:
        _apply_namespaced_rbac(kubeconfig, extra)
    checks = [("list", "exportersets.virtualtarget.jumpstarter.dev", ns) for ns in pool_namespaces or ["default"]]
    checks += [("create", "exporters.jumpstarter.dev", ns) for ns in pool_namespaces]
    checks += [("update", "leases.coordination.k8s.io", ns) for ns in election_namespaces]
    deadline = time.monotonic() + 30
    for verb, resource, namespace in checks:
        while not _may(kubeconfig, verb, resource, namespace, username):
            if time.monotonic() > deadline:
                raise AssertionError(f"{username} may not {verb} {resource} in {namespace} after 30s")
            time.sleep(0.2)


def _admin_api(kubeconfig):
    """An API client of the admin kubeconfig. An operator's start asks the API
    several things; a kubectl run for each cost 0.15 s (0.4 s on a busy machine)."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))


def _may(kubeconfig, verb: str, resource: str, namespace: str, username: str = USERNAME) -> bool:
    """What ``kubectl auth can-i VERB RESOURCE -n NAMESPACE --as USERNAME``
    answers: the API server's authorizer on a SubjectAccessReview of the
    service account (its user and the groups its token would carry)."""
    from kubernetes import client

    plural, _, group = resource.partition(".")
    account_namespace = username.split(":")[2]
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=username,
        groups=["system:serviceaccounts", f"system:serviceaccounts:{account_namespace}", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(verb=verb, resource=plural, group=group,
                                                        namespace=namespace)))
    with _admin_api(kubeconfig) as api:
        return bool(client.AuthorizationV1Api(api).create_subject_access_review(review).status.allowed)


def token_kubeconfig(admin_kubeconfig, path: Path, namespace: str = OPERATOR_NAMESPACE, account: str = ACCOUNT,
                     server: str | None = None) -> Path:
    """A kubeconfig that authenticates as ``namespace/account`` with a token
    from the TokenRequest API, against the admin kubeconfig's API server (or
    ``server``)."""
    admin = json.loads(Path(admin_kubeconfig).read_text())
    cluster = dict(admin["clusters"][0]["cluster"])
    if server:
        cluster["server"] = server
    from kubernetes import client

    with _admin_api(admin_kubeconfig) as api:
        token = client.CoreV1Api(api).create_namespaced_service_account_token(
            account, namespace, client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS))).status.token
    user = f"system:serviceaccount:{namespace}:{account}"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "testbed", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": user}}],
        "current-context": "testbed",
    }, indent=2))
    path.chmod(0o600)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _option(args: list[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` (the last one given)."""
    value = None
    for index, arg in enumerate(args):
        if arg == name and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


class OperatorProcess:
    """One ``python -m exporterset_operator`` limited to one namespace.

    ``kubeconfig`` is the bed's admin kubeconfig: with it config/rbac is
    installed and a token requested, and the operator runs as its own
    service account (``USERNAME``), bound in ``namespace`` (the pool
    ClusterRole) and in its leader election namespace. ``server`` points the
    operator at another address of the API server (a proxy).
    ``service_account=False`` runs it with ``kubeconfig`` as given.
    ``exact=True`` gives it ``extra_args`` alone (the kubeconfig and the
    artifacts directory then come from the environment; the probe port from
    their ``--health-probe-bind-address``)."""

    def __init__(self, kubeconfig: str, namespace: str | None, workdir: Path, *extra_args: str,
                 provisioners=("qemu.jumpstarter.dev",), env: dict | None = None, server: str | None = None,
                 service_account: bool = True, exact: bool = False):
        self.admin_kubeconfig = kubeconfig
        self.namespace = namespace
        self.workdir = workdir
        self.extra_args = list(extra_args)
        self.provisioners = provisioners
        self.env = dict(env or {})
        self.server = server
        self.service_account = service_account
        self.port = free_port()
        self.health_port = free_port()
        self.exact = exact
        if exact:
            self.health_port = int(_option(self.extra_args, "--health-probe-bind-address").rsplit(":", 1)[1])
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._kubeconfig: str | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"operator-{self.port}.log"

    @property
    def kubeconfig(self) -> str:
        """What the operator runs with: its service account's kubeconfig."""
        if self._kubeconfig is None:
            if not self.service_account:
                self._kubeconfig = self.admin_kubeconfig
            else:
                election = []
                if "--leader-elect" in self.extra_args:
                    election = [_option(self.extra_args, "--leader-election-namespace") or self.namespace]
                grant(self.admin_kubeconfig, [self.namespace] if self.namespace else [], election,
                      self.provisioners)
                self.workdir.mkdir(parents=True, exist_ok=True)
                self._kubeconfig = str(token_kubeconfig(
                    self.admin_kubeconfig, self.workdir / f"operator-{self.port}.kubeconfig",
                    account=account_for(self.provisioners), server=self.server))
        return self._kubeconfig

    def start(self) -> OperatorProcess:
        args = [
            sys.executable, "-m", "exporterset_operator",
            "--kubeconfig", self.kubeconfig,
            *(["--namespace", self.namespace] if self.namespace else []),
            "--metrics-bind-address", f"127.0.0.1:{self.port}",
            "--health-probe-bind-address", f"127.0.0.1:{self.health_port}",
            "--artifacts-dir", str(self.workdir / "artifacts"),
            "--log-level", "DEBUG",
            *[arg for p in self.provisioners for arg in ("--provisioner", p)],
            *self.extra_args,
        ]
        env = {**os.environ, **self.env}
        if self.exact:
            args = [sys.executable, "-m", "exporterset_operator", *self.extra_args]
            env.update(KUBECONFIG=self.kubeconfig, ARTIFACTS_DIR=str(self.workdir / "artifacts"))
        if self.service_account:
            # Nothing the operator runs (playbooks, lookups) falls back to the admin's.
            env["KUBECONFIG"] = self.kubeconfig
        log = open(self.log_path, "a")  # noqa: SIM115 (closed with the process)
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        self.starts += 1
        # Stopped when the test or fixture that started it ends, whether or
        # not that test stops it itself.
        processes.track(self.proc.pid, f"operator for namespace {self.namespace} (log {self.log_path})")
        processes.at_owner_end(functools.partial(_end, self.proc))
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        from testbed import answers_ok

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"operator exited with {self.proc.returncode}:\n{self.log_tail()}")
            if answers_ok(f"http://127.0.0.1:{self.health_port}/readyz", 1):
                return
            time.sleep(0.2)
        raise AssertionError(f"operator not ready after {timeout}s:\n{self.log_tail()}")

    def probe(self, path: str) -> tuple[int, str] | None:
        """``(status, body)`` of ``/healthz`` or ``/readyz``; None while nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def metric(self, name: str, labels: str = "") -> float:
        prefix = f"{name}{{{labels}}}" if labels else name
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(prefix + " ") or (not labels and line.startswith(name + "{")):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def leads(self) -> bool:
        """What the process says of itself: ``jumpstarter_exporterset_leader``."""
        try:
            return self.metric("jumpstarter_exporterset_leader") == 1
        except OSError:
            return False

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a Pod's default grace period (30 s):
        the operator finishes its reconciles and releases its Lease first."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _end(proc: subprocess.Popen) -> None:
    """What the owner's end does to an operator still running: SIGTERM,
    SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def leader_and_standby(first: OperatorProcess, second: OperatorProcess) -> tuple[OperatorProcess, OperatorProcess]:
    """Two operators of one leader election: waits until both serve /readyz
    (caches synced, leader or not) and one of them leads; returns (leader,
    standby)."""
    from jumpstarter_standin import wait_for

    first.wait_ready()
    second.wait_ready()
    leader = wait_for(lambda: next((p for p in (first, second) if p.leads()), None), message="a leader")
    return leader, (second if leader is first else first)
