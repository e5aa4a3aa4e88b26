"""The pool inside the Jumpstarter controller's contract: the dormant Exporter,
the controller CA, credentials bound to an Exporter's UID."""

import base64

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import controller_ca, credentials
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import operator_state
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import plan as plan_module
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.demand import (
    attribute_lease_demand,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import (
    CONTROLLER_CA_RETRY,
    scale_plan,
)
from pool_builders import NOW, at, exporter, exporter_set, lease, target_class

DORMANT = {c.ANNOTATION_DORMANT: "true"}
# A self-signed certificate's DER is an ASN.1 SEQUENCE; this one is cut short,
# which is all the check looks at.
CERTIFICATE = ("-----BEGIN CERTIFICATE-----\n"
               + base64.encodebytes(b"\x30\x82\x01\x0a" + bytes(40)).decode()
               + "-----END CERTIFICATE-----\n")
AVAILABLE_CA = controller_ca.controller_ca({"data": {"ca.crt": CERTIFICATE}}, "lab",
                                           "jumpstarter-service-ca-cert", "ca.crt")


def dormant(name="rpi4-dormant-0", **kwargs):
    return exporter(name, ready=False, first_ready=False, annotations=DORMANT, created=-10,
                    **kwargs)


def plan(the_set, exporters=(), pending=0, klass=None, **options):
    leases = [lease(f"pending-{i}") for i in range(pending)]
    return scale_plan(the_set, klass or target_class(), list(exporters), leases, NOW,
                      options=options or None)


def names(entries):
    return [entry["name"] for entry in entries]


# --- the dormant Exporter ----------------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "binding", "min_available", "created", "kept", "removed"),
    [
        # An empty on-demand set gets one, whatever its binding mode.
        ([], "WaitForFirstConsumer", 0, ["rpi4-dormant-0"], [], []),
        ([], "Immediate", 0, ["rpi4-dormant-0"], [], []),
        # Once made it stays while nothing else is enabled.
        ([dormant()], "WaitForFirstConsumer", 0, [], ["rpi4-dormant-0"], []),
        # A set about to grow keeps it until the new Exporters are seen...
        ([dormant()], "Immediate", 2, [], ["rpi4-dormant-0"], []),
        # ...and a set that had nothing enabled and gets Exporters now needs none.
        ([], "Immediate", 2, [], [], []),
        # Another enabled Exporter, ready or not: it goes.
        ([dormant(), exporter("rpi4-0")], "Immediate", 1, [], [], ["rpi4-dormant-0"]),
        ([dormant(), exporter("rpi4-0", ready=False, created=-5)], "Immediate", 1, [], [],
         ["rpi4-dormant-0"]),
        # A leased Exporter is enabled and matches: leases wait NotAvailable.
        ([dormant(), exporter("rpi4-0", lease="l1")], "WaitForFirstConsumer", 0, [], [],
         ["rpi4-dormant-0"]),
        # Only Exporters someone else disabled: they do not serve, the dormant one stays.
        ([dormant(), exporter("rpi4-0", enabled=False)], "WaitForFirstConsumer", 0, [],
         ["rpi4-dormant-0"], []),
        # Two (a stale read made a second): one is enough.
        ([dormant(), dormant("rpi4-dormant-1")], "WaitForFirstConsumer", 0, [],
         ["rpi4-dormant-0"], ["rpi4-dormant-1"]),
        # A terminating one does not count, and its name stays taken.
        ([dormant(terminating=True)], "WaitForFirstConsumer", 0, ["rpi4-dormant-1"], [], []),
    ],
)
def test_dormant_exists_exactly_while_no_other_exporter_is_enabled(pool, binding, min_available,
                                                                   created, kept, removed):
    result = plan(exporter_set(min_available=min_available), pool,
                  klass=target_class(binding=binding))
    assert names(result["create_dormant"]) == created
    assert names(result["delete_dormant"]) == removed
    alive = {e["metadata"]["name"] for e in pool
             if c.ANNOTATION_DORMANT in e["metadata"]["annotations"]
             and not e["metadata"].get("deletionTimestamp")}
    assert sorted(alive - set(removed)) == kept


