"""The pool pass of an ExporterSet: one core for whoever reconciles it.

The operator runs it in process, on what its informer caches hold; the
modules the reconcile role runs (``exporterset_apply``,
``virtualtargetclass_sync``: by hand, from an AWX job, and in the
operator's backend runs) run it on what they read. Each step is a plain
function taking an API client and what the caller observed, so that both
paths write the same things, in the same order, with the same code:

1. ``keep_finalizer``: the set's teardown finalizer, once its class exists
   (``release_finalizer`` removes it once a teardown left nothing);
2. the plan (``k8s/observe.py`` ``plan_for``, on the observation);
3. ``apply_pool``: the plan's Exporters, annotations, status and Events
   (``k8s/apply.py``); the backends are the provisioner role's, between
   this step and the next (``backend_work``: the plan parted between the
   pool pass and a backend pass, and whether a backend pass is needed);
4. ``record_outcome``: ``Successful`` once the backends, too, are settled
   (``outcome_due``), or ``Failure`` naming what failed, with its Warning
   Event;
5. ``class_pass`` / ``sync_class``: the class's in-use finalizer and status;
6. ``policy_pass`` / ``sync_policies``: the status of the
   ExporterSetPolicies naming the set.

The order of a pool pass is ``pool/decision.py``'s ``execute``: the
finalizer, the backend lane's request, then the pool writes with the
outcome. The operator decides its pass there (``decide``) and executes it;
``exporterset_apply`` executes its finalizer and pool writes through the
same ``execute``, the backends being the role's.

Who records steps 4 to 6 of a run of the reconcile role is data the caller
passes (``RECORDERS``, the ``records`` option of ``exporterset_apply``): the
run itself (``run``, the default: by hand or from AWX), or the operator that
started it (``operator``), which makes them in process (its set, class and
policy reconcilers) and keeps every read in its caches.
"""

