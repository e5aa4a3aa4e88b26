"""The scale plan: what one reconcile of an ExporterSet should do.

``scale_plan`` is a pure function of the objects the API server returns and
of ``now``; the rules it implements are written down in
docs/pool-semantics.md. What it reads from the pool apart from the clock
(``_Survey``) is kept per set while no object changes (pool_index.py), which
changes how long a plan takes, never what it says. The provisioner applies the plan in this order:
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

import json
from datetime import timedelta

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import (
    class_status,
    policy,
    pool_index,
    rollout,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    find_condition,
    read_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.lease_safety import (
    LeaseView,
    ended_key,
    format_ended_key,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
    validate_parameters,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.selectors import (
    selector_matches,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.set_overrides import (
    resolve,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import (
    counters_from_tally,
    make_condition,
    pool_status,
    tally_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.qemu.images import (
    UNRECOVERABLE_REASONS,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    backoff_delay,
    format_time,
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
# ScalingLimited reason when the operator's per-set ceiling bites.
REASON_REPLICA_CEILING = "OperatorReplicaCeiling"
# Degraded reason while the set's template labels are refused.
REASON_LABEL_CONFLICT = "TemplateLabelConflict"
# Seconds between two looks at an unavailable controller CA (a ConfigMap
# the operator does not watch).
CONTROLLER_CA_RETRY = 10.0
DEFAULT_SCALE_DOWN_COOLDOWN = "5m"

# Scale-down order, least useful first (then newest first, then name).
_RANK_BACKEND_LOST = 0
_RANK_PROVISIONING = 1
_RANK_OFFLINE = 2
_RANK_IDLE = 3


class _Member:
    """One owned, unleased, non-terminating Exporter and what the plan learnt about it."""

    __slots__ = ("exporter", "name", "ready", "enabled", "annotations", "instance", "rank",
                 "last_ended", "_created")

    def __init__(self, exporter, name, ready, enabled, annotations, instance):
        self.exporter = exporter
        self.name = name
        self.ready = ready
        self.enabled = enabled
        self.annotations = annotations
        self.instance = instance
        self.rank = _RANK_IDLE
        # The latest ended Lease it served, read when it may be reset in place.
        self.last_ended = None
        self._created = None

    @property
    def created(self):
        # Kept: a member of a kept survey has its timeouts checked every plan.
        if self._created is None:
            self._created = parse_time(self.exporter["metadata"]["creationTimestamp"])
        return self._created

    @property
    def created_sort_key(self):
        """creationTimestamp as canonical UTC text, which sorts chronologically.

        The API server writes exactly this form, so parsing is skipped for it.
        """
        text = self.exporter["metadata"]["creationTimestamp"]
        return text if len(text) == 20 and text[-1] == "Z" else format_time(parse_time(text))


class _Builder:
    """Accumulates the actions of one plan."""

    def __init__(self, set_annotations, now):
        self.now_text = format_time(now)
        self.create = []
        self.enable = []
        self.disable = []
        self.delete = []
        self.recycle = []
        self.create_dormant = []
        self.delete_dormant = []
        self.exporter_annotations = {}
        self.set_annotation_values = set_annotations
        self.set_annotations = {}
        self.events = []
        self.requeue = []
        # Written on every Exporter it creates (rollout.py).
        self.template_hash = None

    def remove(self, exporter, reason):
        """Plan the deletion of an owned Exporter; the UID keeps a namesake safe."""
        entry = {"name": exporter["metadata"]["name"], "reason": reason}
        uid = exporter["metadata"].get("uid")
        if uid:
            entry["uid"] = uid
        self.delete.append(entry)

    def annotate(self, name, key, value):
        self.exporter_annotations.setdefault(name, {})[key] = value

    def annotate_set(self, key, value):
        if self.set_annotation_values.get(key) != value:
            self.set_annotations[key] = value

    def event(self, kind, reason, message, exporter=None):
        event = {"type": kind, "reason": reason, "message": message}
        if exporter is not None:
            event["exporter"] = exporter
        self.events.append(event)

    def requeue_at(self, seconds):
        self.requeue.append(max(float(seconds), 0.0))


# Markers of the pool survey: a note written with the plan's time, a member
# whose failure depends on the clock, and what becomes of a member that has
# not failed.
_NOW = object()
_TIMED = object()
_DEPART = "depart"
_ENDED = "ended"
_PARKED = "parked"
_IDLE = "idle"


class _Survey:
    """What a plan reads from the pool alone, apart from the clock.

    It depends only on the Exporters, the Leases naming them, the instances
    and the recycle strategy, so a plan over an unchanged pool reuses it
    (``_pool_survey``). Nothing in it is changed once it is made.
    """

    __slots__ = ("counters", "live", "leased", "leased_enabled", "dormant", "notes",
                 "became_ready", "steps", "parked", "idle", "members_enabled", "provisioning",
                 "template_hashes",
                 "_scale_down_order")

    def scale_down_order(self):
        if self._scale_down_order is None:
            self._scale_down_order = _scale_down_order(self.idle)
        return self._scale_down_order


def _pool_survey(exporter_set, exporters, leases, instances, recycle_strategy):
    """The survey of the pool, kept for the set while every Exporter and Lease
    is the same version (pool_index), the instances are equal and the
    recycle strategy is the same; made afresh when any object lacks a
    version."""
    metadata = exporter_set["metadata"]
    owner = (metadata.get("namespace"), metadata.get("name"), metadata.get("uid"))
    revisions = (pool_index.revision(exporters), pool_index.revision(leases))
    by_revision = None not in revisions
    if by_revision:
        # Snapshots of the operator's caches: their revisions say whether
        # anything changed, without a pass over the objects.
        keys = None
        inputs = (revisions, None, recycle_strategy, instances)
    else:
        keys = pool_index.versions(exporters)
        lease_keys = pool_index.versions(leases) if keys is not None else None
        inputs = None
        if keys is not None and lease_keys is not None:
            inputs = (keys, lease_keys, recycle_strategy, instances)

    def compute(digests):
        # The objects' versions are read only when a survey is made.
        read = pool_index.versions(exporters) if by_revision else keys
        return _survey(exporters, digests.read(exporters, read), leases, instances, recycle_strategy)

    return pool_index.survey(owner, inputs, compute,
                             snapshot=lambda kept: kept[:3] + (_copy_instances(kept[3]),))


def _copy_instances(instances):
    return {name: dict(instance) if isinstance(instance, dict) else instance
            for name, instance in instances.items()}


def _survey(exporters, digests, leases, instances, recycle_strategy):
    """One pass over the pool: counters, lease bookkeeping, and what the rules
    make of each unleased member, as far as the clock does not matter."""
    lease_view = LeaseView(leases)
    # Most Exporters are named by no Lease: their lease checks are skipped.
    active, ended_leases = lease_view.active, lease_view.ended
    survey = _Survey()
    tally = {}
    dormant = []
    notes = []  # (name, annotation, value); _NOW: the plan's time
    steps = []  # (member, failure or _TIMED, what follows when it has not failed)
    parked = []
    idle = []
    template_hashes = {}  # (template hash or None, leased): count (rollout.py)
    live = leased = leased_enabled = members_enabled = 0
    provisioning = False
    for exporter, digest in zip(exporters, digests, strict=True):
        if digest.terminating:
            continue
        name = digest.name
        # Leased from either side: its leaseRef, or a Lease naming it.
        lease = digest.lease or (lease_view.active_holders(name)[0] if name in active else None)
        if digest.dormant:
            dormant.append((exporter, lease is not None))
            continue
        live += 1
        ready, enabled = digest.ready, digest.enabled
        instance = instances.get(name)
        phase = instance.get("phase") if instance else None
        tally_exporter(tally, ready, digest.online, enabled, lease is not None, phase)
        made_from = (digest.annotations.get(c.ANNOTATION_TEMPLATE_HASH), lease is not None)
        template_hashes[made_from] = template_hashes.get(made_from, 0) + 1
        if ready and not digest.first_ready:
            notes.append((name, c.ANNOTATION_FIRST_READY, _NOW))
        if lease:
            leased += 1
            leased_enabled += enabled
            if digest.leased_by != lease:
                notes.append((name, c.ANNOTATION_LEASED_BY, lease))
            continue

        # A member: unleased from both sides (lease_safety.py).
        members_enabled += enabled
        if enabled and not ready:
            provisioning = True
        retiring = digest.retiring
        if not enabled and not retiring and not digest.scale_down:
            continue  # disabled by someone else: counted, never touched
        member = _Member(exporter, name, ready, enabled, digest.annotations, instance)
        if retiring:
            if retiring == c.RECYCLE_IN_PLACE_REUSE and not enabled:
                member.last_ended = lease_view.last_ended(exporter)
            steps.append((member, None, (_DEPART, retiring)))
            continue
        if phase == c.INSTANCE_FAILED:
            steps.append((member, _instance_failure(member), None))
            continue
        ended = None
        if member.name in ended_leases:
            ended = lease_view.lease_to_recycle(member.exporter,
                                                member.annotations.get(c.ANNOTATION_REUSED_AFTER))
        if ended is not None:
            why = (c.RECYCLE_IN_PLACE_REUSE if recycle_strategy == c.RECYCLE_IN_PLACE_REUSE
                   else c.DELETE_RECYCLE)
            member.last_ended = ended
            then = (_ENDED, ended["metadata"]["name"], why)
        else:
            member.rank = _rank(member)
            if not enabled:
                then = (_PARKED,)
            else:
                then = (_IDLE, digest.scale_down)
        if not ready:
            # Whether it stayed unready too long is the clock's to say.
            steps.append((member, _TIMED, then))
        elif then[0] == _PARKED:
            parked.append(member)
        elif then[0] == _IDLE and not then[1]:
            idle.append(member)
        else:
            steps.append((member, None, then))

    parked.sort(key=_parked_order)
    survey.counters = counters_from_tally(tally)
    survey.live, survey.leased, survey.leased_enabled = live, leased, leased_enabled
    survey.dormant = dormant
    survey.notes = notes
    survey.became_ready = any(value is _NOW for _, _, value in notes)
    survey.steps = steps
    survey.parked = parked
    survey.idle = idle
    survey.template_hashes = template_hashes
    survey.members_enabled = members_enabled
    survey.provisioning = provisioning
    survey._scale_down_order = None
    return survey


def scale_plan(exporter_set, virtual_target_class, exporters, pending_leases, now,
               instances=None, options=None, leases=None):
    """Plan one reconcile of ``exporter_set``; see the module docstring.

    ``leases`` are the namespace's Leases (at least those naming the set's
    Exporters): an Exporter a non-ended Lease names is leased even before its
    ``status.leaseRef`` says so, and an ended Lease it served asks for its
    recycle (lease_safety.py).
    """
    now = parse_time(now)
    options = _with_healing({**DEFAULT_OPTIONS, **(options or {})})
    instances = instances or {}
    # A snapshot of a cache keeps its revision (pool_index.Snapshot).
    if not isinstance(exporters, pool_index.Snapshot):
        exporters = list(exporters)
    if not isinstance(leases, pool_index.Snapshot):
        leases = list(leases or ())
    metadata = exporter_set["metadata"]
    spec = exporter_set.get("spec") or {}
    builder = _Builder(metadata.get("annotations") or {}, now)
    recycle_strategy = spec.get("recycleStrategy") or c.RECYCLE_EXIT_AND_REPLACE
    # A paused set (its ExporterSetPolicy) keeps what it has: no action, no
    # annotation, its status as it was with Paused=True (pool/policy.py).
    if (options.get("policy") or {}).get("paused"):
        return policy.paused_plan(exporter_set, now)

    # What the pool alone says (kept while no object changes: _pool_survey).
    survey = _pool_survey(exporter_set, exporters, leases, instances, recycle_strategy)
    for name, key, value in survey.notes:
        builder.annotate(name, key, builder.now_text if value is _NOW else value)
    counters = survey.counters
    leased, leased_enabled, live = survey.leased, survey.leased_enabled, survey.live

    min_replicas = spec.get("minReplicas") or 0
    max_replicas, ceiling_bites = effective_max_replicas(spec, options)
    pending = len(pending_leases or ())

    # A missing class, or one whose provisioner is unknown: nothing can be
    # made; the set says why, naming the field (class_status.unusable).
    unusable = class_status.unusable(virtual_target_class, exporter_set)
    if unusable is not None:
        reason, message = unusable
        builder = _Builder(metadata.get("annotations") or {}, now)
        target = _clamp(leased + pending + (spec.get("minAvailableReplicas") or 0),
                        min_replicas, max_replicas)
        conditions = [
            _available_condition(counters, spec.get("minAvailableReplicas") or 0),
            make_condition(c.CONDITION_PROGRESSING, False, reason,
                           "waiting for a VirtualTargetClass it can use"),
            make_condition(c.CONDITION_DEGRADED, True, reason, message),
            make_condition(c.CONDITION_SCALING_LIMITED, False, "WithinLimits", ""),
            class_status.terminating_condition(virtual_target_class),
        ]
        return _finish(exporter_set, counters, now, builder, target, conditions,
                       parameters=None, images=None, warnings=[])

    class_spec = virtual_target_class.get("spec") or {}
    provisioner = class_spec.get("provisioner")
    # The set over its class, with every field that receives or directs the
    # class's credentials as the class has it; the set's attempts to change
    # them are violations, and nothing is created while there are any.
    resolved = resolve(virtual_target_class, exporter_set)
    parameters, images, redirects = resolved["parameters"], resolved["images"], resolved["violations"]
    validation = validate_parameters(provisioner, parameters)
    errors = list(validation["errors"])
    try:
        cooldown = parse_duration(spec.get("scaleDownCooldown") or DEFAULT_SCALE_DOWN_COOLDOWN)
    except ValueError:
        errors.append(f"spec.scaleDownCooldown: {spec.get('scaleDownCooldown')!r} is not a "
                      "duration")
        cooldown = parse_duration(DEFAULT_SCALE_DOWN_COOLDOWN)
    waits_for_consumer = class_spec.get("bindingMode") == c.BINDING_WAIT_FOR_FIRST_CONSUMER
    warm_buffer = 0 if waits_for_consumer else (spec.get("minAvailableReplicas") or 0)
    # Rollout of changes (rollout.py): what a new Exporter is made from, and
    # whether outdated ones are replaced (never while the set is invalid:
    # nothing could be made in their place).
    builder.template_hash = rollout.template_hash(virtual_target_class, exporter_set,
                                                  parameters, images)
    rollout_strategy, max_unavailable = rollout.settings(options.get("policy"))
    rolling = rollout_strategy != rollout.ROLLOUT_NONE and not (errors or redirects)
    rollout_in_flight = 0

    def replaced_not_reset(member, why):
        """An outdated member is replaced, not reset in place, while rolling."""
        if (rolling and why == c.RECYCLE_IN_PLACE_REUSE
                and rollout.outdated(member.annotations, builder.template_hash)):
            return c.DELETE_RECYCLE
        return why

    failures = _FailureLog(builder.set_annotation_values, now)
    failed = []  # (member, reason, message)
    leaving = set()
    recycling = []
    # Disabled by us for scale-down, unleased; enabled and unleased (what
    # scale-down may pick). The survey's lists are shared: never changed here.
    parked, extra_parked = survey.parked, []
    idle, extra_idle = survey.idle, []

    # Every member is unleased from both sides (lease_safety.py). Removing or
    # resetting one takes two plans: this one disables it (and marks it
    # retiring), a later one, that sees it disabled and still unleased,
    # deletes or resets it.
    retire = []  # (member, why): enabled, to disable first

    def depart(member, why):
        """The member goes (or, with InPlaceReuse, is reset): disabled first,
        removed or reset once seen disabled."""
        if member.enabled:
            retire.append((member, why))
        elif why == c.RECYCLE_IN_PLACE_REUSE:
            recycling.append(member)
        else:
            builder.remove(member.exporter, why)
            leaving.add(member.name)

    # The members whose turn depends on the clock or leaves a trace (an
    # Event, an annotation, a departure), in pool order.
    for member, failure, then in survey.steps:
        if failure is _TIMED:
            failure = _timeout_failure(member, now, options, builder)
        if failure is not None:
            failed.append((member, *failure))
            depart(member, failure[0])
            continue
        kind = then[0]
        if kind == _DEPART:
            rollout_in_flight += then[1] == c.DELETE_ROLLOUT
            depart(member, replaced_not_reset(member, then[1]))
        elif kind == _ENDED:
            _, lease_name, why = then
            replaced = replaced_not_reset(member, why)
            if replaced != why:
                what = "replacing the exporter, made from an earlier template (rollout)"
            elif why == c.RECYCLE_IN_PLACE_REUSE:
                what = "resetting in place (InPlaceReuse)"
            else:
                what = "replacing the exporter (ExitAndReplace)"
            builder.event("Normal", "Recycling", f"lease {lease_name} ended, {what}", member.name)
            depart(member, replaced)
        elif kind == _PARKED:
            extra_parked.append(member)
        else:
            if then[1]:
                builder.annotate(member.name, c.ANNOTATION_SCALE_DOWN, None)
            extra_idle.append(member)
    if extra_parked:
        parked = sorted(parked + extra_parked, key=_parked_order)
    if extra_idle:
        idle = idle + extra_idle
    # Proactive rollout: idle outdated members go, a few at a time, while the
    # warm buffer stays met; those that must wait for a replacement are
    # counted out of the pool, so the replacement is made first.
    rollout_waiting = 0
    if rolling and rollout_strategy == rollout.ROLLOUT_PROACTIVE:
        candidates = [m for m in idle if rollout.outdated(m.annotations, builder.template_hash)]
        going, rollout_waiting = rollout.choose(candidates, max_unavailable, rollout_in_flight,
                                                sum(m.ready for m in idle), warm_buffer)
        if going:
            gone = {m.name for m in going}
            idle = [m for m in idle if m.name not in gone]
            # idle is no longer the survey's: its scale-down order is made afresh.
            extra_idle = extra_idle or going
            for member in going:
                depart(member, c.DELETE_ROLLOUT)
            builder.event("Normal", "RollingOut",
                          f"replacing {len(going)} idle exporter(s) made from an earlier "
                          f"template (Proactive, maxUnavailable {max_unavailable}): "
                          f"{', '.join(sorted(gone))}")

    for member, why in sorted(retire, key=lambda entry: entry[0].name):
        builder.disable.append(member.name)
        builder.annotate(member.name, c.ANNOTATION_RETIRING, why)
    if survey.became_ready:
        failures.reset(builder)
    failed.sort(key=lambda entry: entry[0].name)
    failures.record(failed, builder)

    target_unclamped = leased + pending + warm_buffer
    target = _clamp(target_unclamped, min_replicas, max_replicas)
    # Exporters reset in place are enabled again once their instance is fresh.
    recycling = sorted(recycling, key=lambda m: m.name)
    useful = leased + len(idle) + len(recycling) - rollout_waiting
    need = target - useful
    if rolling and need > 0 and parked:
        # Parked Exporters made from the current template are re-enabled first.
        parked = sorted(parked, key=lambda m: rollout.outdated(m.annotations,
                                                               builder.template_hash))
    reenabled = parked[:max(need, 0)]
    for member in reenabled:
        builder.enable.append(member.name)
        builder.annotate(member.name, c.ANNOTATION_SCALE_DOWN, None)
    for member in parked[len(reenabled):]:
        builder.remove(member.exporter, c.DELETE_SCALE_DOWN)
        leaving.add(member.name)
    scaled_down = [m.name for m in parked[len(reenabled):]]
    if scaled_down:
        builder.event("Normal", "ScaledDown",
                      f"deleting {len(scaled_down)} disabled exporter(s): "
                      f"{', '.join(scaled_down)}")
    for member in recycling:
        entry = {"name": member.name, "strategy": c.RECYCLE_IN_PLACE_REUSE}
        if member.exporter["metadata"].get("uid"):
            entry["uid"] = member.exporter["metadata"]["uid"]
        builder.recycle.append(entry)
        # Applied with the re-enable, after the reset.
        builder.annotate(member.name, c.ANNOTATION_RETIRING, None)
        builder.annotate(member.name, c.ANNOTATION_SCALE_DOWN, None)
        last = member.last_ended
        if last is not None:
            builder.annotate(member.name, c.ANNOTATION_REUSED_AFTER,
                             format_ended_key(ended_key(last)))

    surplus = -need
    waiting_for_cooldown = False
    victims = 0
    if surplus > 0 and idle:
        scale_in = (options.get("policy") or {}).get("scaleIn") or {}
        if extra_idle or _custom_scale_in(scale_in):
            order = _scale_down_order(idle, scale_in)
        else:
            order = survey.scale_down_order()
        # Only ready idle members beyond the warm buffer may go: one being
        # reset counts as useful, but it is not available until it is ready.
        spare_ready = max(sum(1 for m in idle if m.ready) - warm_buffer, 0)
        waiting_for_cooldown, victims = _scale_down(order, surplus, cooldown, now, builder,
                                                    spare_ready)
    else:
        builder.annotate_set(c.ANNOTATION_SURPLUS_SINCE, None)

    to_create = max(need - len(reenabled), 0)
    live_after_deletes = live - len(leaving)
    limits = _CreateLimits(to_create)
    if max_replicas > 0:
        limits.apply(max_replicas - live_after_deletes, *_ceiling_reason(max_replicas, ceiling_bites))
    capacity = options.get("capacity")
    if capacity is not None:
        limits.apply(capacity.get("limit", 0), capacity.get("reason") or c.REASON_NO_FREE_SLOTS,
                     capacity.get("message") or "backend has no free capacity")
    limits.apply(options["burst"], None, None)
    label_conflicts = list(options.get("label_conflicts") or ())
    if errors or redirects or label_conflicts:
        limits.apply(0, None, None)
    backoff_wait = failures.backoff_remaining(options)
    backoff = None
    if backoff_wait > 0:
        limits.apply(0, None, None)
        builder.requeue_at(backoff_wait)
        backoff = failures.backoff_status(options)
    elif failures.exhausted(options):
        limits.apply(1, None, None)
    _create(exporter_set, provisioner, exporters, limits.allowed, options, builder)
    if builder.create and failures.count > 0 and failures.last.get("time"):
        builder.event("Normal", "Retrying",
                      f"attempt {failures.count + 1} after {failures.count} failure(s) in a row "
                      f"(last: {failures.last.get('reason')}), having waited "
                      f"{failures.delay(options):g}s")
    enabled_before = leased_enabled + survey.members_enabled
    # Of the idle members, only scale-down's victims are disabled (the
    # departing ones are never idle).
    enabled_after = leased_enabled + len(reenabled) + len(recycling) + len(idle) - victims
    _keep_one_enabled(exporter_set, provisioner, exporters, survey.dormant, enabled_before,
                      enabled_after, options, builder, refused=bool(label_conflicts))

    if builder.create or builder.enable:
        names = [e["name"] for e in builder.create] + builder.enable
        verb = "creating" if builder.create else "re-enabling"
        builder.event("Normal", "ScaledUp",
                      f"{verb} {len(names)} exporter(s): {', '.join(names)}")

    controller_ca = options.get("controller_ca")
    ca_unavailable = controller_ca is not None and not controller_ca.get("available")
    if ca_unavailable:
        builder.requeue_at(CONTROLLER_CA_RETRY)
    degraded = make_condition(c.CONDITION_DEGRADED, False, "AsExpected", "")
    if label_conflicts:
        degraded = make_condition(c.CONDITION_DEGRADED, True, REASON_LABEL_CONFLICT,
                                  "; ".join(label_conflicts) + "; nothing is created for this set")
    elif redirects:
        # CredentialRedirect, or NotAllowedByClass for the class's other rules.
        degraded = make_condition(c.CONDITION_DEGRADED, True, resolved["reason"],
                                  "; ".join(redirects + errors))
    elif errors:
        degraded = make_condition(c.CONDITION_DEGRADED, True, c.REASON_INVALID_PARAMETERS,
                                  "; ".join(errors))
    elif ca_unavailable:
        degraded = make_condition(c.CONDITION_DEGRADED, True, c.REASON_CONTROLLER_CA_UNAVAILABLE,
                                  controller_ca.get("message") or "the controller CA is unavailable")
    elif failures.degraded(options, builder):
        degraded = make_condition(
            c.CONDITION_DEGRADED, True, c.REASON_REPLICA_FAILURE,
            f"{failures.count} consecutive instance failure(s); last: {failures.last_message}",
        )
    limited_reason, limited_message = limits.reason, limits.message
    if limited_reason is None and max_replicas > 0 and target_unclamped > max_replicas:
        if ceiling_bites:
            limited_reason = REASON_REPLICA_CEILING
            limited_message = (f"need {target_unclamped} replicas, the operator's ceiling is "
                               f"{max_replicas} per set (--max-replicas-per-set)")
        else:
            limited_reason = c.REASON_MAX_REPLICAS_REACHED
            limited_message = f"need {target_unclamped} replicas, maxReplicas is {max_replicas}"
    scaling_limited = (
        make_condition(c.CONDITION_SCALING_LIMITED, True, limited_reason, limited_message)
        if limited_reason
        else make_condition(c.CONDITION_SCALING_LIMITED, False, "WithinLimits", "")
    )
    conditions = [
        _available_condition(counters, warm_buffer),
        _progressing_condition(builder, survey.provisioning, backoff, waiting_for_cooldown),
        degraded,
        scaling_limited,
        class_status.terminating_condition(virtual_target_class),
        rollout.condition(rollout_strategy, survey.template_hashes, builder.template_hash,
                          held_by=_rollout_held_by(rolling, rollout_strategy, rollout_waiting,
                                                   limits)),
    ]
    counters = {**counters, "updatedReplicas": rollout.updated_count(
        survey.template_hashes, builder.template_hash)}
    return _finish(exporter_set, counters, now, builder, target, conditions,
                   parameters=parameters, images=images,
                   warnings=validation["warnings"] + resolved["warnings"], backoff=backoff)


def effective_max_replicas(spec, options):
    """(the set's ceiling, whether it is the operator's): the smaller of
    ``spec.maxReplicas`` (0: none of its own) and the operator's
    ``max_replicas_per_set`` (0: none); 0 only when neither sets one."""
    own = spec.get("maxReplicas") or 0
    operator = options.get("max_replicas_per_set") or 0
    if operator > 0 and (own <= 0 or operator < own):
        return operator, True
    return own, False


def _ceiling_reason(max_replicas, operator_ceiling):
    if operator_ceiling:
        return (REASON_REPLICA_CEILING,
                f"the operator's ceiling of {max_replicas} replicas per set reached "
                "(--max-replicas-per-set)")
    return c.REASON_MAX_REPLICAS_REACHED, f"maxReplicas {max_replicas} reached"


def _rollout_held_by(rolling, strategy, waiting, limits):
    """Why a rollout cannot go on, or None."""
    if not rolling and strategy != rollout.ROLLOUT_NONE:
        return "the set's parameters or images are invalid (Degraded)"
    if waiting and limits.allowed < limits.wanted:
        return ("no replacement can be made while the warm buffer is kept"
                + (f" ({limits.message})" if limits.message else ""))
    return None


def _clamp(value, lower, upper):
    value = max(value, lower)
    return min(value, upper) if upper > 0 else value


def _instance_failure(member):
    """(reason, message) when the backend reports the instance failed, else None."""
    instance = member.instance
    if instance is not None and instance.get("phase") == c.INSTANCE_FAILED:
        detail = instance.get("message") or instance.get("reason") or "instance failed"
        return c.DELETE_FAILED, f"{member.name}: {detail}"
    return None


def _timeout_failure(member, now, options, builder):
    """(reason, message) when a member that is not ready has been so for too
    long, else None.

    Also asks for a requeue at the moment a timeout would expire.
    """
    if c.ANNOTATION_FIRST_READY not in member.annotations:
        age = (now - member.created).total_seconds()
        if age >= options["startup_timeout"]:
            return (c.DELETE_STARTUP_TIMEOUT,
                    f"{member.name}: not ready {options['startup_timeout']:g}s after creation")
        builder.requeue_at(options["startup_timeout"] - age)
        return None
    online = find_condition(member.exporter, "Online") or find_condition(
        member.exporter, "Registered")
    since = (online or {}).get("lastTransitionTime")
    if since is None:
        return None
    offline_for = (now - parse_time(since)).total_seconds()
    if offline_for >= options["offline_timeout"]:
        return c.DELETE_FAILED, f"{member.name}: offline since {since}"
    builder.requeue_at(options["offline_timeout"] - offline_for)
    return None


def _rank(member):
    instance = member.instance
    if instance is not None and instance.get("phase") in (c.INSTANCE_FAILED, c.INSTANCE_UNKNOWN):
        return _RANK_BACKEND_LOST
    if member.ready:
        return _RANK_IDLE
    if c.ANNOTATION_FIRST_READY in member.annotations:
        return _RANK_OFFLINE
    return _RANK_PROVISIONING


def _custom_scale_in(scale_in):
    """Whether a policy's scaleIn changes the default order."""
    return (scale_in.get("order") or "Default") != "Default" or bool(scale_in.get("preferSelector"))


