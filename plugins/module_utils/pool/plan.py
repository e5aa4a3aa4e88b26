"""The scale plan: what one reconcile of an ExporterSet should do.

``make_plan`` is a pure function of the objects the API server returns and
of ``now``: a typed ``Plan`` (phases/model.py) made by the phases in
phases/, in the order ``make_plan`` runs them; ``scale_plan`` gives it as
the dict that modules return and playbooks read. The rules are written down
in docs/pool-semantics.md. What it reads from the pool apart from the clock
(phases/survey.py) may be kept per set while no object changes, in a
``pool_index.SurveyCache`` its caller owns, which changes how long a plan
takes, never what it says. The provisioner applies the plan in this order:
the dormant Exporter it creates and the re-enables (so the selector never
runs out of enabled Exporters), then deletes, then disables and recycles,
then creates (so a tight maxReplicas is never exceeded), then the dormant
Exporters it removes, then the annotation patches (an Exporter's patch only
after its action succeeded), then the status.

Lease safety (lease_safety.py): the plan never disables, deletes or resets
an Exporter that is leased from either side (its ``status.leaseRef`` or a
non-ended Lease naming it). Removing or resetting one takes two plans: the
first disables it (``disable``, annotated ``retiring`` or ``scale-down``),
a later one that sees it disabled and still unleased deletes it (``delete``)
or resets it (``recycle``, enabled again after the reset). A lease's end is
read from the Lease objects, so an Exporter that served a lease is recycled
even when no reconcile saw it leased.

The dormant Exporter: the Jumpstarter controller ends a lease at once when
no enabled Exporter matches its selector. A set that may still grow
therefore keeps one Exporter without a backend (annotated
``constants.ANNOTATION_DORMANT``) while it has no other enabled Exporter; a
lease for the set then waits Pending/Offline on it, and that pending lease is
the demand that brings real instances up. The dormant Exporter counts in no
replica counter, never fails, is never scaled down, and is removed once
another enabled Exporter exists.
"""


