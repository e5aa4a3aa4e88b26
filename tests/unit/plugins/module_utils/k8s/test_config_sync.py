"""Which running instances get their config re-synced, and when the operator
runs the re-sync on its own (k8s/observe.py): on the pass that sees an
input of an unleased instance's config change (k8s/config_sync.py), else
on the fallback period. The writes on a bed are in tests/pool/test_config_resync.py."""

import base64
import copy

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import config_sync
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from pool_builders import NOW, at, exporter, exporter_set, lease, target_class


def pod_of(owned):
    meta = owned["metadata"]
    return {"metadata": {"name": meta["name"], "namespace": "lab",
                         "labels": {c.LABEL_EXPORTER_SET: "rpi4", c.LABEL_EXPORTER: meta["name"]},
                         "ownerReferences": [{"kind": "Exporter", "name": meta["name"], "uid": meta["uid"],
                                              "controller": True}]},
            "status": {"phase": "Running"}}


def observed_for(the_set, exporters, pods, provisioner=c.PROVISIONER_QEMU):
    objects = {"VirtualTargetClass": [target_class(provisioner=provisioner)], "ExporterSet": [the_set],
               "Exporter": exporters, "Lease": [], "Pod": pods, "ExporterSetPolicy": []}
    return k8s_observe.observe(the_set, objects, NOW)


def members():
    running, waiting, disabled = (copy.deepcopy(exporter(n)) for n in ("rpi4-0", "rpi4-1", "rpi4-2"))
    for obj in (running, waiting, disabled):
        obj["metadata"]["uid"] = "uid-" + obj["metadata"]["name"]
    disabled["spec"]["enabled"] = False
    return [running, waiting, disabled], [pod_of(running), pod_of(disabled)]


def test_running_instances_are_the_enabled_ones_with_their_own_pod():
    exporters, pods = members()
    observed = observed_for(exporter_set(), exporters, pods)
    assert k8s_observe.running_exporters(observed) == ["rpi4-0"]
    # A Pod another Exporter of that name left is not its own.
    pods[0]["metadata"]["ownerReferences"][0]["uid"] = "uid-earlier"
    assert k8s_observe.running_exporters(observed_for(exporter_set(), exporters, pods)) == []
    # Lab hosts have no config Secret.
    assert k8s_observe.running_exporters(
        observed_for(exporter_set(), exporters, members()[1], provisioner=c.PROVISIONER_QEMU_BAREMETAL)) == []


def test_an_instance_made_from_an_earlier_template_is_the_rollouts_not_resynced():
    """A class or template change makes a new config for every instance; the
    outdated ones are replaced by the rollout, within its maxUnavailable,
    not restarted by the re-sync as well."""
    exporters, pods = members()
    observed = observed_for(exporter_set(), exporters, pods)
    current = k8s_observe.rollout.template_hash(observed["class"], observed["set"],
                                                observed["resolved"]["parameters"], observed["resolved"]["images"])
    exporters[0]["metadata"].setdefault("annotations", {})[c.ANNOTATION_TEMPLATE_HASH] = current
    assert k8s_observe.running_exporters(observed_for(exporter_set(), exporters, pods)) == ["rpi4-0"]
    exporters[0]["metadata"]["annotations"][c.ANNOTATION_TEMPLATE_HASH] = "0" * 16
    assert k8s_observe.running_exporters(observed_for(exporter_set(), exporters, pods)) == []


def test_a_sync_is_due_on_a_run_by_hand_and_every_interval_otherwise():
    exporters, pods = members()
    young = exporter_set()
    young["metadata"]["creationTimestamp"] = at(-60)
    observed = observed_for(young, exporters, pods)
    assert not k8s_observe.config_sync_due(observed)
    assert k8s_observe.probe_playbook(observed) is None
    observed["sync_config"] = True
    assert k8s_observe.config_sync_due(observed)
    # The set's author writes its annotations, not its status: a forged
    # sync stamp of the former annotation starts no re-sync.
    young["metadata"]["annotations"]["virtualtarget.jumpstarter.dev/config-synced-at"] = at(-86400)
    assert not k8s_observe.config_sync_due(observed_for(young, exporters, pods))
    old = exporter_set(state={k8s_observe.CONFIG_SYNCED_KEY: at(-k8s_observe.CONFIG_SYNC_SECONDS)})
    old["metadata"]["creationTimestamp"] = at(-86400)
    observed = observed_for(old, exporters, pods)
    assert k8s_observe.config_sync_due(observed)
    assert k8s_observe.probe_playbook(observed) == k8s_observe.CONFIG_SYNC_PLAYBOOK
    # Due, it reads the controller CA (the re-sync needs it) ...
    reads = []
    k8s_observe.plan_for(old, observed, read_controller_ca=lambda: reads.append(1) or {"available": True,
                                                                                      "tls_ca": "Q0E="})
    assert reads == [1]
    variables = k8s_observe.playbook_variables(old, observed, {})
    assert variables["running_exporters"] == ["rpi4-0"] and variables["controller_tls_ca"] == "Q0E="
    # ... and not while nothing runs.
    assert not k8s_observe.config_sync_due(observed_for(old, exporters, []))


