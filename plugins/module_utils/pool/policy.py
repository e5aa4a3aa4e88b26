"""ExporterSetPolicy: the pool controls of one ExporterSet.

The controls (pause, rollout of changes, scale-in order, autohealing knobs)
live in an object of their own, ``ExporterSetPolicy`` in this collection's
API group, that names its set (``spec.exporterSetName``, same namespace),
not in fields of the ExporterSet: the ExporterSet and VirtualTargetClass
CRDs share their names with upstream Jumpstarter's, a cluster holds one
definition of each, and upstream's schema would prune fields it does not
know (docs/concepts.md says more). config/crd/exportersetpolicies.yaml is
the schema the API server enforces; ``validate`` says the same here, for
objects that did not come through it, and names the field at fault.

``normalize`` fills every default (today's behaviour): not paused,
``Opportunistic`` rollout one instance at a time, the ``Default`` scale-in
order, and healing knobs of ``None`` — the operator's pool options
(``failure_threshold``, ``failure_backoff_base``...) then decide, as they do
without a policy. ``policy_for`` picks the one policy of a set; an invalid
policy, or two policies naming one set, leave the set on the defaults with a
``PolicyValid=False`` condition that says why.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import sizing, status_compare
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import (
    merge_conditions,
    with_set_healthy,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    parse_duration,
)

ROLLOUT_OPPORTUNISTIC = "Opportunistic"
ROLLOUT_PROACTIVE = "Proactive"
ROLLOUT_NONE = "None"
ROLLOUT_STRATEGIES = (ROLLOUT_OPPORTUNISTIC, ROLLOUT_PROACTIVE, ROLLOUT_NONE)

SCALE_IN_DEFAULT = "Default"
SCALE_IN_OLDEST_FIRST = "OldestFirst"
SCALE_IN_NEWEST_FIRST = "NewestFirst"
SCALE_IN_ORDERS = (SCALE_IN_DEFAULT, SCALE_IN_OLDEST_FIRST, SCALE_IN_NEWEST_FIRST)

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# The policy's own condition: whether it is in force.
CONDITION_VALID = "Valid"

_FIELDS = {
    "exporterSetName": None,
    "paused": None,
    "rollout": ("strategy", "maxUnavailable"),
    "scaleIn": ("order", "preferSelector"),
    "healing": ("startupFailureThreshold", "minFailingDuration", "unschedulableBackoff"),
    "leaseWait": ("percentile", "target", "maxBuffer"),
}


def defaults():
    """The policy of a set that has none: today's behaviour."""
    return {
        "paused": False,
        "rollout": {"strategy": ROLLOUT_OPPORTUNISTIC, "maxUnavailable": 1},
        "scaleIn": {"order": SCALE_IN_DEFAULT, "preferSelector": None},
        "healing": {
            "startupFailureThreshold": None,
            "minFailingDuration": None,
            "unschedulableBackoff": {"base": None, "max": None},
        },
        # A lease-wait target sizes the warm buffer (pool/sizing.py).
        "leaseWait": None,
    }


def _section(spec, key):
    value = (spec or {}).get(key)
    return value if isinstance(value, dict) else {}


def normalize(spec):
    """``spec`` (an ExporterSetPolicy's, or None) with every default filled.

    Durations stay as written (Go durations, ``timeutil.parse_duration``
    reads them); a knob left out is ``None``: the operator's pool option.
    """
    spec = spec or {}
    policy = defaults()
    if spec.get("paused") is not None:
        policy["paused"] = bool(spec["paused"])
    for section in ("rollout", "scaleIn"):
        given = _section(spec, section)
        policy[section].update({k: v for k, v in given.items() if k in policy[section] and v is not None})
    healing = _section(spec, "healing")
    for key in ("startupFailureThreshold", "minFailingDuration"):
        if healing.get(key) is not None:
            policy["healing"][key] = healing[key]
    backoff = _section(healing, "unschedulableBackoff")
    for key in ("base", "max"):
        if backoff.get(key) is not None:
            policy["healing"]["unschedulableBackoff"][key] = backoff[key]
    if isinstance(spec.get("leaseWait"), dict):
        policy["leaseWait"] = dict(spec["leaseWait"])
    return policy


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_min(errors, field, value, minimum):
    if value is None:
        return
    if not _is_int(value):
        errors.append(f"{field}: must be an integer, not {value!r}")
    elif value < minimum:
        errors.append(f"{field}: must be >= {minimum}")


