"""The ExporterSet reconciler: one reconcile of one set, observed from the
cache, planned, acted on; and the body of the set's backend runs.

Two speeds. The plan comes from the collection's pool logic, computed here
in process, and its pool part (Exporters created, enabled, disabled,
deleted where their instance goes with them; annotations, the set's status
and Events) is written at once, with the module's own code, in
milliseconds. Whatever needs the provisioner's backends (instances made,
reset or removed, hosts probed, a set torn down) is handed to the backend
lane (``backends.BackendRuns``), which runs the reconcile playbook through
ansible-runner off the pool loop: one run per set at a time, batched,
bounded across sets, a failed run retried by the lane with the set's own
backoff. The body of a run (``backend_pass``) raises as a reconcile does
(results.py). When nothing is asked, nothing runs (fast path).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import UTC, datetime

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners as registry
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import objects as k8s_objects
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import apply as k8s_apply
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import (
    controller_ca,
    lifecycle,
    reconcile_pass,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import (
    class_status,
    decision,
    permissions,
    pool_index,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.selectors import (
    selector_matches,
)
from kubernetes.client.rest import ApiException

from .backends import BackendRuns
from .expectations import Expectations
from .keys import SetKey, typed
from .metrics import Metrics
from .results import ReconcileError, Result, TerminalError
from .runner import PlaybookRunner

log = logging.getLogger(__name__)

FINALIZER = lifecycle.FINALIZER
OBSERVED_KINDS = ("VirtualTargetClass", "ExporterSet", "Exporter", "Lease", "Pod", "ExporterSetPolicy")
# How long a backend run waits for new Exporters' credentials, so that one
# run makes the backends of a whole burst. It sleeps until an event of one of
# the set's Exporters wakes it (backends.BackendRuns.changed), and looks at
# the caches only then; caches that deliver no events are not waited on.
BATCH_WINDOW = 1.0


def utcnow() -> datetime:
    return datetime.now(UTC)


class SetReconciler:
    def __init__(
        self,
        caches,
        api_client,
        runner: PlaybookRunner,
        metrics: Metrics,
        provisioners: set[str],
        playbook: str = "playbooks/reconcile.yml",
        plan_options: dict | None = None,
        clock=utcnow,
        watch=None,
        permissions: permissions.Permissions = permissions.ALL_GRANTED,
    ):
        self.caches = caches
        # What the account may not do (pool/permissions.py): those features
        # are off, or done another way, and every set served says so.
        self.permissions = permissions
        self.api_client = api_client
        self.runner = runner
        self.metrics = metrics
        self.provisioners = provisioners
        self.playbook = playbook
        self.plan_options = dict(plan_options or {})
        self.clock = clock
        self.expectations = Expectations()
        # What the planner read from each set's pool, kept while its objects
        # are unchanged: the operator plans the same pools again and again.
        self.surveys = pool_index.SurveyCache()
        # The watches.yaml entry (watches.Watch), when there is one: what runs
        # (its playbook or role), the vars every run gets, the finalizer,
        # manageStatus, snakeCaseParameters and the selector.
        self.watch = watch
        if watch is not None:
            self.playbook = watch.runnable()
        self.finalizer = watch.finalizer.name if watch is not None and watch.finalizer else (
            None if watch is not None else decision.Options.finalizer)
        self.manage_status = watch.manage_status if watch is not None else decision.Options.manage_status
        # The backend lane (backends.BackendRuns), whose threads run
        # ``backend_pass``; the controller gives the reconciler its own. A
        # reconciler used on its own has one that is never started: what it
        # asks for waits, and ``run_backends`` runs a set's pass at once.
        self.backends = BackendRuns(self.backend_pass)
        # The caches of the instances' config inputs (config_inputs.py),
        # given by the controller; without them a set's config is re-synced
        # on the fallback period (k8s/observe.py config_sync_due).
        self.config_inputs = None
        # A backend run waiting for credentials wakes on the events of its
        # set's Exporters, which the Exporter informer hands the lane.
        exporters = caches.get("Exporter") if hasattr(caches, "get") else None
        self._woken_by_events = hasattr(exporters, "handlers")
        if self._woken_by_events:
            exporters.handlers.append(self._exporter_event)

    @property
    def options(self) -> decision.Options:
        """How the pool pass acts (pool/decision.py)."""
        return decision.Options(finalizer=self.finalizer, manage_status=self.manage_status,
                                may_write_finalizer=self.permissions.on("set-finalizer"))

    @property
    def _backend_failure(self) -> dict[SetKey, str]:
        """The message of each set's last failed backend run (a copy)."""
        return self.backends.failures()

    def _exporter_event(self, event_type, obj, previous) -> None:
        owner = k8s_objects.controller_of(obj, "ExporterSet")
        if owner:
            self.backends.changed(SetKey((obj.get("metadata") or {}).get("namespace") or "", owner))

    def _variables(self, exporter_set, observed, plan, teardown=False) -> dict:
        """Extra vars of a run: the entry's vars (the finalizer's too on
        teardown), then the set as the SDK passes it. The operator records
        the outcome, the class's and the policies' status itself (in process,
        k8s/reconcile_pass.py): the run leaves them to it."""
        variables = {**k8s_observe.playbook_variables(exporter_set, observed, plan, teardown=teardown),
                     "reconcile_records": reconcile_pass.RECORDED_BY_OPERATOR,
                     "denied_permissions": self.permissions.as_denied()}
        if self.watch is None:
            return variables
        if not self.watch.snake_case_parameters:
            for snake in k8s_objects.snake_case_spec(exporter_set.get("spec") or {}):
                variables.pop(snake, None)
            variables.update(exporter_set.get("spec") or {})
        extra = self.watch.finalizer_vars() if teardown else self.watch.vars
        # manageStatus false: the run's exporterset_apply leaves the outcome
        # conditions to the playbook, as the operator itself does.
        return {**extra, **variables, "exporterset_manage_status": self.manage_status}

    # -- observation -------------------------------------------------------
    def observe(self, exporter_set: dict) -> dict:
        """Everything the plan needs, from the informer caches."""
        namespace = exporter_set["metadata"]["namespace"]
        objects = {kind: self.caches[kind].list(namespace) for kind in OBSERVED_KINDS}
        if self.config_inputs is not None:
            objects.update(self.config_inputs.objects(namespace))
        return k8s_observe.observe(exporter_set, objects, self.clock())

    # -- reconcile -----------------------------------------------------------
    def reconcile_set(self, key: SetKey) -> Result:
        namespace, name = key
        exporter_set = self.caches["ExporterSet"].get(namespace, name)
        if exporter_set is None:
            self.runner.forget(key)
            self.metrics.forget_set(namespace, name)
            self.expectations.forget(key)
            return Result(path="gone")
        observed = self.observe(exporter_set)
        vclass = observed["class"]
        provisioner = k8s_observe.provisioner_of(observed)
        if vclass is not None and provisioner not in self.provisioners:
            if class_status.known_provisioner(provisioner):
                return Result(path="skipped")  # another operator's
            # Unknown to the collection (a typo): every operator reports it,
            # the same status and Event, and touches nothing else.
            return self._report_unusable(exporter_set, observed)
        if self.watch is not None and self.watch.selector and not selector_matches(
                self.watch.selector, exporter_set["metadata"].get("labels") or {}):
            return Result(path="skipped")

        if lifecycle.deleting(exporter_set):
            return self._teardown(key, exporter_set, observed)
        if self.config_inputs is not None and registry.get(provisioner).has_pods:
            # From now on a change of an instance's token or CA brings the set back.
            self.config_inputs.watch(namespace)
        self._report_permissions(exporter_set)

        # A terminating Exporter counts as gone: the plan skips it, and an
        # orphaning delete keeps it until the garbage collector is done.
        owned_names = {e["metadata"]["name"] for e in observed["owned"] if not e["metadata"].get("deletionTimestamp")}
        versions = {e["metadata"]["name"]: e["metadata"].get("resourceVersion") for e in observed["owned"]}
        seen = self.expectations.satisfied(key, owned_names, set(observed["taken_names"]), versions)
        observation = decision.Observation(exporter_set, has_class=vclass is not None, expectations_met=seen)
        if seen:
            observation = self._observe_pass(key, exporter_set, observed, observation)
        decided = decision.decide(observation, self.options)
        applied = decision.execute(decided, _PassWriter(self, exporter_set, observation.plan, provisioner),
                                   _SetBackends(self.backends, key))
        if applied is not None:
            self._count_actions(key, decided.pool_writes.plan)
            # A pass that starts before the cache shows these writes would
            # plan them again (a disable twice, its Event twice): it waits.
            written = applied.get("versions") or {}
            patched = {name: (versions[name], written[name]) for name in applied.get("patched") or ()
                       if name in versions and written.get(name) not in (None, versions[name])}
            if applied["created"] or applied["deleted"] or patched:
                self.expectations.expect(key, applied["created"], applied["deleted"], patched)
        return Result(requeue_after=decided.requeue_after, path=decided.path)

    def _observe_pass(self, key, exporter_set, observed, observation):
        """The rest of a pass's observation: the plan (its metrics counted),
        its pool part and the backend lane's state for the set."""
        namespace, name = key
        vclass = observed["class"]
        provisioner = k8s_observe.provisioner_of(observed)
        # The controller CA is a GET by name, made only when backends are to be
        # made; an unavailable one requeues the set (the config inputs'
        # caches, config_inputs.py, serve the re-sync only).
        plan = k8s_observe.plan_for(
            exporter_set, observed, self.plan_options,
            read_controller_ca=lambda: controller_ca.read_controller_ca(self.api_client, namespace, vclass),
            surveys=self.surveys,
        )
        self.metrics.observe_set(namespace, name, plan["status"], len(observed["pending"]))
        self.metrics.observe_service(namespace, name, provisioner, observed, plan["status"], self.clock().timestamp())
        busy = self.backends.busy(key)
        work = reconcile_pass.backend_work(plan, exporter_set, observed, provisioner,
                                           self.backends.acting(key) if busy else ())
        return dataclasses.replace(
            observation, plan=plan, pool_plan=work.pool_plan, backends_needed=work.needed, busy=busy,
            failed=self.backends.failed(key), sync_wait=k8s_observe.config_sync_wait(observed))

    # -- the backend lane ---------------------------------------------------------
    def run_backends(self, key) -> None:
        """A backend run of ``key`` now, in the calling thread, its outcome
        kept by the lane as its threads keep it (never raises)."""
        self.backends.run_now(key)

    def _ran(self, key, result, what: str) -> None:
        """Count and log a run; a failed one raises for the lane's backoff."""
        self.metrics.playbook_runs.labels("successful" if result.ok else "failed").inc()
        extra = {"namespace": key[0], "exporterset": key[1], "seconds": round(result.duration, 2)}
        if not result.ok:
            raise ReconcileError(result.message, path=what)
        log.info("backend run succeeded", extra={**extra, "path": what})

    def backend_pass(self, key) -> None:
        """One backend run of a set (on a backend lane thread): plan afresh
        from the caches and run the reconcile playbook once for every backend
        the set needs now: instances made, reset or removed, hosts probed, or
        the set's teardown. Raises ``ReconcileError`` when the run failed
        (the set says so first), ``TerminalError`` for a key that is no set's."""
        key = typed(key)
        if not isinstance(key, SetKey):
            raise TerminalError(f"backend lane key {key!r}: not an ExporterSet", path="backends")
        namespace, _ = key
        # Batched: Exporters just created get their credential from the
        # Jumpstarter controller within moments; a run waits for them (at
        # most BATCH_WINDOW, woken by the events of the set's Exporters) so
        # that one run makes every backend of a burst.
        deadline = time.monotonic() + BATCH_WINDOW
        while True:
            seen = self.backends.changes(key)
            exporter_set = self.caches["ExporterSet"].get(*key)
            if exporter_set is None:
                return
            observed = self.observe(exporter_set)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._woken_by_events or not _awaiting_credentials(observed):
                break
            self.backends.wait_change(key, seen, remaining)
        if lifecycle.deleting(exporter_set):
            self._run_teardown(key, exporter_set, observed)
            return
        vclass = observed["class"]
        plan = k8s_observe.plan_for(
            exporter_set, observed, self.plan_options,
            read_controller_ca=lambda: controller_ca.read_controller_ca(self.api_client, namespace, vclass),
            surveys=self.surveys,
        )
        work = reconcile_pass.backend_work(plan, exporter_set, observed, k8s_observe.provisioner_of(observed))
        backend_plan = work.backend_plan or {}
        if backend_plan or work.unprovisioned:
            acting = {e["name"] for e in backend_plan.get("delete", []) + backend_plan.get("recycle", [])}
            with self.backends.acting_on(key, acting | set(work.unprovisioned)):
                self._run_playbook(key, exporter_set, observed, backend_plan, plan)
        elif work.probe:
            self._run_probe(key, exporter_set, observed, plan, work.probe)

    def _apply_in_process(self, exporter_set: dict, plan: dict, provisioner: str,
                          write_outcome: bool | None = None) -> dict:
        """The plan's Exporter, annotation, status and Event writes, without a playbook.

        Returns what was written (``created`` and ``deleted`` Exporter names).
        """
        if write_outcome is None:
            write_outcome = self.manage_status
        applier = reconcile_pass.pool_applier(self.api_client, exporter_set, write_outcome=write_outcome,
                                              permissions=self.permissions)
        return reconcile_pass.apply_pool(applier, plan, provisioner)

    def _begin_run(self, exporter_set, observed, backend_plan, plan, teardown=None) -> dict:
        """The first call of the run's pass, made here (reconcile_pass.py
        ``hand_off``): the backends' part checked against lease safety on a
        fresh read, for the playbook's backend tasks and its finishing call."""
        try:
            writer = reconcile_pass.hand_off(self.api_client, exporter_set, observed, backend_plan,
                                             teardown=teardown, permissions=self.permissions,
                                             write_outcome=self.manage_status)
        except (k8s_apply.ApplyError, ApiException) as exc:
            if teardown:
                k8s_status.emit_events(self.api_client, exporter_set, [lifecycle.failure_event(exporter_set, str(exc))])
            else:
                self._report_failure(exporter_set, plan, str(exc))
            raise ReconcileError(str(exc), path="teardown" if teardown else "playbook") from exc
        return reconcile_pass.begun(writer, writer.finish_due())

    def _run_playbook(self, key, exporter_set, observed, backend_plan, plan) -> None:
        """The reconcile playbook with the backends' part of the plan."""
        variables = self._variables(exporter_set, observed, backend_plan)
        variables["exporterset_pass_begun"] = self._begin_run(exporter_set, observed, backend_plan, plan)
        result = self.runner.run(self.playbook, key, variables)
        if result.report is not None:
            # What the run's writes really were: a name that met a 409 or a
            # blocking Secret was not deleted and is not waited for.
            created, deleted = result.report["created"], result.report["deleted"]
        else:
            created = []
            deleted = [d["name"] for d in backend_plan.get("delete") or []]
        self._count_actions(key, backend_plan)
        if not result.ok:
            self._report_failure(exporter_set, plan, result.message)
        self._ran(key, result, "playbook")
        if created or deleted:
            self.expectations.expect(key, created, deleted)

    def _run_probe(self, key, exporter_set, observed, plan, playbook) -> None:
        """Refresh the backends' report (it comes back as a watch event).

        Bounded by the report's age: a steady pool costs one probe per
        interval, whatever else happens to the set.
        """
        variables = self._variables(exporter_set, observed, plan)
        result = self.runner.run(playbook, key, variables)
        if not result.ok:
            self._report_failure(exporter_set, plan, result.message)
        self._ran(key, result, "probe")

    def _count_actions(self, key, plan: dict) -> None:
        namespace, name = key
        created = plan.get("create") or []
        if created:
            self.metrics.scale_ups.labels(namespace, name).inc(len(created))
        deletes = plan.get("delete") or []
        scale_down = [d for d in deletes if d.get("reason") == constants.DELETE_SCALE_DOWN]
        if scale_down:
            self.metrics.scale_downs.labels(namespace, name).inc(len(scale_down))
        failed = [d for d in deletes if d.get("reason") in (constants.DELETE_FAILED, constants.DELETE_STARTUP_TIMEOUT)]
        if failed:
            self.metrics.failures.labels(namespace, name).inc(len(failed))

    def _report_failure(self, exporter_set: dict, plan: dict, message: str) -> None:
        try:
            reconcile_pass.record_outcome(self.api_client, exporter_set, message, status=plan["status"],
                                          write_condition=self.manage_status)
        except ApiException as exc:
            log.warning("could not report failure", extra={"error": str(exc)[:300]})

    def _report_permissions(self, exporter_set: dict) -> None:
        """The set's ``PermissionsLimited`` condition, with a Warning Event
        when it turns True; nothing when the cached set already says it."""
        wanted = permissions.condition_due(exporter_set, self.permissions)
        if wanted is None:
            return
        try:
            reconcile_pass.record_permissions(self.api_client, exporter_set, wanted, self.clock())
        except ApiException as exc:
            raise ReconcileError(str(exc), path="permissions") from exc

    def _report_unusable(self, exporter_set: dict, observed: dict) -> Result:
        """Status and Events of a set whose class cannot be used (its plan
        creates nothing); no finalizer, no playbook. Raises TerminalError
        once they are written."""
        plan = k8s_observe.plan_for(exporter_set, observed, self.plan_options, surveys=self.surveys)
        if plan.get("changed"):
            try:
                self._apply_in_process(exporter_set, plan, "")
            except (k8s_apply.ApplyError, ApiException) as exc:
                raise ReconcileError(str(exc), path="unusable") from exc
        # Said in the status; nothing more until the set or its class changes.
        raise TerminalError(
            f"VirtualTargetClass {(exporter_set.get('spec') or {}).get('virtualTargetClassName')}: "
            f"spec.provisioner {k8s_observe.provisioner_of(observed)!r} is not one the collection knows",
            path="unusable")

    # -- finalizer (k8s/lifecycle.py decides, for every runner of a set) -------
    def _teardown(self, key, exporter_set: dict, observed: dict) -> Result:
        """A set being deleted (pool/decision.py decides): its backends and
        Exporters go (on the backend lane), it waits for leases, or its
        finalizer goes."""
        facts = lifecycle.teardown_observed(exporter_set, observed)
        # Exporters already going (an orphaning delete waits for the garbage
        # collector) are not left to the teardown.
        left = set(facts.get("teardown_left") or ())
        observation = decision.Observation(exporter_set, has_class=observed["class"] is not None,
                                           expectations_met=not left or self.expectations.satisfied(key, left),
                                           **facts)
        decided = decision.decide(observation, self.options)
        # After a failed teardown run the lane runs the next once its backoff ends.
        decision.execute(decided, _PassWriter(self, exporter_set, {}, k8s_observe.provisioner_of(observed)),
                         _SetBackends(self.backends, key))
        return Result(requeue_after=decided.requeue_after, path=decided.path)

    def _run_teardown(self, key, exporter_set: dict, observed: dict) -> None:
        """The teardown run: the finalizer's playbook (or the entry's, with
        the finalizer's vars) releases every backend and deletes or detaches
        the Exporters."""
        if not lifecycle.tears_down(exporter_set, self.finalizer) or not lifecycle.teardown_actionable(observed):
            return
        remaining = [e for e in observed["owned"] if not e["metadata"].get("deletionTimestamp")]
        variables = self._variables(exporter_set, observed, {}, teardown=True)
        variables["exporterset_pass_begun"] = self._begin_run(
            exporter_set, observed, {}, {}, teardown=lifecycle.reclaim(observed["class"])["exporters"])
        teardown = self.watch.finalizer_runnable() if self.watch is not None else self.playbook
        result = self.runner.run(teardown, key, variables)
        if not result.ok:
            k8s_status.emit_events(self.api_client, exporter_set,
                                   [lifecycle.failure_event(exporter_set, result.message)])
        self._ran(key, result, "teardown")
        # The cache shows the deletions shortly; the pool loop waits for them
        # (a run that deleted nothing, having held or only disabled, waits for none).
        deleted = (result.report["deleted"] if result.report is not None
                   else [e["metadata"]["name"] for e in remaining])
        self.expectations.expect(key, [], deleted)