def _scale_down_order(idle, scale_in=None):
    """Idle members, the first to disable first: least useful (backend lost,
    provisioning, offline, idle), then those the policy's
    ``scaleIn.preferSelector`` matches, then newest first (``OldestFirst``:
    oldest first), then by name."""
    scale_in = scale_in or {}
    prefer = scale_in.get("preferSelector")
    # Stable sorts: by name, then by age, then preferred first, then least useful first.
    order = sorted(idle, key=lambda m: m.name)
    order.sort(key=lambda m: m.created_sort_key, reverse=scale_in.get("order") != "OldestFirst")
    if prefer:
        order.sort(key=lambda m: not selector_matches(
            prefer, m.exporter["metadata"].get("labels") or {}))
    order.sort(key=lambda m: m.rank)
    return order


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


def _parked_order(member):
    return -member.rank, member.name


def _scale_down(order, surplus, cooldown, now, builder, spare_ready):
    """Disable the least useful idle exporters once the cooldown has run out.

    ``order`` is the idle members in ``_scale_down_order``; at most
    ``spare_ready`` of the victims may be ready (the rest of the ready ones
    are the warm buffer). Returns whether the cooldown is still running, and
    how many were disabled.
    """
    since_text = builder.set_annotation_values.get(c.ANNOTATION_SURPLUS_SINCE)
    try:
        since = parse_time(since_text) if since_text else None
    except ValueError:
        since = None
    if since is None:
        builder.annotate_set(c.ANNOTATION_SURPLUS_SINCE, builder.now_text)
        since = now
    remaining = cooldown - (now - since).total_seconds()
    if remaining > 0:
        builder.requeue_at(remaining)
        return True, 0
    victims = []
    for member in order:
        if len(victims) == surplus:
            break
        if member.ready:
            if spare_ready == 0:
                continue
            spare_ready -= 1
        victims.append(member)
    if not victims:
        return False, 0
    for member in victims:
        builder.disable.append(member.name)
        builder.annotate(member.name, c.ANNOTATION_SCALE_DOWN, builder.now_text)
    names = sorted(m.name for m in victims)
    builder.event("Normal", "ScalingDown",
                  f"disabling {len(names)} idle exporter(s) before deletion: {', '.join(names)}")
    return False, len(victims)


