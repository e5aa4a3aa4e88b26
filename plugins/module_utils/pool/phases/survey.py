"""The survey: what a plan reads from the pool alone, apart from the clock.

It depends only on the Exporters, the Leases naming them, the instances and
the recycle strategy, so a plan over an unchanged pool may reuse it: the
caller that plans again and again (the operator) keeps the surveys in a
``pool_index.SurveyCache`` of its own; without one a survey is made afresh.
Nothing in a survey is changed once it is made.
"""

from dataclasses import dataclass

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import pool_index
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.lease_safety import (
    LeaseView,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases import (
    failures,
    scale_down,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import (
    counters_from_tally,
    tally_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    format_time,
    parse_time,
)

# Scale-down order, least useful first (then newest first, then by name in the same direction).
RANK_BACKEND_LOST = 0
RANK_PROVISIONING = 1
RANK_OFFLINE = 2
RANK_IDLE = 3


class Member:
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
        self.rank = RANK_IDLE
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


# What becomes of a member that has not failed (``Turn.then``).
@dataclass(frozen=True, slots=True)
class Depart:
    """It goes, or is reset in place: ``why`` is its retiring annotation."""

    why: str


@dataclass(frozen=True, slots=True)
class LeaseEnded:
    """The lease it served ended: it is recycled (``why``, the strategy's reason)."""

    lease: str
    why: str


@dataclass(frozen=True, slots=True)
class Parked:
    """Disabled by scale-down and still unleased: re-enabled or deleted."""


@dataclass(frozen=True, slots=True)
class Idle:
    """Enabled and unleased; ``scale_down``: it still carries a scale-down mark to clear."""

    scale_down: bool


@dataclass(frozen=True, slots=True)
class Turn:
    """A member whose fate depends on the clock or leaves a trace: ``failure``
    is ``(reason, message)`` when it failed already, ``timed`` when whether it
    stayed unready too long is the clock's to say, ``then`` what follows when
    it has not failed."""

    member: Member
    then: object = None
    failure: tuple | None = None
    timed: bool = False


@dataclass(frozen=True, slots=True)
class Note:
    """An annotation to write on an Exporter; ``at_now``: its value is the plan's time."""

    name: str
    key: str
    value: str | None = None
    at_now: bool = False


class Survey:
    """The survey of one pool (see the module docstring)."""

    __slots__ = ("counters", "live", "leased", "leased_enabled", "dormant", "notes",
                 "became_ready", "turns", "parked", "idle", "members_enabled", "provisioning",
                 "template_hashes", "_scale_down_order")

    def scale_down_order(self):
        if self._scale_down_order is None:
            self._scale_down_order = scale_down.order(self.idle)
        return self._scale_down_order


def survey_pool(exporter_set, exporters, leases, instances, recycle_strategy, cache=None):
    """The survey of the pool; with a ``cache`` (pool_index.SurveyCache), kept
    for the set while every Exporter and Lease is the same version, the
    instances are equal and the recycle strategy is the same, and made afresh
    when any object lacks a version."""
    if cache is None:
        return survey(exporters, pool_index.Digests().read(exporters, None), leases, instances,
                      recycle_strategy)
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
        return survey(exporters, digests.read(exporters, read), leases, instances, recycle_strategy)

    return cache.survey(owner, inputs, compute,
                        snapshot=lambda kept: kept[:3] + (_copy_instances(kept[3]),))


def _copy_instances(instances):
    return {name: dict(instance) if isinstance(instance, dict) else instance
            for name, instance in instances.items()}


def survey(exporters, digests, leases, instances, recycle_strategy):
    """One pass over the pool: counters, lease bookkeeping, and what the rules
    make of each unleased member, as far as the clock does not matter."""
    lease_view = LeaseView(leases)
    # Most Exporters are named by no Lease: their lease checks are skipped.
    active, ended_leases = lease_view.active, lease_view.ended
    result = Survey()
    tally = {}
    dormant = []
    notes = []
    turns = []
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
            notes.append(Note(name, c.ANNOTATION_FIRST_READY, at_now=True))
        if lease:
            leased += 1
            leased_enabled += enabled
            if digest.leased_by != lease:
                notes.append(Note(name, c.ANNOTATION_LEASED_BY, lease))
            continue

        # A member: unleased from both sides (lease_safety.py).
        members_enabled += enabled
        if enabled and not ready:
            provisioning = True
        retiring = digest.retiring
        if not enabled and not retiring and not digest.scale_down:
            continue  # disabled by someone else: counted, never touched
        member = Member(exporter, name, ready, enabled, digest.annotations, instance)
        if retiring:
            if retiring == c.RECYCLE_IN_PLACE_REUSE and not enabled:
                member.last_ended = lease_view.last_ended(exporter)
            turns.append(Turn(member, Depart(retiring)))
            continue
        if phase == c.INSTANCE_FAILED:
            turns.append(Turn(member, failure=failures.instance_failure(member)))
            continue
        ended = None
        if member.name in ended_leases:
            ended = lease_view.lease_to_recycle(member.exporter,
                                                member.annotations.get(c.ANNOTATION_REUSED_AFTER))
        if ended is not None:
            why = (c.RECYCLE_IN_PLACE_REUSE if recycle_strategy == c.RECYCLE_IN_PLACE_REUSE
                   else c.DELETE_RECYCLE)
            member.last_ended = ended
            then = LeaseEnded(ended["metadata"]["name"], why)
        else:
            member.rank = rank(member)
            then = Parked() if not enabled else Idle(digest.scale_down)
        if not ready:
            turns.append(Turn(member, then, timed=True))
        elif isinstance(then, Parked):
            parked.append(member)
        elif isinstance(then, Idle) and not then.scale_down:
            idle.append(member)
        else:
            turns.append(Turn(member, then))

    parked.sort(key=parked_order)
    result.counters = counters_from_tally(tally)
    result.live, result.leased, result.leased_enabled = live, leased, leased_enabled
    result.dormant = dormant
    result.notes = notes
    result.became_ready = any(note.at_now for note in notes)
    result.turns = turns
    result.parked = parked
    result.idle = idle
    result.template_hashes = template_hashes
    result.members_enabled = members_enabled
    result.provisioning = provisioning
    result._scale_down_order = None
    return result


def rank(member):
    instance = member.instance
    if instance is not None and instance.get("phase") in (c.INSTANCE_FAILED, c.INSTANCE_UNKNOWN):
        return RANK_BACKEND_LOST
    if member.ready:
        return RANK_IDLE
    if c.ANNOTATION_FIRST_READY in member.annotations:
        return RANK_OFFLINE
    return RANK_PROVISIONING


def parked_order(member):
    return -member.rank, member.name
