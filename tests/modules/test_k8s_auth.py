"""The connection options of plugins/module_utils/api/client.py against the
test bed: kubernetes.core's names and K8S_AUTH_* variables, kubeconfig
contexts, errors that name the host or option at fault, and one
module_defaults entry for a whole play."""

import os
import sys

import ansible_runner
import pytest
import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import client as k8s_client
from kubernetes import client

GROUP = ("virtualtarget.jumpstarter.dev", "v1alpha1")
AUTH_VARIABLES = [v for _spec, env in k8s_client.AUTH_OPTIONS.values() for v in env] + ["KUBECONFIG"]

pytestmark = pytest.mark.testbed


@pytest.fixture
def clean_env(monkeypatch):
    for variable in AUTH_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


@pytest.fixture
def token(api, namespace):
    """A TokenRequest token of a ServiceAccount allowed everything in ``namespace``."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="job")))
    rbac.create_namespaced_role(namespace, client.V1Role(metadata=client.V1ObjectMeta(name="job"), rules=[
        client.V1PolicyRule(api_groups=["virtualtarget.jumpstarter.dev", "jumpstarter.dev", ""],
                            resources=["*"], verbs=["*"])]))
    rbac.create_namespaced_role_binding(namespace, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="job"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="job"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="job", namespace=namespace)]))
    return core.create_namespaced_service_account_token("job", namespace, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))).status.token


def _who(api):
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview(metadata=client.V1ObjectMeta()))
    return review.status.user_info.username


def test_environment_variables_as_awx_injects_them(testbed, namespace, token, clean_env):
    clean_env.setenv("K8S_AUTH_HOST", testbed.server + "/")
    clean_env.setenv("K8S_AUTH_API_KEY", token)
    clean_env.setenv("K8S_AUTH_VERIFY_SSL", "True")
    clean_env.setenv("K8S_AUTH_SSL_CA_CERT", str(testbed.pki_dir / "ca.crt"))
    with k8s_client.connect() as api:
        assert api.configuration.host == testbed.server
        assert _who(api) == f"system:serviceaccount:{namespace}:job"
    # AWX writes "False" when the credential does not verify the certificate.
    clean_env.setenv("K8S_AUTH_VERIFY_SSL", "False")
    clean_env.delenv("K8S_AUTH_SSL_CA_CERT")
    with k8s_client.connect() as api:
        assert api.configuration.verify_ssl is False
        assert _who(api) == f"system:serviceaccount:{namespace}:job"


def test_options_win_over_the_environment(testbed, namespace, token, clean_env):
    clean_env.setenv("K8S_AUTH_HOST", "https://127.0.0.1:1")
    clean_env.setenv("K8S_AUTH_API_KEY", "not-this-one")
    with k8s_client.connect(host=testbed.server, api_key=token, ca_cert=str(testbed.pki_dir / "ca.crt")) as api:
        assert _who(api) == f"system:serviceaccount:{namespace}:job"


def test_kubeconfig_context_and_overrides(testbed, namespace, token, clean_env, tmp_path):
    config = yaml.safe_load(testbed.kubeconfig.read_text())
    admin = config["contexts"][0]
    config["clusters"].append({"name": "elsewhere", "cluster": {**config["clusters"][0]["cluster"],
                                                                 "server": "https://127.0.0.1:1"}})
    config["contexts"].append({"name": "elsewhere", "context": {**admin["context"], "cluster": "elsewhere"}})
    config["current-context"] = "elsewhere"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(k8s_client.ConnectionOptionsError, match=r"cannot reach the API server at https://127\.0\.0\.1:1"):
        k8s_client.connect(kubeconfig=str(path))
    clean_env.setenv("K8S_AUTH_CONTEXT", admin["name"])
    with k8s_client.connect(kubeconfig=str(path)) as api:
        assert api.configuration.host == testbed.server
        assert _who(api) != f"system:serviceaccount:{namespace}:job"
    # host given with the kubeconfig overrides the server of its context.
    clean_env.delenv("K8S_AUTH_CONTEXT")
    with k8s_client.connect(kubeconfig=str(path), host=testbed.server) as api:
        assert api.configuration.host == testbed.server
        assert _who(api) == _who(testbed.api_client())


def test_errors_name_the_host_or_the_option(testbed, clean_env, tmp_path):
    with pytest.raises(k8s_client.ConnectionOptionsError) as refused:
        k8s_client.connect(host=testbed.server, api_key="bogus-token-value", ca_cert=str(testbed.pki_dir / "ca.crt"))
    assert str(refused.value).startswith(
        f"the API server at {testbed.server} refused the bearer token (option api_key)")
    assert "bogus-token-value" not in str(refused.value)
    clean_env.setenv("K8S_AUTH_SSL_CA_CERT", str(tmp_path / "missing.crt"))
    with pytest.raises(k8s_client.ConnectionOptionsError, match=r"K8S_AUTH_SSL_CA_CERT: .*missing\.crt is not a file"):
        k8s_client.connect(host=testbed.server, api_key="x")
    clean_env.delenv("K8S_AUTH_SSL_CA_CERT")
    # The system's trust store does not know the bed's private CA.
    with pytest.raises(k8s_client.ConnectionOptionsError) as untrusted:
        k8s_client.connect(host=testbed.server, api_key="x", ca_cert="/etc/ssl/certs/ca-certificates.crt")
    assert f"cannot reach the API server at {testbed.server}" in str(untrusted.value)
    assert "ca_cert /etc/ssl/certs/ca-certificates.crt" in str(untrusted.value)
    clean_env.setenv("HOME", str(tmp_path))
    with pytest.raises(k8s_client.ConnectionOptionsError, match=r"cannot load the default kubeconfig .*K8S_AUTH_HOST"):
        k8s_client.connect()


def test_one_module_defaults_entry_reaches_every_module_of_a_play(testbed, api, namespace, token, clean_env,
                                                                   tmp_path):
    """A play sets the connection once for the group; the reconcile role's
    modules (exporterset_info, exporterset_apply) take it, with no
    kubeconfig and no K8S_AUTH_* variable anywhere."""
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", {
        "apiVersion": "/".join(GROUP), "kind": "VirtualTargetClass",
        "metadata": {"name": "qemu-small", "namespace": namespace},
        "spec": {"provisioner": "qemu.jumpstarter.dev",
                 "parameters": {"arch": "x86_64", "resources": {"cpu": 1, "memory": "256Mi"}}}})
    custom.create_namespaced_custom_object(*GROUP, namespace, "exportersets", {
        "apiVersion": "/".join(GROUP), "kind": "ExporterSet", "metadata": {"name": "pool", "namespace": namespace},
        "spec": {"virtualTargetClassName": "qemu-small", "minReplicas": 1, "maxReplicas": 2,
                 "minAvailableReplicas": 1, "selector": {"matchLabels": {"board": "auth"}},
                 "template": {"metadata": {"labels": {"board": "auth"}}}}})
    playbook = tmp_path / "project" / "play.yml"
    playbook.parent.mkdir()
    playbook.write_text(yaml.safe_dump([{
        "name": "Reconcile with the connection set once", "hosts": "localhost", "connection": "local",
        "gather_facts": False,
        "module_defaults": {"group/jumpstarter.virtual_exporters.kubernetes": {
            "host": testbed.server, "api_key": token, "ca_cert": str(testbed.pki_dir / "ca.crt")}},
        "roles": [{"role": "jumpstarter.virtual_exporters.reconcile"}],
        "vars": {"exporterset_name": "pool", "exporterset_namespace": namespace},
    }]))
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "runner").mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"), project_dir=str(playbook.parent), playbook="play.yml",
        envvars={"ANSIBLE_COLLECTIONS_PATH": os.environ["ANSIBLE_COLLECTIONS_PATH"], "HOME": str(home),
                 "ANSIBLE_PYTHON_INTERPRETER": sys.executable, "ANSIBLE_LOCALHOST_WARNING": "false"},
        quiet=True, timeout=300)
    assert runner.status == "successful", runner.stdout.read()[-4000:]
    exporters = custom.list_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters")["items"]
    assert [e["metadata"]["name"] for e in exporters] == ["pool-0"]
