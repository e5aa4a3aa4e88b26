"""Applies the Kubernetes side of a scale plan: Exporter CRs, annotations,
the set's status and Events.

Shared by the ``exporterset_apply`` module (from a playbook) and the operator
(in process), so both make the same writes in the same order: deletes, then
disables and enables, then creates, then annotation patches, then the status.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import (
    k8s_objects,
    k8s_status,
)

EXPORTER = ("jumpstarter.dev", "v1alpha1", "exporters")


class ApplyError(Exception):
    """A write the API server refused; the message names the object."""


class PlanApplier:
    def __init__(self, api_client, exporterset, check_mode=False, write_outcome=True):
        from kubernetes import client

        self.check = check_mode
        self.write_outcome = write_outcome
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.set = exporterset
        self.namespace = self.set["metadata"]["namespace"]
        self.result = {"created": [], "deleted": [], "patched": [], "status_changed": False, "events": 0}

    def _fail(self, what, exc):
        raise ApplyError(f"{what}: {getattr(exc, 'status', '')} {getattr(exc, 'reason', exc)}".strip()) from exc

    def delete(self, name):
        from kubernetes.client.rest import ApiException

        if not self.check:
            try:
                self.custom.delete_namespaced_custom_object(*EXPORTER[:2], self.namespace, EXPORTER[2], name)
            except ApiException as exc:
                if exc.status != 404:
                    self._fail(f"deleting Exporter {self.namespace}/{name}", exc)
                return
        self.result["deleted"].append(name)

    def patch(self, name, body):
        from kubernetes.client.rest import ApiException

        if not self.check:
            try:
                self.custom.patch_namespaced_custom_object(*EXPORTER[:2], self.namespace, EXPORTER[2], name, body)
            except ApiException as exc:
                if exc.status == 404:
                    return
                self._fail(f"patching Exporter {self.namespace}/{name}", exc)
        if name not in self.result["patched"]:
            self.result["patched"].append(name)

    def create(self, manifest):
        from kubernetes.client.rest import ApiException

        name = manifest["metadata"]["name"]
        if not self.check:
            try:
                self.custom.create_namespaced_custom_object(*EXPORTER[:2], self.namespace, EXPORTER[2], manifest)
            except ApiException as exc:
                if exc.status != 409:
                    self._fail(f"creating Exporter {self.namespace}/{name}", exc)
                # AlreadyExists: the name was taken since the plan was made (a
                # stale read); the next plan sees it and picks another name.
                return
        self.result["created"].append(name)

    def apply_plan(self, plan, provisioner):
        for entry in plan.get("delete") or []:
            self.delete(entry["name"])
        for name in plan.get("disable") or []:
            self.patch(name, {"spec": {"enabled": False}})
        for name in plan.get("enable") or []:
            self.patch(name, {"spec": {"enabled": True}})
        for entry in plan.get("create") or []:
            self.create(k8s_objects.exporter_manifest(self.set, entry, provisioner))
        deleted = {entry["name"] for entry in plan.get("delete") or []}
        for name, annotations in sorted((plan.get("exporter_annotations") or {}).items()):
            if name not in deleted and annotations:
                self.patch(name, {"metadata": {"annotations": annotations}})
        self.write_set(plan)

    def write_set(self, plan):
        meta = self.set["metadata"]
        set_annotations = plan.get("set_annotations") or {}
        if k8s_status.annotations_differ(meta.get("annotations"), set_annotations):
            if not self.check:
                k8s_status.patch_annotations(
                    self.api_client, k8s_status.GROUP, k8s_status.VERSION, k8s_status.PLURAL,
                    self.namespace, meta["name"], set_annotations,
                )
            self.result["set_annotations_changed"] = True
        status = plan.get("status")
        if status:
            outcome = None
            if self.write_outcome:
                outcome = k8s_status.outcome_condition(
                    "Successful", "LastReconcileSucceeded", "", meta.get("generation", 0)
                )
            if self.check:
                desired = k8s_status.status_with_outcome(status, self.set.get("status"), outcome)
                self.result["status_changed"] = k8s_status.status_differs(self.set.get("status"), desired)
            else:
                self.result["status_changed"], _ = k8s_status.write_status(
                    self.api_client, self.namespace, meta["name"], status, outcome=outcome
                )
        events = plan.get("events") or []
        if events and not self.check:
            self.result["events"] = k8s_status.emit_events(self.api_client, self.set, events)

    def teardown(self, mode, owned):
        uid = self.set["metadata"]["uid"]
        for exporter in owned:
            name = exporter["metadata"]["name"]
            if mode == "delete":
                self.delete(name)
            else:
                remaining = [
                    ref for ref in exporter["metadata"].get("ownerReferences") or [] if ref.get("uid") != uid
                ]
                self.patch(name, {"metadata": {"ownerReferences": remaining or None}})

    def changed(self):
        r = self.result
        return bool(
            r["created"] or r["deleted"] or r["patched"] or r["status_changed"] or r["events"]
            or r.get("set_annotations_changed")
        )
