"""The VirtualTargetClass reconciler: the class's finalizer (kept while a
set names it) and its status (its sets, whether its parameters are valid);
the rules are pool/class_status.py's."""

from __future__ import annotations

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pool_writes
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import class_status
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
    informer caches, the API client, the provisioners served, the clock."""

    def __init__(self, caches, api_client, provisioners: set[str], clock):
        self.caches = caches
        self.api_client = api_client
        self.provisioners = provisioners
        self.clock = clock


class ClassReconciler(CachedKindReconciler):

    def reconcile(self, key: ClassKey) -> Result:
        namespace, name = key.namespace, key.name
        vclass = self.caches["VirtualTargetClass"].get(namespace, name)
        if vclass is None:
            return Result(path="gone")
        if not serves_class(vclass, self.provisioners):
            return Result(path="skipped")
        names = class_status.sets_using(vclass, self.caches["ExporterSet"].list(namespace))
        wanted = class_status.desired(vclass, names, self.clock())
        finalizers = vclass["metadata"].get("finalizers") or []
        status_stale = wanted["status"] is not None and class_status.status_differs(
            vclass.get("status"), wanted["status"])
        if not status_stale and wanted["finalizers"] == finalizers:
            return Result(path="fastpath")
        # Releasing the class is decided on a fresh list of its sets, not the
        # cache: a set created a moment ago still holds it.
        releasing = class_status.FINALIZER in finalizers and class_status.FINALIZER not in wanted["finalizers"]
        try:
            pool_writes.sync_class(self.api_client, namespace, name,
                                   None if releasing else self.caches["ExporterSet"].list(namespace),
                                   now=self.clock(), vclass=vclass)
        except ApiException as exc:
            raise ReconcileError(str(exc), path="class") from exc
        return Result(path="class")
