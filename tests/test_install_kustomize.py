"""The kustomize install (config/): it builds, it agrees with the reviewed
operator_install role, and ``kubectl apply -k config/default`` installs the
operator on a real API server the way docs/install.md tells a stranger to.

The bed tests use a private bed holding only upstream Jumpstarter's CRDs
(Exporter, Lease, Client, ExporterAccessPolicy): a Jumpstarter cluster before
this project is installed. config/default installs the CRDs itself there,
and uninstalling it (CRDs included) cannot disturb the run's shared bed.
kwok runs no containers, so the operator Pods never run: the tests check
what the API server and the controllers make of the objects (CRDs
established, Deployments with their ReplicaSets and scheduled Pods, RBAC
decisions). Then the operator runs as a local process the way the installed
qemu Deployment would run it (its service account's token, its arguments and
environment) until a pool is warm, once for config/default and once for a
second bed installed by playbooks/install.yml; the two installs are compared
object by object.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import validate_parameters
from ansible_play import ansible_env
from exporterset_operator.metrics import Metrics
from jumpstarter_standin import wait_for
from jumpstarter_standin.pytest_plugin import serve_namespace
from kubernetes import client
from operator_process import OperatorProcess, token_kubeconfig
from pool_helpers import GROUP, make_class, make_set, settle_pool
from testbed import BIN_DIR, default_crd_files, namespace_name, upstream_core_crd_files

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config"
ROLE = ROOT / "roles" / "operator_install"
NAMESPACE = "jumpstarter-virtual"
PROVISIONERS = sorted([constants.PROVISIONER_QEMU, constants.PROVISIONER_QEMU_BAREMETAL,
                       constants.PROVISIONER_CORELLIUM])
# The qemu Deployment's account (one per provisioner Deployment, the same roles).
ACCOUNT = f"system:serviceaccount:{NAMESPACE}:exporterset-operator-qemu"


def _kustomize(directory: Path) -> list[dict]:
    built = subprocess.run([str(BIN_DIR / "kubectl"), "kustomize", str(directory)],
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    return [doc for doc in yaml.safe_load_all(built.stdout) if doc]


def _key(obj: dict) -> tuple:
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def _listed(directory: Path) -> list[dict]:
    """The objects of a kustomization's resource files, as written."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    return [doc for name in kustomization["resources"]
            for doc in yaml.safe_load_all((directory / name).read_text()) if doc]


def _render_role_template(name: str, **overrides) -> list[dict]:
    """A template of roles/operator_install as the role renders it with its defaults."""
    variables = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()) | overrides
    environment = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    text = environment.from_string((ROLE / "templates" / name).read_text()).render(**variables)
    return [doc for doc in yaml.safe_load_all(text) if doc]


# -- the kustomizations, built offline ------------------------------------------


def test_default_builds_the_crds_rbac_and_one_deployment_per_provisioner():
    objects = _kustomize(CONFIG / "default")
    kinds = sorted(obj["kind"] for obj in objects)
    assert kinds == sorted(["Namespace", "CustomResourceDefinition", "CustomResourceDefinition",
                            "CustomResourceDefinition", "ServiceAccount", "ServiceAccount", "ServiceAccount",
                            "ClusterRole", "ClusterRole",
                            "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Deployment", "Deployment"])
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for obj in objects:
        assert obj["metadata"].get("namespace") == (None if obj["kind"] in cluster_scoped else NAMESPACE), _key(obj)
    assert [obj["metadata"]["name"] for obj in objects if obj["kind"] == "Namespace"] == [NAMESPACE]


def test_crd_kustomization_holds_exactly_the_crds_the_bed_installs():
    listed = yaml.safe_load((CONFIG / "crd" / "kustomization.yaml").read_text())["resources"]
    on_disk = sorted(path.name for path in (CONFIG / "crd").glob("*.yaml") if path.name != "kustomization.yaml")
    assert sorted(listed) == on_disk
    bed_files = {path.resolve() for path in default_crd_files()}
    assert {(CONFIG / "crd" / name).resolve() for name in listed} <= bed_files
    built = {obj["metadata"]["name"]: obj for obj in _kustomize(CONFIG / "crd")}
    assert built == {obj["metadata"]["name"]: obj for obj in _listed(CONFIG / "crd")}


