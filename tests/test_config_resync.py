"""Config Secrets re-synced on the bed (``exporter_pods`` ``state: synced``,
run by a real ansible-playbook as the qemu_pod and corellium roles run it).

An instance's config (token, controller endpoint, CA, drivers) that changed
is rewritten into its config Secret and its Pod deleted, so the next run
starts the exporter afresh on it; an unchanged one is left alone; a leased
one (from either side) is left exactly as it is until its lease ends, then
re-synced. The pure side (which instances run, when a sync is due) is in
tests/unit/plugins/module_utils/k8s/test_config_sync.py.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_play import BIN, ansible_env, run_tasks
from jumpstarter_standin import wait_for
from kubernetes import client
from pool_helpers import GROUP, make_class, make_set

ROOT = Path(__file__).resolve().parents[1]
FQCN = "jumpstarter.virtual_exporters"
EXPORTERS = ("jumpstarter.dev", "v1alpha1")
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n").decode()


def config_of(core, namespace):
    secret = core.read_namespaced_secret("pool-0-config", namespace)
    return json.loads(base64.b64decode(secret.data["pool-0.yaml"]).decode()), secret.metadata.resource_version


def test_a_changed_config_is_rewritten_and_restarted_only_while_unleased(testbed, namespace, tmp_path):
    with testbed.api_client() as api:
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        vclass = make_class(custom, namespace)
        the_set = make_set(custom, namespace)
        exporter = custom.create_namespaced_custom_object(*EXPORTERS, namespace, "exporters", {
            "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
            "metadata": {"name": "pool-0", "labels": {"board": "qemu-x86", c.LABEL_EXPORTER_SET: "pool"},
                         "annotations": {c.ANNOTATION_PROVISIONER: c.PROVISIONER_QEMU},
                         "ownerReferences": [{"apiVersion": "/".join(GROUP), "kind": "ExporterSet", "name": "pool",
                                              "uid": the_set["metadata"]["uid"], "controller": True}]},
            "spec": {"enabled": True}})
        owner = [client.V1OwnerReference(api_version="jumpstarter.dev/v1alpha1", kind="Exporter", name="pool-0",
                                         uid=exporter["metadata"]["uid"], controller=True)]
        core.create_namespaced_secret(namespace, client.V1Secret(
            metadata=client.V1ObjectMeta(name="pool-0-exporter", owner_references=owner),
            string_data={"token": "first-token"}))

        def set_status(**status):
            custom.patch_namespaced_custom_object_status(*EXPORTERS, namespace, "exporters", "pool-0", {
                "status": {"credential": {"name": "pool-0-exporter"}, "endpoint": "grpc.example:443", **status}})
            return custom.get_namespaced_custom_object(*EXPORTERS, namespace, "exporters", "pool-0")

        def run(state, exporter, ca=CA):
            task = {f"{FQCN}.exporter_pods": {
                "exporterset": the_set, "virtual_target_class": vclass, "owned_exporters": [exporter],
                "exporters": ["pool-0"], "parameters": vclass["spec"]["parameters"], "controller_tls_ca": ca,
                "state": state}}
            result, = run_tasks(tmp_path, [task])
            assert not result.get("failed"), result
            return result

        exporter = set_status()
        made = run("present", exporter)
        assert made["created"] == ["pool-0"]
        pod_uid = core.read_namespaced_pod("pool-0", namespace).metadata.uid
        config, version = config_of(core, namespace)
        assert config["token"] == "first-token" and config["endpoint"] == "grpc.example:443"

        # Unchanged: nothing written, the Pod stays.
        same = run("synced", exporter)
        assert same["resynced"] == [] and not same["changed"]
        assert config_of(core, namespace)[1] == version
        # Without the CA (a run that could not read it) nothing is written either.
        core.patch_namespaced_secret("pool-0-exporter", namespace, {"stringData": {"token": "second-token"}})
        assert run("synced", exporter, ca="")["resynced"] == []

        # Leased (its status.leaseRef): the new token waits, Secret and Pod as they were.
        exporter = set_status(leaseRef={"name": "someones-lease"})
        held = run("synced", exporter)
        assert held["resynced"] == [] and held["waiting"] == ["pool-0"]
        assert config_of(core, namespace) == (config, version)
        assert core.read_namespaced_pod("pool-0", namespace).metadata.uid == pod_uid

        # The lease over: rewritten, and the Pod goes to start again on it.
        custom.patch_namespaced_custom_object_status(*EXPORTERS, namespace, "exporters", "pool-0",
                                                      {"status": {"leaseRef": None}})
        exporter = custom.get_namespaced_custom_object(*EXPORTERS, namespace, "exporters", "pool-0")
        synced = run("synced", exporter)
        assert synced["resynced"] == ["pool-0"] and synced["changed"]
        assert config_of(core, namespace)[0]["token"] == "second-token"
        pods = core.list_namespaced_pod(namespace).items
        assert all(p.metadata.uid != pod_uid or p.metadata.deletion_timestamp for p in pods)

        # The playbook the operator runs when a re-sync is due, run by hand:
        # it reads the CA itself, re-syncs and notes when on the set.
        # A new endpoint and token reach the next Pod the same way.
        wait_for(lambda: not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == "pool-0"],
                 timeout=30, message="the old Pod gone")
        assert run("present", exporter)["created"] == ["pool-0"]
        set_status(endpoint="grpc.moved.example:443")
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="jumpstarter-service-ca-cert"),
            data={"ca.crt": base64.b64decode(CA).decode()}))
        core.patch_namespaced_secret("pool-0-exporter", namespace, {"stringData": {"token": "third-token"}})
        completed = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", "localhost,", str(ROOT / "playbooks/config_sync.yml"),
             "-e", "exporterset_name=pool", "-e", f"exporterset_namespace={namespace}"],
            env=ansible_env(), capture_output=True, text=True, timeout=300)
        assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
        config = config_of(core, namespace)[0]
        assert (config["token"], config["endpoint"]) == ("third-token", "grpc.moved.example:443")
        assert not [p for p in core.list_namespaced_pod(namespace).items
                    if p.metadata.name == "pool-0" and not p.metadata.deletion_timestamp]
        annotations = custom.get_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool")[
            "metadata"]["annotations"]
        assert k8s_observe.ANNOTATION_CONFIG_SYNCED in annotations
