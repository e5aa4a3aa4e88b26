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
import time
from datetime import UTC, datetime

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import config_sync
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_play import BIN, ansible_env, run_tasks
from exporterset_operator import config_inputs
from exporterset_operator.informer import Informer
from jumpstarter_standin import pytest_plugin as standin_plugin
from jumpstarter_standin import wait_for
from jumpstarter_standin.tokens import subject_of
from kubernetes import client
from operator_process import ROOT
from pool_helpers import GROUP, make_class, make_owned_exporter, make_set, settle_pool

FQCN = "jumpstarter.virtual_exporters"
EXPORTERS = ("jumpstarter.dev", "v1alpha1")
OBSERVED = {"VirtualTargetClass": (*GROUP, "virtualtargetclasses"), "ExporterSet": (*GROUP, "exportersets"),
            "ExporterSetPolicy": (*GROUP, "exportersetpolicies"), "Exporter": (*EXPORTERS, "exporters"),
            "Lease": (*EXPORTERS, "leases")}
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n").decode()


def config_of(core, namespace):
    secret = core.read_namespaced_secret("pool-0-config", namespace)
    return json.loads(base64.b64decode(secret.data["pool-0.yaml"]).decode()), secret.metadata.resource_version


def test_a_changed_config_is_rewritten_and_restarted_only_while_unleased(testbed, namespace, tmp_path):
    with testbed.api_client() as api:
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        vclass = make_class(custom, namespace)
        the_set = make_set(custom, namespace)
        exporter = make_owned_exporter(custom, namespace, the_set)
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
        # Restarted as a reset is made: disabled on a checked Lease list
        # first, enabled again afterwards, no longer marked.
        after = custom.get_namespaced_custom_object(*EXPORTERS, namespace, "exporters", "pool-0")
        assert after["spec"]["enabled"] is True
        assert c.ANNOTATION_LEASES_CHECKED_AT in after["metadata"]["annotations"]
        assert c.ANNOTATION_RETIRING not in after["metadata"]["annotations"]
        pods = core.list_namespaced_pod(namespace).items
        assert all(p.metadata.uid != pod_uid or p.metadata.deletion_timestamp for p in pods)

        # A Lease naming it that the Exporter does not know of yet (the
        # controller writes the Lease first) holds it as well.
        wait_for(lambda: not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == "pool-0"],
                 timeout=30, message="the old Pod gone")
        exporter = custom.get_namespaced_custom_object(*EXPORTERS, namespace, "exporters", "pool-0")
        assert run("present", exporter)["created"] == ["pool-0"]
        pod_uid = core.read_namespaced_pod("pool-0", namespace).metadata.uid
        custom.create_namespaced_custom_object(*EXPORTERS, namespace, "leases", {
            "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Lease", "metadata": {"name": "lease-side"},
            "spec": {"clientRef": {"name": "someone"}, "selector": {"matchLabels": {"board": "qemu-x86"}}}})
        custom.patch_namespaced_custom_object_status(*EXPORTERS, namespace, "leases", "lease-side",
                                                      {"status": {"ended": False, "exporterRef": {"name": "pool-0"}}})
        core.patch_namespaced_secret("pool-0-exporter", namespace, {"stringData": {"token": "held-token"}})
        held = run("synced", exporter)
        assert held["resynced"] == [] and held["waiting"] == ["pool-0"]
        assert config_of(core, namespace)[0]["token"] == "second-token"
        assert core.read_namespaced_pod("pool-0", namespace).metadata.uid == pod_uid
        assert custom.get_namespaced_custom_object(*EXPORTERS, namespace, "exporters", "pool-0")["spec"]["enabled"]
        custom.patch_namespaced_custom_object_status(*EXPORTERS, namespace, "leases", "lease-side",
                                                      {"status": {"ended": True}})

        # The playbook the operator runs when a re-sync is due, run by hand:
        # it reads the CA itself, re-syncs and notes when on the set.
        # A new endpoint and token reach the next Pod the same way.
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
        state = custom.get_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool")[
            "status"]["operatorState"]
        assert k8s_observe.CONFIG_SYNCED_KEY in state