def _pool_binding(namespace: str) -> dict:
    """config/rbac/pool as ``kubectl apply -k config/rbac/pool -n NAMESPACE`` makes it."""
    (binding,) = _kustomize(CONFIG / "rbac" / "pool")
    binding["metadata"]["namespace"] = namespace
    return binding


def test_rbac_is_what_the_operator_install_role_creates():
    """config/rbac and rbac.yml.j2 (with the role's defaults: cluster-wide,
    namespace jumpstarter-virtual) hold the same objects, rules included."""
    role = {_key(obj): obj for obj in _render_role_template("rbac.yml.j2")}
    kustomize = {_key(obj): obj for obj in _listed(CONFIG / "rbac")}
    assert kustomize == role
    # ...and kustomize leaves them as written.
    assert {_key(obj): obj for obj in _kustomize(CONFIG / "rbac")} == kustomize
    # A pool namespace of the role is config/rbac/pool applied there.
    pools = ["jumpstarter-lab", "team-b"]
    role = {_key(obj): obj for obj in _render_role_template("rbac.yml.j2", operator_install_pool_namespaces=pools)}
    assert role == kustomize | {_key(b): b for b in map(_pool_binding, pools)}


def test_no_secret_or_configmap_is_listed_watched_or_written_outside_the_pool_namespaces():
    """Secrets and ConfigMaps are read, listed and watched (Secrets as
    metadata only, for the config re-sync on change) only where the pool
    ClusterRole is bound, with no verb beyond those; the cluster-wide role
    grants nothing on them, nor pods/exec, nor any write on Pods or Exporters;
    pods/exec (the reset in place of a QEMU Pod) is the pool role's, a rule of
    its own with get and create only."""
    by_name = {obj["metadata"]["name"]: obj for obj in _listed(CONFIG / "rbac") if obj["kind"] == "ClusterRole"}
    cluster_wide = {(group, resource, verb) for rule in by_name["exporterset-operator"]["rules"]
                    for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}
    assert not {r for _, r, _ in cluster_wide} & {"secrets", "configmaps", "pods/exec"}
    assert {v for _, r, v in cluster_wide if r in ("pods", "exporters")} == {"list", "watch"}
    for rule in by_name["exporterset-operator-pool"]["rules"]:
        if {"secrets", "configmaps"} & set(rule["resources"]):
            allowed = {"get", "list", "watch"} | ({"create", "update", "delete"} if "secrets" in rule["resources"]
                                                  else set())
            assert set(rule["verbs"]) <= allowed and rule["resources"] in (["secrets"], ["configmaps"]), rule
        if "pods/exec" in rule["resources"]:
            assert rule["resources"] == ["pods/exec"] and set(rule["verbs"]) <= {"get", "create"}, rule
    (binding,) = [obj for obj in _kustomize(CONFIG / "default") if obj["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == "exporterset-operator"
    assert _pool_binding("x")["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                             "name": "exporterset-operator-pool"}


def test_watching_one_namespace_makes_only_namespaced_rbac_there():
    objects = _render_role_template("rbac.yml.j2", operator_install_watch_namespace="team-a",
                                    operator_install_pool_namespaces=["ignored"])
    kinds = {(obj["kind"], obj["metadata"]["name"]): obj["metadata"].get("namespace") for obj in objects}
    assert kinds == {
        ("Namespace", NAMESPACE): None,
        **{("ServiceAccount", f"exporterset-operator-{p.split('.')[0]}"): NAMESPACE for p in PROVISIONERS},
        ("Role", "exporterset-operator"): "team-a", ("RoleBinding", "exporterset-operator"): "team-a",
        ("Role", "exporterset-operator-pool"): "team-a", ("RoleBinding", "exporterset-operator-pool"): "team-a",
        ("Role", "exporterset-operator-leader-election"): NAMESPACE,
        ("RoleBinding", "exporterset-operator-leader-election"): NAMESPACE,
    }
    cluster = {obj["metadata"]["name"]: obj["rules"] for obj in _listed(CONFIG / "rbac")
               if obj["kind"] == "ClusterRole"}
    assert {obj["metadata"]["name"]: obj["rules"] for obj in objects if obj["kind"] == "Role"
            and obj["metadata"]["namespace"] == "team-a"} == cluster


def test_manager_deployments_are_what_the_role_creates():
    role = {_key(obj): obj for obj in _render_role_template("deployment.yml.j2")}
    kustomize = {_key(obj): obj for obj in _listed(CONFIG / "manager")}
    assert kustomize == role


@pytest.mark.parametrize("provisioner", PROVISIONERS)
def test_manager_runs_one_locked_down_operator_per_provisioner(provisioner):
    short = provisioner.split(".")[0]
    deployments = {obj["metadata"]["name"]: obj for obj in _kustomize(CONFIG / "manager")}
    pod = deployments[f"exporterset-operator-{short}"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python3", "-m", "exporterset_operator"]
    assert {f"--provisioner={provisioner}", "--leader-elect", f"--leader-election-id=exporterset-operator-{short}",
            "--metrics-bind-address=0.0.0.0:8080"} <= set(container["args"])
    assert [arg for arg in container["args"] if arg.startswith("--provisioner")] == [f"--provisioner={provisioner}"]
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["LEADER_ELECTION_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert container["ports"] == [{"name": "metrics", "containerPort": 8080}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                             "capabilities": {"drop": ["ALL"]}}
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert [volume["name"] for volume in pod["volumes"] if "emptyDir" in volume] == ["tmp"]
    # An account of its own, not shared with the other provisioners' Deployments.
    assert pod["serviceAccountName"] == f"exporterset-operator-{short}"


def test_an_overlay_chooses_namespace_image_and_monitoring(tmp_path):
    """The overlay of docs/install.md. config/prometheus stays out of
    config/default (ServiceMonitor needs the Prometheus Operator's CRD); an
    overlay adds it, and it lands in the overlay's namespace, with a Service
    over every operator Pod."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": "monitored",
        "resources": [os.path.relpath(CONFIG / "default", overlay)],
        "components": [os.path.relpath(CONFIG / "prometheus", overlay)],
        "images": [{"name": "quay.io/jumpstarter-dev/exporterset-operator",
                    "newName": "registry.example.com/jumpstarter/exporterset-operator", "newTag": "dev"}],
    }))
    objects = _kustomize(overlay)
    by_kind = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    (service,) = by_kind["Service"]
    (monitor,) = by_kind["ServiceMonitor"]
    assert service["metadata"]["namespace"] == monitor["metadata"]["namespace"] == "monitored"
    assert {obj["metadata"]["namespace"] for obj in objects if "namespace" in obj["metadata"]} == {"monitored"}
    assert [subject["namespace"] for binding in by_kind["ClusterRoleBinding"] + by_kind["RoleBinding"]
            for subject in binding["subjects"]] == ["monitored"] * 6  # three accounts, two bindings
    for deployment in by_kind["Deployment"]:
        assert [container["image"] for container in deployment["spec"]["template"]["spec"]["containers"]] == [
            "registry.example.com/jumpstarter/exporterset-operator:dev"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        ports = {port["name"] for container in deployment["spec"]["template"]["spec"]["containers"]
                 for port in container["ports"]}
        assert {port["targetPort"] for port in service["spec"]["ports"]} <= ports
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [endpoint["port"] for endpoint in monitor["spec"]["endpoints"]] == ["metrics"]
    assert "ServiceMonitor" not in {obj["kind"] for obj in _kustomize(CONFIG / "default")}


def _metric_series_names() -> set[str]:
    names = set()
    for family in Metrics().registry.collect():
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(family.type, [""])
        names.update(family.name + suffix for suffix in suffixes)
    return names


def test_dashboard_queries_only_metrics_the_operator_exports():
    dashboard = json.loads((CONFIG / "dashboards" / "pool.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    expressions += [variable["query"]["query"] for variable in dashboard["templating"]["list"]
                    if isinstance(variable.get("query"), dict)]
    used = {name for expr in expressions for name in re.findall(r"jumpstarter_exporterset_\w+", expr)}
    exported = _metric_series_names()
    assert used - exported == set()
    # Every family is on some panel.
    families = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in exported}
    assert families - {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in used} == set()
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def _samples() -> dict[str, list[dict]]:
    """{directory name: its objects}; one object per file (yamllint's rule)."""
    samples = {}
    for directory in sorted(path for path in (CONFIG / "samples").iterdir() if path.is_dir()):
        for path in sorted(directory.glob("*.yaml")):
            (document,) = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
            samples.setdefault(directory.name, []).append(document)
    return samples


def test_samples_hold_a_valid_class_and_set_per_provisioner():
    provisioners = []
    for name, documents in _samples().items():
        (klass,) = [doc for doc in documents if doc["kind"] == "VirtualTargetClass"]
        (exporterset,) = [doc for doc in documents if doc["kind"] == "ExporterSet"]
        provisioner = klass["spec"]["provisioner"]
        provisioners.append(provisioner)
        assert name == provisioner.split(".")[0]
        assert validate_parameters(provisioner, klass["spec"].get("parameters")) == {"errors": [], "warnings": []}
        assert exporterset["spec"]["virtualTargetClassName"] == klass["metadata"]["name"]
        selector = exporterset["spec"]["selector"]["matchLabels"]
        assert selector.items() <= exporterset["spec"]["template"]["metadata"]["labels"].items()
        for document in documents:
            assert "namespace" not in document["metadata"], "samples go into the namespace given to kubectl"
    assert sorted(provisioners) == PROVISIONERS


# -- on a real API server ---------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(testbed_factory):
    """A Jumpstarter cluster without this project, then config/default applied
    to it (server side); `kubectl delete -k config/default` afterwards."""
    bed = testbed_factory("kustomize", crd_files=upstream_core_crd_files())
    assert bed.kubectl("get", "crd", "exportersets.virtualtarget.jumpstarter.dev", check=False).returncode != 0
    started = time.monotonic()
    bed.kubectl("apply", "--server-side", "-k", str(CONFIG / "default"))
    bed.apply_seconds = time.monotonic() - started
    yield bed
    bed.kubectl("delete", "-k", str(CONFIG / "default"), "--wait=true", "--timeout=120s")
    for crd in ("exportersets", "virtualtargetclasses"):
        gone = bed.kubectl("get", "crd", f"{crd}.virtualtarget.jumpstarter.dev", check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr


def _get(bed, *args) -> dict:
    return json.loads(bed.kubectl("get", "-o", "json", *args).stdout)


def _eventually(check, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.testbed
def test_apply_installs_established_crds_and_every_object(cluster):
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/exportersets.virtualtarget.jumpstarter.dev",
                    "crd/virtualtargetclasses.virtualtarget.jumpstarter.dev")
    live = _get(cluster, "-k", str(CONFIG / "default"))["items"]
    assert sorted(_key(obj) for obj in live) == sorted(_key(obj) for obj in _kustomize(CONFIG / "default"))
    # A second apply changes nothing and is accepted as well (an upgrade in place).
    again = cluster.kubectl("apply", "--server-side", "-k", str(CONFIG / "default"))
    assert "serverside-applied" in again.stdout


@pytest.mark.testbed
def test_every_deployment_gets_scheduled_pods(cluster):
    def scheduled():
        deployments = _get(cluster, "deployments", "-n", NAMESPACE)["items"]
        assert sorted(d["metadata"]["name"] for d in deployments) == sorted(
            f"exporterset-operator-{p.split('.')[0]}" for p in PROVISIONERS)
        replica_sets = _get(cluster, "replicasets", "-n", NAMESPACE)["items"]
        owners = {rs["metadata"]["ownerReferences"][0]["name"] for rs in replica_sets}
        assert owners == {d["metadata"]["name"] for d in deployments}
        pods = _get(cluster, "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=exporterset-operator")["items"]
        assert len(pods) == 2 * len(deployments)
        assert all(pod["spec"].get("nodeName") for pod in pods)
        return pods

    pods = _eventually(scheduled)
    for pod in pods:
        component = pod["metadata"]["labels"]["app.kubernetes.io/component"]
        assert pod["spec"]["serviceAccountName"] == f"exporterset-operator-{component}"
        assert pod["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


@pytest.mark.testbed
@pytest.mark.parametrize(("verb", "resource", "allowed"), [
    ("patch", "exportersets.virtualtarget.jumpstarter.dev/status", "yes"),
    ("update", "exportersets.virtualtarget.jumpstarter.dev/status", "no"),
    ("watch", "exporters.jumpstarter.dev", "yes"),
    ("create", "exporters.jumpstarter.dev", "no"),
    ("create", "pods", "no"),
    ("create", "pods/exec", "no"),
    ("get", "secrets", "no"),
    ("list", "configmaps", "no"),
    ("delete", "exportersets.virtualtarget.jumpstarter.dev", "no"),
    ("create", "leases.jumpstarter.dev", "no"),
])
def test_outside_the_pool_namespaces_the_account_only_reads_and_reports(cluster, verb, resource, allowed):
    def decided():
        assert _can_i(cluster, verb, resource, "some-team") == allowed
    _eventually(decided, timeout=20)


def _can_i(bed, verb: str, resource: str, namespace: str) -> str:
    """``kubectl auth can-i`` for the operator's account; ``resource/sub`` is a subresource."""
    resource, _, subresource = resource.partition("/")
    answer = bed.kubectl("auth", "can-i", verb, resource, *([f"--subresource={subresource}"] if subresource else []),
                         "-n", namespace, f"--as={ACCOUNT}", check=False)
    return answer.stdout.strip()


@pytest.mark.testbed
def test_a_pool_namespace_gets_the_writes_and_reads_by_name(cluster, request):
    """`kubectl apply -k config/rbac/pool -n NAMESPACE` (docs/install.md)."""
    namespace = namespace_name(request.node.name)
    cluster.kubectl("create", "namespace", namespace)
    try:
        cluster.kubectl("apply", "--server-side", "-k", str(CONFIG / "rbac" / "pool"), "-n", namespace)
        expected = [("create", "exporters.jumpstarter.dev", "yes"), ("create", "pods", "yes"),
                    ("get", "secrets", "yes"), ("delete", "secrets", "yes"), ("get", "configmaps", "yes"),
                    # Listed and watched (Secrets as metadata only) for the config
                    # re-sync on change; ConfigMaps never written.
                    ("list", "secrets", "yes"), ("watch", "secrets", "yes"), ("list", "configmaps", "yes"),
                    ("update", "configmaps", "no"),
                    # The reset in place of a QEMU Pod, in the set's own namespace.
                    ("create", "pods/exec", "yes"), ("update", "leases.jumpstarter.dev", "no")]

        def decided():
            answers = [(verb, resource, _can_i(cluster, verb, resource, namespace)) for verb, resource, _ in expected]
            assert answers == expected
        _eventually(decided, timeout=20)
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


@pytest.mark.testbed
def test_leader_election_leases_only_in_the_operator_namespace(cluster):
    def decided():
        for namespace, allowed in ((NAMESPACE, "yes"), ("default", "no")):
            answer = cluster.kubectl("auth", "can-i", "update", "leases.coordination.k8s.io", "-n", namespace,
                                     f"--as={ACCOUNT}", check=False)
            assert answer.stdout.strip() == allowed, namespace
    _eventually(decided, timeout=20)


@pytest.mark.testbed
def test_samples_apply_in_a_team_namespace(cluster, request):
    namespace = namespace_name(request.node.name)
    cluster.kubectl("create", "namespace", namespace)
    try:
        applied = cluster.kubectl("apply", "--server-side", "-n", namespace, "-R", "-f", str(CONFIG / "samples"))
        assert applied.stdout.count("serverside-applied") == 2 * len(PROVISIONERS)
        classes = _get(cluster, "vtc", "-n", namespace)["items"]
        sets = _get(cluster, "exset", "-n", namespace)["items"]
        assert sorted(c["spec"]["provisioner"] for c in classes) == PROVISIONERS
        # The CRD's defaults were filled in by the API server.
        assert all(s["spec"]["recycleStrategy"] == "ExitAndReplace" for s in sets)
        assert len(sets) == len(PROVISIONERS)
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


# -- from either install to a warm pool, as the installed service account ---------

POOL_NAMESPACE = "jumpstarter-lab"
# Set by the API server or by who applied, not by the install.
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


@pytest.fixture(scope="module")
def playbook_cluster(testbed_factory, cluster, tmp_path_factory):
    """Another bed with only upstream's CRDs, installed by playbooks/install.yml
    with the pool namespace the stand-in will serve."""
    bed = testbed_factory("install-playbook", crd_files=upstream_core_crd_files())
    bed.kubectl("create", "namespace", POOL_NAMESPACE)
    workdir = tmp_path_factory.mktemp("install-playbook")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
         str(ROOT / "playbooks" / "install.yml"),
         "-e", json.dumps({"operator_install_pool_namespaces": [POOL_NAMESPACE]})],
        env={**ansible_env(), "K8S_AUTH_KUBECONFIG": str(bed.kubeconfig), "KUBECONFIG": str(bed.kubeconfig),
             "ANSIBLE_STDOUT_CALLBACK": "default"},
        capture_output=True, text=True, timeout=600, cwd=workdir,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return bed


@pytest.fixture(scope="module")
def kustomize_cluster(cluster):
    """The config/default bed, with config/rbac/pool applied to the pool namespace."""
    cluster.kubectl("create", "namespace", POOL_NAMESPACE)
    cluster.kubectl("apply", "--server-side", "-k", str(CONFIG / "rbac" / "pool"), "-n", POOL_NAMESPACE)
    yield cluster
    cluster.kubectl("delete", "namespace", POOL_NAMESPACE, "--wait=false")


def _installed(bed) -> dict[tuple, dict]:
    """The live objects of the install, without what the API server adds."""
    wanted = [_key(obj) for obj in _kustomize(CONFIG / "default")] + [_key(_pool_binding(POOL_NAMESPACE))]
    live = {}
    for kind, namespace, name in wanted:
        obj = _get(bed, kind, name, *(["-n", namespace] if namespace else []))
        obj.pop("status", None)
        for field in SERVER_FIELDS:
            obj["metadata"].pop(field, None)
        annotations = obj["metadata"].get("annotations") or {}
        annotations.pop("deployment.kubernetes.io/revision", None)
        if not annotations:
            obj["metadata"].pop("annotations", None)
        live[(kind, namespace, name)] = obj
    return live


@pytest.mark.testbed
def test_the_playbook_and_kustomize_install_the_same_objects(kustomize_cluster, playbook_cluster):
    from_kustomize = _installed(kustomize_cluster)
    from_playbook = _installed(playbook_cluster)
    assert sorted(from_playbook) == sorted(from_kustomize)
    for key, obj in from_kustomize.items():
        assert from_playbook[key] == obj, key


def _deployment_process(bed, deployment: str, workdir: Path) -> OperatorProcess:
    """The operator as the installed Deployment runs it (its service account,
    command arguments and environment), as a local process: kwok runs no
    containers. Only the metrics address is a free local port instead."""
    installed = _get(bed, "deployment", deployment, "-n", NAMESPACE)
    pod = installed["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python3", "-m", "exporterset_operator"]
    args = [arg for arg in container["args"] if not arg.startswith("--metrics-bind-address")]
    env = {}
    for entry in container.get("env", []):
        field = (entry.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
        env[entry["name"]] = installed["metadata"]["namespace"] if field == "metadata.namespace" else entry["value"]
    kubeconfig = token_kubeconfig(bed.kubeconfig, workdir / "operator.kubeconfig", namespace=NAMESPACE,
                                  account=pod["serviceAccountName"])
    return OperatorProcess(str(kubeconfig), None, workdir, *args, provisioners=(),
                           env={**env, "KUBECONFIG": str(kubeconfig)}, service_account=False)


@pytest.mark.testbed
@pytest.mark.parametrize("install", ["kustomize", "playbook"])
def test_installed_operator_reaches_a_warm_pool(install, request, tmp_path):
    """The qemu Deployment's operator, as its own service account with only
    the installed RBAC, fills a pool the controller stand-in registers."""
    bed = request.getfixturevalue(f"{install}_cluster")
    proc = _deployment_process(bed, "exporterset-operator-qemu", tmp_path)
    assert proc.kubeconfig != str(bed.kubeconfig)
    with bed.api_client() as api, serve_namespace(bed.kubeconfig, POOL_NAMESPACE) as standin:
        custom = client.CustomObjectsApi(api)
        make_class(custom, POOL_NAMESPACE)
        make_set(custom, POOL_NAMESPACE)
        proc.start()
        try:
            proc.wait_ready()
            started = time.monotonic()
            status = settle_pool(standin, 2, custom, POOL_NAMESPACE, timeout=180)
            print(f"{install}: warm pool of 2 after {time.monotonic() - started:.1f}s")
            assert status["readyReplicas"] == 2
            assert proc.leads()
            lease = client.CoordinationV1Api(api).read_namespaced_lease("exporterset-operator-qemu", NAMESPACE)
            assert lease.spec.holder_identity.endswith(f"_{proc.proc.pid}")
            custom.delete_namespaced_custom_object(*GROUP, POOL_NAMESPACE, "exportersets", "pool")
            wait_for(lambda: not custom.list_namespaced_custom_object(*GROUP, POOL_NAMESPACE, "exportersets")["items"],
                     timeout=120, message="the set torn down")
        finally:
            proc.stop()
            print(f"--- operator log ---\n{proc.log_tail(30)}")