def test_a_set_that_cannot_grow_yet_gets_the_dormant_exporter():
    result = plan(exporter_set(min_available=2), capacity={"limit": 0, "reason": "NoFreeSlots",
                                                           "message": "no slots"})
    assert result["create"] == []
    assert names(result["create_dormant"]) == ["rpi4-dormant-0"]


def test_dormant_exporter_matches_the_set_and_has_no_backend_fields():
    (entry,) = plan(exporter_set())["create_dormant"]
    assert entry["labels"] == {"board": "rpi4", "virtual": "true", c.LABEL_EXPORTER_SET: "rpi4"}
    assert entry["annotations"][c.ANNOTATION_DORMANT] == "true"
    assert c.LABEL_HOST not in entry["labels"]


def test_dormant_exporter_counts_nowhere_and_never_fails():
    # Never ready, older than any startup timeout: still not a failure.
    old = exporter("rpi4-dormant-0", ready=False, first_ready=False, annotations=DORMANT,
                   created=-86400)
    result = plan(exporter_set(), [old], startup_timeout=60)
    status = result["status"]
    assert status["replicas"] == 0 and status["unavailableReplicas"] == 0
    assert status["exportersOffline"] == 0
    assert result["delete"] == [] and result["delete_dormant"] == []
    assert operator_state.CONSECUTIVE_FAILURES not in result["set_state"]
    assert result["changed"] is True  # the first status write; nothing else


def test_pending_lease_on_the_dormant_exporter_brings_up_a_real_instance():
    klass = target_class(binding="WaitForFirstConsumer")
    first = plan(exporter_set(), [dormant()], pending=1, klass=klass)
    assert names(first["create"]) == ["rpi4-0"]
    # Kept until the new one is seen, so the lease never loses its match.
    assert first["delete_dormant"] == []
    new = exporter("rpi4-0", ready=False, first_ready=False, created=-1)
    second = plan(exporter_set(), [dormant(), new], pending=1, klass=klass)
    assert names(second["delete_dormant"]) == ["rpi4-dormant-0"]
    assert second["create"] == []


def test_scale_down_to_zero_creates_the_dormant_exporter_with_the_disable():
    the_set = exporter_set(cooldown="0s", state={operator_state.SURPLUS_SINCE: at(-1)})
    result = plan(the_set, [exporter("rpi4-0"), exporter("rpi4-1")])
    assert result["disable"] == ["rpi4-0", "rpi4-1"]
    assert names(result["create_dormant"]) == ["rpi4-dormant-0"]


@pytest.mark.parametrize(("pool", "leases", "plan_options"), [
    # The lease of the only Exporter ended (ExitAndReplace): it is disabled first.
    ([exporter("rpi4-0")], [lease("l1", assigned="rpi4-0", ended=True)], {}),
    # The only Exporter's instance failed: it is disabled first.
    ([exporter("rpi4-0", ready=False, created=-600, first_ready=False)], [], {"startup_timeout": 60}),
    # The only Exporter is parked and goes.
    ([exporter("rpi4-0", enabled=False, annotations={c.ANNOTATION_SCALE_DOWN: at(-5)})], [], {}),
])
def test_removing_the_last_enabled_exporter_creates_the_dormant_one_first(pool, leases, plan_options):
    result = scale_plan(exporter_set(), target_class(), pool, [], NOW, options=plan_options or None,
                        leases=leases)
    assert names(result["delete"]) + result["disable"] == ["rpi4-0"]
    assert names(result["create_dormant"]) == ["rpi4-dormant-0"]


def test_a_re_enabled_exporter_stands_in_for_the_dormant_one():
    parked = exporter("rpi4-1", enabled=False, annotations={c.ANNOTATION_SCALE_DOWN: at(-5)})
    result = plan(exporter_set(), [dormant(), parked], pending=1)
    assert result["enable"] == ["rpi4-1"]
    assert names(result["delete_dormant"]) == ["rpi4-dormant-0"]


