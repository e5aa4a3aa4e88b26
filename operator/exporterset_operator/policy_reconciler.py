"""The ExporterSetPolicy reconciler: a policy's status, the set it is in
force for and its ``Valid`` condition (pool/policy.py), as the core's
``policy_pass`` (k8s/reconcile_pass.py) writes it on the informer caches
(a run of the reconcile role by hand writes it too). Written by the
operator that serves the set's class (by every one while there is no such
set or class: the same status, guarded by resourceVersion)."""

from __future__ import annotations

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import reconcile_pass
from kubernetes.client.rest import ApiException

from .class_reconciler import CachedKindReconciler, serves_class
from .keys import PolicyKey
from .results import ReconcileError, Result


class PolicyReconciler(CachedKindReconciler):

    def reconcile(self, key: PolicyKey) -> Result:
        namespace, name = key.namespace, key.name
        esp = self.caches["ExporterSetPolicy"].get(namespace, name)
        if esp is None or not self.granted.on("policy-status"):
            return Result(path="gone")
        the_set = self.caches["ExporterSet"].get(namespace, (esp.get("spec") or {}).get("exporterSetName") or "")
        vclass = the_set and self.caches["VirtualTargetClass"].get(
            namespace, (the_set.get("spec") or {}).get("virtualTargetClassName") or "")
        if vclass and not serves_class(vclass, self.provisioners):
            return Result(path="skipped")
        try:
            written = reconcile_pass.policy_pass(
                self.api_client, esp, self.caches["ExporterSetPolicy"].list(namespace),
                self.caches["ExporterSet"].list(namespace), self.clock())
        except ApiException as exc:
            raise ReconcileError(str(exc), path="policy") from exc
        if written.exists and not written.changed:
            return Result(path="fastpath")
        return Result(path="policy" if written.exists else "gone")
