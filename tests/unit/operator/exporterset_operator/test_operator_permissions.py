"""The operator under fewer grants (pool/permissions.py): what it asks the
API server at start-up, and what its controller and reconcilers leave off
or do instead; the API server is a script of answers here (the slot's Role
on a real one: tests/controller/test_upstream_slot.py)."""

from __future__ import annotations

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import reconcile_pass
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import permissions
from exporterset_operator import permissions as probing
from exporterset_operator.controller import Controller
from exporterset_operator.informer import Informer
from exporterset_operator.keys import ClassKey, PolicyKey, SetKey
from exporterset_operator.metrics import Metrics
from exporterset_operator.reconciler import Reconciler
from kubernetes.client.rest import ApiException
from pool_builders import exporter_set, target_class
from test_operator_reconcilers import Store, caches
from upstream_slot import SLOT_RULES
from urllib3.exceptions import MaxRetryError

SLOT = [{"apiGroups": [g], "resources": list(r), "verbs": list(v)} for g, r, v in SLOT_RULES]
LIMITED = permissions.Permissions.from_rules(SLOT)


def scripted(monkeypatch, answers):
    """``_post`` answering from ``answers(kind, spec)``, every request kept."""
    asked = []

    def post(api_client, kind, spec):
        asked.append((kind, spec))
        return answers(kind, spec)

    monkeypatch.setattr(probing, "_post", post)
    return asked


def test_one_rules_review_in_the_namespace_says_what_is_missing(monkeypatch):
    asked = scripted(monkeypatch, lambda kind, spec: {"status": {"resourceRules": SLOT, "incomplete": False}})
    assert probing.probe(None, "lab", ["qemu.jumpstarter.dev"]) == LIMITED
    assert asked == [("SelfSubjectRulesReview", {"namespace": "lab"})]
    # A provisioner that never resets in a running Pod does not need exec.
    assert set(probing.probe(None, "lab", ["corellium.jumpstarter.dev"]).lacking) == set(LIMITED.lacking) - {
        "exec-reset"}


def test_an_incomplete_review_asks_for_each_missing_grant(monkeypatch):
    def answers(kind, spec):
        if kind == "SelfSubjectRulesReview":
            return {"status": {"resourceRules": SLOT, "incomplete": True}}
        # Another authorizer allows Secret deletion.
        attributes = spec["resourceAttributes"]
        return {"status": {"allowed": (attributes["resource"], attributes["verb"]) == ("secrets", "delete")}}

    asked = scripted(monkeypatch, answers)
    found = probing.probe(None, "lab", ["qemu.jumpstarter.dev"])
    assert found.on("secret-delete") and not found.on("exec-reset")
    assert set(found.lacking) == set(LIMITED.lacking) - {"secret-delete"}
    exec_check = next(spec["resourceAttributes"] for kind, spec in asked if kind == "SelfSubjectAccessReview"
                      and spec["resourceAttributes"]["resource"] == "pods"
                      and spec["resourceAttributes"].get("subresource") == "exec")
    assert exec_check["namespace"] == "lab"


def test_watching_every_namespace_nothing_is_asked_and_every_feature_is_on(monkeypatch):
    asked = scripted(monkeypatch, lambda kind, spec: {"status": {"allowed": False}})
    assert probing.probe(None, None, ["qemu.jumpstarter.dev"]) == permissions.ALL_GRANTED
    assert asked == []


@pytest.mark.parametrize("error", [
    ApiException(status=403),
    # The API server not reachable yet: the operator starts and answers its probes.
    MaxRetryError(None, "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", "Connection refused"),
])
def test_when_the_api_server_cannot_say_every_feature_stays_on(monkeypatch, error):
    def refused(kind, spec):
        raise error

    scripted(monkeypatch, refused)
    assert probing.probe(None, "lab", ["qemu.jumpstarter.dev"]) == permissions.ALL_GRANTED


def test_an_unwatchable_kind_is_synced_empty_and_never_asked_for(monkeypatch):
    started = []
    alive = type("Thread", (), {"name": "informer", "is_alive": lambda self: True})()
    monkeypatch.setattr(Informer, "start", lambda self: started.append(self.resource.kind) or alive)
    now = [1000.0]
    controller = Controller(None, lambda caches: None, Metrics(), workers=1, namespace="lab",
                            watch_silence_timeout=900, clock=lambda: now[0], permissions=LIMITED)
    controller.start_informers()
    assert "ExporterSetPolicy" not in started and "ExporterSet" in started
    for kind in started:
        controller.caches[kind].synced.set()
    assert controller.readiness() == []
    now[0] += 1000
    silent = controller.liveness()
    assert silent and not [line for line in silent if "ExporterSetPolicy" in line]


def reconciler_of(granted, sets=(), classes=(), policies=()):
    held = caches(sets, classes)
    held["ExporterSetPolicy"] = Store(policies)
    return Reconciler(held, None, None, Metrics(), {"qemu.jumpstarter.dev"}, permissions=granted)


@pytest.mark.parametrize("granted", [LIMITED, permissions.Permissions()], ids=["slot", "every grant"])
def test_a_set_says_what_is_off_once_and_gets_a_finalizer_only_where_it_may(monkeypatch, granted):
    the_set, vclass = exporter_set(), target_class()
    reconciler = reconciler_of(granted, [the_set], [vclass])
    calls = []
    monkeypatch.setattr(reconcile_pass, "keep_finalizer", lambda *args, **kwargs: calls.append("finalizer"))
    monkeypatch.setattr(reconcile_pass, "record_permissions",
                        lambda api, s, condition, now: calls.append(condition))
    reconciler._apply_in_process = lambda *args, **kwargs: {"created": [], "deleted": [], "patched": []}
    reconciler.reconcile(SetKey("lab", the_set["metadata"]["name"]))
    if granted.lacking:
        (condition,) = calls
        assert (condition["type"], condition["status"], condition["reason"]) == (
            "PermissionsLimited", "True", "MissingPermission")
        # Once written, the cached set says it: nothing more.
        the_set.setdefault("status", {})["conditions"] = [condition]
        calls.clear()
        reconciler.reconcile(SetKey("lab", the_set["metadata"]["name"]))
        assert calls == []
    else:
        assert calls == ["finalizer"]


def test_a_class_and_a_policy_are_left_unwritten_without_their_grants(monkeypatch):
    vclass = target_class()
    policy = {"metadata": {"name": "p", "namespace": "lab"}, "spec": {"exporterSetName": "pool"}}
    written = []
    monkeypatch.setattr(reconcile_pass, "class_pass", lambda *args, **kwargs: written.append(("class", kwargs)))
    monkeypatch.setattr(reconcile_pass, "policy_pass", lambda *args, **kwargs: written.append("policy"))
    slot = reconciler_of(LIMITED, classes=[vclass], policies=[policy])
    assert slot.reconcile(ClassKey("lab", vclass["metadata"]["name"])).path == "skipped"
    assert slot.reconcile(PolicyKey("lab", "p")).path == "gone"
    assert written == []
    # Status granted, finalizer not: the status alone.
    status_only = permissions.Permissions({"class-finalizer": LIMITED.lacking["class-finalizer"]})
    reconciler_of(status_only, classes=[vclass]).reconcile(ClassKey("lab", vclass["metadata"]["name"]))
    assert written == [("class", {"add_finalizer": False})]
