"""Creates: the set's target, and how many new Exporters this plan makes
under the ceilings that apply (maxReplicas or the operator's per-set
ceiling, the backend's capacity, the burst, an invalid set, the failure
backoff), and why it makes fewer than it needs."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases import naming

# ScalingLimited reason when the operator's per-set ceiling bites.
REASON_REPLICA_CEILING = "OperatorReplicaCeiling"


def effective_max_replicas(spec, options):
    """(the set's ceiling, whether it is the operator's): the smaller of
    ``spec.maxReplicas`` (0: none of its own) and the operator's
    ``max_replicas_per_set`` (0: none); 0 only when neither sets one."""
    own = spec.get("maxReplicas") or 0
    operator = options.get("max_replicas_per_set") or 0
    if operator > 0 and (own <= 0 or operator < own):
        return operator, True
    return own, False


def clamp(value, lower, upper):
    value = max(value, lower)
    return min(value, upper) if upper > 0 else value


class CreateLimits:
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


def _ceiling_reason(max_replicas, operator_ceiling):
    if operator_ceiling:
        return (REASON_REPLICA_CEILING,
                f"the operator's ceiling of {max_replicas} replicas per set reached "
                "(--max-replicas-per-set)")
    return c.REASON_MAX_REPLICAS_REACHED, f"maxReplicas {max_replicas} reached"


def create(exporter_set, provisioner, exporters, wanted, live_after_deletes, ceiling, blocked,
           failures, options, draft):
    """Make up to ``wanted`` new Exporters; ``ceiling`` is
    ``effective_max_replicas``'s result, ``blocked`` whether the set may not
    have any (invalid, or its labels refused). Returns the ``CreateLimits``
    and the ``status.backoff`` while a failure backoff holds creates back."""
    max_replicas, ceiling_bites = ceiling
    limits = CreateLimits(wanted)
    if max_replicas > 0:
        limits.apply(max_replicas - live_after_deletes, *_ceiling_reason(max_replicas, ceiling_bites))
    capacity = options.get("capacity")
    if capacity is not None:
        limits.apply(capacity.get("limit", 0), capacity.get("reason") or c.REASON_NO_FREE_SLOTS,
                     capacity.get("message") or "backend has no free capacity")
    limits.apply(options["burst"], None, None)
    if blocked:
        limits.apply(0, None, None)
    backoff_wait = failures.backoff_remaining(options)
    backoff = None
    if backoff_wait > 0:
        limits.apply(0, None, None)
        draft.requeue_at(backoff_wait)
        backoff = failures.backoff_status(options)
    elif failures.exhausted(options):
        limits.apply(1, None, None)
    if limits.allowed > 0:
        draft.create.extend(naming.new_exporters(exporter_set, provisioner,
                                                 naming.taken_names(options, exporters),
                                                 limits.allowed, draft.template_hash))
    if draft.create and failures.count > 0 and failures.last.get("time"):
        draft.event("Normal", "Retrying",
                    f"attempt {failures.count + 1} after {failures.count} failure(s) in a row "
                    f"(last: {failures.last.get('reason')}), having waited "
                    f"{failures.delay(options):g}s")
    return limits, backoff