def _rendered(core, namespace, name):
    """(token, tls.ca, resourceVersion) of the config Secret of Exporter ``name``."""
    secret = core.read_namespaced_secret(f"{name}-config", namespace)
    config = json.loads(base64.b64decode(secret.data[f"{name}.yaml"]).decode())
    return config["token"], (config.get("tls") or {}).get("ca"), secret.metadata.resource_version


def _pod_uid(core, namespace, name):
    pods = [p for p in core.list_namespaced_pod(namespace).items
            if p.metadata.name == name and not p.metadata.deletion_timestamp]
    return pods[0].metadata.uid if pods else None


def test_the_operator_resyncs_a_new_token_or_ca_on_the_pass_that_sees_it_never_a_leased_one(
        api, namespace, standin, operator):
    """The operator watches the config's inputs: a rotated token and a new
    controller CA reach the running instances within seconds (not on the
    five-minute fallback), by a rewritten config Secret and a new Pod; the
    leased instance keeps its config and its Pod."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    proc = operator()
    settle_pool(standin, 1, custom, namespace)
    standin.create_lease("lease-a", {"board": "qemu-x86"})
    leased = standin.wait_assigned("lease-a")
    settle_pool(standin, 1, custom, namespace, leasedReplicas=1, replicas=2)
    names = sorted(e["metadata"]["name"] for e in standin.exporters())
    free = [n for n in names if n != leased]

    def quiet():
        """Every instance has its Pod and no backend run is queued or in flight:
        a run of the reconcile playbook re-syncs too, and none is left to."""
        return all(_pod_uid(core, namespace, name) for name in names) and not proc.metric(
            "jumpstarter_exporterset_backend_runs")

    wait_for(quiet, timeout=60, message="every Pod made and no backend run left")
    runs = proc.metric("jumpstarter_exporterset_playbook_runs_total")

    def stale():
        """What the operator's pass finds to re-sync, from what the API holds
        now: the digests the module noted are the ones the pass computes."""
        objects = {kind: custom.list_namespaced_custom_object(*gvr, namespace, plural)["items"]
                   for kind, (*gvr, plural) in OBSERVED.items()}
        objects["Pod"] = [api.sanitize_for_serialization(p) for p in core.list_namespaced_pod(namespace).items]
        objects["Secret"] = [{"metadata": api.sanitize_for_serialization(s.metadata)}
                             for s in core.list_namespaced_secret(namespace).items]
        objects["ConfigMap"] = [api.sanitize_for_serialization(m)
                                for m in core.list_namespaced_config_map(namespace).items]
        the_set = next(s for s in objects["ExporterSet"] if s["metadata"]["name"] == "pool")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return k8s_observe.stale_configs(k8s_observe.observe(the_set, objects, now))

    assert stale() == []
    # Every config Secret notes the digest of its inputs, from the start.
    for name in names:
        secret = core.read_namespaced_secret(f"{name}-config", namespace)
        assert config_sync.ANNOTATION_CONFIG_INPUTS in (secret.metadata.annotations or {}), name
    before = {name: (_rendered(core, namespace, name), _pod_uid(core, namespace, name)) for name in names}

    def rotated(name):
        """A new token, valid as the controller issues them, for ``name``."""
        exporter = standin.exporter(name)
        token = standin.controller.signer.issue(
            subject_of("exporter", namespace, name, exporter["metadata"]["uid"]))
        core.patch_namespaced_secret(f"{name}-exporter", namespace,
                                     {"data": {"token": base64.b64encode(token.encode()).decode()}})
        return token

    # A rotated token (the leased instance's too).
    tokens = {name: rotated(name) for name in (leased, free[0])}
    started = time.monotonic()
    wait_for(lambda: _rendered(core, namespace, free[0])[0] == tokens[free[0]], timeout=45,
             message=f"{free[0]}'s new token in its config Secret")
    token_seconds = time.monotonic() - started
    assert token_seconds < k8s_observe.CONFIG_SYNC_SECONDS / 5, token_seconds
    # Started again, and nothing left running that would read the CA anyway.
    wait_for(quiet, timeout=60, message=f"{free[0]} started again and no backend run left")

    # A new controller CA (the same certificate twice: the exporters still trust it).
    core.patch_namespaced_config_map(standin_plugin.SERVICE_CA_CONFIGMAP, namespace,
                                     {"data": {"ca.crt": standin.ca_pem + standin.ca_pem}})
    new_ca = base64.b64encode((standin.ca_pem + standin.ca_pem).encode()).decode()
    started = time.monotonic()
    wait_for(lambda: all(_rendered(core, namespace, name)[1] == new_ca for name in free), timeout=45,
             message=f"the new CA in the config Secrets of {free}")
    ca_seconds = time.monotonic() - started
    assert ca_seconds < k8s_observe.CONFIG_SYNC_SECONDS / 5, ca_seconds
    print(f"re-synced {token_seconds:.1f} s after the token, {ca_seconds:.1f} s after the CA, "
          f"{proc.metric('jumpstarter_exporterset_playbook_runs_total') - runs:g} playbook runs in all")

    wait_for(quiet, timeout=60, message="the instances started again and no backend run left")
    assert stale() == []
    # Each started again on its new config (a new Pod).
    assert all(_pod_uid(core, namespace, name) != before[name][1] for name in free)
    # The leased instance: its config and its Pod exactly as they were.
    assert _rendered(core, namespace, leased) == before[leased][0]
    assert _pod_uid(core, namespace, leased) == before[leased][1]
    assert standin.exporter_of("lease-a") == leased


def test_the_secrets_cache_holds_metadata_only_and_sees_a_rotated_token(testbed, namespace):
    """The operator's cache of a pool namespace's Secrets (config_inputs.py):
    kube-apiserver sends their metadata only, on the list (an empty one too)
    and on the watch, so no token is ever held; a changed token is a MODIFIED
    event with a new resourceVersion, delivered by the watch (no relist)."""
    with testbed.api_client() as api:
        core = client.CoreV1Api(api)
        first_api, second_api = AcceptRecorder(api.configuration), AcceptRecorder(api.configuration)
        seen = []

        def start(api_client):
            informer = Informer(config_inputs.SECRETS, api_client, namespace=namespace,
                                handlers=[lambda kind, obj, previous: seen.append((kind, obj, previous))])
            return informer, informer.start()

        started = [start(first_api)]  # on a namespace without Secrets
        try:
            assert started[0][0].synced.wait(30)
            core.create_namespaced_secret(namespace, client.V1Secret(
                metadata=client.V1ObjectMeta(name="listed"), string_data={"token": "first"}))
            started.append(start(second_api))  # lists it
            assert started[1][0].synced.wait(30)
            core.patch_namespaced_secret("listed", namespace, {"stringData": {"token": "second"}})
            for informer, _ in started:
                wait_for(lambda informer=informer: informer.get(namespace, "listed")["metadata"]["resourceVersion"]
                         == core.read_namespaced_secret("listed", namespace).metadata.resource_version,
                         timeout=30, message="the rotated token's version cached")
            modified = [(obj, previous) for kind, obj, previous in seen if kind == "MODIFIED"]
            assert len(modified) == 2
            for obj, previous in modified:
                assert obj["metadata"]["resourceVersion"] != previous["metadata"]["resourceVersion"]
            cached = [informer.get(namespace, "listed") for informer, _ in started]
            for held in [o for event in seen for o in event[1:] if o] + cached:
                assert set(held) <= {"apiVersion", "kind", "metadata"}, held
                text = json.dumps(held)
                assert not [token for token in ("first", "second")
                            if base64.b64encode(token.encode()).decode() in text or token in text], held
            assert [informer.relists for informer, _ in started] == [1, 1]
            # What was asked: metadata, on every list and watch.
            asked = first_api.accepted + second_api.accepted
            assert len(asked) >= 4 and all("as=PartialObjectMetadata" in accept for accept in asked), asked
        finally:
            for informer, thread in started:
                informer.stop()
                thread.join(30)
            first_api.close()
            second_api.close()


class AcceptRecorder(client.ApiClient):
    """A real ApiClient noting the Accept header of each GET it sends."""

    def __init__(self, configuration):
        super().__init__(configuration)
        self.accepted = []

    def call_api(self, method, url, header_params=None, *args, **kwargs):
        if method == "GET":
            self.accepted.append((header_params or {}).get("Accept", ""))
        return super().call_api(method, url, header_params, *args, **kwargs)
