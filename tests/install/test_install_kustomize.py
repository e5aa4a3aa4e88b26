"""The kustomize install (config/): it builds, it agrees with the reviewed
operator_install role, and ``kubectl apply -k config/default`` (namespaced;
config/cluster-wide is checked offline, and every operator test runs under
its RBAC) installs the operator on a real API server the way
docs/install.md tells a stranger to.

The bed tests use a private bed holding only upstream Jumpstarter's CRDs
(Exporter, Lease, Client, ExporterAccessPolicy): a Jumpstarter cluster before
this project is installed. config/default installs the CRDs itself there,
and uninstalling it (CRDs included) cannot disturb the run's shared bed.
kwok runs no containers, so the operator Pods never run: the tests check
what the API server and the controllers make of the objects (CRDs
established, Deployments with their ReplicaSets and scheduled Pods, RBAC
decisions, the admission policy's refusals of an impersonated tenant). Then
the operator runs as a local process the way the installed
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
from operator_process import ROOT, OperatorProcess, token_kubeconfig
from pool_helpers import GROUP, make_class, make_set, settle_pool
from testbed import BIN_DIR, default_crd_files, namespace_name, upstream_core_crd_files

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


# config/rbac's Roles, whose rules the role reads as they are (tasks/main.yml).
RBAC_ROLE_FILES = ("role.yaml", "pool_role_qemu.yaml", "pool_role_qemu_baremetal.yaml", "pool_role_corellium.yaml",
                   "leader_election_role.yaml")
SHORTS = [p.split(".")[0] for p in PROVISIONERS]
# Verbs each provisioner's pool role must not grant: what its operator never
# does (no Pods on lab hosts, no exec but the QEMU Pod's reset in place, no
# cache of Secrets or ConfigMaps without Pod-backed instances to re-sync).
NOT_NEEDED = {
    "qemu": set(),
    "corellium": {("", "pods/exec", "get"), ("", "pods/exec", "create")},
    "qemu-baremetal": {("", "pods", verb) for verb in ("get", "create", "delete")}
    | {("", "pods/exec", "get"), ("", "pods/exec", "create"), ("jumpstarter.dev", "exporters/finalizers", "update")}
    | {("", "secrets", verb) for verb in ("list", "watch", "create", "update")}
    | {("", "configmaps", verb) for verb in ("list", "watch")},
}


def _bool(value) -> bool:
    """Ansible's ``bool`` filter, for the role's templates."""
    return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")


def _render_role_template(name: str, **overrides) -> list[dict]:
    """A template of roles/operator_install as the role renders it with its
    defaults (and, as its task passes them, config/rbac's Roles)."""
    roles = [yaml.safe_load((CONFIG / "rbac" / file).read_text()) for file in RBAC_ROLE_FILES]
    variables = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()) | {
        "operator_install_rbac_roles": roles} | overrides
    environment = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    environment.filters["bool"] = _bool
    text = environment.from_string((ROLE / "templates" / name).read_text()).render(**variables)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _grants(role: dict) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


