"""The lifecycle of an ExporterSet, decided once for whoever reconciles it.

The operator, ``ansible-playbook playbooks/reconcile.yml`` and an AWX job
running that playbook on a schedule all decide these things here, so a set
ends the same way whichever of them runs it:

- the finalizer (``FINALIZER``): a set whose class exists carries it
  (``needs_finalizer``); a deleted set that carries it is torn down
  (``tears_down``) and loses it once nothing of it is left
  (``teardown_remaining``), so either runner can finish what the other
  started;
- how a deleted set is torn down (``reclaim``): backends removed and
  Exporters deleted, or both kept and the Exporters detached, by the class's
  ``reclaimPolicy``;
- the options of the scale plan (``plan_options``): the pool logic's
  defaults, overridden only by the options a caller names;
- the outcome of a reconcile (``outcome``, ``failure_event``):
  ``Successful`` only once the whole reconcile, backends included, is done;
  ``Failure`` with the failing step's message otherwise;
- and the writes of these (``add_finalizer``, ``remove_finalizer``,
  ``write_outcome``), each on a fresh read with its resourceVersion as
  precondition, retried on a 409 Conflict, and nothing written in check mode.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import guarded_write
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import lease_safety
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import plan as pool_plan
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.decision import (  # noqa: F401
    FINALIZER,
    deleting,
    has_finalizer,
    needs_finalizer,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import merge_conditions

RECLAIM_DELETE = "Delete"
RECLAIM_RETAIN = "Retain"
# The outcome conditions' reasons (the Ansible Operator SDK's).
REASON_SUCCEEDED = "LastReconcileSucceeded"
REASON_FAILED = "ReconcileFailed"
REASON_TEARDOWN_FAILED = "TeardownFailed"
# A deleted set whose class reclaims with Delete keeps its finalizer, and its
# leased Exporters, until their leases end: this condition (and a Normal
# Event of the same reason) says so while it waits.
CONDITION_WAITING_FOR_LEASES = "WaitingForLeases"
REASON_EXPORTERS_LEASED = "ExportersLeased"
REASON_NO_LEASES = "NoLeases"
# Scale plan options a caller may set (reconcile_plan_options, watches.yaml
# vars); the others are what the reconcile observed.
PLAN_OPTION_NAMES = ("burst", "startup_timeout", "offline_timeout", "failure_threshold",
                     "failure_backoff_base", "failure_backoff_max", "min_failing_duration",
                     "unschedulable_backoff_base", "unschedulable_backoff_max", "max_replicas_per_set")


class LifecycleError(ValueError):
    """A lifecycle input that cannot be used; the message names it."""


def _meta(exporter_set):
    return exporter_set.get("metadata") or {}


def tears_down(exporter_set, finalizer=FINALIZER):
    """Whether this reconcile is a teardown: the set is being deleted and
    still carries ``finalizer``. A deleted set without it is left alone (it
    goes with the garbage collector, or another finalizer's owner holds it)."""
    return deleting(exporter_set) and has_finalizer(exporter_set, finalizer)


def reclaim(vclass):
    """How a deleted set's instances go, by the class's ``reclaimPolicy``:
    ``backends`` is the provisioner role's tasks file (``remove`` or
    ``retain``) and ``exporters`` the teardown of the ``exporterset_apply``
    module (``delete`` or ``detach``)."""
    policy = ((vclass or {}).get("spec") or {}).get("reclaimPolicy") or RECLAIM_DELETE
    if policy == RECLAIM_RETAIN:
        return {"policy": policy, "backends": "retain", "exporters": "detach"}
    return {"policy": RECLAIM_DELETE, "backends": "remove", "exporters": "delete"}


def teardown_remaining(observed):
    """What a teardown still has to release: the names of the set's
    Exporters not already going, and of its instance Pods. The finalizer goes
    once this is empty."""
    exporters = [e["metadata"]["name"] for e in observed["owned"] if not e["metadata"].get("deletionTimestamp")]
    pods = [p["metadata"]["name"] for p in observed.get("pods") or []]
    return sorted(set(exporters) | set(pods))


def teardown_leased(observed):
    """{name: the leases holding it} of the set's Exporters a teardown must
    not delete yet: leased from either side (lease_safety.py), disabled or
    not (a lease made with ``allowDisabled`` lands on a disabled Exporter).
    Empty when the class retains its instances (``reclaim``): detaching
    destroys nothing."""
    if reclaim(observed.get("class"))["exporters"] != "delete":
        return {}
    view = lease_safety.LeaseView(observed.get("leases") or ())
    leased = {}
    for exporter in observed["owned"]:
        if exporter["metadata"].get("deletionTimestamp"):
            continue
        holders = view.holders(exporter)
        if holders:
            leased[exporter["metadata"]["name"]] = holders
    return leased


def teardown_actionable(observed):
    """What of ``teardown_remaining`` a teardown may act on now: everything
    but the leased Exporters (``teardown_leased``) and their Pods. Empty
    while only leased ones remain: the teardown then waits for the leases."""
    leased = teardown_leased(observed)
    pods = {p["metadata"]["name"]: (p["metadata"].get("labels") or {}).get(constants.LABEL_EXPORTER)
            for p in observed.get("pods") or []}
    return [name for name in teardown_remaining(observed)
            if name not in leased and pods.get(name) not in leased]


def teardown_observed(exporter_set, observed):
    """What a pass's ``decision.Observation`` holds of a teardown
    (``teardown``, ``teardown_left``, ``teardown_waits_for``); nothing for
    a living set."""
    if not deleting(exporter_set):
        return {}
    left = teardown_remaining(observed)
    return {"teardown": reclaim(observed.get("class"))["exporters"], "teardown_left": tuple(left),
            "teardown_waits_for": teardown_leased(observed) if left and not teardown_actionable(observed) else {}}


def waiting_for_leases_condition(leased):
    """The ``WaitingForLeases`` condition of a teardown (``leased``: {name: leases})."""
    if not leased:
        return {"type": CONDITION_WAITING_FOR_LEASES, "status": "False", "reason": REASON_NO_LEASES,
                "message": ""}
    held = ", ".join(f"{name} (lease {', '.join(leases)})" for name, leases in sorted(leased.items()))
    return {"type": CONDITION_WAITING_FOR_LEASES, "status": "True", "reason": REASON_EXPORTERS_LEASED,
            "message": f"deletion waits for leases to end before deleting {len(leased)} leased "
                       f"exporter(s): {held}; the finalizer {FINALIZER} stays until then"}


def write_waiting_for_leases(api_client, exporter_set, leased, now, check_mode=False):
    """Write the ``WaitingForLeases`` condition of a teardown on a fresh read,
    and a Normal Event of its reason when it turns True or names other
    Exporters. Nothing is written for a set that never waited. Returns
    whether the condition changed."""
    wanted = waiting_for_leases_condition(leased)

    def body_for(current):
        status = current.get("status") or {}
        conditions = status.get("conditions") or []
        previous = next((c for c in conditions if c.get("type") == CONDITION_WAITING_FOR_LEASES), None)
        if previous is None and not leased:
            return None
        if previous is not None and (previous.get("status"), previous.get("message")) == (
                wanted["status"], wanted["message"]):
            return None
        return {"status": {**status, "conditions": merge_conditions(conditions, [wanted], now)}}

    changed = _write_fresh(api_client, exporter_set, body_for, True, check_mode)
    if changed and leased and not check_mode:
        k8s_status.emit_events(api_client, exporter_set, [
            {"type": "Normal", "reason": CONDITION_WAITING_FOR_LEASES, "message": wanted["message"]}])
    return changed


def plan_options(given=None, where="reconcile_plan_options"):
    """The scale plan's options: the pool logic's defaults with the ``given``
    ones over them. An unknown option, or one that is not a number >= 0, is
    an error naming it (``where`` says where it was given)."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(PLAN_OPTION_NAMES))
    if unknown:
        raise LifecycleError(f"{where}: unknown option(s) {unknown}; known: {list(PLAN_OPTION_NAMES)}")
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise LifecycleError(f"{where}.{name}: {value!r} is not a number >= 0")
    return {**{name: pool_plan.DEFAULT_OPTIONS[name] for name in PLAN_OPTION_NAMES}, **given}


def outcome(exporter_set, error=None):
    """The outcome condition of a reconcile of ``exporter_set``:
    ``Successful`` when ``error`` is None (write it only once the backends,
    too, are done), else ``Failure`` with ``error`` as its message."""
    generation = _meta(exporter_set).get("generation", 0)
    if error is None:
        return k8s_status.outcome_condition("Successful", REASON_SUCCEEDED, "", generation)
    return k8s_status.outcome_condition("Failure", REASON_FAILED, error, generation)


def failure_message(step, message):
    """A failure's message: the step that failed, then what it said."""
    message = (message or "").strip() or "failed"
    return f"{step}: {message}" if step else message


def failure_event(exporter_set, message):
    """The Warning Event of a failed reconcile (``TeardownFailed`` for a
    set being deleted, which gets no outcome condition)."""
    reason = REASON_TEARDOWN_FAILED if deleting(exporter_set) else REASON_FAILED
    return {"type": "Warning", "reason": reason, "message": message[:1024]}


# -- writes ----------------------------------------------------------------------

def _write_fresh(api_client, exporter_set, body_for, status, check_mode):
    """Write what ``body_for(current)`` returns (None: nothing to change) on
    a fresh read of the set, with its resourceVersion as precondition, through
    the status subresource when ``status``; a 409 Conflict reads again and
    retries (``guarded_write``). Returns whether the set changed (or would,
    in check mode)."""
    meta = _meta(exporter_set)

    def plan(current):
        body = body_for(current)
        return None if body is None else guarded_write.Patch(body, status)

    return guarded_write.read_modify_write(
        api_client, constants.EXPORTER_SET, meta["namespace"], meta["name"], plan,
        uid=meta.get("uid"), check_mode=check_mode).changed


def _patch_finalizers(api_client, exporter_set, change, check_mode):
    """Apply ``change`` (list -> list) to the set's finalizers on a fresh
    read; returns whether they changed (or would, in check mode)."""
    def body_for(current):
        finalizers = list(current["metadata"].get("finalizers") or [])
        wanted = change(finalizers)
        return None if wanted == finalizers else {"metadata": {"finalizers": wanted or None}}
    return _write_fresh(api_client, exporter_set, body_for, False, check_mode)


def add_finalizer(api_client, exporter_set, finalizer=FINALIZER, check_mode=False):
    """Add ``finalizer`` to the set (a deleted set gets none)."""
    def change(finalizers):
        return finalizers if finalizer in finalizers else [*finalizers, finalizer]
    if deleting(exporter_set):
        return False
    return _patch_finalizers(api_client, exporter_set, change, check_mode)


def remove_finalizer(api_client, exporter_set, finalizer=FINALIZER, check_mode=False):
    """Remove ``finalizer`` from the set; a set already gone is no change."""
    return _patch_finalizers(api_client, exporter_set, lambda fs: [f for f in fs if f != finalizer], check_mode)


def write_condition(api_client, exporter_set, condition, now, check_mode=False):
    """Merge ``condition`` (type, status, reason, message) into the set's
    conditions on a fresh read, keeping every other field; returns whether
    it changed."""
    def body_for(current):
        status = current.get("status") or {}
        conditions = merge_conditions(status.get("conditions"), [condition], now,
                                      _meta(current).get("generation"))
        return None if conditions == status.get("conditions") else {"status": {"conditions": conditions}}
    return _write_fresh(api_client, exporter_set, body_for, True, check_mode)


def write_outcome(api_client, exporter_set, condition, check_mode=False):
    """Write only the outcome ``condition`` (``outcome``) into the set's
    status, keeping every other field; returns whether it changed."""
    def body_for(current):
        status = current.get("status") or {}
        kept = {k: v for k, v in status.items() if k != "conditions"}
        kept["conditions"] = [c for c in status.get("conditions") or []
                              if c.get("type") not in k8s_status.OUTCOME_CONDITIONS]
        desired = k8s_status.status_with_outcome(kept, status, condition)
        return {"status": desired} if k8s_status.status_differs(status, desired) else None
    return _write_fresh(api_client, exporter_set, body_for, True, check_mode)
