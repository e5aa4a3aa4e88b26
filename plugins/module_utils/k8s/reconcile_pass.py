"""The pool pass of an ExporterSet: one core for whoever reconciles it.

The operator runs it in process, on what its informer caches hold; the
reconcile role runs it through the ``exporterset_pass`` module (by hand,
from an AWX job, and in the operator's backend runs), on what it reads.
Each step is a plain function taking an API client and what the caller
observed, so that both paths write the same things with the same code. The
order of a pass is ``pool/decision.py``'s, written once: ``decide`` makes
the ``Pass``, ``execute`` does the finalizer, the pool writes and the
request to the backends, and ``finish`` what waits for the backends. The
steps:

1. ``keep_finalizer``: the set's teardown finalizer, once its class exists
   (``release_finalizer`` removes it once a teardown left nothing);
2. the plan (``k8s/observe.py`` ``plan_for``, on the observation), parted
   between the pool and the backends (``backend_work``);
3. ``apply_pool``: the pool part's Exporters, annotations, status and
   Events (``k8s/apply.py``);
4. the request to the backends: the operator's backend lane, or, for the
   role, the lease-safety check of the deletes and resets on a fresh read
   (``RunWriter.submit``), whose result the role's backend tasks act on;
5. after the backends (``RunWriter.write_backends``): the Exporters whose
   backends are gone deleted, those reset in place enabled again, or a
   teardown's deletes or detaches and its finalizer;
6. ``record_outcome``: ``Successful`` once the backends, too, are settled
   (``outcome_due``), or ``Failure`` naming what failed, with its Warning
   Event; then ``class_pass`` / ``sync_class``, the class's in-use
   finalizer and status, and ``policy_pass`` / ``sync_policies``, the
   status of the ExporterSetPolicies naming the set.

Who records step 6 of a run of the reconcile role is data the caller
passes (``RECORDERS``, the ``records`` option of ``exporterset_pass``): the
run itself (``run``, the default: by hand or from AWX), or the operator that
started it (``operator``), which makes them in process (its set, class and
policy reconcilers) and keeps every read in its caches.
"""

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import exporterset_options
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import guarded_write
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.core import CoreApi
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import apply as k8s_apply
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import lifecycle, pool_writes
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import Changes
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import class_status, decision, policy
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import permissions as pool_permissions
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
    wanted = _class_wanted(vclass, exporter_sets, now, add_finalizer)
    if wanted is None:
        return None
    finalizers = meta.get("finalizers") or []
    releasing = class_status.FINALIZER in finalizers and class_status.FINALIZER not in wanted["finalizers"]
    return pool_writes.sync_class(api_client, meta["namespace"], meta["name"],
                                  None if releasing else exporter_sets, now=now, vclass=vclass,
                                  add_finalizer=add_finalizer)


def _class_wanted(vclass, exporter_sets, now, add_finalizer):
    """The class's finalizers and status its sets ask for, None when the
    copy ``vclass`` already carries them."""
    wanted = class_status.desired(vclass, class_status.sets_using(vclass, exporter_sets), now, add_finalizer)
    status_stale = wanted["status"] is not None and class_status.status_differs(vclass.get("status"),
                                                                                 wanted["status"])
    if not status_stale and wanted["finalizers"] == (_meta(vclass).get("finalizers") or []):
        return None
    return wanted


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


# -- a pass of the reconcile role (the exporterset_pass module) ----------------------------

NAMESPACE_KINDS = (c.VIRTUAL_TARGET_CLASS, c.EXPORTER_SET, c.EXPORTER, c.LEASE)
# Run by hand there may be no later run soon: a teardown that disabled
# Exporters gives the Jumpstarter controller this long to see them disabled,
# then looks again, on fresh reads, before it releases any backend.
TEARDOWN_SETTLE = 1.0


def read_namespace(api_client, namespace):
    """What ``k8s/observe.py`` ``observe`` reads, listed from the API: the
    namespace's classes, sets, Exporters, Leases, the Pods labelled with a
    set and the ExporterSetPolicies (none where their CRD is not installed)."""
    objects = {gvr.kind: _list(api_client, gvr, namespace) for gvr in NAMESPACE_KINDS}
    objects["Pod"] = CoreApi(api_client).list("Pod", namespace, label_selector=c.LABEL_EXPORTER_SET)["items"]
    objects[c.EXPORTER_SET_POLICY.kind] = _list(api_client, c.EXPORTER_SET_POLICY, namespace, missing_ok=True)
    return objects