RBAC_KINDS = {"Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
TENANCY = {"virtualtarget-tenant", "virtualtarget-admin"}


def _operator_rbac(objects: list[dict]) -> dict[tuple, dict]:
    """The operator's namespace, accounts and RBAC among ``objects`` (not the tenancy roles)."""
    return {_key(obj): obj for obj in objects
            if obj["kind"] in RBAC_KINDS and obj["metadata"]["name"] not in TENANCY}


# -- the kustomizations, built offline ------------------------------------------


def test_default_builds_a_namespaced_install():
    """config/default: every grant of the operator is a Role in its own
    namespace, each account bound to its own pool role, and each operator
    watches that namespace; cluster-scoped are only the CRDs, the tenancy
    roles and the admission policy."""
    objects = _kustomize(CONFIG / "default")
    kinds = sorted(obj["kind"] for obj in objects)
    assert kinds == sorted(["Namespace", *["CustomResourceDefinition"] * 3, *["ServiceAccount"] * 3,
                            *["Role"] * 5, *["RoleBinding"] * 5, "ClusterRole", "ClusterRole",
                            *["ValidatingAdmissionPolicy"] * 3, *["ValidatingAdmissionPolicyBinding"] * 3,
                            *["Deployment"] * 3])
    assert {obj["metadata"]["name"] for obj in objects if obj["kind"] == "ClusterRole"} == TENANCY
    # config/tenancy as written (the role applies the files themselves), but
    # the namespace kustomize gives the admission policy and its binding.
    tenancy = {_key(obj): obj for obj in _listed(CONFIG / "tenancy")}
    built = [json.loads(json.dumps(obj)) for obj in objects if _scoped_key(obj) in tenancy]
    for obj in built:
        obj["metadata"].pop("namespace", None)
    assert {_key(obj): obj for obj in built} == tenancy
    for obj in objects:
        if obj["kind"] in ("Role", "RoleBinding", "ServiceAccount", "Deployment"):
            assert obj["metadata"]["namespace"] == NAMESPACE, _key(obj)
    bindings = {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == "RoleBinding"}
    for short in SHORTS:
        binding = bindings[f"exporterset-operator-pool-{short}"]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": f"exporterset-operator-pool-{short}"}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"exporterset-operator-{short}",
                                        "namespace": NAMESPACE}]
    assert bindings["exporterset-operator"]["roleRef"]["kind"] == "Role"
    for deployment in (obj for obj in objects if obj["kind"] == "Deployment"):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {entry["name"]: entry for entry in container["env"]}
        assert env["WATCH_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_cluster_wide_builds_the_crds_rbac_and_one_deployment_per_provisioner():
    objects = _kustomize(CONFIG / "cluster-wide")
    kinds = sorted(obj["kind"] for obj in objects)
    assert kinds == sorted(["Namespace", *["CustomResourceDefinition"] * 3, *["ServiceAccount"] * 3,
                            *["ClusterRole"] * 6, "ClusterRoleBinding", "Role", "RoleBinding",
                            *["ValidatingAdmissionPolicy"] * 3, *["ValidatingAdmissionPolicyBinding"] * 3,
                            *["Deployment"] * 3])
    for obj in objects:
        if obj["kind"] in ("Role", "RoleBinding", "ServiceAccount", "Deployment"):
            assert obj["metadata"]["namespace"] == NAMESPACE, _key(obj)
        if obj["kind"] == "Deployment":
            (container,) = obj["spec"]["template"]["spec"]["containers"]
            assert "WATCH_NAMESPACE" not in {entry["name"] for entry in container["env"]}
    assert [obj["metadata"]["name"] for obj in objects if obj["kind"] == "Namespace"] == [NAMESPACE]


def test_crd_kustomization_holds_exactly_the_crds_the_bed_installs():
    listed = yaml.safe_load((CONFIG / "crd" / "kustomization.yaml").read_text())["resources"]
    on_disk = sorted(path.name for path in (CONFIG / "crd").glob("*.yaml") if path.name != "kustomization.yaml")
    assert sorted(listed) == on_disk
    bed_files = {path.resolve() for path in default_crd_files()}
    assert {(CONFIG / "crd" / name).resolve() for name in listed} <= bed_files
    built = {obj["metadata"]["name"]: obj for obj in _kustomize(CONFIG / "crd")}
    assert built == {obj["metadata"]["name"]: obj for obj in _listed(CONFIG / "crd")}


def _pool_bindings(namespace: str) -> list[dict]:
    """config/rbac/pool as ``kubectl apply -k config/rbac/pool -n NAMESPACE`` makes it."""
    bindings = _kustomize(CONFIG / "rbac" / "pool")
    for binding in bindings:
        binding["metadata"]["namespace"] = namespace
    return bindings


def test_rbac_is_what_the_operator_install_role_creates():
    """rbac.yml.j2 with the role's defaults (namespaced, namespace
    jumpstarter-virtual) makes the RBAC of config/default, and with
    operator_install_cluster_wide config/rbac as written, rules included; a
    pool namespace of the role is config/rbac/pool applied there."""
    namespaced = _operator_rbac(_render_role_template("rbac.yml.j2"))
    assert namespaced == _operator_rbac(_kustomize(CONFIG / "default"))
    cluster = {_key(obj): obj for obj in _render_role_template("rbac.yml.j2", operator_install_cluster_wide=True)}
    kustomize = {_key(obj): obj for obj in _listed(CONFIG / "rbac")}
    assert cluster == kustomize
    # ...and kustomize leaves them as written.
    assert {_key(obj): obj for obj in _kustomize(CONFIG / "rbac")} == kustomize
    assert _operator_rbac(_kustomize(CONFIG / "cluster-wide")) == kustomize
    pools = ["jumpstarter-lab", "team-b"]
    role = {_key(obj): obj for obj in _render_role_template("rbac.yml.j2", operator_install_cluster_wide=True,
                                                            operator_install_pool_namespaces=pools)}
    assert role == kustomize | {_key(b): b for pool in pools for b in _pool_bindings(pool)}


def test_each_provisioner_account_gets_its_own_pool_role_and_no_more():
    """Per provisioner, the pool role grants none of what its operator never
    does (NOT_NEEDED), and its account is bound to that role alone: in every
    install (config/rbac/pool, config/default, the role for one provisioner)."""
    roles = {obj["metadata"]["name"]: obj for obj in _listed(CONFIG / "rbac") if obj["kind"] == "ClusterRole"}
    assert set(roles) == {"exporterset-operator"} | {f"exporterset-operator-pool-{s}" for s in SHORTS}
    qemu = _grants(roles["exporterset-operator-pool-qemu"])
    for short in SHORTS:
        grants = _grants(roles[f"exporterset-operator-pool-{short}"])
        assert grants & NOT_NEEDED[short] == set(), short
        assert grants <= qemu, short
    # Only the QEMU Pod's reset in place execs, in a rule of its own.
    (exec_rule,) = [r for r in roles["exporterset-operator-pool-qemu"]["rules"] if "pods/exec" in r["resources"]]
    assert exec_rule == {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]}
    for built in (_pool_bindings("x"), [o for o in _kustomize(CONFIG / "default") if o["kind"] == "RoleBinding"
                                        and o["metadata"]["name"].startswith("exporterset-operator-pool-")]):
        assert sorted((b["roleRef"]["name"], [s["name"] for s in b["subjects"]]) for b in built) == sorted(
            (f"exporterset-operator-pool-{s}", [f"exporterset-operator-{s}"]) for s in SHORTS)
    only = _render_role_template("rbac.yml.j2", operator_install_provisioners=[constants.PROVISIONER_QEMU_BAREMETAL])
    assert sorted(o["metadata"]["name"] for o in only if o["kind"] == "Role"
                  and o["metadata"]["name"].startswith("exporterset-operator-pool")) == [
        "exporterset-operator-pool-qemu-baremetal"]