class _FailureLog:
    """Consecutive failures kept in the set's annotations."""

    def __init__(self, annotations, now):
        self.now = now
        try:
            self.count = int(annotations.get(c.ANNOTATION_CONSECUTIVE_FAILURES) or 0)
        except ValueError:
            self.count = 0
        try:
            self.last = json.loads(annotations.get(c.ANNOTATION_LAST_FAILURE) or "{}")
        except ValueError:
            self.last = {}
        if not isinstance(self.last, dict):
            self.last = {}

    @property
    def last_message(self):
        return self.last.get("message", "")

    def exhausted(self, options):
        """At the threshold, or the last failure cannot be cured by a retry."""
        return self.count >= options["failure_threshold"] or bool(self.last.get("unrecoverable"))

    def degraded(self, options, builder):
        """Exhausted, and failing for ``min_failing_duration`` since the
        streak's first failure (at once when a retry cannot cure it); asks
        for a requeue when that moment is still to come."""
        if not self.exhausted(options) or self.last.get("unrecoverable"):
            return self.exhausted(options)
        since = self.last.get("since") or self.last.get("time")
        if not since:
            return True
        remaining = options["min_failing_duration"] - (self.now - parse_time(since)).total_seconds()
        if remaining > 0:
            builder.requeue_at(remaining)
            return False
        return True

    def reset(self, builder):
        self.count = 0
        self.last = {}
        builder.annotate_set(c.ANNOTATION_CONSECUTIVE_FAILURES, None)
        builder.annotate_set(c.ANNOTATION_LAST_FAILURE, None)

    def record(self, failed, builder):
        already_counted = set(self.last.get("exporters") or ())
        for member, reason, message in failed:
            builder.event("Warning", "ReplicaFailed" if reason == c.DELETE_FAILED else reason,
                          message, member.name)
        fresh = [entry for entry in failed if entry[0].name not in already_counted]
        if not fresh:
            return
        since = (self.last.get("since") or self.last.get("time")) if self.count > 0 else None
        self.count += len(fresh)
        _, reason, message = fresh[-1]
        self.last = {
            "time": format_time(self.now),
            "since": since or format_time(self.now),
            "reason": reason,
            "message": message,
            "exporters": sorted(entry[0].name for entry in failed),
        }
        if all(c.ANNOTATION_FIRST_READY not in entry[0].annotations for entry in fresh):
            # Never became ready (unschedulable, or could not start): the
            # unschedulable backoff spaces the attempts.
            self.last["start"] = True
        if any((entry[0].instance or {}).get("reason") in UNRECOVERABLE_REASONS for entry in fresh):
            # A wrong image digest fails every retry alike: degraded at once.
            self.last["unrecoverable"] = True
        builder.annotate_set(c.ANNOTATION_CONSECUTIVE_FAILURES, str(self.count))
        builder.annotate_set(c.ANNOTATION_LAST_FAILURE,
                             json.dumps(self.last, sort_keys=True, separators=(",", ":")))

    def delay(self, options):
        """Seconds the create after the last failure waits: instances that
        never became ready back off exponentially (``unschedulable_backoff_*``);
        other failures by ``failure_backoff_*``, the maximum from the threshold on."""
        if self.last.get("start") and not self.last.get("unrecoverable"):
            return backoff_delay(self.count, options["unschedulable_backoff_base"],
                                 options["unschedulable_backoff_max"])
        delay = options["failure_backoff_max"]
        if not self.exhausted(options):
            delay = backoff_delay(self.count, options["failure_backoff_base"], delay)
        return delay

    def backoff_remaining(self, options):
        """Seconds until the next create is allowed (0 when it is allowed now)."""
        if self.count <= 0 or not self.last.get("time"):
            return 0.0
        elapsed = (self.now - parse_time(self.last["time"])).total_seconds()
        return max(self.delay(options) - elapsed, 0.0)

    def backoff_status(self, options):
        """``status.backoff`` while a create waits: the failures in a row, the
        wait, and when the next attempt is made."""
        delay = self.delay(options)
        next_time = parse_time(self.last["time"]) + timedelta(seconds=delay)
        return {"attempts": self.count, "delaySeconds": int(round(delay)),
                "nextAttemptTime": format_time(next_time)}