def observe_by_name(api_client, namespace, name, plan_options, now=None):
    """The set ``name`` read now, its observation and plan as the operator
    makes them from its caches, or None when it does not exist. A run by
    hand re-syncs the config of the instances that run, so it reads the
    controller CA then. Returns (exporter_set, observed, plan, objects)."""
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import controller_ca

    objects = read_namespace(api_client, namespace)
    exporter_set = next((s for s in objects[c.EXPORTER_SET.kind] if s["metadata"]["name"] == name), None)
    if exporter_set is None:
        return None
    observed = k8s_observe.observe(exporter_set, objects, now or datetime.now(UTC))
    observed["sync_config"] = True
    plan = {}
    if not lifecycle.deleting(exporter_set):
        plan = k8s_observe.plan_for(
            exporter_set, observed, plan_options,
            read_controller_ca=lambda: controller_ca.read_controller_ca(api_client, namespace, observed["class"]))
    return exporter_set, observed, plan, objects


@dataclass
class Report:
    """What a pass wrote: the Exporters created, deleted, patched, not made
    for a credential Secret in the way (``blocked``) or left alone by lease
    safety (``held``), the 409s met, and whether the set's status,
    finalizer and outcome, the class and which policies were written."""
    created: list = field(default_factory=list)
    deleted: list = field(default_factory=list)
    patched: list = field(default_factory=list)
    blocked: list = field(default_factory=list)
    held: list = field(default_factory=list)
    conflicts: int = 0
    status_changed: bool = False
    events: int = 0
    finalizer_changed: bool = False
    outcome_changed: bool = False
    class_changed: bool = False
    policies_changed: list = field(default_factory=list)

    LISTS = ("created", "deleted", "patched", "blocked", "held")

    def add(self, result):
        """Count in an applier's ``result``."""
        for key in self.LISTS:
            mine = getattr(self, key)
            mine.extend(name for name in result.get(key) or () if name not in mine)
        self.conflicts += result.get("conflicts") or 0
        self.status_changed = self.status_changed or bool(result.get("status_changed"))
        self.events += result.get("events") or 0

    def changed(self):
        return bool(self.created or self.deleted or self.patched or self.status_changed or self.events
                    or self.finalizer_changed or self.outcome_changed or self.class_changed
                    or self.policies_changed)

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, data):
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: (list(v) if isinstance(v, list) else v) for k, v in (data or {}).items() if k in known})


@dataclass(frozen=True)
class Handoff:
    """What the reconcile role's backend tasks do between the pass's two
    module calls, each list of Exporter names checked against lease safety
    on a fresh read: a living set's backends to remove (their Exporters are
    deleted after), to reset in place, to make, and whose config to
    re-sync; a deleted set's backends to release with the provisioner
    role's ``tasks`` (``remove``, or ``retain`` for a class that keeps its
    instances)."""
    remove: list = field(default_factory=list)
    reset: list = field(default_factory=list)
    provision: list = field(default_factory=list)
    resync: list = field(default_factory=list)
    release: list = field(default_factory=list)
    tasks: str = ""

    def empty(self):
        return not (self.remove or self.reset or self.provision or self.resync or self.release)

    def to_dict(self):
        return asdict(self)


def _names(entries):
    return [entry["name"] for entry in entries or ()]


def _backend_writes(plan):
    """Whether the backends' part of a plan writes anything once they ran."""
    return bool(plan and (plan.get("delete") or plan.get("recycle") or plan.get("exporter_annotations")
                          or plan.get("events")))


