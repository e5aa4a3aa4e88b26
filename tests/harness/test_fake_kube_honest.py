"""The in-memory API server of the writers' unit tests (tests/unit/fake_kube.py)
answers as the bed's kube-apiserver does. One sequence of the calls the
writers make (k8s/apply.py, guarded_write.py, status.py, credentials.py,
exporter_pods.py), through the same CustomObjectsApi and api/core.CoreApi,
runs on both, with the same status codes and the same resulting objects
(the fields the writers read; resourceVersions as grown or not, uids by
whose they are); then PlanApplier applies one plan on both and leaves the
same. A fake that grew kinder (a stale resourceVersion let through, a
precondition ignored, a status written by a patch of the object) fails
here before a unit test could pass on it."""

from __future__ import annotations

import base64
import json
import pprint
import time

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import core as k8s_core
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import apply as k8s_apply
from fake_kube import FakeKube
from kubernetes import client
from kubernetes.client.rest import ApiException
from pool_helpers import make_set

pytestmark = pytest.mark.testbed

EXPORTERS = ("jumpstarter.dev", "v1alpha1")
# How long the bed's garbage collector may take to orphan or collect.
GC_SECONDS = 10


class Run:
    """The outcomes of the sequence on one API server, as plain data."""

    def __init__(self, api_client, namespace, settle):
        self.custom = client.CustomObjectsApi(api_client)
        self.core = k8s_core.CoreApi(api_client)
        self.namespace = namespace
        self.settle = settle  # settle(done): until the garbage collector made done() true
        self.outcomes = []
        self.versions = {}  # object name -> its last resourceVersion seen
        self.uids = {}  # uid -> the name of the object it was first seen on

    def step(self, what, call):
        """Record what ``call`` answered: the view of the object it returned, or the refusal."""
        try:
            answer = call()
        except ApiException as exc:
            reason = json.loads(exc.body).get("reason") if exc.body else None
            self.outcomes.append((what, exc.status, reason))
            return None
        self.outcomes.append((what, "ok", self.view(answer)))
        return answer

    def view(self, obj):
        if obj.get("kind") == "Status":
            return "Status"
        if "metadata" not in obj:
            return obj
        if "items" in obj:
            return {"names": [item["metadata"]["name"] for item in obj["items"]],
                    "version not behind its items": all(
                        int(obj["metadata"]["resourceVersion"]) >= int(item["metadata"]["resourceVersion"])
                        for item in obj["items"])}
        meta = obj["metadata"]
        name = meta["name"]
        self.uids.setdefault(meta["uid"], name)
        version = int(meta["resourceVersion"])
        before = self.versions.get(name)
        self.versions[name] = version
        return {
            "resourceVersion": "new" if before is None else "grew" if version > before else
            "same" if version == before else "went back",
            "generation": meta.get("generation"),
            "labels": meta.get("labels"), "annotations": meta.get("annotations"),
            "finalizers": meta.get("finalizers"), "terminating": bool(meta.get("deletionTimestamp")),
            "grace": meta.get("deletionGracePeriodSeconds"),
            "owners": [self.uids.get(ref["uid"], "unknown") for ref in meta.get("ownerReferences") or []] or None,
            # A Pod's spec and status get the server's defaults, which the fake does not know.
            **({"phase": obj["status"]["phase"]} if obj["kind"] == "Pod" else
               {key: obj.get(key) for key in ("spec", "status", "data", "count")}),
        }

    def get(self, name):
        return self.custom.get_namespaced_custom_object(*EXPORTERS, self.namespace, "exporters", name)

    def patch(self, name, body, status=False):
        write = (self.custom.patch_namespaced_custom_object_status if status
                 else self.custom.patch_namespaced_custom_object)
        return write(*EXPORTERS, self.namespace, "exporters", name, body)

    def delete(self, name, **options):
        return self.custom.delete_namespaced_custom_object(
            *EXPORTERS, self.namespace, "exporters", name, body=k8s_core.delete_options(**options))

    def exporter(self, name, **meta):
        return self.custom.create_namespaced_custom_object(*EXPORTERS, self.namespace, "exporters", {
            "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
            "metadata": {"name": name, **meta}, "spec": {"enabled": True},
            # Dropped: the status is written through its subresource only.
            "status": {"leaseRef": {"name": "at-create"}}})

    def secret(self, name, owner, **fields):
        return self.core.create("Secret", self.namespace, {
            "apiVersion": "v1", "kind": "Secret", **fields,
            "metadata": {"name": name, "ownerReferences": [{
                "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter", "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"], "controller": True}]}})

    def pod(self, name, **spec):
        return self.core.create("Pod", self.namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}],
                     "terminationGracePeriodSeconds": 7, **spec},
            # Dropped: a new Pod is Pending.
            "status": {"phase": "Running"}})

    def exporter_gone(self, name):
        try:
            self.get(name)
        except ApiException as exc:
            return exc.status == 404
        return False

    def run(self):
        made = self.step("create", lambda: self.exporter("e1", labels={"pool": "a"}, annotations={"note": "1"}))
        first = made["metadata"]["resourceVersion"]
        self.step("create a taken name", lambda: self.exporter("e1"))
        self.step("get a missing one", lambda: self.get("missing"))
        self.step("patch the spec on its version", lambda: self.patch(
            "e1", {"spec": {"enabled": False}, "metadata": {"resourceVersion": first}}))
        self.step("patch on a stale version", lambda: self.patch(
            "e1", {"metadata": {"resourceVersion": first, "annotations": {"stale": "yes"}}}))
        self.step("merge patch: null removes", lambda: self.patch(
            "e1", {"metadata": {"annotations": {"note": None, "other": "x"}}}))
        self.step("status in a patch of the object", lambda: self.patch(
            "e1", {"status": {"leaseRef": {"name": "by-object-patch"}}}))
        self.step("patch of the status", lambda: self.patch(
            "e1", {"status": {"leaseRef": {"name": "l1"}}, "metadata": {"annotations": {"by-status": "x"}}},
            status=True))
        stale = self.versions["e1"] - 1
        self.step("status patch on a stale version", lambda: self.patch(
            "e1", {"status": {"leaseRef": None}, "metadata": {"resourceVersion": str(stale)}}, status=True))
        self.step("a patch that changes nothing", lambda: self.patch("e1", {"spec": {"enabled": False}}))
        self.step("patch a missing one", lambda: self.patch("missing", {"spec": {"enabled": True}}))

        e1 = self.get("e1")
        self.step("secret with stringData", lambda: self.secret("s1", e1, stringData={"token": "t"}))
        self.step("list by a missing label", lambda: self.custom.list_namespaced_custom_object(
            *EXPORTERS, self.namespace, "exporters", label_selector="!gone"))
        self.step("list by a label", lambda: self.custom.list_namespaced_custom_object(
            *EXPORTERS, self.namespace, "exporters", label_selector="pool=a"))

        secret = self.core.read("Secret", self.namespace, "s1")
        self.versions["s1"] = int(secret["metadata"]["resourceVersion"])
        self.step("replace on a stale version", lambda: self.core.replace("Secret", self.namespace, "s1", {
            **secret, "metadata": {**secret["metadata"], "resourceVersion": str(self.versions["e1"])},
            "data": {"token": base64.b64encode(b"u").decode()}}))
        self.step("replace on its version", lambda: self.core.replace("Secret", self.namespace, "s1", {
            **secret, "data": {"token": base64.b64encode(b"u").decode()}}))

        # Left unscheduled (no node has the label): a Pod no kubelet runs goes at once.
        pod = self.step("create a Pod", lambda: self.pod("p1", nodeSelector={"no": "such-node"}))
        self.step("delete the Pod with another uid", lambda: self.core.delete(
            "Pod", self.namespace, "p1", grace_period_seconds=0, body=k8s_core.delete_options(uid="another-uid")))
        self.step("delete an unscheduled Pod", lambda: self.core.delete(
            "Pod", self.namespace, "p1", body=k8s_core.delete_options(uid=pod["metadata"]["uid"])))
        self.step("the Pod gone", lambda: self.core.read("Pod", self.namespace, "p1"))
        # Bound to a node (none of that name: no kubelet finishes it), a Pod
        # gets its grace period: one in the query is not read beside a body,
        # so core.delete puts it in the body, and a grace of 0 ends it at once.
        self.step("create a bound Pod", lambda: self.pod("p2", nodeName="no-such-node"))
        self.step("delete it, the grace in the query", lambda: self.core._request(
            "DELETE", "Pod", self.namespace, "p2", body=k8s_core.delete_options(
                uid=self.core.read("Pod", self.namespace, "p2")["metadata"]["uid"]), query={"gracePeriodSeconds": 0}))
        self.step("still terminating", lambda: self.core.read("Pod", self.namespace, "p2"))
        self.step("delete it, grace 0", lambda: self.core.delete(
            "Pod", self.namespace, "p2", grace_period_seconds=0, body=k8s_core.delete_options()))
        self.step("then gone", lambda: self.core.read("Pod", self.namespace, "p2"))

        event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1.held"},
                 "involvedObject": {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter", "name": "e1",
                                    "namespace": self.namespace, "uid": e1["metadata"]["uid"]},
                 "reason": "ExporterHeld", "message": "held", "type": "Normal", "count": 1,
                 "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
                 "source": {"component": "fake-kube-honest"}}
        self.step("create an Event", lambda: self.core.create("Event", self.namespace, event))
        self.step("create it again", lambda: self.core.create("Event", self.namespace, event))
        self.step("bump its count on a stale version", lambda: self.core.patch("Event", self.namespace, "e1.held", {
            "count": 2, "metadata": {"resourceVersion": str(self.versions["e1.held"] - 1)}}))
        self.step("bump its count", lambda: self.core.patch("Event", self.namespace, "e1.held", {
            "count": 2, "metadata": {"resourceVersion": str(self.versions["e1.held"])}}))

        e1 = self.get("e1")
        self.step("delete with another uid", lambda: self.delete("e1", uid="another-uid"))
        self.step("delete on a stale version", lambda: self.delete(
            "e1", uid=e1["metadata"]["uid"], resource_version=first))
        self.step("orphaning delete", lambda: self.delete(
            "e1", uid=e1["metadata"]["uid"], resource_version=e1["metadata"]["resourceVersion"],
            propagation_policy="Orphan"))
        self.settle(lambda: self.exporter_gone("e1"))
        self.step("orphaned gone", lambda: self.get("e1"))
        self.step("its dependent, orphaned", lambda: self.core.read("Secret", self.namespace, "s1"))
        self.step("delete it again", lambda: self.delete("e1"))

        self.step("create another", lambda: self.exporter("e2"))
        self.secret("s2", self.get("e2"))
        self.step("background delete", lambda: self.delete("e2", propagation_policy="Background"))
        self.settle(lambda: self.core.read("Secret", self.namespace, "s2", missing_ok=True) is None)
        self.step("its dependent, collected", lambda: self.core.read("Secret", self.namespace, "s2"))

        self.step("create with a finalizer", lambda: self.exporter("e3", finalizers=["example.com/keep"]))
        self.step("delete it", lambda: self.delete("e3", uid=self.get("e3")["metadata"]["uid"]))
        self.step("terminating", lambda: self.get("e3"))
        self.step("finalizer off", lambda: self.patch("e3", {"metadata": {"finalizers": None}}))
        self.step("the Exporter then gone", lambda: self.get("e3"))
        return self.outcomes


