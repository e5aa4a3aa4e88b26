"""The ownership rule, on plain dicts (no I/O).

An object belongs to the owner its controller reference names: an Exporter
to its ExporterSet, a Pod, config Secret or credential Secret to its
Exporter, a Lease to the Exporter it was given. The UID decides, not the
name: an object left by an earlier owner of the same name belongs to nobody
alive. Labels (the set label, the Exporter label) only index objects for
selectors and never decide ownership. ``api/objects.py`` gives the same
functions to the code that builds objects.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants


def controller_reference(owner):
    """The controller owner reference to ``owner`` (an ExporterSet unless it says its kind)."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion", constants.EXPORTER_SET.api_version),
        "kind": owner.get("kind", constants.EXPORTER_SET.kind),
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_ref(obj, kind=None):
    """The object's controller owner reference (of ``kind`` when given), or None."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref if kind is None or ref.get("kind") == kind else None
    return None


def controlled_by(obj, owner_uid):
    """Whether ``obj`` belongs to the owner whose UID is ``owner_uid``."""
    ref = controller_ref(obj)
    return bool(owner_uid) and ref is not None and ref.get("uid") == owner_uid


def controller_of(obj, kind):
    """Name of the owner of ``kind`` that ``obj`` belongs to, or None."""
    return (controller_ref(obj, kind) or {}).get("name")