from datetime import UTC, datetime
from typing import NamedTuple

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import exporterset_options
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import apply as k8s_apply
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import (
    guarded_write,
    lifecycle,
    pool_writes,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import class_status, policy
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.decision import (  # noqa: F401
    outcome_due,
    outcome_missing,
)

RECORDED_BY_RUN = exporterset_options.RECORDED_BY_RUN
RECORDED_BY_OPERATOR = exporterset_options.RECORDED_BY_OPERATOR
RECORDERS = tuple(exporterset_options.RECORDS["records"]["choices"])


def _meta(obj):
    return obj.get("metadata") or {}


# -- 1. the set's finalizer -------------------------------------------------------

def keep_finalizer(api_client, exporter_set, finalizer=lifecycle.FINALIZER, has_class=True, check_mode=False):
    """Add ``finalizer`` to a living set whose class exists (``has_class``)
    and that does not carry it yet; nothing is read when the caller's copy
    already carries it. Returns whether it changed."""
    if not lifecycle.needs_finalizer(exporter_set, {} if has_class else None, finalizer):
        return False
    return lifecycle.add_finalizer(api_client, exporter_set, finalizer, check_mode=check_mode)


def release_finalizer(api_client, exporter_set, finalizer=lifecycle.FINALIZER, left=(), check_mode=False):
    """Remove ``finalizer`` from a set being torn down once nothing of it is
    left (``left``: what the teardown still holds: ``lifecycle.teardown_remaining``
    of the observation, or the Exporters a teardown run held); the set then
    goes. Returns whether it changed."""
    if not finalizer or left:
        return False
    return lifecycle.remove_finalizer(api_client, exporter_set, finalizer, check_mode=check_mode)


# -- 3. the pool writes ---------------------------------------------------------------

def pool_applier(api_client, exporter_set, write_outcome=True, check_mode=False, permissions=None):
    """The writer of a plan's pool part for ``exporter_set``; ``write_outcome``
    adds the SDK's ``Successful`` condition to the status the plan writes;
    ``permissions`` (``pool/permissions.py``): what the caller may not do."""
    return k8s_apply.PlanApplier(api_client, exporter_set, check_mode=check_mode, write_outcome=write_outcome,
                                 permissions=permissions)


def record_permissions(api_client, exporter_set, condition, now):
    """The set's ``PermissionsLimited`` condition (``pool/permissions.py``),
    and a Warning Event naming what is off when it is True and changed.
    Returns whether it changed."""
    changed = lifecycle.write_condition(api_client, exporter_set, condition, now)
    if changed and condition["status"] == "True":
        k8s_status.emit_events(api_client, exporter_set, [
            {"type": "Warning", "reason": condition["reason"], "message": condition["message"]}])
    return changed


def apply_pool(applier, plan, provisioner):
    """Write the plan's Exporters, annotations, the set's status and its
    Events (``k8s/apply.py`` holds the lease-safety checks of each write).
    Returns what was written: the applier's result with the resourceVersion
    each Exporter write returned (``versions``). Raises ``ApplyError``."""
    applier.apply_plan(plan, provisioner or "")
    return {**applier.result, "versions": dict(applier.versions)}


# -- between 3 and 4: the backends' part ----------------------------------------------------

class BackendWork(NamedTuple):
    """A plan parted between the pool pass and the backends
    (``k8s/observe.py`` ``split_plan``): what the pool pass writes now,
    and what a backend pass (the reconcile playbook with the provisioner's
    role) has to do: the backends' part of the plan, the Exporters that
    have their credential and no backend yet, the probe playbook due."""
    pool_plan: dict
    backend_plan: dict | None
    unprovisioned: list
    probe: str | None

    @property
    def needed(self):
        """Whether a backend pass has anything to do now."""
        return bool(self.backend_plan or self.unprovisioned or self.probe)


def backend_work(plan, exporter_set, observed, provisioner, acting=()):
    """Part ``plan``; ``acting``: the Exporters a backend pass is at work
    on, which the pool part leaves be. Returns ``BackendWork``."""
    pool_plan, backend_plan = k8s_observe.split_plan(plan, exporter_set, provisioner, acting)
    return BackendWork(pool_plan, backend_plan, k8s_observe.unprovisioned(observed),
                       k8s_observe.probe_playbook(observed))


# -- 4. the outcome ------------------------------------------------------------------------

def record_outcome(api_client, exporter_set, error=None, status=None, write_condition=True, check_mode=False):
    """Record the outcome of the whole reconcile: ``Successful`` when
    ``error`` is None, else ``Failure`` with ``error`` as its message and a
    Warning Event (``TeardownFailed`` for a set being deleted, which gets no
    condition). With ``status`` (the plan's, which the caller has) the
    condition is written with it in one write; without, only the condition
    is, on a fresh read. ``write_condition`` False (the watch's
    ``manageStatus: false``) leaves the conditions to the caller.
    Returns {"changed", "outcome_changed", "events"}."""
    condition = lifecycle.outcome(exporter_set, error)
    changed = False
    if write_condition and not lifecycle.deleting(exporter_set):
        if status is not None and not check_mode:
            meta = _meta(exporter_set)
            changed, _ = k8s_status.write_status(api_client, meta["namespace"], meta["name"], status,
                                                 outcome=condition)
        else:
            changed = lifecycle.write_outcome(api_client, exporter_set, condition, check_mode)
    events = 0
    if error is not None and not check_mode:
        events = k8s_status.emit_events(api_client, exporter_set, [lifecycle.failure_event(exporter_set, error)])
    return {"changed": changed or error is not None, "outcome_changed": changed, "events": events}


# -- 5. the class ----------------------------------------------------------------------------

def class_pass(api_client, vclass, exporter_sets, now, add_finalizer=True):
    """The class's finalizer and status from the caller's copies (an
    informer's cache): nothing is read or written when they already say
    what its sets ask for (returns None). Otherwise the write, guarded by
    the copy's resourceVersion (a 409 is raised, for the caller to look
    again once its copy is newer); releasing the class is decided on a
    fresh list of its sets, not the copy: a set created a moment ago
    still holds it. Returns ``sync_class``'s result."""
    meta = _meta(vclass)
    names = class_status.sets_using(vclass, exporter_sets)
    wanted = class_status.desired(vclass, names, now, add_finalizer)
    finalizers = meta.get("finalizers") or []
    status_stale = wanted["status"] is not None and class_status.status_differs(vclass.get("status"),
                                                                                 wanted["status"])
    if not status_stale and wanted["finalizers"] == finalizers:
        return None
    releasing = class_status.FINALIZER in finalizers and class_status.FINALIZER not in wanted["finalizers"]
    return pool_writes.sync_class(api_client, meta["namespace"], meta["name"],
                                  None if releasing else exporter_sets, now=now, vclass=vclass,
                                  add_finalizer=add_finalizer)


def sync_class(api_client, namespace, name, exporter_sets=None, add_finalizer=True, now=None, check_mode=False):
    """The class's finalizer and status on a fresh read (``exporter_sets``:
    the namespace's sets when the caller has just listed them), retried on
    a 409; in check mode nothing is written. Returns ``pool_writes.sync_class``'s
    result."""
    return pool_writes.sync_class(api_client, namespace, name, exporter_sets, now=now,
                                  add_finalizer=add_finalizer, check_mode=check_mode)


# -- 6. the policies ------------------------------------------------------------------------

def policy_pass(api_client, esp, policies, exporter_sets, now, check_mode=False):
    """The status of the ExporterSetPolicy ``esp`` from the namespace's
    ``policies`` and ``exporter_sets`` (``pool/policy.py`` decides it):
    nothing is written when ``esp`` already carries it; the write is
    guarded by the resourceVersion of ``esp`` (a 409 is raised). Returns
    ``guarded_write.Written``."""
    wanted = policy.desired_status(esp, policies, exporter_sets, now)
    if not policy.status_differs(esp.get("status"), wanted):
        return guarded_write.Written(True, False, esp)
    return pool_writes.write_policy_status(api_client, esp, wanted, check_mode=check_mode)


def sync_policies(api_client, exporter_set, policies, exporter_sets, now, check_mode=False):
    """The status of every ExporterSetPolicy of the set's namespace that
    names the set (two or more: each says it is in conflict), as
    ``policy_pass`` writes it. Returns the names of the policies written."""
    meta = _meta(exporter_set)
    written = []
    for esp in policies:
        if not policy.names_set(esp, meta.get("namespace"), meta.get("name")):
            continue
        if policy_pass(api_client, esp, policies, exporter_sets, now, check_mode).changed:
            written.append(esp["metadata"]["name"])
    return written


# -- what a run records, by who records -------------------------------------------------------

def _list(api_client, gvr, namespace, missing_ok=False):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        return client.CustomObjectsApi(api_client).list_namespaced_custom_object(*gvr.at(namespace))["items"]
    except ApiException as exc:
        if missing_ok and exc.status == 404:
            return []
        raise


def records_here(records):
    """Whether a run told ``records`` records them itself (``exporterset_options``)."""
    return exporterset_options.records_here(records)


def finish(api_client, exporter_set, records=exporterset_options.RECORDS["records"]["default"], error=None,
           write_condition=True, add_class_finalizer=False, now=None, check_mode=False):
    """What a run of the reconcile role records once its work is done
    (``error`` None) or has failed: the outcome (``record_outcome``), then,
    once it succeeded, the class's finalizer and status and the status of
    the policies naming the set, on fresh lists of the namespace's sets and
    policies (an ExporterSetPolicy CRD that is not installed: none). With
    ``records`` ``operator`` nothing is read or written: the operator that
    started the run records them. Returns {"changed", "outcome_changed",
    "events", "class", "policies"}."""
    result = {"changed": False, "outcome_changed": False, "events": 0, "class": None, "policies": []}
    if not records_here(records):
        return result
    result.update(record_outcome(api_client, exporter_set, error, write_condition=write_condition,
                                 check_mode=check_mode))
    if error is not None:
        return result
    now = now or datetime.now(UTC)
    meta = _meta(exporter_set)
    namespace = meta["namespace"]
    sets = _list(api_client, c.EXPORTER_SET, namespace)
    class_name = (exporter_set.get("spec") or {}).get("virtualTargetClassName") or ""
    if class_name:
        result["class"] = sync_class(api_client, namespace, class_name, sets, add_class_finalizer, now, check_mode)
        result["changed"] = result["changed"] or result["class"]["changed"]
    policies = _list(api_client, c.EXPORTER_SET_POLICY, namespace, missing_ok=True)
    result["policies"] = sync_policies(api_client, exporter_set, policies, sets, now, check_mode)
    result["changed"] = result["changed"] or bool(result["policies"])
    return result