def test_no_secret_or_configmap_is_listed_watched_or_written_outside_the_pool_namespaces():
    """Secrets and ConfigMaps are read, listed and watched (Secrets as
    metadata only, for the config re-sync on change) only where a pool role
    is bound, with no verb beyond those and ConfigMaps never written; the
    watch role grants nothing on them, nor pods/exec, nor any write on Pods
    or Exporters."""
    roles = {obj["metadata"]["name"]: obj for obj in _listed(CONFIG / "rbac") if obj["kind"] == "ClusterRole"}
    cluster_wide = _grants(roles.pop("exporterset-operator"))
    assert not {r for _, r, _ in cluster_wide} & {"secrets", "configmaps", "pods/exec"}
    assert {v for _, r, v in cluster_wide if r in ("pods", "exporters")} == {"list", "watch"}
    for role in roles.values():
        for rule in role["rules"]:
            if {"secrets", "configmaps"} & set(rule["resources"]):
                allowed = {"get", "list", "watch"} | ({"create", "update", "delete"}
                                                      if "secrets" in rule["resources"] else set())
                assert set(rule["verbs"]) <= allowed and rule["resources"] in (["secrets"], ["configmaps"]), rule
    (binding,) = [obj for obj in _kustomize(CONFIG / "cluster-wide") if obj["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == "exporterset-operator"
    assert {b["roleRef"]["kind"] for b in _pool_bindings("x")} == {"ClusterRole"}


def test_tenant_and_admin_roles_grant_what_each_owns():
    """A set author gets their sets (and scale) and policies and a read of
    classes: never a set's status, a class write, a Secret or a ConfigMap.
    The admin role holds the verb the admission policy asks for."""
    roles = {obj["metadata"]["name"]: obj for obj in _listed(CONFIG / "tenancy") if obj["kind"] == "ClusterRole"}
    group = "virtualtarget.jumpstarter.dev"
    tenant = _grants(roles["virtualtarget-tenant"])
    writes = {"create", "update", "patch", "delete"}
    assert {(g, r, v) for g, r, v in tenant if v in writes} == {
        (group, r, v) for r in ("exportersets", "exportersetpolicies") for v in writes} | {
        (group, "exportersets/scale", v) for v in ("update", "patch")}
    assert {r for _, r, _ in tenant} == {"exportersets", "exportersets/scale", "exportersetpolicies",
                                         "virtualtargetclasses"}
    assert not {v for _, r, v in tenant if r == "virtualtargetclasses"} - {"get", "list", "watch"}
    admin = _grants(roles["virtualtarget-admin"])
    assert (group, "virtualtargetclasses", "administer") in admin
    assert not {r for _, r, _ in admin if r.endswith("/status")}
    (policy,) = [obj for obj in _listed(CONFIG / "tenancy") if obj["kind"] == "ValidatingAdmissionPolicy"
                 and obj["metadata"]["name"] == "virtualtarget-trusted-objects"]
    assert "check('administer')" in " ".join(v["expression"] for v in policy["spec"]["variables"])


def test_watching_one_namespace_makes_only_namespaced_rbac_there():
    objects = _render_role_template("rbac.yml.j2", operator_install_watch_namespace="team-a",
                                    operator_install_pool_namespaces=["ignored"])
    kinds = {(obj["kind"], obj["metadata"]["name"]): obj["metadata"].get("namespace") for obj in objects}
    assert kinds == {
        ("Namespace", NAMESPACE): None,
        **{("ServiceAccount", f"exporterset-operator-{s}"): NAMESPACE for s in SHORTS},
        ("Role", "exporterset-operator"): "team-a", ("RoleBinding", "exporterset-operator"): "team-a",
        **{(kind, f"exporterset-operator-pool-{s}"): "team-a" for s in SHORTS for kind in ("Role", "RoleBinding")},
        ("Role", "exporterset-operator-leader-election"): NAMESPACE,
        ("RoleBinding", "exporterset-operator-leader-election"): NAMESPACE,
    }
    cluster = {obj["metadata"]["name"]: obj["rules"] for obj in _listed(CONFIG / "rbac")
               if obj["kind"] == "ClusterRole"}
    assert {obj["metadata"]["name"]: obj["rules"] for obj in objects if obj["kind"] == "Role"
            and obj["metadata"]["namespace"] == "team-a"} == cluster
    deployments = _render_role_template("deployment.yml.j2", operator_install_watch_namespace="team-a")
    for deployment in deployments:
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert "--namespace=team-a" in container["args"]
        assert "WATCH_NAMESPACE" not in {entry["name"] for entry in container["env"]}


def test_manager_deployments_are_what_the_role_creates():
    """The role's Deployments are config/default's (each watching its own
    namespace), and cluster-wide config/manager's (its files, the released
    image named by its images: entry)."""
    default = {_key(obj): obj for obj in _kustomize(CONFIG / "default") if obj["kind"] == "Deployment"}
    assert {_key(obj): obj for obj in _render_role_template("deployment.yml.j2")} == default
    role = {_key(obj): obj for obj in _render_role_template("deployment.yml.j2", operator_install_cluster_wide=True)}
    kustomize = {_key(obj): obj for obj in _kustomize(CONFIG / "manager")}
    assert kustomize == role


@pytest.mark.parametrize("provisioner", PROVISIONERS)
def test_manager_runs_one_locked_down_operator_per_provisioner(provisioner):
    short = provisioner.split(".")[0]
    deployments = {obj["metadata"]["name"]: obj for obj in _kustomize(CONFIG / "manager")}
    pod = deployments[f"exporterset-operator-{short}"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python3", "-m", "exporterset_operator"]
    assert {f"--provisioner={provisioner}", "--leader-elect",
            "--metrics-bind-address=0.0.0.0:8080", "--health-probe-bind-address=:8081"} <= set(container["args"])
    # The Lease upstream's controller of the provisioner holds (election.py), not one of our own.
    assert not [arg for arg in container["args"] if arg.startswith("--leader-election-id")]
    assert [arg for arg in container["args"] if arg.startswith("--provisioner")] == [f"--provisioner={provisioner}"]
    env = {entry["name"]: entry for entry in container["env"]}
    assert env["LEADER_ELECTION_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # The probes on the port upstream's exporter-set slot probes, apart from the metrics.
    assert container["ports"] == [{"name": "metrics", "containerPort": 8080}, {"name": "health", "containerPort": 8081}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
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
        "images": [{"name": "quay.io/jumpstarter-dev/virtual-exporters/exporterset-operator",
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
    # Three accounts in the watch and election bindings, one in each pool binding.
    assert [subject["namespace"] for binding in by_kind["RoleBinding"]
            for subject in binding["subjects"]] == ["monitored"] * 9
    assert "ClusterRoleBinding" not in by_kind
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


CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                  "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def _scoped_key(obj: dict) -> tuple:
    kind, namespace, name = _key(obj)
    return kind, None if kind in CLUSTER_SCOPED else namespace, name


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
    # kustomize gives the admission policy and its binding the namespace too
    # (it does not know them as cluster-scoped); the API server drops it.
    assert sorted(_key(obj) for obj in live) == sorted(_scoped_key(obj) for obj in _kustomize(CONFIG / "default"))
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


def _account(short: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:exporterset-operator-{short}"


def _allowed(auth, user: str, grant: tuple[str, str, str], namespace: str) -> bool:
    """The API server's RBAC decision (a SubjectAccessReview) for ``user``."""
    group, resource, verb = grant
    resource, _, subresource = resource.partition("/")
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=user, resource_attributes=client.V1ResourceAttributes(
            namespace=namespace, verb=verb, group=group, resource=resource, subresource=subresource)))
    return auth.create_subject_access_review(review).status.allowed


@pytest.mark.testbed
def test_each_operator_account_may_do_what_its_provisioner_needs_and_nothing_more(cluster):
    """The namespaced install on a real API server: in its namespace each
    provisioner's account holds the watch role's and its own pool role's
    grants and none of NOT_NEEDED; in any other namespace it holds none."""
    roles = {obj["metadata"]["name"]: obj for obj in _listed(CONFIG / "rbac") if obj["kind"] == "ClusterRole"}
    watch = _grants(roles["exporterset-operator"])
    asked = watch | _grants(roles["exporterset-operator-pool-qemu"])
    expected = {}
    for short in SHORTS:
        own = watch | _grants(roles[f"exporterset-operator-pool-{short}"])
        for grant in sorted(asked | NOT_NEEDED[short]):
            expected[(short, NAMESPACE, grant)] = grant in own and grant not in NOT_NEEDED[short]
            expected[(short, "some-team", grant)] = False
    assert sum(expected.values()) > 0 and not all(expected.values())
    with cluster.api_client() as api:
        auth = client.AuthorizationV1Api(api)

        def decided():
            answers = {key: _allowed(auth, _account(key[0]), key[2], key[1]) for key in expected}
            assert {k: v for k, v in answers.items() if v != expected[k]} == {}
        _eventually(decided, timeout=20)


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


TENANT, ADMIN = "tenant-a", "admin-a"


def _as(api, user: str):
    """A CustomObjectsApi and a CoreV1Api acting as ``user`` (impersonation)."""
    impersonated = client.ApiClient(api.configuration)
    impersonated.set_default_header("Impersonate-User", user)
    return client.CustomObjectsApi(impersonated), client.CoreV1Api(impersonated)


def _refused(call) -> str:
    """The API server's message refusing ``call()``: a 403."""
    with pytest.raises(client.ApiException) as refused:
        call()
    assert refused.value.status == 403, refused.value.body
    return json.loads(refused.value.body)["message"]


def _ca(name: str, labels=None) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}},
            "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n"}}


@pytest.mark.testbed
def test_tenants_write_sets_and_policies_only_admins_write_classes_and_trusted_configmaps(cluster, request):
    """A tenant bound to the shipped tenant role makes sets and policies in its
    namespace, but not their status; a Role that also lets it write classes
    and ConfigMaps does not get its class or a trusted ConfigMap past the
    admission policy. An admin bound to the shipped admin role writes both."""
    namespace = namespace_name(request.node.name)
    cluster.kubectl("create", "namespace", namespace)
    try:
        cluster.kubectl("create", "rolebinding", "sets", "-n", namespace, "--clusterrole=virtualtarget-tenant",
                        f"--user={TENANT}")
        cluster.kubectl("create", "rolebinding", "lab-admins", "-n", namespace, "--clusterrole=virtualtarget-admin",
                        f"--user={ADMIN}")
        # RBAC that is too wide: what a namespace's `edit` gives on ConfigMaps, and classes.
        cluster.kubectl("create", "role", "too-wide", "-n", namespace, "--verb=get,create,update,patch,delete",
                        "--resource=configmaps,virtualtargetclasses.virtualtarget.jumpstarter.dev")
        cluster.kubectl("create", "rolebinding", "too-wide", "-n", namespace, "--role=too-wide", f"--user={TENANT}")
        with cluster.api_client() as api:
            auth = client.AuthorizationV1Api(api)
            def bound():
                assert _allowed(auth, TENANT, (GROUP[0], "exportersets", "create"), namespace)
                assert _allowed(auth, TENANT, (GROUP[0], "virtualtargetclasses", "create"), namespace)
                assert _allowed(auth, ADMIN, (GROUP[0], "virtualtargetclasses", "administer"), namespace)
            _eventually(bound, timeout=20)
            tenant, tenant_core = _as(api, TENANT)
            admin, admin_core = _as(api, ADMIN)

            # The admin makes the class and the controller CA; the tenant a set and its policy.
            make_class(admin, namespace)
            admin_core.create_namespaced_config_map(namespace, _ca("jumpstarter-service-ca-cert"))
            make_set(tenant, namespace)
            tenant.create_namespaced_custom_object(*GROUP, namespace, "exportersetpolicies", {
                "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSetPolicy",
                "metadata": {"name": "pool"}, "spec": {"exporterSetName": "pool"}})
            tenant.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                                  {"spec": {"minAvailableReplicas": 1}})
            # Not the status the operator decides from: RBAC refuses it.
            assert "exportersets/status" in _refused(lambda: tenant.patch_namespaced_custom_object_status(
                *GROUP, namespace, "exportersets", "pool", {"status": {"replicas": 7}}))

            # RBAC lets the tenant write ConfigMaps and classes; the policy refuses the trusted ones.
            tenant_core.create_namespaced_config_map(namespace, _ca("notes"))
            policy = "only a class admin may"
            assert policy in _refused(lambda: make_class(tenant, namespace, name="mine"))
            assert policy in _refused(lambda: tenant.patch_namespaced_custom_object(
                *GROUP, namespace, "virtualtargetclasses", "qemu-small", {"spec": {"parameters": {"memory": "64Gi"}}}))
            assert policy in _refused(lambda: tenant.delete_namespaced_custom_object(
                *GROUP, namespace, "virtualtargetclasses", "qemu-small"))
            message = _refused(lambda: tenant_core.patch_namespaced_config_map(
                "jumpstarter-service-ca-cert", namespace, {"data": {"ca.crt": "mine"}}))
            assert f"trusted ConfigMap {namespace}/jumpstarter-service-ca-cert: {policy} update it" in message
            assert TENANT in message
            assert policy in _refused(lambda: tenant_core.delete_namespaced_config_map(
                "jumpstarter-service-ca-cert", namespace))
            assert policy in _refused(lambda: tenant_core.create_namespaced_config_map(
                namespace, _ca("my-ca", {"virtualtarget.jumpstarter.dev/trusted": "true"})))
            # A change of the finalizers alone passes (the operator's in-use
            # finalizer, written by an account that may not administer).
            tenant.patch_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small",
                                                  {"metadata": {"finalizers": ["example.com/held"]}})
            tenant.patch_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small",
                                                  {"metadata": {"finalizers": None}})
            # Nor can it make its own ConfigMap trusted by labelling it.
            assert policy in _refused(lambda: tenant_core.patch_namespaced_config_map(
                "notes", namespace, {"metadata": {"labels": {"virtualtarget.jumpstarter.dev/trusted": "true"}}}))
            # Nothing refused was written.
            ca = client.CoreV1Api(api).read_namespaced_config_map("jumpstarter-service-ca-cert", namespace)
            assert ca.data == _ca("x")["data"]
            klass = client.CustomObjectsApi(api).get_namespaced_custom_object(
                *GROUP, namespace, "virtualtargetclasses", "qemu-small")
            assert "memory" not in (klass["spec"].get("parameters") or {})
            assert not klass["metadata"].get("deletionTimestamp")

            # The admin may change both.
            admin_core.patch_namespaced_config_map("jumpstarter-service-ca-cert", namespace,
                                                   {"metadata": {"labels": {"rotated": "yes"}}})
            admin.patch_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small",
                                                 {"metadata": {"annotations": {"reviewed": "yes"}}})
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