def poll(done):
    deadline = time.monotonic() + GC_SECONDS
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)


def apply_a_plan(api_client, namespace, settle):
    """PlanApplier's writes for one plan (an orphaning delete with what goes
    with it, a disable, a disable held by a lease, a create blocked by a
    credential Secret, a create) and what they leave, as plain data."""
    custom = client.CustomObjectsApi(api_client)
    core = k8s_core.CoreApi(api_client)
    the_set = make_set(custom, namespace)
    labels = {c.LABEL_EXPORTER_SET: "pool"}

    def exporter(name, enabled, lease=None):
        made = custom.create_namespaced_custom_object(*EXPORTERS, namespace, "exporters", {
            "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
            "metadata": {"name": name, "labels": labels}, "spec": {"enabled": enabled}})
        if lease:
            custom.patch_namespaced_custom_object_status(*EXPORTERS, namespace, "exporters", name,
                                                         {"status": {"leaseRef": {"name": lease}}})
        return made

    def secret(name, owner):
        core.create("Secret", namespace, {"apiVersion": "v1", "kind": "Secret", "metadata": {
            "name": name, "ownerReferences": [{"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
                                               "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                               "controller": True}]}})

    gone = exporter("pool-0", enabled=False)
    secret("pool-0-exporter", gone)
    secret("pool-0-config", gone)
    exporter("pool-1", enabled=True)
    exporter("pool-2", enabled=True, lease="l-2")
    # The credential of another Exporter under the name pool-3 would take.
    secret("pool-3-exporter", exporter("pool-9", enabled=True))
    applier = k8s_apply.PlanApplier(api_client, the_set)
    applier.apply_plan({
        "delete": [{"name": "pool-0", "reason": "ScaleDown", "uid": gone["metadata"]["uid"]}],
        "disable": ["pool-1", "pool-2"],
        "create": [{"name": name, "labels": labels, "annotations": {}} for name in ("pool-3", "pool-4")],
        "exporter_annotations": {"pool-1": {c.ANNOTATION_RETIRING: "ScaleDown"},
                                 "pool-2": {c.ANNOTATION_RETIRING: "ScaleDown"}},
    }, c.PROVISIONER_QEMU)

    def exporters():
        return custom.list_namespaced_custom_object(*EXPORTERS, namespace, "exporters",
                                                    label_selector=f"{c.LABEL_EXPORTER_SET}=pool")["items"]

    settle(lambda: "pool-0" not in {e["metadata"]["name"] for e in exporters()})
    return {
        "result": {key: applier.result[key] for key in ("created", "deleted", "patched", "blocked", "held",
                                                        "conflicts")},
        "exporters": {e["metadata"]["name"]: {
            "enabled": e["spec"]["enabled"],
            # The Lease list's resourceVersion is the server's own.
            "annotations": {k: "set" if k == c.ANNOTATION_LEASES_CHECKED_AT else v
                            for k, v in (e["metadata"].get("annotations") or {}).items()},
            "owners": [ref["kind"] for ref in e["metadata"].get("ownerReferences") or []]} for e in exporters()},
        "secrets": sorted(s["metadata"]["name"] for s in core.list("Secret", namespace)["items"]),
        "events": sorted((e["reason"], (e.get("related") or {}).get("name", ""))
                         for e in core.list("Event", namespace)["items"]
                         # Not the scheduler's about the first run's Pods.
                         if e["involvedObject"]["kind"] != "Pod"),
    }


def test_the_fake_answers_as_the_api_server(api, namespace):
    on_the_bed = Run(api, namespace, poll).run()
    bed_plan = apply_a_plan(api, namespace, poll)
    fake = FakeKube(namespace)
    with fake.api_client() as api_client:
        in_memory = Run(api_client, namespace, lambda done: fake.collect_garbage()).run()
        fake_plan = apply_a_plan(api_client, namespace, lambda done: fake.collect_garbage())
    assert len(in_memory) == len(on_the_bed)
    differ = [(bed[0], {"bed": bed[1:], "fake": faked[1:]}) for bed, faked in zip(on_the_bed, in_memory, strict=True)
              if bed != faked]
    assert not differ, pprint.pformat(differ, width=120)
    assert fake_plan == bed_plan
