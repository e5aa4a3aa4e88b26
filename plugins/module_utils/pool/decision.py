# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""One pool pass of an ExporterSet, decided and then done.

``decide(observation, options)`` is pure: from what the pass observed (the
set, whether its class exists, whether the writes of the last pass are
seen, the scale plan and its pool part, the backend lane's state) it
returns a ``Pass``, frozen data saying every step: the set's finalizer to
add, the pool writes (the plan's Exporters, annotations, status and Events)
and whether the outcome goes with them, what to ask of the backend lane,
whether the set is paused, and when to look again. For a deleted set the
same: its teardown's backends to release, the leases it waits for, or its
finalizer to remove.

``execute(decided, writer, backends)`` does a ``Pass`` in the one order a
pass has: the finalizer, then the pool writes with the outcome (a
teardown's ``WaitingForLeases``, or its finalizer removed), then the
request to the backends; ``finish(decided, writer, error)`` is the rest of
it, once the backends ran: the writes that wait for them (the Exporters
whose backends are gone deleted, those reset in place enabled again; a
teardown's deletes or detaches and its finalizer), then, where the pass
records them (``records``), the outcome and the class's and policies'
status. ``writer`` and ``backends`` are the caller's: the operator's writes
in process and its backend lane, or the ``exporterset_pass`` module's
writes and the reconcile role's backend tasks, which run between its two
calls (``k8s/reconcile_pass.py`` ``RunWriter``).

Whether the pool loop may act (``Options``) is defined here once, with its
defaults.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants

FINALIZER = constants.GROUP + "/teardown"
# A pass that does not see its last pass's writes yet looks again after this.
EXPECTATIONS_REQUEUE = 1.0
# What a pass asks of the backend lane.
SUBMIT = "submit"  # a run of the set's backends
CLEAR = "clear"  # forget a failed run: nothing is left for the backends
PATHS = ("waiting", "inprocess", "fastpath", "teardown", "skipped")


def _meta(obj):
    return obj.get("metadata") or {}


def deleting(exporter_set):
    """Whether the set is being deleted."""
    return bool(_meta(exporter_set).get("deletionTimestamp"))


def has_finalizer(exporter_set, finalizer=FINALIZER):
    return bool(finalizer) and finalizer in (_meta(exporter_set).get("finalizers") or [])


def needs_finalizer(exporter_set, vclass, finalizer=FINALIZER):
    """Whether a reconcile adds ``finalizer`` to the set now: it lives, its
    class exists (a set without one has nothing to tear down yet) and the
    finalizer is not there."""
    return (bool(finalizer) and not deleting(exporter_set) and vclass is not None
            and not has_finalizer(exporter_set, finalizer))


def outcome_missing(exporter_set):
    """Whether the set's status lacks the SDK's ``Successful=True`` for its
    current generation."""
    generation = _meta(exporter_set).get("generation", 0)
    for condition in (exporter_set.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Successful":
            return not (condition.get("status") == "True"
                        and condition.get("observedGeneration", generation) == generation)
    return True


def outcome_due(exporter_set, plan, settled, write_condition=True):
    """Whether a pool pass writes the outcome now: the caller writes the
    conditions (``write_condition``: the watch's ``manageStatus``), nothing
    is left to do for the set's backends and no failed backend run's
    ``Failure`` stands (``settled``), the set is not paused (a paused set
    writes nothing once it says so, not even the outcome of a newer
    generation) and its status lacks the outcome."""
    return bool(write_condition and settled and not paused(plan) and outcome_missing(exporter_set))


def paused(plan):
    """Whether the plan is a paused set's (its ExporterSetPolicy's ``paused``)."""
    return bool((plan or {}).get("paused"))


@dataclass(frozen=True)
class Options:
    """How the pool loop acts on a set: the finalizer it keeps (None or
    empty: none), whether it writes the outcome conditions (the watch's
    ``manageStatus``) and whether its account may write the set's
    finalizers (``pool/permissions.py`` ``set-finalizer``)."""
    finalizer: str | None = FINALIZER
    manage_status: bool = True
    may_write_finalizer: bool = True
    # Whether the pass records the outcome, the class's and the policies'
    # status itself once the backends ran (a run of the reconcile role by
    # hand or from AWX); the operator's reconcilers record them in process.
    records: bool = False


@dataclass(frozen=True)
class Observation:
    """What a pass observed. ``plan`` and what follows it are read only
    once ``expectations_met``: the scale plan, its pool part (what the pass
    writes itself, ``changed`` when there is anything), whether the set's
    backends have work, and the lane's state for the set (a run queued or
    going: ``busy``; its last run failed: ``failed``); ``sync_wait``: the
    seconds a config re-sync is held back.

    A deleted set's: ``teardown``, how it releases its Exporters (``delete``
    or ``detach``, k8s/lifecycle.py ``reclaim``); ``teardown_left``, the
    Exporters and Pods it still holds (``teardown_remaining``), its
    finalizer removed once there are none; ``teardown_waits_for``, {name:
    leases} when only leased Exporters are left (``teardown_actionable``
    empty): nothing is released until the leases end."""
    exporter_set: Mapping[str, Any]
    has_class: bool
    expectations_met: bool = True
    plan: Mapping[str, Any] = field(default_factory=dict)
    pool_plan: Mapping[str, Any] = field(default_factory=dict)
    backends_needed: bool = False
    busy: bool = False
    failed: bool = False
    sync_wait: float | None = None
    teardown: str | None = None
    teardown_left: tuple = ()
    teardown_waits_for: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PoolWrites:
    """The pool part of the plan to write, and whether the outcome
    (``Successful``) is written with its status."""
    plan: Mapping[str, Any]
    write_outcome: bool


@dataclass(frozen=True)
class Pass:
    """One pass, decided (``decide``), in the order ``execute`` does it."""
    finalizer: str | None = None
    backends: str | None = None
    pool_writes: PoolWrites | None = None
    outcome: bool = False
    paused: bool = False
    requeue_after: float | None = None
    path: str = "fastpath"
    teardown: str | None = None
    records: bool = False
    wait_for_leases: Mapping[str, Any] | None = None
    release_finalizer: str | None = None


def _requeue(plan, sync_wait):
    requeue = plan.get("requeue_after")
    # A re-sync held back for a moment: looked at again then.
    if sync_wait:
        requeue = min(requeue or sync_wait, sync_wait)
    return requeue


def decide(observation, options=Options()):
    """The ``Pass`` of ``observation`` under ``options``."""
    exporter_set = observation.exporter_set
    if deleting(exporter_set):
        return _teardown(observation, options)
    finalizer = None
    if options.may_write_finalizer and needs_finalizer(exporter_set, {} if observation.has_class else None,
                                                       options.finalizer):
        finalizer = options.finalizer
    if not observation.expectations_met:
        # The last pass's writes are not seen yet: a plan now would make them again.
        return Pass(finalizer=finalizer, requeue_after=EXPECTATIONS_REQUEUE, path="waiting", records=options.records)
    plan = observation.plan
    is_paused = paused(plan)
    # A paused set makes no backend work.
    needed = observation.backends_needed and not is_paused
    backends = None
    if not observation.busy:
        backends = SUBMIT if needed else CLEAR
    # The outcome is written once nothing is left to do for the set's
    # backends; a failed run's Failure stays until then.
    settled = not (needed or observation.busy or observation.failed)
    outcome = outcome_due(exporter_set, plan, settled, options.manage_status)
    pool_writes = None
    if observation.pool_plan.get("changed") or outcome:
        pool_writes = PoolWrites(observation.pool_plan, write_outcome=bool(options.manage_status and settled))
    return Pass(finalizer=finalizer, backends=backends, pool_writes=pool_writes, outcome=outcome,
                paused=is_paused, requeue_after=_requeue(plan, observation.sync_wait),
                path="inprocess" if pool_writes is not None else "fastpath", records=options.records)


def _teardown(observation, options):
    """The ``Pass`` of a deleted set: nothing unless it carries the
    finalizer (it goes with the garbage collector, or another finalizer's
    owner holds it)."""
    if not observation.teardown or not has_finalizer(observation.exporter_set, options.finalizer):
        return Pass(path="skipped")
    if not observation.teardown_left:
        return Pass(release_finalizer=options.finalizer, backends=CLEAR, records=options.records, path="teardown")
    if not observation.expectations_met:
        return Pass(requeue_after=EXPECTATIONS_REQUEUE, path="waiting", records=options.records)
    if observation.teardown_waits_for:
        # A lease's end (its Lease or Exporter event) brings the set back.
        return Pass(wait_for_leases=dict(observation.teardown_waits_for), records=options.records,
                    path="teardown")
    # Its backends released (the request), then its Exporters deleted or
    # detached and, once nothing is held, its finalizer removed (``finish``).
    return Pass(backends=SUBMIT, teardown=observation.teardown, records=options.records, path="teardown")


def execute(decided, writer, backends):
    """Do ``decided``: the finalizer (``writer.add_finalizer(name)``), the
    pool writes with the outcome (``writer.write_pool(plan, write_outcome)``:
    Exporters created, enabled and disabled, annotations, the set's status
    and Events), a teardown's ``WaitingForLeases``
    (``writer.wait_for_leases(leased)``) or its finalizer removed
    (``writer.release_finalizer(name)``), then the request to the backends (``backends.submit()``,
    which checks the deletes and resets against lease safety on a fresh
    read before any backend goes, or ``backends.clear_failure()``). Returns
    what the pool writes wrote, None without."""
    if decided.finalizer:
        writer.add_finalizer(decided.finalizer)
    applied = None
    if decided.pool_writes is not None:
        applied = writer.write_pool(decided.pool_writes.plan, decided.pool_writes.write_outcome)
    if decided.wait_for_leases:
        writer.wait_for_leases(decided.wait_for_leases)
    if decided.release_finalizer:
        writer.release_finalizer(decided.release_finalizer)
    if decided.backends == SUBMIT:
        backends.submit()
    elif decided.backends == CLEAR:
        backends.clear_failure()
    return applied


def finish(decided, writer, error=None):
    """The rest of ``decided`` once its backends ran: unless they failed
    (``error``, what failed), the writes that waited for them
    (``writer.write_backends()``); then, where the pass records them
    (``decided.records``), the outcome, ``Successful`` or ``Failure`` with
    ``error``, and after a success the class's and policies' status
    (``writer.record(error)``)."""
    if error is None:
        writer.write_backends()
    if decided.records:
        writer.record(error)