# -- from either install to a warm pool, as the installed service account ---------

# config/default's operator serves the namespace it is installed in.
POOL_NAMESPACE = NAMESPACE
# Set by the API server or by who applied, not by the install.
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


@pytest.fixture(scope="module")
def playbook_cluster(testbed_factory, cluster, tmp_path_factory):
    """Another bed with only upstream's CRDs, installed by playbooks/install.yml
    with its defaults (namespaced, as config/default)."""
    bed = testbed_factory("install-playbook", crd_files=upstream_core_crd_files())
    workdir = tmp_path_factory.mktemp("install-playbook")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
         str(ROOT / "playbooks" / "install.yml")],
        env={**ansible_env(), "K8S_AUTH_KUBECONFIG": str(bed.kubeconfig), "KUBECONFIG": str(bed.kubeconfig),
             "ANSIBLE_STDOUT_CALLBACK": "default"},
        capture_output=True, text=True, timeout=600, cwd=workdir,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return bed


@pytest.fixture(scope="module")
def kustomize_cluster(cluster):
    """The config/default bed."""
    return cluster


def _installed(bed) -> dict[tuple, dict]:
    """The live objects of the install, without what the API server adds."""
    wanted = [_scoped_key(obj) for obj in _kustomize(CONFIG / "default")]
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
    containers. Only the metrics and probe addresses are free local ports instead."""
    installed = _get(bed, "deployment", deployment, "-n", NAMESPACE)
    pod = installed["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python3", "-m", "exporterset_operator"]
    args = [arg for arg in container["args"]
            if not arg.startswith(("--metrics-bind-address", "--health-probe-bind-address"))]
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
        vclass = make_class(custom, POOL_NAMESPACE)
        make_set(custom, POOL_NAMESPACE)
        proc.start()
        try:
            proc.wait_ready()
            started = time.monotonic()
            status = settle_pool(standin, 2, custom, POOL_NAMESPACE, timeout=180)
            print(f"{install}: warm pool of 2 after {time.monotonic() - started:.1f}s")
            assert status["readyReplicas"] == 2
            assert proc.leads()
            lease = client.CoordinationV1Api(api).read_namespaced_lease(
                "exporter-set-controller-qemu.jumpstarter.dev", NAMESPACE)
            assert lease.spec.holder_identity.endswith(f"_{proc.proc.pid}")
            custom.delete_namespaced_custom_object(*GROUP, POOL_NAMESPACE, "exportersets", "pool")
            wait_for(lambda: not custom.list_namespaced_custom_object(*GROUP, POOL_NAMESPACE, "exportersets")["items"],
                     timeout=120, message="the set torn down")
            # The class's in-use finalizer goes once no set uses it; the
            # namespace's deletion after the module waits for it.
            class_name = vclass["metadata"]["name"]
            wait_for(lambda: not custom.get_namespaced_custom_object(
                *GROUP, POOL_NAMESPACE, "virtualtargetclasses", class_name)["metadata"].get("finalizers"),
                timeout=60, message="the class's finalizer released")
        finally:
            proc.stop()
            print(f"--- operator log ---\n{proc.log_tail(30)}")