class _CreateLimits:
    """The smallest of several ceilings on creates, and why it applies."""

    def __init__(self, wanted):
        self.wanted = wanted
        self.allowed = wanted
        self.reason = None
        self.message = None

    def apply(self, ceiling, reason, message):
        ceiling = max(ceiling, 0)
        if ceiling >= self.allowed:
            return
        self.allowed = ceiling
        if reason is not None:
            self.reason = reason
            self.message = f"{message}: creating {ceiling} of {self.wanted} needed"


def _create(exporter_set, provisioner, exporters, count, options, builder):
    if count <= 0:
        return
    set_name = exporter_set["metadata"]["name"]
    taken = set(options.get("taken_names") or ())
    # Terminating Exporters keep their names until they are gone.
    taken.update(e["metadata"]["name"] for e in exporters)
    names = _free_names(set_name, taken)
    for _ in range(count):
        entry = _new_exporter(exporter_set, provisioner, next(names))
        if builder.template_hash is not None:
            entry["annotations"][c.ANNOTATION_TEMPLATE_HASH] = builder.template_hash
        builder.create.append(entry)


def _keep_one_enabled(exporter_set, provisioner, exporters, dormant, enabled_before,
                      enabled_after, options, builder, refused=False):
    """The dormant Exporter exists exactly while no other Exporter of the set is enabled.

    ``enabled_after`` counts the other Exporters that are enabled once the
    plan's disables, deletes and re-enables are done; Exporters the plan
    creates count only once they are seen, so an existing dormant Exporter
    stays until then. A new one is not made for a set that has no enabled
    Exporter yet and gets some in this plan: the creates come in the same
    write, and nothing enabled goes meanwhile. A dormant Exporter that holds
    a lease (it should never be Online) is left alone. A set whose template
    labels are ``refused`` (another set's, or reserved) gets none: it would
    carry those labels.
    """
    deleting = bool(exporter_set["metadata"].get("deletionTimestamp"))
    wanted = not deleting and not refused and enabled_after == 0
    removable = sorted((e for e, leased in dormant if not leased),
                       key=lambda e: e["metadata"]["name"])
    if wanted and not dormant and (enabled_before > 0 or not builder.create):
        taken = set(options.get("taken_names") or ())
        taken.update(e["metadata"]["name"] for e in exporters)
        taken.update(entry["name"] for entry in builder.create)
        builder.create_dormant.append(dormant_exporter(exporter_set, provisioner, taken))
        return
    keep = 1 if wanted and len(removable) == len(dormant) else 0
    for exporter in removable[keep:]:
        entry = {"name": exporter["metadata"]["name"]}
        if exporter["metadata"].get("uid"):
            entry["uid"] = exporter["metadata"]["uid"]
        builder.delete_dormant.append(entry)