def test_a_set_being_deleted_keeps_no_dormant_exporter():
    the_set = exporter_set()
    the_set["metadata"]["deletionTimestamp"] = at(-1)
    result = plan(the_set, [dormant()])
    assert result["create_dormant"] == []
    assert names(result["delete_dormant"]) == ["rpi4-dormant-0"]


def test_a_leased_dormant_exporter_is_left_alone():
    result = plan(exporter_set(), [dormant(lease="odd"), exporter("rpi4-0")])
    assert result["delete_dormant"] == []


def test_delete_entries_carry_the_uid_the_plan_saw():
    ended = exporter("rpi4-0", enabled=False, annotations={c.ANNOTATION_RETIRING: c.DELETE_RECYCLE})
    ended["metadata"]["uid"] = "uid-0"
    result = plan(exporter_set(), [ended])
    assert result["delete"] == [{"name": "rpi4-0", "reason": c.DELETE_RECYCLE, "uid": "uid-0"}]


def test_dormant_exporter_takes_no_headroom_from_demand():
    full = exporter_set(name="a", max_replicas=1)
    other = exporter_set(name="b", max_replicas=1)
    sleeper = exporter("a-dormant-0", ready=False, first_ready=False, annotations=DORMANT,
                       owner="a")
    demand = attribute_lease_demand([full, other], [lease("l1")], [sleeper], NOW)
    assert demand == {"a": ["l1"], "b": []}


# --- the controller CA ---------------------------------------------------------------


@pytest.mark.parametrize(("annotation", "reference"), [
    (None, ("jumpstarter-service-ca-cert", "ca.crt")),
    ("", ("jumpstarter-service-ca-cert", "ca.crt")),
    ("corp-ca", ("corp-ca", "ca.crt")),
    ("corp-ca/bundle.pem", ("corp-ca", "bundle.pem")),
    (" corp-ca / bundle.pem ", ("corp-ca", "bundle.pem")),
])
def test_configmap_reference(annotation, reference):
    vclass = target_class()
    if annotation is not None:
        vclass["metadata"]["annotations"] = {c.ANNOTATION_CONTROLLER_CA_CONFIGMAP: annotation}
    assert controller_ca.configmap_reference(vclass) == reference


@pytest.mark.parametrize(("configmap", "fragment"), [
    (None, "ConfigMap lab/jumpstarter-service-ca-cert key ca.crt: the ConfigMap does not exist"),
    ({"data": {}}, "ConfigMap lab/jumpstarter-service-ca-cert key ca.crt: no such key"),
    ({"data": {"ca.crt": "hello"}}, "holds no PEM certificate"),
    ({"data": {"ca.crt": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}},
     "holds no PEM certificate"),
    ({"data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n"}},
     "certificate 1 is not valid base64"),
    ({"data": {"ca.crt": CERTIFICATE + "-----BEGIN CERTIFICATE-----\nAAAA\n"
                                      "-----END CERTIFICATE-----\n"}},
     "certificate 2 is not a DER certificate"),
])
def test_unavailable_ca_names_the_configmap_and_key(configmap, fragment):
    result = controller_ca.controller_ca(configmap, "lab", "jumpstarter-service-ca-cert", "ca.crt")
    assert result["available"] is False and result["tls_ca"] == ""
    assert fragment in result["message"]


def test_available_ca_is_the_bundle_in_base64():
    assert AVAILABLE_CA["available"] is True
    assert base64.b64decode(AVAILABLE_CA["tls_ca"]).decode() == CERTIFICATE


