"""The one read-modify-write of a pool object's status (and finalizers):
an ExporterSet's, a VirtualTargetClass's, an ExporterSetPolicy's.

Every writer of those goes through ``read_modify_write``, from the modules
and the operator alike:

- the object is read fresh (or the caller's copy is used for the first
  attempt, ``given``: an informer's cache);
- ``plan(current)`` says what to write: a list of ``Patch``es applied in
  order (the finalizers first, then the status, say), or nothing, and then
  nothing is written: a status that would not change (``status_patch``,
  through ``pool/status_compare.py``) makes no write;
- each patch carries the resourceVersion it was planned on (the one the
  previous patch returned), so a concurrent writer is never overwritten
  blindly;
- a 409 Conflict reads the object again and plans again, up to
  ``attempts`` times (then it is raised); ``attempts=1`` raises it at once,
  for a caller that looks again once its cache has the newer object;
- a 404 (on the read or a write), or an object whose uid is not the one
  asked for, is gone: nothing more is written;
- in check mode nothing is written and a planned patch counts as a change.

Needs the ``kubernetes`` client; takes an ``ApiClient``.
"""

import time
from typing import NamedTuple

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import writer
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import status_compare
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import backoff_delay

ATTEMPTS = 5


class Patch(NamedTuple):
    """One merge patch of the object: of its status subresource when
    ``status``, else of the object itself (its metadata)."""
    body: dict
    status: bool = True


class Written(NamedTuple):
    exists: bool  # False once the object is gone (404, or another uid)
    changed: bool  # something was written (in check mode: would be)
    current: dict | None  # the object as last read or returned by a write
    patches: tuple = ()  # the patches written (in check mode: planned)


def status_patch(current, wanted, wanted_keys_only=False):
    """The patch writing ``wanted`` as the status of ``current``, or None
    when that changes nothing."""
    if wanted is None or not status_compare.status_differs(
            (current or {}).get("status"), wanted, wanted_keys_only):
        return None
    return Patch({"status": wanted})


def _read(api, gvr, namespace, name):
    from kubernetes.client.rest import ApiException

    try:
        return api.get_namespaced_custom_object(*gvr.at(namespace), name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def read_modify_write(api_client, gvr, namespace, name, plan, given=None, uid=None,
                      attempts=ATTEMPTS, check_mode=False):
    """Write what ``plan(current)`` returns (a list of ``Patch``, or a
    single one, or None) on ``gvr``'s object ``namespace/name``, guarded by
    its resourceVersion, retrying a 409 on a fresh read. Returns
    ``Written``."""
    from kubernetes import client

    api = client.CustomObjectsApi(api_client)
    # The diff is the callers' to record: they know what a patch means.
    write = writer.Writer(api_client)
    # What was written, over every attempt: a finalizer written before a
    # status patch met a 409 is still a change.
    written = []
    for attempt in range(attempts):
        current = given if attempt == 0 and given is not None else _read(api, gvr, namespace, name)
        if current is None or (uid and current["metadata"].get("uid") != uid):
            return Written(False, bool(written), None, tuple(written))
        patches = plan(current)
        if isinstance(patches, Patch):
            patches = [patches]
        patches = tuple(p for p in patches or () if p is not None)
        if not patches:
            return Written(True, bool(written), current, tuple(written))
        if check_mode:
            return Written(True, True, current, patches)
        for patch in patches:
            outcome = write.patch(gvr, namespace, name, patch.body, status=patch.status,
                                  resource_version=current["metadata"]["resourceVersion"])
            if not outcome.written:
                break
            current = outcome.obj
            written.append(patch)
        else:
            return Written(True, True, current, tuple(written))
        if outcome.status == writer.GONE:
            return Written(False, bool(written), None, tuple(written))
        if attempt == attempts - 1:
            raise outcome.error
        time.sleep(backoff_delay(attempt + 1, 0.05))
    raise AssertionError("unreachable")  # pragma: no cover