def dormant_exporter(exporter_set, provisioner, taken_names):
    """The ``create`` entry of a set's dormant Exporter, named clear of ``taken_names``."""
    name = _free_name(f"{exporter_set['metadata']['name']}-dormant", set(taken_names))
    entry = _new_exporter(exporter_set, provisioner, name)
    entry["annotations"][c.ANNOTATION_DORMANT] = "true"
    return entry


def needs_dormant_exporter(exporters, leaving):
    """Whether a set whose Exporters ``leaving`` are disabled or deleted is left
    with no enabled Exporter and no dormant one (terminating ones do not count)."""
    for exporter in exporters:
        name, _, _, enabled, _, terminating = read_exporter(exporter)
        if terminating:
            continue
        if c.ANNOTATION_DORMANT in (exporter["metadata"].get("annotations") or {}):
            return False
        if enabled and name not in leaving:
            return False
    return True


def _free_name(prefix, taken):
    return next(_free_names(prefix, taken))


def _free_names(prefix, taken):
    """The names ``prefix-N`` not in ``taken``, smallest N first; one pass over
    the numbers however many are taken (each name given counts as taken)."""
    index = 0
    while True:
        name = f"{prefix}-{index}"
        if name not in taken:
            yield name
        index += 1


def _new_exporter(exporter_set, provisioner, name):
    """A ``create`` entry: the template's labels and annotations plus the pool's own."""
    set_name = exporter_set["metadata"]["name"]
    template_metadata = ((exporter_set.get("spec") or {}).get("template") or {}).get(
        "metadata") or {}
    labels = dict(template_metadata.get("labels") or {})
    labels[c.LABEL_EXPORTER_SET] = set_name
    annotations = dict(template_metadata.get("annotations") or {})
    annotations[c.ANNOTATION_SET_GENERATION] = str(exporter_set["metadata"].get("generation", ""))
    annotations[c.ANNOTATION_PROVISIONER] = provisioner
    return {"name": name, "labels": labels, "annotations": annotations}