class _PassWriter:
    """The writes of a pool pass (pool/decision.py ``execute``), in process."""

    def __init__(self, reconciler, exporter_set, plan, provisioner):
        self.reconciler, self.exporter_set, self.plan, self.provisioner = reconciler, exporter_set, plan, provisioner

    def add_finalizer(self, finalizer):
        reconcile_pass.keep_finalizer(self.reconciler.api_client, self.exporter_set, finalizer)

    def wait_for_leases(self, leased):
        try:
            lifecycle.write_waiting_for_leases(self.reconciler.api_client, self.exporter_set, leased,
                                               self.reconciler.clock())
        except ApiException as exc:
            raise ReconcileError(str(exc), path="teardown") from exc

    def release_finalizer(self, finalizer):
        reconcile_pass.release_finalizer(self.reconciler.api_client, self.exporter_set, finalizer)
        meta = self.exporter_set["metadata"]
        self.reconciler.runner.forget(SetKey(meta["namespace"], meta["name"]))

    def write_pool(self, pool_plan, write_outcome):
        # Creating, enabling or disabling Exporters touches no backend (a new
        # Exporter gets its backend once its credential exists), so it is
        # applied here, in milliseconds, with the module's own code.
        try:
            return self.reconciler._apply_in_process(self.exporter_set, pool_plan, self.provisioner,
                                                     write_outcome=write_outcome)
        except (k8s_apply.ApplyError, ApiException) as exc:
            self.reconciler._report_failure(self.exporter_set, self.plan, str(exc))
            raise ReconcileError(str(exc), path="inprocess") from exc


class _SetBackends:
    """The backend lane, for one set (pool/decision.py ``execute``)."""

    def __init__(self, lane, key):
        self.lane, self.key = lane, key

    def submit(self):
        # Held while a failed run's backoff lasts: the lane runs it then.
        self.lane.submit(self.key)

    def clear_failure(self):
        self.lane.clear_failure(self.key)


def _awaiting_credentials(observed: dict) -> bool:
    """Whether an Exporter of the set that will want a backend still waits
    for the credential the Jumpstarter controller issues."""
    return any(
        not e["metadata"].get("deletionTimestamp")
        and constants.ANNOTATION_DORMANT not in (e["metadata"].get("annotations") or {})
        and (e.get("spec") or {}).get("enabled", True)
        and not ((e.get("status") or {}).get("credential") or {}).get("name")
        for e in observed["owned"])