# -- re-synced on the pass that sees an input change (k8s/config_sync.py) ----

CA = "-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n"


def _owned_by(name, uid, exporter_name, version="1", annotations=None):
    return {"metadata": {"name": name, "namespace": "lab", "uid": f"uid-{name}", "resourceVersion": version,
                         "annotations": dict(annotations or {}),
                         "ownerReferences": [{"kind": "Exporter", "name": exporter_name, "uid": uid,
                                              "controller": True}]}}


class Pool:
    """One running instance, rpi4-0, with its credential and config Secrets
    and the CA ConfigMap as the operator's caches hold them (metadata of the
    Secrets only), its config noting the digest of the inputs it was written
    from; ``observed()`` is a pass over them."""

    def __init__(self, since_sync=-3600):
        self.set = exporter_set(state={k8s_observe.CONFIG_SYNCED_KEY: at(since_sync)})
        self.set["metadata"]["creationTimestamp"] = at(-86400)
        self.exporter, = members()[0][:1]
        self.exporter["status"].update({"credential": {"name": "rpi4-0-exporter"}, "endpoint": "grpc.lab:443"})
        self.credential = _owned_by("rpi4-0-exporter", "uid-rpi4-0", "rpi4-0", version="10")
        self.config = _owned_by("rpi4-0-config", "uid-rpi4-0", "rpi4-0")
        self.configmap = {"metadata": {"name": "jumpstarter-service-ca-cert", "namespace": "lab"},
                          "data": {"ca.crt": CA}}
        self.leases = []
        self.note()

    def objects(self):
        return {"VirtualTargetClass": [target_class()], "ExporterSet": [self.set], "Exporter": [self.exporter],
                "Lease": self.leases, "Pod": [pod_of(self.exporter)], "ExporterSetPolicy": [],
                "Secret": [s for s in (self.credential, self.config) if s],
                "ConfigMap": [m for m in (self.configmap,) if m]}

    def observed(self):
        return k8s_observe.observe(self.set, self.objects(), NOW)

    def note(self):
        """What exporter_pods notes on the config Secret it writes now."""
        observed = self.observed()
        self.config["metadata"]["annotations"][config_sync.ANNOTATION_CONFIG_INPUTS] = config_sync.inputs_digest(
            self.set, self.exporter, c.PROVISIONER_QEMU, observed["resolved"]["parameters"], self.credential,
            base64.b64encode(CA.encode()).decode())


def test_unchanged_inputs_cost_no_run_however_long_since_the_last_sync():
    pool = Pool(since_sync=-86400)
    observed = pool.observed()
    assert k8s_observe.stale_configs(observed) == []
    # With the inputs seen there is no periodic re-sync: nothing changed, nothing runs.
    assert not k8s_observe.config_sync_due(observed)
    assert k8s_observe.probe_playbook(observed) is None
    assert k8s_observe.config_sync_wait(observed) is None


def test_a_new_token_endpoint_ca_or_driver_list_makes_the_sync_due_on_that_pass():
    def changed(change):
        pool = Pool(since_sync=-60)
        change(pool)
        observed = pool.observed()
        assert k8s_observe.stale_configs(observed) == ["rpi4-0"]
        assert k8s_observe.config_sync_due(observed)
        assert k8s_observe.probe_playbook(observed) == k8s_observe.CONFIG_SYNC_PLAYBOOK
        return pool

    # A rotated token: the credential Secret's new version (its data is never seen).
    changed(lambda pool: pool.credential["metadata"].update(resourceVersion="11"))
    # A new credential Secret of that name (the controller issued it again).
    changed(lambda pool: pool.credential["metadata"].update(uid="uid-again"))
    changed(lambda pool: pool.configmap.update(data={"ca.crt": CA + CA}))
    changed(lambda pool: pool.exporter["status"].update(endpoint="grpc.moved:443"))
    changed(lambda pool: pool.set["spec"]["template"]["spec"].update(
        drivers=[{"name": "power", "type": "jumpstarter_driver_qemu.driver.Qemu"}]))
    # Written before the digest was noted (an older release): re-synced once.
    changed(lambda pool: pool.config["metadata"]["annotations"].clear())
    # Re-synced (the module notes the new digest): nothing more to do.
    pool = changed(lambda pool: pool.credential["metadata"].update(resourceVersion="12"))
    pool.note()
    assert not k8s_observe.config_sync_due(pool.observed())