def _available_condition(counters, warm_buffer):
    available = counters["availableReplicas"]
    message = f"{available} available, warm buffer {warm_buffer}"
    if available >= warm_buffer:
        return make_condition(c.CONDITION_AVAILABLE, True, "MinimumAvailable", message)
    return make_condition(c.CONDITION_AVAILABLE, False, "BelowMinimumAvailable", message)


def _progressing_condition(builder, provisioning, backoff, waiting_for_cooldown):
    if builder.create or builder.enable:
        return make_condition(c.CONDITION_PROGRESSING, True, "ScalingUp", "adding exporters")
    scaling_down = any(builder.exporter_annotations.get(name, {}).get(c.ANNOTATION_SCALE_DOWN)
                       for name in builder.disable)
    if scaling_down or any(d["reason"] == c.DELETE_SCALE_DOWN for d in builder.delete):
        return make_condition(c.CONDITION_PROGRESSING, True, "ScalingDown", "removing idle exporters")
    if builder.delete or builder.recycle or builder.disable:
        return make_condition(c.CONDITION_PROGRESSING, True, "Replacing", "replacing exporters")
    if backoff:
        return make_condition(
            c.CONDITION_PROGRESSING, True, "BackOff",
            f"waiting before replacing failed instances: {backoff['attempts']} failure(s) in a "
            f"row, next attempt at {backoff['nextAttemptTime']} "
            f"(after {backoff['delaySeconds']}s)")
    if provisioning:
        return make_condition(c.CONDITION_PROGRESSING, True, "Provisioning",
                              "waiting for exporters to become ready")
    if waiting_for_cooldown:
        return make_condition(c.CONDITION_PROGRESSING, True, "WaitingForCooldown",
                              "surplus exporters are removed after scaleDownCooldown")
    return make_condition(c.CONDITION_PROGRESSING, False, "Stable", "pool is at its target")


