"""The VirtualTargetClass reconciler: the class's finalizer (kept while a
set names it) and its status (its sets, whether its parameters are valid);
the rules are pool/class_status.py's, the pass the core's
(k8s/reconcile_pass.py ``class_pass``, which the reconcile role's run by
hand makes too), here on the informer caches."""

from __future__ import annotations

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import reconcile_pass
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import class_status, permissions
from kubernetes.client.rest import ApiException

from .keys import ClassKey
from .results import ReconcileError, Result


def serves_class(vclass: dict, provisioners: set[str]) -> bool:
    """A class of one of ``provisioners``, or of one the collection does not
    know (every operator reports those, idempotently)."""
    provisioner = (vclass.get("spec") or {}).get("provisioner")
    return provisioner in provisioners or not class_status.known_provisioner(provisioner)


class CachedKindReconciler:
    """What the class and policy reconcilers read and write with: the
    informer caches, the API client, the provisioners served, the clock and
    what the account may not do (pool/permissions.py)."""

    def __init__(self, caches, api_client, provisioners: set[str], clock,
                 granted: permissions.Permissions = permissions.ALL_GRANTED):
        self.caches = caches
        self.api_client = api_client
        self.provisioners = provisioners
        self.clock = clock
        self.granted = granted


class ClassReconciler(CachedKindReconciler):

    def reconcile(self, key: ClassKey) -> Result:
        namespace, name = key.namespace, key.name
        vclass = self.caches["VirtualTargetClass"].get(namespace, name)
        if vclass is None:
            return Result(path="gone")
        if not serves_class(vclass, self.provisioners) or not self.granted.on("class-status"):
            return Result(path="skipped")
        try:
            written = reconcile_pass.class_pass(self.api_client, vclass,
                                                self.caches["ExporterSet"].list(namespace), self.clock(),
                                                add_finalizer=self.granted.on("class-finalizer"))
        except ApiException as exc:
            raise ReconcileError(str(exc), path="class") from exc
        if written is None:
            return Result(path="fastpath")
        return Result(path="class")