def test_a_run_re_syncs_only_the_instances_a_due_sync_names():
    """What a reconcile run is given to re-sync (``running_exporters``):
    nothing while no re-sync is due, so a run that makes backends starts no
    re-sync module; once due, the stale instances where the inputs are seen,
    and every running one on a run by hand."""
    pool = Pool()
    observed = pool.observed()
    assert k8s_observe.running_exporters(observed) == ["rpi4-0"]
    assert k8s_observe.playbook_variables(pool.set, observed, {})["running_exporters"] == []
    pool.credential["metadata"]["resourceVersion"] = "11"
    observed = pool.observed()
    assert k8s_observe.playbook_variables(pool.set, observed, {})["running_exporters"] == ["rpi4-0"]
    # Held back for a moment after the last sync: nothing yet.
    held = Pool(since_sync=-2)
    held.credential["metadata"]["resourceVersion"] = "11"
    assert k8s_observe.playbook_variables(held.set, held.observed(), {})["running_exporters"] == []
    # By hand: every running instance, whatever the inputs say.
    by_hand = Pool().observed()
    by_hand["sync_config"] = True
    assert k8s_observe.playbook_variables(pool.set, by_hand, {})["running_exporters"] == ["rpi4-0"]


def test_a_leased_instance_is_left_until_its_lease_ends():
    pool = Pool()
    pool.credential["metadata"]["resourceVersion"] = "11"
    pool.exporter["status"]["leaseRef"] = {"name": "ci-1"}
    assert not k8s_observe.config_sync_due(pool.observed())
    # Held from the Lease's side alone.
    del pool.exporter["status"]["leaseRef"]
    pool.leases = [lease("ci-1", assigned="rpi4-0")]
    assert not k8s_observe.config_sync_due(pool.observed())
    # The lease over: the change is still there, and due now.
    pool.leases = [lease("ci-1", assigned="rpi4-0", ended=True)]
    assert k8s_observe.stale_configs(pool.observed()) == ["rpi4-0"]
    assert k8s_observe.config_sync_due(pool.observed())


def test_a_sync_just_run_holds_the_next_for_a_moment_and_the_set_is_looked_at_then():
    pool = Pool(since_sync=-2)
    pool.credential["metadata"]["resourceVersion"] = "11"
    observed = pool.observed()
    assert not k8s_observe.config_sync_due(observed)
    assert k8s_observe.config_sync_wait(observed) == k8s_observe.CONFIG_SYNC_MIN_SECONDS - 2


def test_nothing_is_due_where_a_sync_would_write_nothing():
    def quiet(change):
        pool = Pool()
        pool.credential["metadata"]["resourceVersion"] = "11"
        change(pool)
        assert k8s_observe.stale_configs(pool.observed()) == []

    quiet(lambda pool: setattr(pool, "configmap", None))  # no CA: nothing is written without it
    quiet(lambda pool: pool.configmap.update(data={"ca.crt": "not a certificate"}))
    quiet(lambda pool: setattr(pool, "config", None))  # the run that makes its Pod writes it
    quiet(lambda pool: pool.config["metadata"]["ownerReferences"][0].update(uid="uid-earlier"))
    quiet(lambda pool: pool.credential["metadata"]["ownerReferences"][0].update(uid="uid-earlier"))
    quiet(lambda pool: pool.exporter["spec"].update(enabled=False))
    quiet(lambda pool: pool.set["status"]["operatorState"].update(
        {k8s_observe.CONFIG_SYNCED_KEY: "garbage"}) or pool.exporter["status"].pop("credential"))


def test_without_the_inputs_the_sync_falls_back_to_the_period():
    pool = Pool(since_sync=-60)
    pool.credential["metadata"]["resourceVersion"] = "11"
    objects = pool.objects()
    del objects["Secret"], objects["ConfigMap"]
    observed = k8s_observe.observe(pool.set, objects, NOW)
    assert observed["config_inputs"] is None and k8s_observe.stale_configs(observed) == []
    assert not k8s_observe.config_sync_due(observed)
    pool = Pool(since_sync=-k8s_observe.CONFIG_SYNC_SECONDS)
    objects = pool.objects()
    del objects["Secret"], objects["ConfigMap"]
    assert k8s_observe.config_sync_due(k8s_observe.observe(pool.set, objects, NOW))


def test_the_digest_needs_the_secrets_version_not_its_token():
    pool = Pool()
    parameters = pool.observed()["resolved"]["parameters"]
    full = copy.deepcopy(pool.credential)
    full["data"] = {"token": base64.b64encode(b"a token").decode()}
    ca = base64.b64encode(CA.encode()).decode()

    def digest(credential):
        return config_sync.inputs_digest(pool.set, pool.exporter, c.PROVISIONER_QEMU, parameters, credential, ca)

    assert digest(full) == digest(pool.credential)
    full["data"]["token"] = base64.b64encode(b"another token").decode()
    assert digest(full) == digest(pool.credential)
    assert "a token" not in digest(full)
