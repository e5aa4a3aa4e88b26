"""The ExporterSetPolicy reconciler: a policy's status, the set it is in
force for and its ``Valid`` condition (pool/policy.py). Written by the
operator that serves the set's class (by every one while there is no such
set or class: the same status, guarded by resourceVersion)."""

from __future__ import annotations

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pool_writes
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy
from kubernetes.client.rest import ApiException

from .class_reconciler import CachedKindReconciler, serves_class
from .keys import PolicyKey
from .results import ReconcileError, Result


class PolicyReconciler(CachedKindReconciler):

    def reconcile(self, key: PolicyKey) -> Result:
        namespace, name = key.namespace, key.name
        esp = self.caches["ExporterSetPolicy"].get(namespace, name)
        if esp is None:
            return Result(path="gone")
        the_set = self.caches["ExporterSet"].get(namespace, (esp.get("spec") or {}).get("exporterSetName") or "")
        vclass = the_set and self.caches["VirtualTargetClass"].get(
            namespace, (the_set.get("spec") or {}).get("virtualTargetClassName") or "")
        if vclass and not serves_class(vclass, self.provisioners):
            return Result(path="skipped")
        wanted = policy.desired_status(esp, self.caches["ExporterSetPolicy"].list(namespace),
                                       self.caches["ExporterSet"].list(namespace), self.clock())
        if not policy.status_differs(esp.get("status"), wanted):
            return Result(path="fastpath")
        try:
            written = pool_writes.write_policy_status(self.api_client, esp, wanted)
        except ApiException as exc:
            raise ReconcileError(str(exc), path="policy") from exc
        return Result(path="policy" if written.exists else "gone")
