#!/usr/bin/python
# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

DOCUMENTATION = r"""
---
module: exporterset_apply
short_description: Apply the Kubernetes side of an ExporterSet scale plan in one call
version_added: 0.1.0
description:
  - Applies what every provisioner shares in a scale plan (see the
    C(jumpstarter.virtual_exporters.scale_plan) filter), that is, it deletes the Exporters the plan removes, disables and re-enables Exporters,
    creates the new Exporters (owned by the set, labelled and annotated),
    patches bookkeeping annotations on Exporters and on the set, writes the
    set's status through the status subresource and records Kubernetes Events.
  - Backends (Pods, lab host processes, cloud instances) are left to the
    provisioner role; run its teardown before this module and its provisioning after.
  - Writes are batched into one module run, which matters because every module
    run costs a Python start.
  - The status write is guarded by the object's resourceVersion and retried
    on a 409 Conflict with a fresh read.
author:
  - Jumpstarter virtual exporters maintainers
attributes:
  check_mode:
    support: full
    description: Reports what would change and writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    description: Applying the same plan to the state it produced reports no change.
options:
  exporterset:
    description: The ExporterSet object as read from the API (metadata with uid is required).
    type: dict
    required: true
  plan:
    description: The scale plan for this set.
    type: dict
    required: true
  provisioner:
    description: Provisioner string of the set's class, recorded on new Exporters.
    type: str
    required: true
  teardown:
    description:
      - C(none) applies the plan.
      - C(delete) deletes every Exporter the set owns (the set is being deleted, reclaimPolicy Delete).
      - C(detach) removes the set's owner reference from every Exporter it owns, so they
        outlive the set (reclaimPolicy Retain).
    type: str
    choices: [none, delete, detach]
    default: none
  owned_exporters:
    description: The Exporters the set owns; needed for I(teardown).
    type: list
    elements: dict
    default: []
  write_outcome:
    description: Add the Ansible Operator SDK C(Successful) outcome condition to the status.
    type: bool
    default: true
  kubeconfig:
    description: Path to a kubeconfig. Default is C(K8S_AUTH_KUBECONFIG), C(KUBECONFIG), then in-cluster.
    type: path
requirements:
  - kubernetes >= 30
"""

EXAMPLES = r"""
- name: Apply the Exporter side of the plan and write the status
  jumpstarter.virtual_exporters.exporterset_apply:
    exporterset: "{{ _virtualtarget_jumpstarter_dev_exporterset }}"
    plan: "{{ exporterset_plan }}"
    provisioner: "{{ virtual_target_class.spec.provisioner }}"

- name: Detach every Exporter of a set that is deleted with reclaimPolicy Retain
  jumpstarter.virtual_exporters.exporterset_apply:
    exporterset: "{{ _virtualtarget_jumpstarter_dev_exporterset }}"
    plan: {}
    provisioner: qemu.jumpstarter.dev
    teardown: detach
    owned_exporters: "{{ owned_exporters }}"
"""

RETURN = r"""
created:
  description: Names of the Exporters created.
  returned: always
  type: list
  elements: str
deleted:
  description: Names of the Exporters deleted (or already gone).
  returned: always
  type: list
  elements: str
patched:
  description: Names of the Exporters whose spec or annotations changed.
  returned: always
  type: list
  elements: str
status_changed:
  description: Whether the set's status was written.
  returned: always
  type: bool
events:
  description: Number of Events recorded.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import (
    k8s_objects,
    k8s_status,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s_client import (
    api_client,
)

EXPORTER = ("jumpstarter.dev", "v1alpha1", "exporters")



class PlanApplier:
    def __init__(self, module, api_client):
        from kubernetes import client

        self.module = module
        self.check = module.check_mode
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.set = module.params["exporterset"]
        self.namespace = self.set["metadata"]["namespace"]
        self.result = {"created": [], "deleted": [], "patched": [], "status_changed": False, "events": 0}

    def _fail(self, what, exc):
        self.module.fail_json(msg=f"{what}: {getattr(exc, 'reason', exc)} {getattr(exc, 'body', '')}".strip(),
                              **self.result)

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
            if self.module.params["write_outcome"]:
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


def main():
    module = AnsibleModule(
        argument_spec=dict(
            exporterset=dict(type="dict", required=True),
            plan=dict(type="dict", required=True),
            provisioner=dict(type="str", required=True),
            teardown=dict(type="str", choices=["none", "delete", "detach"], default="none"),
            owned_exporters=dict(type="list", elements="dict", default=[]),
            write_outcome=dict(type="bool", default=True),
            kubeconfig=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        module.fail_json(msg="the kubernetes Python client is required (pip install kubernetes)")
    applier = PlanApplier(module, api_client(module.params["kubeconfig"]))
    if module.params["teardown"] != "none":
        applier.teardown(module.params["teardown"], module.params["owned_exporters"])
    else:
        applier.apply_plan(module.params["plan"], module.params["provisioner"])
    module.exit_json(changed=applier.changed(), **applier.result)


if __name__ == "__main__":
    main()