class RunWriter:
    """The writes of one pass of the reconcile role (``pool/decision.py``'s
    ``execute`` and ``finish``), and its backends: ``submit`` checks the
    deletes and resets (a teardown's releases) against lease safety on a
    fresh read and keeps what the role's backend tasks may do (``handoff``).
    ``state()`` is what a second call, once the backends ran, finishes
    from (``from_state``)."""

    def __init__(self, api_client, exporter_set, provisioner, *, records=RECORDED_BY_RUN, write_outcome=True,
                 add_class_finalizer=False, permissions=None, check_mode=False, observed=None, backend_plan=None,
                 teardown=None, release=None, owned=None, report=None, finalizer=lifecycle.FINALIZER,
                 settle=TEARDOWN_SETTLE, seen=None):
        self.api_client, self.exporter_set, self.provisioner = api_client, exporter_set, provisioner or ""
        self.records, self.write_outcome, self.add_class_finalizer = records, write_outcome, add_class_finalizer
        self.permissions = permissions or pool_permissions.ALL_GRANTED
        self.check_mode, self.settle = check_mode, settle
        self.observed = observed
        self.backend_plan = dict(backend_plan or {})
        self.teardown = teardown
        self.release = list(release or ())
        self.owned = list(owned if owned is not None else (observed or {}).get("owned") or ())
        self.report = report or Report()
        self.handoff = Handoff()
        # The finalizer a teardown removes once nothing is held (None: the
        # operator's, which it removes itself).
        self.finalizer = finalizer
        # Every write of the pass, for --diff; ``seen``: the caller's copies
        # of the set's Exporters, which a diff starts from.
        self.changes = Changes()
        self.seen = {(e.get("metadata") or {}).get("name"): e for e in seen or ()}

    @classmethod
    def from_state(cls, api_client, state, check_mode=False):
        """The writer of a pass's second call, from its first call's ``state()``."""
        return cls(api_client, state["exporterset"], state.get("provisioner"), records=state["records"],
                   write_outcome=state.get("write_outcome", True),
                   add_class_finalizer=state.get("add_class_finalizer", False),
                   permissions=pool_permissions.Permissions.from_denied(state.get("denied_permissions") or ()),
                   check_mode=check_mode, backend_plan=state.get("backend_plan"), teardown=state.get("teardown"),
                   release=state.get("release"), owned=state.get("owned"),
                   report=Report.from_dict(state.get("report")), finalizer=state.get("finalizer") or None)

    def state(self):
        return {"exporterset": self.exporter_set, "provisioner": self.provisioner, "records": self.records,
                "write_outcome": self.write_outcome, "add_class_finalizer": self.add_class_finalizer,
                "denied_permissions": self.permissions.as_denied(), "backend_plan": self.backend_plan,
                "teardown": self.teardown, "release": self.release,
                "owned": self.owned if self.teardown else [], "finalizer": self.finalizer or "",
                "report": self.report.to_dict()}

    def decided(self):
        """The ``Pass`` a second call finishes (``decision.finish``)."""
        return decision.Pass(teardown=self.teardown, records=records_here(self.records))

    def _applier(self, write_outcome=False):
        applier = pool_applier(self.api_client, self.exporter_set, write_outcome=write_outcome,
                               check_mode=self.check_mode, permissions=self.permissions)
        applier.changes = self.changes
        applier.seen.update(self.seen)
        return applier

    def _held_events(self, applier):
        if applier.held_why and not self.check_mode:
            self.report.events += k8s_status.emit_events(self.api_client, self.exporter_set, applier.held_events())

    def _set_change(self, before, after):
        self.changes.record(f"{c.EXPORTER_SET.kind}/{_meta(self.exporter_set).get('name')}", before, after)

    def _finalizer_written(self, finalizer, adding):
        finalizers = list(_meta(self.exporter_set).get("finalizers") or [])
        after = [*finalizers, finalizer] if adding else [f for f in finalizers if f != finalizer]
        self.report.finalizer_changed = True
        self._set_change({"metadata": {"finalizers": finalizers}}, {"metadata": {"finalizers": after}})

    # -- decision.execute --------------------------------------------------------------
    def wait_for_leases(self, leased):
        if lifecycle.write_waiting_for_leases(self.api_client, self.exporter_set, leased, datetime.now(UTC),
                                              check_mode=self.check_mode):
            self.report.status_changed = True

    def release_finalizer(self, finalizer):
        if release_finalizer(self.api_client, self.exporter_set, finalizer, check_mode=self.check_mode):
            self._finalizer_written(finalizer, adding=False)

    def add_finalizer(self, finalizer):
        if keep_finalizer(self.api_client, self.exporter_set, finalizer, check_mode=self.check_mode):
            self._finalizer_written(finalizer, adding=True)

    def write_pool(self, plan, write_outcome):
        applier = self._applier(write_outcome)
        try:
            return apply_pool(applier, plan, self.provisioner)
        finally:
            self.report.add(applier.result)

    def submit(self):
        if self.teardown:
            self._confirm_teardown()
            return
        applier = self._applier()
        if self.backend_plan:
            self.backend_plan = applier.confirm(self.backend_plan)
            self._held_events(applier)
        observed = self.observed or {}
        self.handoff = Handoff(remove=_names(self.backend_plan.get("delete")),
                               reset=_names(self.backend_plan.get("recycle")),
                               provision=k8s_observe.unprovisioned(observed) if observed else [],
                               resync=k8s_observe.exporters_to_resync(observed, self.exporter_set)
                               if observed else [])

    def _confirm_teardown(self):
        applier = self._applier()
        releasable = applier.confirm_teardown(self.teardown, self.owned)
        self._held_events(applier)
        self.report.add({"patched": applier.result["patched"]})
        if applier.result["patched"] and not self.check_mode:
            # Disabled just now: looked at again once the controller had a moment.
            time.sleep(self.settle)
            again = self._applier()
            releasable = again.confirm_teardown(self.teardown, self.owned)
            self._held_events(again)
        self.release = releasable
        with_backends = [e["metadata"]["name"] for e in self.owned
                         if c.ANNOTATION_DORMANT not in (_meta(e).get("annotations") or {})]
        reclaim = lifecycle.reclaim((self.observed or {}).get("class"))
        self.handoff = Handoff(release=[name for name in with_backends if name in releasable],
                               tasks=reclaim["backends"])

    def clear_failure(self):
        """Nothing is kept of an earlier run's failure outside the set's status."""

    # -- decision.finish ---------------------------------------------------------------
    def finish_due(self, objects=None, now=None):
        """Whether a second call has anything to write once the backends
        ran: the backends' part of the plan, a teardown, or what this run
        records that the copies read (``objects``) do not carry yet."""
        if self.teardown or _backend_writes(self.backend_plan):
            return True
        if not records_here(self.records):
            return False
        return records_due(self.exporter_set, objects, self.write_outcome, self.add_class_finalizer,
                           now or datetime.now(UTC))

    def write_backends(self):
        if self.teardown:
            applier = self._applier()
            applier.teardown(self.teardown, self.owned, self.provisioner, only=self.release)
            self.report.add(applier.result)
            if release_finalizer(self.api_client, self.exporter_set, self.finalizer,
                                 left=applier.result["held"], check_mode=self.check_mode):
                self._finalizer_written(self.finalizer, adding=False)
            return
        if _backend_writes(self.backend_plan):
            self.write_pool(self.backend_plan, False)

    def record(self, error=None):
        result = finish(self.api_client, self.exporter_set, records=self.records, error=error,
                        write_condition=self.write_outcome, add_class_finalizer=self.add_class_finalizer,
                        check_mode=self.check_mode)
        self.report.outcome_changed = self.report.outcome_changed or result["outcome_changed"]
        self.report.class_changed = self.report.class_changed or bool((result["class"] or {}).get("changed"))
        self.report.policies_changed.extend(result["policies"])
        self.report.events += result["events"]
        if result["outcome_changed"]:
            outcome = lifecycle.outcome(self.exporter_set, error)
            current = [cond for cond in (self.exporter_set.get("status") or {}).get("conditions") or []
                       if cond.get("type") in k8s_status.OUTCOME_CONDITIONS]
            self._set_change({"status": {"outcome": current}}, {"status": {"outcome": [outcome]}})


