"""The writes of what pool/ computes for objects other than the set: a
VirtualTargetClass's finalizer and status (``pool/class_status.py`` decides
them) and an ExporterSetPolicy's status (``pool/policy.py``).

Every write is guarded by the object's resourceVersion
(``guarded_write.read_modify_write``).
"""

from datetime import UTC, datetime

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import guarded_write
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import class_status


def sync_class(api_client, namespace, name, exporter_sets=None, now=None, attempts=guarded_write.ATTEMPTS,
               vclass=None, add_finalizer=True, check_mode=False):
    """Bring one class's finalizer and status to what its sets ask for.

    ``exporter_sets`` are the namespace's sets (the operator passes its
    cache); without them they are listed. Every write is guarded by the
    class's resourceVersion (``guarded_write``), so several operators
    writing the same class converge: after a 409 the class is read again,
    its sets listed again and the write retried, unless the caller gave the
    class it has (``vclass``, from a cache): then the 409 is raised, for the
    caller to look again once its cache has the newer class. In
    ``check_mode`` nothing is written: the result says what would be. Returns
    {"exists", "changed", "sets", "events", "finalizers", "status"}
    (``exists`` False once a deleted, unused class is let go).
    """
    from kubernetes import client

    api = client.CustomObjectsApi(api_client)
    planned = {}

    def plan(current):
        sets = exporter_sets
        if sets is None or planned:
            sets = api.list_namespaced_custom_object(*c.EXPORTER_SET.at(namespace))["items"]
        planned["names"] = names = class_status.sets_using(current, sets)
        planned["wanted"] = wanted = class_status.desired(current, names, now or datetime.now(UTC), add_finalizer)
        planned["class"] = current
        # The finalizer first: a status that counts no set finds the class
        # already released (and a deleted one gone).
        finalizers = None
        if wanted["finalizers"] != (current["metadata"].get("finalizers") or []):
            finalizers = guarded_write.Patch({"metadata": {"finalizers": wanted["finalizers"]}}, status=False)
        return [finalizers, guarded_write.status_patch(current, wanted["status"])]

    written = guarded_write.read_modify_write(
        api_client, c.VIRTUAL_TARGET_CLASS, namespace, name, plan, given=vclass,
        attempts=1 if vclass is not None else attempts, check_mode=check_mode)
    if not planned:
        return {"exists": False, "changed": False, "sets": [], "events": []}
    names, wanted = planned["names"], planned["wanted"]
    if not written.exists:
        return {"exists": False, "changed": written.changed, "sets": names, "events": []}
    if not check_mode and any(p.status for p in written.patches) and wanted["events"]:
        k8s_status.emit_events(api_client, {**planned["class"], "kind": c.VIRTUAL_TARGET_CLASS.kind,
                                            "apiVersion": c.VIRTUAL_TARGET_CLASS.api_version},
                               wanted["events"])
    return {"exists": wanted["status"] is not None or bool(wanted["finalizers"]),
            "changed": written.changed, "sets": names, "events": wanted["events"],
            "finalizers": wanted["finalizers"], "status": wanted["status"]}


def write_policy_status(api_client, esp, status, check_mode=False):
    """Write the policy's status when it changes (``wanted_keys_only``: the
    fields it names), guarded by the resourceVersion of ``esp`` (the
    caller's copy, from its cache): a 409 is raised, for the caller to look
    again once its cache has the newer object. In ``check_mode`` nothing is
    written. Returns ``Written``."""
    meta = esp["metadata"]
    return guarded_write.read_modify_write(
        api_client, c.EXPORTER_SET_POLICY, meta["namespace"], meta["name"],
        lambda current: guarded_write.status_patch(current, status, wanted_keys_only=True),
        given=esp, attempts=1, check_mode=check_mode)
