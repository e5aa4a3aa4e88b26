"""The writes of what pool/ computes for objects other than the set: a
VirtualTargetClass's finalizer and status (``pool/class_status.py`` decides
them) and an ExporterSetPolicy's status (``pool/policy.py``).

Every write is guarded by the object's resourceVersion.
"""

import time
from datetime import UTC, datetime

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import class_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import backoff_delay


def sync_class(api_client, namespace, name, exporter_sets=None, now=None, attempts=5, vclass=None,
               add_finalizer=True):
    """Bring one class's finalizer and status to what its sets ask for.

    ``exporter_sets`` are the namespace's sets (the operator passes its
    cache); without them they are listed. Every write is guarded by the
    class's resourceVersion, so several operators writing the same class
    converge: after a 409 the class is read again and the write retried,
    unless the caller gave the class it has (``vclass``, from a cache): then
    the 409 is raised, for the caller to look again once its cache has the
    newer class. Returns {"exists", "changed", "sets", "events", "finalizers",
    "status"} (``exists`` False once a deleted, unused class is let go).
    """
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    api = client.CustomObjectsApi(api_client)
    given = vclass
    for attempt in range(1 if given is not None else attempts):
        if given is None:
            try:
                vclass = api.get_namespaced_custom_object(*c.VIRTUAL_TARGET_CLASS.at(namespace), name)
            except ApiException as exc:
                if exc.status == 404:
                    return {"exists": False, "changed": False, "sets": [], "events": []}
                raise
        if exporter_sets is None or attempt:
            exporter_sets = api.list_namespaced_custom_object(
                *c.EXPORTER_SET.at(namespace))["items"]
        names = class_status.sets_using(vclass, exporter_sets)
        wanted = class_status.desired(vclass, names, now or datetime.now(UTC), add_finalizer)
        meta = vclass["metadata"]
        changed = False
        try:
            # The finalizer first: a status that counts no set finds the
            # class already released (and a deleted one gone).
            if wanted["finalizers"] != (meta.get("finalizers") or []):
                written = api.patch_namespaced_custom_object(
                    *c.VIRTUAL_TARGET_CLASS.at(namespace), name,
                    {"metadata": {"finalizers": wanted["finalizers"],
                                  "resourceVersion": meta["resourceVersion"]}})
                meta = written["metadata"]
                changed = True
            if wanted["status"] is not None and class_status.status_differs(vclass.get("status"), wanted["status"]):
                api.patch_namespaced_custom_object_status(
                    *c.VIRTUAL_TARGET_CLASS.at(namespace), name,
                    {"metadata": {"resourceVersion": meta["resourceVersion"]},
                     "status": wanted["status"]})
                changed = True
                if wanted["events"]:
                    k8s_status.emit_events(api_client, {**vclass, "kind": c.VIRTUAL_TARGET_CLASS.kind,
                                                        "apiVersion": c.VIRTUAL_TARGET_CLASS.api_version},
                                           wanted["events"])
        except ApiException as exc:
            if exc.status == 404:
                return {"exists": False, "changed": changed, "sets": names, "events": []}
            if exc.status != 409 or given is not None or attempt == attempts - 1:
                raise
            time.sleep(backoff_delay(attempt + 1, 0.05))
            continue
        return {"exists": wanted["status"] is not None or bool(wanted["finalizers"]),
                "changed": changed, "sets": names, "events": wanted["events"],
                "finalizers": wanted["finalizers"], "status": wanted["status"]}
    raise AssertionError("unreachable")  # pragma: no cover


def write_policy_status(api_client, esp, status):
    """Patch the policy's status, guarded by its resourceVersion (a 409 is
    raised: the caller looks again once its cache has the newer object)."""
    from kubernetes import client

    meta = esp["metadata"]
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        *c.EXPORTER_SET_POLICY.at(meta["namespace"]), meta["name"],
        {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status})