def _finish(exporter_set, counters, now, builder, target, conditions, parameters, images,
            warnings, backoff=None):
    previous_status = exporter_set.get("status") or {}
    previous_conditions = {x.get("type"): x for x in previous_status.get("conditions") or ()}
    for condition in conditions:
        was = previous_conditions.get(condition["type"]) or {}
        turned_bad = condition["status"] == "True" and condition["type"] in (
            c.CONDITION_DEGRADED, c.CONDITION_SCALING_LIMITED, c.CONDITION_CLASS_TERMINATING)
        if turned_bad and (was.get("status"), was.get("reason")) != ("True", condition["reason"]):
            builder.event("Warning", condition["reason"], condition["message"])
    status = pool_status(exporter_set, None, now=now, conditions=conditions, counters=counters)
    if backoff:
        status["backoff"] = backoff
    leaving = {d["name"] for d in builder.delete}
    exporter_annotations = {
        name: patch for name, patch in sorted(builder.exporter_annotations.items())
        if name not in leaving
    }
    changed = bool(
        builder.create or builder.enable or builder.disable or builder.delete or builder.recycle
        or builder.create_dormant or builder.delete_dormant or exporter_annotations
        or builder.set_annotations or status != previous_status
    )
    return {
        "target": target,
        "create": builder.create,
        "enable": sorted(builder.enable),
        "disable": sorted(builder.disable),
        "delete": sorted(builder.delete, key=lambda d: d["name"]),
        "recycle": sorted(builder.recycle, key=lambda r: r["name"]),
        "create_dormant": builder.create_dormant,
        "delete_dormant": builder.delete_dormant,
        "exporter_annotations": exporter_annotations,
        "set_annotations": dict(sorted(builder.set_annotations.items())),
        "status": status,
        "events": builder.events,
        "requeue_after": min(builder.requeue) if builder.requeue else None,
        "changed": changed,
        "parameters": parameters,
        "images": images,
        "warnings": warnings,
    }
