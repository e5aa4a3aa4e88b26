"""A VirtualTargetClass's finalizer and status, and what its sets say about it.

A class in use cannot vanish under its sets: while any ExporterSet of its
namespace names it (a terminating set included, as its teardown still reads
the class), the class carries ``FINALIZER``; once none does, the finalizer
goes, so deleting an unused class is immediate and a deleted class that is
still in use stays (Terminating) until its last set is gone. Its sets keep
working meanwhile and show ``ClassTerminating``.

The class's status says which sets use it (``sets``, ``setCount``) and
whether its own parameters are valid (condition ``Valid``: ``Valid``,
``InvalidParameters`` or ``UnknownProvisioner``, the message naming each
field), with ``observedGeneration``.

Who writes it: the operator serving the class's provisioner; a class whose
provisioner the collection does not know (a typo such as
``qemu.jumpstater.dev``) is written by every operator, idempotently (the
same status and finalizers, guarded by resourceVersion). The reconcile
playbook run by hand writes the status of the class of the set it
reconciles and releases the class once unused (module
``virtualtargetclass_sync``); it adds the finalizer only when asked
(``reconcile_class_finalizer``), as nothing would remove it after the last
set is deleted when no operator runs.

``desired`` and the condition helpers are pure; ``k8s/pool_writes.py``
(``sync_class``) reads and writes the class through the ``kubernetes``
client.
"""


from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import status_compare
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
    unknown_provisioner_message,
    validate_parameters,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import (
    make_condition,
    merge_condition,
)

FINALIZER = c.GROUP + "/in-use"
CONDITION_VALID = "Valid"
# The class's own spec is fine.
REASON_VALID = "Valid"


def known_provisioner(provisioner):
    return provisioners.known(provisioner)


def sets_using(vclass, exporter_sets):
    """Names of the sets of the class's namespace that name it, sorted."""
    meta = vclass["metadata"]
    return sorted(
        s["metadata"]["name"] for s in exporter_sets
        if s["metadata"].get("namespace") == meta.get("namespace")
        and (s.get("spec") or {}).get("virtualTargetClassName") == meta["name"]
    )


def validity(vclass):
    """The class's ``Valid`` condition (type, status, reason, message)."""
    spec = vclass.get("spec") or {}
    provisioner = spec.get("provisioner")
    if not known_provisioner(provisioner):
        return make_condition(CONDITION_VALID, False, c.REASON_UNKNOWN_PROVISIONER,
                              unknown_provisioner_message(provisioner))
    errors = validate_parameters(provisioner, spec.get("parameters"))["errors"]
    if errors:
        return make_condition(CONDITION_VALID, False, c.REASON_INVALID_PARAMETERS,
                              "; ".join(f"spec.{e}" for e in errors))
    return make_condition(CONDITION_VALID, True, REASON_VALID, f"parameters are valid for {provisioner}")


def unusable(vclass, exporter_set):
    """(reason, message) when the set cannot use ``vclass`` at all, else None.

    A missing class and one whose provisioner is unknown; the message names
    the field at fault (the set's or the class's).
    """
    spec = exporter_set.get("spec") or {}
    namespace = exporter_set["metadata"].get("namespace")
    if vclass is None:
        name = spec.get("virtualTargetClassName")
        return c.REASON_CLASS_NOT_FOUND, (
            f"spec.virtualTargetClassName: VirtualTargetClass {name!r} not found in namespace "
            f"{namespace!r}")
    provisioner = (vclass.get("spec") or {}).get("provisioner")
    if not known_provisioner(provisioner):
        return c.REASON_UNKNOWN_PROVISIONER, (
            f"VirtualTargetClass {vclass['metadata']['name']!r} "
            f"{unknown_provisioner_message(provisioner)}")
    return None


def terminating_condition(vclass):
    """The set's ``ClassTerminating`` condition: True while its class is being deleted."""
    deleted = ((vclass or {}).get("metadata") or {}).get("deletionTimestamp")
    if not deleted:
        return make_condition(c.CONDITION_CLASS_TERMINATING, False, "ClassActive", "")
    return make_condition(
        c.CONDITION_CLASS_TERMINATING, True, c.REASON_CLASS_TERMINATING,
        f"VirtualTargetClass {vclass['metadata']['name']!r} is being deleted (since {deleted}); "
        "it stays until the last set using it is gone, and this set keeps working meanwhile")


def desired(vclass, set_names, now, add_finalizer=True):
    """What the class should carry: {"finalizers", "status", "events"}.

    ``status`` is None when the class is going (deleted and unused: only its
    finalizer is to be dropped). ``events`` are the Warning Events of a
    ``Valid`` condition that has just turned False. Without
    ``add_finalizer`` the finalizer is kept while in use and removed once
    unused, but never added (a writer that cannot be there to remove it).
    """
    meta = vclass["metadata"]
    had = meta.get("finalizers") or []
    finalizers = [f for f in had if f != FINALIZER]
    # The API server refuses a new finalizer on an object being deleted.
    if set_names and (FINALIZER in had or (add_finalizer and not meta.get("deletionTimestamp"))):
        finalizers.append(FINALIZER)
    if meta.get("deletionTimestamp") and not set_names:
        return {"finalizers": finalizers, "status": None, "events": []}
    generation = meta.get("generation")
    previous = (vclass.get("status") or {}).get("conditions") or []
    valid = validity(vclass)
    status = {
        "observedGeneration": generation,
        "sets": list(set_names),
        "setCount": len(set_names),
        "conditions": [merge_condition(previous, valid, generation, now)]
        + [dict(x) for x in previous if x.get("type") != CONDITION_VALID],
    }
    was = next((x for x in previous if x.get("type") == CONDITION_VALID), {})
    events = []
    if valid["status"] == "False" and (was.get("status"), was.get("reason")) != (
            "False", valid["reason"]):
        events.append({"type": "Warning", "reason": valid["reason"], "message": valid["message"]})
    return {"finalizers": finalizers, "status": status, "events": events}


def status_differs(current, wanted):
    """Whether writing ``wanted`` changes ``current`` (the one comparison,
    ``pool/status_compare.py``: every field, transition times aside)."""
    return status_compare.status_differs(current, wanted)
