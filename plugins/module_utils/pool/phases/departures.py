"""Departures: the members that go or are reset in place in this plan.

Every member is unleased from both sides (lease_safety.py). Removing or
resetting one takes two plans: the first disables it and marks it retiring,
a later one that sees it disabled and still unleased deletes or resets it.
A member departs when it failed, when the lease it served ended, when it
retires already, or (a Proactive rollout) when it was made from an earlier
template.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import rollout
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.lease_safety import (
    ended_key,
    format_ended_key,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases import (
    failures,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.model import (
    Reset,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.survey import (
    Depart,
    LeaseEnded,
    Parked,
    parked_order,
)


class Departures:
    """What the walk over the members found.

    ``failed``: ``failures.Failed`` entries; ``leaving``: names deleted in
    this plan; ``recycling``: members reset in place, by name; ``parked`` and
    ``idle``: the members scale-down may re-enable or disable (``fresh_idle``:
    ``idle`` is not the survey's own list); ``rollout_waiting``: outdated
    members that wait for their replacement.
    """

    def __init__(self, survey):
        self.failed = []
        self.leaving = set()
        self.recycling = []
        self.retire = []  # (member, why): enabled, to disable first
        self.parked = survey.parked
        self.idle = survey.idle
        self.fresh_idle = False
        self.rollout_waiting = 0

    def depart(self, member, why, draft):
        """The member goes (or, with InPlaceReuse, is reset): disabled first,
        removed or reset once seen disabled."""
        if member.enabled:
            self.retire.append((member, why))
        elif why == c.RECYCLE_IN_PLACE_REUSE:
            self.recycling.append(member)
        else:
            draft.remove(member.exporter, why)
            self.leaving.add(member.name)


def walk(survey, rollout_plan, now, options, draft):
    """The members whose turn depends on the clock or leaves a trace (an
    Event, an annotation, a departure), in pool order, then the Proactive
    rollout's departures; the retiring members are disabled."""
    found = Departures(survey)
    in_flight = 0
    extra_parked, extra_idle = [], []
    for turn in survey.turns:
        member, then, failure = turn.member, turn.then, turn.failure
        if turn.timed:
            failure = failures.timeout_failure(member, now, options, draft)
        if failure is not None:
            found.failed.append(failures.Failed(member, *failure))
            found.depart(member, failure[0], draft)
        elif isinstance(then, Depart):
            in_flight += then.why == c.DELETE_ROLLOUT
            found.depart(member, rollout_plan.replaced_not_reset(member, then.why), draft)
        elif isinstance(then, LeaseEnded):
            replaced = rollout_plan.replaced_not_reset(member, then.why)
            if replaced != then.why:
                what = "replacing the exporter, made from an earlier template (rollout)"
            elif then.why == c.RECYCLE_IN_PLACE_REUSE:
                what = "resetting in place (InPlaceReuse)"
            else:
                what = "replacing the exporter (ExitAndReplace)"
            draft.event("Normal", "Recycling", f"lease {then.lease} ended, {what}", member.name)
            found.depart(member, replaced, draft)
        elif isinstance(then, Parked):
            extra_parked.append(member)
        else:
            if then.scale_down:
                draft.annotate(member.name, c.ANNOTATION_SCALE_DOWN, None)
            extra_idle.append(member)
    # The survey's lists are shared: never changed here.
    if extra_parked:
        found.parked = sorted(found.parked + extra_parked, key=parked_order)
    if extra_idle:
        found.idle = found.idle + extra_idle
        found.fresh_idle = True
    _roll_out(found, rollout_plan, in_flight, draft)
    for member, why in sorted(found.retire, key=lambda entry: entry[0].name):
        draft.disable.append(member.name)
        draft.annotate(member.name, c.ANNOTATION_RETIRING, why)
    return found


def _roll_out(found, rollout_plan, in_flight, draft):
    """Proactive rollout: idle outdated members go, a few at a time, while the
    warm buffer stays met; those that must wait for a replacement are
    counted out of the pool, so the replacement is made first."""
    if not (rollout_plan.rolling and rollout_plan.strategy == rollout.ROLLOUT_PROACTIVE):
        return
    idle = found.idle
    candidates = [m for m in idle if rollout.outdated(m.annotations, rollout_plan.template_hash)]
    going, found.rollout_waiting = rollout.choose(candidates, rollout_plan.max_unavailable, in_flight,
                                                  sum(m.ready for m in idle), rollout_plan.warm_buffer)
    if not going:
        return
    gone = {m.name for m in going}
    found.idle = [m for m in idle if m.name not in gone]
    # idle is no longer the survey's: its scale-down order is made afresh.
    found.fresh_idle = True
    for member in going:
        found.depart(member, c.DELETE_ROLLOUT, draft)
    draft.event("Normal", "RollingOut",
                f"replacing {len(going)} idle exporter(s) made from an earlier "
                f"template (Proactive, maxUnavailable {rollout_plan.max_unavailable}): "
                f"{', '.join(sorted(gone))}")


def reset_in_place(recycling, draft):
    """The resets in place, by name; each is enabled again after its reset,
    with the lease it served recorded so it is not reset for it twice."""
    recycling = sorted(recycling, key=lambda m: m.name)
    for member in recycling:
        draft.recycle.append(Reset(member.name, c.RECYCLE_IN_PLACE_REUSE,
                                   member.exporter["metadata"].get("uid")))
        # Applied with the re-enable, after the reset.
        draft.annotate(member.name, c.ANNOTATION_RETIRING, None)
        draft.annotate(member.name, c.ANNOTATION_SCALE_DOWN, None)
        if member.last_ended is not None:
            draft.annotate(member.name, c.ANNOTATION_REUSED_AFTER,
                           format_ended_key(ended_key(member.last_ended)))
    return recycling