def test_unavailable_ca_is_degraded_with_an_event_and_a_retry():
    problem = controller_ca.controller_ca(None, "lab", "jumpstarter-service-ca-cert", "ca.crt")
    result = plan(exporter_set(min_available=1), [exporter("rpi4-0")], controller_ca=problem)
    degraded = next(x for x in result["status"]["conditions"] if x["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", c.REASON_CONTROLLER_CA_UNAVAILABLE)
    assert "lab/jumpstarter-service-ca-cert" in degraded["message"]
    (event,) = [e for e in result["events"] if e["reason"] == c.REASON_CONTROLLER_CA_UNAVAILABLE]
    assert event["type"] == "Warning" and "ca.crt" in event["message"]
    assert result["requeue_after"] == CONTROLLER_CA_RETRY


def test_available_ca_is_not_a_condition():
    result = plan(exporter_set(min_available=1), [exporter("rpi4-0")], controller_ca=AVAILABLE_CA)
    degraded = next(x for x in result["status"]["conditions"] if x["type"] == "Degraded")
    assert degraded["status"] == "False"


# --- what a reconcile observes -------------------------------------------------------


def observed_pool(exporters, provisioner=c.PROVISIONER_QEMU, recycle="ExitAndReplace"):
    the_set = exporter_set(recycle=recycle, min_available=len(exporters))
    for item in exporters:
        item["metadata"]["uid"] = item["metadata"]["name"] + "-uid"
        item["metadata"]["ownerReferences"] = [{"uid": the_set["metadata"]["uid"],
                                                "controller": True}]
        item["status"]["credential"] = {"name": item["metadata"]["name"] + "-exporter"}
    objects = {"VirtualTargetClass": [target_class(provisioner=provisioner)],
               "ExporterSet": [the_set], "Exporter": exporters, "Lease": [], "Pod": []}
    return the_set, k8s_observe.observe(the_set, objects, NOW)


def test_backends_are_made_only_with_an_available_ca():
    the_set, observed = observed_pool([exporter("rpi4-0", ready=False, created=-1)])
    reads = []

    def read():
        reads.append(1)
        return AVAILABLE_CA

    k8s_observe.plan_for(the_set, observed, read_controller_ca=read)
    assert reads == [1]
    assert k8s_observe.unprovisioned(observed) == ["rpi4-0"]
    variables = k8s_observe.playbook_variables(the_set, observed, {})
    assert variables["controller_tls_ca"] == AVAILABLE_CA["tls_ca"]

    problem = controller_ca.controller_ca(None, "lab", "jumpstarter-service-ca-cert", "ca.crt")
    the_set, observed = observed_pool([exporter("rpi4-0", ready=False, created=-1)])
    result = k8s_observe.plan_for(the_set, observed, read_controller_ca=lambda: problem)
    assert k8s_observe.unprovisioned(observed) == []
    degraded = next(x for x in result["status"]["conditions"] if x["type"] == "Degraded")
    assert degraded["reason"] == c.REASON_CONTROLLER_CA_UNAVAILABLE

    the_set, observed = observed_pool([exporter("rpi4-0", ready=False, created=-1)])
    k8s_observe.plan_for(the_set, observed)
    assert k8s_observe.unprovisioned(observed) == []


def instance_pod(name, owner_uid):
    return {"metadata": {"name": name, "labels": {
        c.LABEL_EXPORTER_SET: "rpi4", "virtualtarget.jumpstarter.dev/exporter": name},
        "ownerReferences": [{"kind": "Exporter", "uid": owner_uid, "controller": True}]},
        "status": {"phase": "Running"}}


def test_the_ca_is_read_only_when_backends_are_to_be_made():
    # The Exporter has its Pod: nothing to make, no read.
    the_set, observed = observed_pool([exporter("rpi4-0")])
    observed["pods"] = [instance_pod("rpi4-0", "rpi4-0-uid")]
    k8s_observe.plan_for(the_set, observed, read_controller_ca=pytest.fail)
    assert observed["controller_ca"] is None


def test_a_pod_left_by_an_earlier_exporter_of_the_name_is_no_backend():
    the_set, observed = observed_pool([exporter("rpi4-0")])
    observed["pods"] = [instance_pod("rpi4-0", "an-earlier-uid")]
    observed["controller_ca"] = AVAILABLE_CA
    assert k8s_observe.unprovisioned(observed) == ["rpi4-0"]


def test_in_place_reuse_of_a_qemu_pod_reads_the_ca():
    ended = exporter("rpi4-0", enabled=False, annotations={c.ANNOTATION_RETIRING: c.RECYCLE_IN_PLACE_REUSE})
    the_set, observed = observed_pool([ended], recycle="InPlaceReuse")
    observed["pods"] = [instance_pod("rpi4-0", "rpi4-0-uid")]
    k8s_observe.plan_for(the_set, observed, read_controller_ca=lambda: AVAILABLE_CA)
    assert observed["controller_ca"] is AVAILABLE_CA


def test_the_dormant_exporter_never_gets_a_backend():
    the_set, observed = observed_pool([dormant()])
    observed["controller_ca"] = AVAILABLE_CA
    assert k8s_observe.unprovisioned(observed) == []
    variables = k8s_observe.playbook_variables(the_set, observed, {})
    assert variables["exporters_with_backends"] == []


def test_the_dormant_exporter_gets_no_lab_host():
    the_set, observed = observed_pool([dormant()], provisioner=c.PROVISIONER_QEMU_BAREMETAL)
    observed["controller_ca"] = AVAILABLE_CA
    assert k8s_observe.unprovisioned(observed) == []


# --- credentials -----------------------------------------------------------------------


def secret(owner_uid, token="tok"):
    return {"metadata": {"name": "rpi4-0-exporter", "uid": "secret-uid",
                         "ownerReferences": [{"kind": "Exporter", "name": "rpi4-0",
                                              "uid": owner_uid, "controller": True}]},
            "data": {"token": base64.b64encode(token.encode()).decode()}}


def owned_exporter(uid="uid-new", credential=None):
    item = exporter("rpi4-0")
    item["metadata"]["uid"] = uid
    if credential:
        item["status"]["credential"] = {"name": credential}
    return item


@pytest.mark.parametrize(("credential", "name"), [
    (None, "rpi4-0-exporter"),
    ("custom-secret", "custom-secret"),
])
def test_credential_secret_name(credential, name):
    assert credentials.credential_secret_name(owned_exporter(credential=credential)) == name


@pytest.mark.parametrize(("found", "token"), [
    (secret("uid-new"), "tok"),
    (secret("uid-old"), None),      # issued to an earlier Exporter of the same name
    ({"metadata": {"name": "rpi4-0-exporter"}, "data": {"token": "dG9r"}}, None),  # no owner
    (secret("uid-new", token=""), None),
    (None, None),
])
def test_a_backend_gets_only_a_token_issued_to_its_exporter(found, token):
    assert credentials.token_for(found, owned_exporter()) == token


def test_an_exporter_without_uid_gets_no_token():
    assert credentials.token_for(secret("uid-new"), exporter("rpi4-0")) is None


@pytest.mark.parametrize(("pool", "leaving", "needed"), [
    ([exporter("rpi4-0")], {"rpi4-0"}, True),
    ([exporter("rpi4-0"), exporter("rpi4-1")], {"rpi4-0"}, False),
    ([exporter("rpi4-0"), dormant()], {"rpi4-0"}, False),
    ([exporter("rpi4-0"), dormant(terminating=True)], {"rpi4-0"}, True),
    ([exporter("rpi4-0"), exporter("rpi4-1", enabled=False)], {"rpi4-0"}, True),
    ([exporter("rpi4-0"), exporter("rpi4-1", terminating=True)], {"rpi4-0"}, True),
])
def test_whether_removing_exporters_needs_the_dormant_one_first(pool, leaving, needed):
    assert plan_module.needs_dormant_exporter(pool, leaving) is needed


def test_the_dormant_exporter_is_named_clear_of_taken_names():
    entry = plan_module.dormant_exporter(exporter_set(), c.PROVISIONER_QEMU_BAREMETAL,
                                         ["rpi4-dormant-0"])
    assert entry["name"] == "rpi4-dormant-1"
    assert entry["annotations"][c.ANNOTATION_DORMANT] == "true"
    assert entry["annotations"][c.ANNOTATION_PROVISIONER] == c.PROVISIONER_QEMU_BAREMETAL