def records_due(exporter_set, objects, write_outcome=True, add_class_finalizer=False, now=None):
    """Whether a run that records (``finish``) would write anything on the
    copies it read (``objects``, ``read_namespace``'s): the set's outcome
    missing, its class's finalizer or status, or the status of a policy
    naming it, not what its sets ask for. Without copies: True."""
    if objects is None:
        return True
    if write_outcome and not lifecycle.deleting(exporter_set) and outcome_missing(exporter_set):
        return True
    now = now or datetime.now(UTC)
    meta = _meta(exporter_set)
    sets = objects.get(c.EXPORTER_SET.kind) or []
    class_name = (exporter_set.get("spec") or {}).get("virtualTargetClassName") or ""
    vclass = next((v for v in objects.get(c.VIRTUAL_TARGET_CLASS.kind) or []
                   if _meta(v).get("name") == class_name), None)
    if vclass is not None and _class_wanted(vclass, sets, now, add_class_finalizer) is not None:
        return True
    policies = objects.get(c.EXPORTER_SET_POLICY.kind) or []
    return any(policy.names_set(esp, meta.get("namespace"), meta.get("name"))
               and policy.status_differs(esp.get("status"), policy.desired_status(esp, policies, sets, now))
               for esp in policies)


def begin(api_client, exporter_set, observed, plan, objects=None, *, records=RECORDED_BY_RUN, write_outcome=True,
          add_class_finalizer=False, permissions=None, check_mode=False, settle=TEARDOWN_SETTLE):
    """The first call of a pass of the reconcile role, on what it read: the
    pass decided (``decision.decide``) and executed up to the backends (the
    finalizer, the pool part of the plan, the lease-safety check of the
    deletes and resets); when nothing is left for the backends it is
    finished at once. A write that fails records the failure (where the run
    records) and raises ``ApplyError``. Returns (writer, finished)."""
    provisioner = k8s_observe.provisioner_of(observed)
    options = decision.Options(manage_status=write_outcome, records=records_here(records))
    has_class = observed["class"] is not None
    backend_plan = {}
    if lifecycle.deleting(exporter_set):
        observation = decision.Observation(exporter_set, has_class=has_class,
                                           **lifecycle.teardown_observed(exporter_set, observed))
    else:
        work = backend_work(plan, exporter_set, observed, provisioner)
        backend_plan = dict(work.backend_plan or {})
        needed = bool(work.backend_plan or work.unprovisioned
                      or k8s_observe.exporters_to_resync(observed, exporter_set))
        observation = decision.Observation(exporter_set, has_class=has_class, plan=plan,
                                           pool_plan=work.pool_plan, backends_needed=needed)
    decided = decision.decide(observation, options)
    writer = RunWriter(api_client, exporter_set, provisioner, records=records, write_outcome=write_outcome,
                       add_class_finalizer=add_class_finalizer, permissions=permissions, check_mode=check_mode,
                       observed=observed, teardown=decided.teardown, settle=settle,
                       backend_plan=backend_plan if decided.backends == decision.SUBMIT else None)
    try:
        decision.execute(decided, writer, writer)
        if writer.handoff.empty():
            decision.finish(decided, writer)
            return writer, True
    except (k8s_apply.ApplyError, _api_exception()) as exc:
        error = str(exc)
        if decided.records:
            writer.record(error)
        raise k8s_apply.ApplyError(error) from exc
    return writer, False