def _check_duration(errors, field, value):
    if value is None:
        return None
    try:
        seconds = parse_duration(value) if isinstance(value, str) else None
    except ValueError:
        seconds = None
    if seconds is None or seconds < 0:
        errors.append(f"{field}: {value!r} is not a non-negative duration such as \"30s\" or \"5m\"")
        return None
    return seconds


def _check_enum(errors, field, value, allowed):
    if value is not None and value not in allowed:
        errors.append(f"{field}: must be one of {', '.join(allowed)}, not {value!r}")


def _check_selector(errors, field, selector):
    if selector is None:
        return
    if not isinstance(selector, dict):
        errors.append(f"{field}: must be a label selector (matchLabels, matchExpressions)")
        return
    for key in sorted(set(selector) - {"matchLabels", "matchExpressions"}):
        errors.append(f"{field}.{key}: unknown field")
    labels = selector.get("matchLabels")
    if labels is not None and not (isinstance(labels, dict)
                                   and all(isinstance(v, str) for v in labels.values())):
        errors.append(f"{field}.matchLabels: must map label keys to string values")
    expressions = selector.get("matchExpressions")
    if expressions is None:
        return
    if not isinstance(expressions, list):
        errors.append(f"{field}.matchExpressions: must be a list")
        return
    for index, expression in enumerate(expressions):
        where = f"{field}.matchExpressions[{index}]"
        if not isinstance(expression, dict) or not expression.get("key"):
            errors.append(f"{where}.key: required")
            continue
        operator = expression.get("operator")
        _check_enum(errors, f"{where}.operator", operator, SELECTOR_OPERATORS)
        if operator is None:
            errors.append(f"{where}.operator: required")
        values = expression.get("values") or []
        if operator in ("In", "NotIn") and not values:
            errors.append(f"{where}.values: must not be empty for operator {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            errors.append(f"{where}.values: must be empty for operator {operator}")


def validate(spec):
    """Errors of ``spec``, each naming its field ("spec.rollout.maxUnavailable:
    must be >= 1"); empty when it is valid."""
    errors = []
    if not isinstance(spec, dict):
        return ["spec: must be an object"]
    for key in sorted(set(spec) - set(_FIELDS)):
        errors.append(f"spec.{key}: unknown field")
    name = spec.get("exporterSetName")
    if not isinstance(name, str) or not name:
        errors.append("spec.exporterSetName: required, the name of an ExporterSet in the same namespace")
    if spec.get("paused") is not None and not isinstance(spec["paused"], bool):
        errors.append(f"spec.paused: must be true or false, not {spec['paused']!r}")
    for section, keys in _FIELDS.items():
        if keys is None or spec.get(section) is None:
            continue
        if not isinstance(spec[section], dict):
            errors.append(f"spec.{section}: must be an object")
            continue
        for key in sorted(set(spec[section]) - set(keys)):
            errors.append(f"spec.{section}.{key}: unknown field")
    rollout, scale_in, healing = (_section(spec, k) for k in ("rollout", "scaleIn", "healing"))
    _check_enum(errors, "spec.rollout.strategy", rollout.get("strategy"), ROLLOUT_STRATEGIES)
    _check_min(errors, "spec.rollout.maxUnavailable", rollout.get("maxUnavailable"), 1)
    _check_enum(errors, "spec.scaleIn.order", scale_in.get("order"), SCALE_IN_ORDERS)
    _check_selector(errors, "spec.scaleIn.preferSelector", scale_in.get("preferSelector"))
    _check_min(errors, "spec.healing.startupFailureThreshold", healing.get("startupFailureThreshold"), 1)
    _check_duration(errors, "spec.healing.minFailingDuration", healing.get("minFailingDuration"))
    backoff = healing.get("unschedulableBackoff")
    if backoff is not None and not isinstance(backoff, dict):
        errors.append("spec.healing.unschedulableBackoff: must be an object")
    elif backoff is not None:
        for key in sorted(set(backoff) - {"base", "max"}):
            errors.append(f"spec.healing.unschedulableBackoff.{key}: unknown field")
        base = _check_duration(errors, "spec.healing.unschedulableBackoff.base", backoff.get("base"))
        cap = _check_duration(errors, "spec.healing.unschedulableBackoff.max", backoff.get("max"))
        if base is not None and base <= 0:
            errors.append("spec.healing.unschedulableBackoff.base: must be longer than 0")
        if base is not None and cap is not None and cap < base:
            errors.append("spec.healing.unschedulableBackoff.max: must not be shorter than base")
    if isinstance(spec.get("leaseWait"), dict):
        error = sizing.parse_target(spec["leaseWait"])[1]
        if error:
            errors.append(error)
    return errors


def names_set(policy, namespace, name):
    """Whether the ExporterSetPolicy object ``policy`` is for the set ``namespace/name``."""
    meta = policy.get("metadata") or {}
    return (meta.get("namespace") == namespace and not meta.get("deletionTimestamp")
            and (policy.get("spec") or {}).get("exporterSetName") == name)


def policy_for(exporter_set, policies):
    """(the set's normalized policy, a PolicyValid=False condition or None).

    ``policies`` are ExporterSetPolicy objects (at least those of the set's
    namespace). No policy: the defaults. One valid policy: its controls.
    An invalid one, or more than one naming the set: the defaults, and a
    condition naming the field or the policies at fault.
    """
    meta = exporter_set["metadata"]
    mine = sorted((p for p in policies or () if names_set(p, meta.get("namespace"), meta["name"])),
                  key=lambda p: p["metadata"]["name"])
    if not mine:
        return normalize(None), None
    if len(mine) > 1:
        names = ", ".join(p["metadata"]["name"] for p in mine)
        return normalize(None), policy_condition(
            False, c.REASON_CONFLICTING_POLICIES,
            f"ExporterSetPolicies {names} all name this set; one set takes one policy, "
            "so it runs with the defaults until all but one are deleted")
    (policy,) = mine
    errors = validate(policy.get("spec"))
    if errors:
        return normalize(None), policy_condition(
            False, c.REASON_INVALID_POLICY,
            f"ExporterSetPolicy {policy['metadata']['name']}: {'; '.join(errors)}; "
            "the set runs with the defaults")
    return normalize(policy["spec"]), None


def policy_condition(valid, reason, message):
    return policy_condition_of(c.CONDITION_POLICY_VALID, valid, reason, message)


def valid_condition():
    """The set's PolicyValid condition once its policy is fine again."""
    return policy_condition(True, c.REASON_POLICY_VALID, "the set's ExporterSetPolicy, if any, is in force")


def paused_plan(exporter_set, now):
    """The plan of a paused set: nothing created, deleted, disabled, enabled
    or reset, no annotation written, and a status that is the previous one
    with ``Paused=True``. Once that condition is written the plan is
    unchanged, so a paused set makes no writes at all (its counters catch up
    when it is unpaused)."""
    previous_status = exporter_set.get("status") or {}
    paused = policy_condition_of(c.CONDITION_PAUSED, True, c.REASON_PAUSED,
                                 "the set's ExporterSetPolicy pauses it: nothing is created, deleted, "
                                 "disabled, enabled or recycled until it is unpaused")
    status = dict(previous_status)
    status["conditions"] = merge_conditions(previous_status.get("conditions") or [], [paused], now)
    events = []
    if _condition(previous_status, c.CONDITION_PAUSED).get("status") != "True":
        events.append({"type": "Normal", "reason": c.REASON_PAUSED, "message": paused["message"]})
    return {
        "target": None,
        "create": [],
        "enable": [],
        "disable": [],
        "delete": [],
        "recycle": [],
        "create_dormant": [],
        "delete_dormant": [],
        "exporter_annotations": {},
        "set_state": {},
        "status": status,
        "events": events,
        "requeue_after": None,
        "changed": status != previous_status,
        "parameters": None,
        "images": None,
        "warnings": [],
        "paused": True,
    }


def apply_to_plan(plan, exporter_set, condition, now):
    """The set's policy conditions in ``plan``: ``condition`` (PolicyValid=False
    from ``policy_for``) with a Warning Event when it turns so; PolicyValid=True
    once a set that had it False is fine again; Paused=False (Resumed) once a
    set that was paused is not."""
    status = plan.get("status")
    if not status:
        return plan
    previous_status = exporter_set.get("status") or {}
    updates = []
    was_valid = _condition(previous_status, c.CONDITION_POLICY_VALID)
    if condition is not None:
        updates.append(condition)
        if (was_valid.get("status"), was_valid.get("reason"), was_valid.get("message")) != (
                "False", condition["reason"], condition["message"]):
            plan["events"] = [*(plan.get("events") or []),
                              {"type": "Warning", "reason": condition["reason"], "message": condition["message"]}]
    elif was_valid.get("status") == "False":
        updates.append(valid_condition())
    if not plan.get("paused") and _condition(previous_status, c.CONDITION_PAUSED).get("status") == "True":
        updates.append(policy_condition_of(c.CONDITION_PAUSED, False, c.REASON_RESUMED,
                                           "the set is not paused"))
        plan["events"] = [*(plan.get("events") or []),
                          {"type": "Normal", "reason": c.REASON_RESUMED, "message": "the set is not paused"}]
    if not updates:
        return plan
    generation = None if plan.get("paused") else exporter_set["metadata"].get("generation")
    status["conditions"] = merge_conditions(status.get("conditions") or [], updates, now, generation)
    if not plan.get("paused"):
        status["conditions"] = with_set_healthy(status["conditions"], now, generation)
    plan["changed"] = bool(plan.get("changed") or status != previous_status)
    return plan


def policy_condition_of(kind, status, reason, message):
    return {"type": kind, "status": "True" if status else "False", "reason": reason, "message": message}


def _condition(status, kind):
    return next((x for x in (status or {}).get("conditions") or () if x.get("type") == kind), {})


def desired_status(esp, policies, exporter_sets, now):
    """The status an ExporterSetPolicy should carry: ``observedGeneration``,
    ``exporterSet`` (the set it is in force for; empty while it is not:
    invalid, in conflict, or no such set) and a ``Valid`` condition
    (``Valid``, ``InvalidPolicy`` or ``ConflictingPolicies``), from the
    namespace's ``policies`` and ``exporter_sets``."""
    meta = esp["metadata"]
    namespace, generation = meta.get("namespace"), meta.get("generation")
    spec = esp.get("spec") or {}
    set_name = spec.get("exporterSetName")
    errors = validate(spec)
    rivals = sorted(p["metadata"]["name"] for p in policies or ()
                    if p["metadata"]["name"] != meta["name"] and names_set(p, namespace, set_name))
    exists = any(s["metadata"]["name"] == set_name and not s["metadata"].get("deletionTimestamp")
                 for s in exporter_sets or ())
    if errors:
        valid = policy_condition_of(CONDITION_VALID, False, c.REASON_INVALID_POLICY, "; ".join(errors))
    elif rivals:
        valid = policy_condition_of(
            CONDITION_VALID, False, c.REASON_CONFLICTING_POLICIES,
            f"ExporterSetPolicies {', '.join(rivals)} also name ExporterSet {set_name}; "
            "none is in force until one is left")
    elif exists:
        valid = policy_condition_of(CONDITION_VALID, True, c.REASON_POLICY_VALID,
                                    f"in force for ExporterSet {set_name}")
    else:
        valid = policy_condition_of(CONDITION_VALID, True, c.REASON_POLICY_VALID,
                                    f"ExporterSet {set_name} does not exist; in force once it does")
    previous = (esp.get("status") or {}).get("conditions") or []
    status = {"exporterSet": set_name if valid["status"] == "True" and exists else "",
              "conditions": merge_conditions(previous, [valid], now, generation)}
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def status_differs(current, wanted):
    """Whether writing ``wanted`` changes ``current``: the one comparison
    (``pool/status_compare.py``) over the fields the policy's status names
    (it is merge-patched; transition times aside)."""
    return status_compare.status_differs(current, wanted, wanted_keys_only=True)