from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import (
    class_status,
    operator_state,
    policy,
    pool_index,
    rollout,
    service_level,
    sizing,
    timings,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases import (
    conditions,
    creates,
    departures,
    scale_down,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.conditions import (  # noqa: F401
    REASON_LABEL_CONFLICT,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.creates import (  # noqa: F401 (the plan's names for its callers)
    REASON_REPLICA_CEILING,
    effective_max_replicas,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.dormant import (  # noqa: F401
    keep_one_enabled,
    needs_dormant_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.failures import FailureLog
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.model import Draft, Plan
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.naming import (
    dormant_exporter as _dormant_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.survey import survey_pool
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.wanted import (  # noqa: F401
    DEFAULT_SCALE_DOWN_COOLDOWN,
    Wanted,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    parse_duration,
    parse_time,
)

DEFAULT_OPTIONS = {
    "burst": 20,
    "startup_timeout": 300,
    # Seconds an exporter that was ready may stay offline before it is replaced.
    "offline_timeout": 300,
    "failure_threshold": 3,
    "failure_backoff_base": 10,
    "failure_backoff_max": 300,
    # Autohealing, per set from its ExporterSetPolicy's healing.* (_with_healing):
    # seconds a failure streak lasts before ReplicaFailure, and the backoff
    # between attempts at an instance that never became ready.
    "min_failing_duration": 0,
    "unschedulable_backoff_base": 30,
    "unschedulable_backoff_max": 600,
    "taken_names": (),
    "capacity": None,
    # controller_ca.read_controller_ca's result, when the reconcile read it.
    "controller_ca": None,
    # The operator's ceiling on the replicas of any one set, whatever its
    # maxReplicas says (0 there means no ceiling of the set's own); an admin's
    # setting (--max-replicas-per-set, reconcile_plan_options). 0: none.
    "max_replicas_per_set": 100,
    # Why the set's template labels may not be used (selectors.py,
    # template_label_conflicts): each a message naming the field. Nothing is
    # created while there are any.
    "label_conflicts": (),
}
# Seconds between two looks at an unavailable controller CA (a ConfigMap
# the operator does not watch).
CONTROLLER_CA_RETRY = 10.0


def scale_plan(exporter_set, virtual_target_class, exporters, pending_leases, now,
               instances=None, options=None, leases=None, surveys=None):
    """``make_plan``'s Plan as a dict, the shape modules return and playbooks read."""
    return make_plan(exporter_set, virtual_target_class, exporters, pending_leases, now,
                     instances=instances, options=options, leases=leases, surveys=surveys).to_dict()


def make_plan(exporter_set, virtual_target_class, exporters, pending_leases, now,
              instances=None, options=None, leases=None, surveys=None):
    """Plan one reconcile of ``exporter_set``; see the module docstring.

    ``leases`` are the namespace's Leases (at least those naming the set's
    Exporters): an Exporter a non-ended Lease names is leased even before its
    ``status.leaseRef`` says so, and an ended Lease it served asks for its
    recycle (lease_safety.py). ``surveys``: the caller's
    ``pool_index.SurveyCache``, or None to survey the pool afresh.
    """
    now = parse_time(now)
    options = _with_healing({**DEFAULT_OPTIONS, **(options or {})})
    # A paused set (its ExporterSetPolicy) keeps what it has: no action, no
    # annotation, its status as it was with Paused=True (pool/policy.py).
    if (options.get("policy") or {}).get("paused"):
        return Plan.from_dict(policy.paused_plan(exporter_set, now), exporter_set)
    # A snapshot of a cache keeps its revision (pool_index.Snapshot).
    if not isinstance(exporters, pool_index.Snapshot):
        exporters = list(exporters)
    if not isinstance(leases, pool_index.Snapshot):
        leases = list(leases or ())
    spec = exporter_set.get("spec") or {}
    state = operator_state.of(exporter_set)
    recycle_strategy = spec.get("recycleStrategy") or c.RECYCLE_EXIT_AND_REPLACE
    survey = survey_pool(exporter_set, exporters, leases, instances or {}, recycle_strategy, surveys)
    ceiling = creates.effective_max_replicas(spec, options)
    pending = len(pending_leases or ())

    # A missing class, or one whose provisioner is unknown: nothing can be
    # made; the set says why, naming the field (class_status.unusable).
    unusable = class_status.unusable(virtual_target_class, exporter_set)
    if unusable is not None:
        return _unusable_plan(exporter_set, virtual_target_class, survey, pending, ceiling, unusable, now)

    draft = Draft(state, now)
    for note in survey.notes:
        draft.annotate(note.name, note.key, draft.now_text if note.at_now else note.value)
    wanted = Wanted(exporter_set, virtual_target_class, options)
    draft.template_hash = wanted.template_hash
    # What the status reads of the Exporters, it reads as this pass leaves
    # them (its first-ready stamps in), so the next pass computes the same.
    as_planned = timings.as_planned(exporters, {note.name: draft.now_text for note in survey.notes
                                                if note.key == c.ANNOTATION_FIRST_READY and note.at_now})
    # A lease-wait target sizes the warm buffer, minAvailableReplicas its floor.
    sized = sizing.for_plan(exporter_set, virtual_target_class, as_planned, leases, wanted.warm_buffer,
                            options.get("policy"), now, draft,
                            room=ceiling[0] - survey.leased - pending if ceiling[0] > 0 else None,
                            cooldown=wanted.cooldown)
    if sized is not None:
        wanted.warm_buffer = sized[0].buffer

    # Failures, ended leases, retiring and outdated members: who departs.
    moves = departures.walk(survey, wanted, now, options, draft)
    failures = FailureLog(state, now)
    failures.settle(moves.failed, survey.became_ready, draft)

    # An invalid set (its parameters, its refusals, its labels) resets no
    # instance: a reset makes it again from the set's parameters. A member
    # whose lease ended waits, disabled, until they are fixed, and counts
    # for nothing meanwhile.
    label_conflicts = list(options.get("label_conflicts") or ())
    refused = wanted.invalid or bool(label_conflicts)
    if refused:
        moves.recycling = []
    if label_conflicts:
        moves.parked = []  # none re-enabled, none deleted: the set is not to act

    # The target, and the parked members re-enabled or deleted to meet it.
    target_unclamped = survey.leased + pending + wanted.warm_buffer
    target = creates.clamp(target_unclamped, spec.get("minReplicas") or 0, ceiling[0])
    useful = survey.leased + len(moves.idle) + len(moves.recycling) - moves.rollout_waiting
    need = target - useful
    reenabled, deleted = scale_down.settle_parked(moves.parked, need, wanted.template_hash,
                                                  wanted.rolling, draft)
    moves.leaving.update(deleted)
    # Exporters reset in place are enabled again once their instance is fresh.
    recycling = departures.reset_in_place(moves.recycling, draft)
    waiting_for_cooldown, victims = scale_down.disable_surplus(
        survey, moves.idle, moves.fresh_idle, -need, wanted.cooldown, wanted.warm_buffer, options,
        now, draft)
    if label_conflicts:
        _park_while_labels_refused(moves.idle, draft)

    # New Exporters under the ceilings, then the dormant Exporter.
    limits, backoff = creates.create(
        exporter_set, wanted.provisioner, exporters, max(need - len(reenabled), 0),
        survey.live - len(moves.leaving), ceiling, refused, failures, options, draft)
    # Of the idle members, only scale-down's victims are disabled (the
    # departing ones are never idle).
    keep_one_enabled(exporter_set, wanted.provisioner, exporters, survey.dormant,
                     survey.leased_enabled + survey.members_enabled,
                     survey.leased_enabled + len(reenabled) + len(recycling) + len(moves.idle) - victims,
                     options, draft, refused=bool(label_conflicts))
    if draft.create or draft.enable:
        names = [e.name for e in draft.create] + draft.enable
        verb = "creating" if draft.create else "re-enabling"
        draft.event("Normal", "ScaledUp", f"{verb} {len(names)} exporter(s): {', '.join(names)}")

    # The set's conditions and status.
    controller_ca = options.get("controller_ca")
    if controller_ca is not None and not controller_ca.get("available"):
        draft.requeue_at(CONTROLLER_CA_RETRY)
    held_by = conditions.rollout_held_by(wanted.rolling, wanted.strategy, moves.rollout_waiting, limits)
    set_conditions = [
        conditions.available(survey.counters, wanted.warm_buffer),
        conditions.progressing(draft, survey.provisioning, backoff, waiting_for_cooldown),
        conditions.degraded(wanted, label_conflicts, controller_ca, failures, options, draft),
        conditions.scaling_limited(limits, ceiling, target_unclamped),
        class_status.terminating_condition(virtual_target_class),
        rollout.condition(wanted.strategy, survey.template_hashes, wanted.template_hash, held_by=held_by),
        conditions.fields_ignored(wanted.warnings),
    ]
    counters = {**survey.counters, "updatedReplicas": rollout.updated_count(
        survey.template_hashes, wanted.template_hash)}
    return conditions.finish(exporter_set, counters, now, draft, target, set_conditions,
                             parameters=wanted.parameters, images=wanted.images,
                             warnings=wanted.warnings, backoff=backoff,
                             sizing=sized[1] if sized else None,
                             service=service_level.for_plan(exporter_set, as_planned, leases, counters, now,
                                                                     surveys))


def _park_while_labels_refused(idle, draft):
    """A set whose template labels are refused (an Exporter it does not
    control came to carry them after the set was made, say a lab's board)
    keeps none of its members enabled but the leased ones: a lease asking
    for that Exporter by the label would land on them. Its ``idle``
    members are parked as a scale-down parks them (re-enabled, or deleted,
    once the set is fixed); parked ones stay parked meanwhile, and a leased
    one waits disabled when its lease ends (``recycling`` is empty)."""
    names = sorted(member.name for member in idle if member.name not in draft.disable)
    for name in names:
        draft.disable.append(name)
        draft.annotate(name, c.ANNOTATION_SCALE_DOWN, draft.now_text)
    if names:
        draft.event("Normal", "ScalingDown",
                    f"disabling {len(names)} idle exporter(s) while the template's labels are refused: "
                    f"{', '.join(names)}")


def _unusable_plan(exporter_set, virtual_target_class, survey, pending, ceiling, unusable, now):
    """The plan of a set whose class cannot be used: no action, and the status says why."""
    reason, message = unusable
    spec = exporter_set.get("spec") or {}
    draft = Draft(operator_state.of(exporter_set), now)
    target = creates.clamp(survey.leased + pending + (spec.get("minAvailableReplicas") or 0),
                           spec.get("minReplicas") or 0, ceiling[0])
    set_conditions = [
        conditions.available(survey.counters, spec.get("minAvailableReplicas") or 0),
        conditions.make_condition(c.CONDITION_PROGRESSING, False, reason,
                                  "waiting for a VirtualTargetClass it can use"),
        conditions.make_condition(c.CONDITION_DEGRADED, True, reason, message),
        conditions.make_condition(c.CONDITION_SCALING_LIMITED, False, "WithinLimits", ""),
        class_status.terminating_condition(virtual_target_class),
    ]
    return conditions.finish(exporter_set, survey.counters, now, draft, target, set_conditions,
                             parameters=None, images=None, warnings=[])


def dormant_exporter(exporter_set, provisioner, taken_names):
    """The ``create`` entry of a set's dormant Exporter, named clear of ``taken_names``."""
    return _dormant_exporter(exporter_set, provisioner, taken_names).to_dict()


def _with_healing(options):
    """The plan options with the set's ExporterSetPolicy ``healing`` knobs
    (``options["policy"]``) over them; a knob left out (None) keeps the option."""
    healing = (options.get("policy") or {}).get("healing") or {}
    backoff = healing.get("unschedulableBackoff") or {}
    knobs = (
        ("failure_threshold", healing.get("startupFailureThreshold")),
        ("min_failing_duration", healing.get("minFailingDuration")),
        ("unschedulable_backoff_base", backoff.get("base")),
        ("unschedulable_backoff_max", backoff.get("max")),
    )
    if all(value is None for _, value in knobs):
        return options
    options = dict(options)
    for name, value in knobs:
        if value is None:
            continue
        try:
            options[name] = int(value) if name == "failure_threshold" else parse_duration(value)
        except (TypeError, ValueError):
            continue  # policy.validate names it; the option stays
    return options