def hand_off(api_client, exporter_set, observed, backend_plan, *, teardown=None, permissions=None,
             records=RECORDED_BY_OPERATOR, write_outcome=True, settle=TEARDOWN_SETTLE):
    """The first call of a backend run the operator starts, made in its
    process (its pool writes are made): the backends' part of its plan
    (``backend_plan``) or, for a set that is torn down (``teardown``:
    ``lifecycle.reclaim``'s ``exporters``), its releases checked against
    lease safety (``RunWriter.submit``). Returns the writer; ``begun(writer,
    ...)`` is the run's ``exporterset_pass_begun``."""
    writer = RunWriter(api_client, exporter_set, k8s_observe.provisioner_of(observed), records=records,
                       write_outcome=write_outcome, permissions=permissions, observed=observed,
                       backend_plan=backend_plan, teardown=teardown, finalizer=None, settle=settle)
    decision.execute(decision.Pass(backends=decision.SUBMIT, teardown=teardown), writer, writer)
    return writer


def begun(writer, finish_due, finished=False):
    """What the reconcile role's backend tasks and its finishing call read
    of a begun pass (``exporterset_pass_begun``); a pass finished already
    has no ``state``."""
    return {"backends": writer.handoff.to_dict(), "state": {} if finished else writer.state(),
            "finish": bool(finish_due) and not finished, "records": writer.records}


def _api_exception():
    from kubernetes.client.rest import ApiException

    return ApiException
