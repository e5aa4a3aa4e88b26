"""Which Exporters an ExporterSet adopts, and the overlaps of selectors it reports.

As a ReplicaSet does with Pods, a set counts the Exporters its controller
owner reference names (by UID), and adopts an Exporter its ``spec.selector``
selects that has no controller owner. Tenant safety narrows what may be
adopted (``why_not_adoptable``):

- an Exporter with a controller owner (another set, upstream's controller,
  anything) is never taken;
- only an Exporter of the set's own namespace;
- only one a pool of the set's provisioner made (its provisioner annotation
  names it): a physical board, or an Exporter another provisioner serves,
  that matches the selector is not the set's to delete or reset;
- not one whose set label names another set (detached from it: only a set
  of that name takes it back);
- not while it is leased, from either side; it is adopted once the lease
  ends;
- nothing with an empty selector, nor for a set that is refused (its
  template labels collide, it redirects the class's credentials) or paused.

A pass that adopts creates nothing: the next pass counts the adopted
Exporters, so the set never makes one it is about to adopt. Each adoption
is written by ``k8s/apply.py`` (``PlanApplier.adopt``) on a fresh read with
the same rule and the Exporter's resourceVersion as precondition, and gets a
Normal ``Adopted`` Event naming the Exporter.

A selector that does not select the set's own template labels (the CRD
refuses it; upstream's does not) makes the condition True too, reason
``SelectorMismatch``.

Overlaps: two sets of a namespace whose selectors select each other's
Exporters are reported on both, with the ``SelectorOverlap`` condition and
a Warning Event when it turns so (``selectors.template_label_conflicts``
still refuses the later of the two). The condition also names the Exporters
the selector matches and the set will not adopt, with why, and the pending
leases its template labels satisfy that are not its demand because an
Exporter no set controls satisfies them (reason ``LeasesForUnownedExporters``
when that is all; ``pool/demand.py``).
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import ownership, selectors
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import (
    make_condition,
    merge_conditions,
    with_set_healthy,
)

CONDITION_SELECTOR_OVERLAP = "SelectorOverlap"
REASON_SELECTOR_OVERLAP = "SelectorOverlap"
REASON_NOT_ADOPTED = "ExportersNotAdopted"
REASON_NO_OVERLAP = "NoOverlap"
REASON_SELECTOR_MISMATCH = "SelectorMismatch"
REASON_LEASES_NOT_COUNTED = "LeasesForUnownedExporters"
REASON_ADOPTED = "Adopted"
# How many Exporters the condition names before it says "and N more".
_NAMED_AT_MOST = 10


def _selector(exporter_set):
    return (exporter_set.get("spec") or {}).get("selector") or {}


def why_not_adoptable(exporter_set, exporter, provisioner, holders=()):
    """Why ``exporter_set`` may not adopt ``exporter`` now; None when it may.

    ``holders`` are the leases holding the Exporter (lease_safety.LeaseView).
    Only asked of an Exporter the set's selector selects.
    """
    meta = exporter.get("metadata") or {}
    set_meta = exporter_set["metadata"]
    owner = ownership.controller_ref(exporter)
    if owner is not None:
        return f"controlled by {owner.get('kind')} {owner.get('name')}"
    if meta.get("namespace") and meta.get("namespace") != set_meta.get("namespace"):
        return f"in namespace {meta.get('namespace')}"
    if meta.get("deletionTimestamp"):
        return "terminating"
    labels = meta.get("labels") or {}
    if selectors.selector_is_empty(_selector(exporter_set)) or not selectors.selector_matches(
            _selector(exporter_set), labels):
        return "not selected by spec.selector"
    named = labels.get(constants.LABEL_EXPORTER_SET)
    if named not in (None, set_meta["name"]):
        return f"its {constants.LABEL_EXPORTER_SET} label names ExporterSet {named}"
    made_by = (meta.get("annotations") or {}).get(constants.ANNOTATION_PROVISIONER)
    if made_by != provisioner:
        return (f"not made by {provisioner} (its {constants.ANNOTATION_PROVISIONER} annotation is "
                f"{made_by!r})" if made_by else
                f"not made by a pool (no {constants.ANNOTATION_PROVISIONER} annotation)")
    if holders:
        return f"leased by {', '.join(holders)}"
    return None


def adoption(exporter_set, exporters, provisioner, lease_view):
    """(to adopt, not adopted) among ``exporters`` (the namespace's).

    To adopt: ``{"name", "uid", "resourceVersion"}`` of each Exporter without
    a controller owner that the set may take now. Not adopted: ``"name: why"``
    for each one the selector matches that it may not take (owned by another
    controller, another provisioner's, a physical board...); leased ones are
    left out of both (taken once the lease ends).
    """
    selector = _selector(exporter_set)
    if selectors.selector_is_empty(selector) or not provisioner:
        return [], []
    adopt, refused = [], []
    uid = exporter_set["metadata"].get("uid")
    for exporter in exporters:
        meta = exporter["metadata"]
        if not selectors.selector_matches(selector, meta.get("labels") or {}):
            continue
        if uid and ownership.controlled_by(exporter, uid):
            continue
        if ownership.controller_of(exporter, constants.EXPORTER_SET.kind):
            # Another set's: the overlap of the two sets says so (``overlaps``).
            continue
        holders = lease_view.holders(exporter)
        why = why_not_adoptable(exporter_set, exporter, provisioner, holders)
        if why is None:
            adopt.append({"name": meta["name"], "uid": meta.get("uid"),
                          "resourceVersion": meta.get("resourceVersion")})
        elif not holders and not meta.get("deletionTimestamp"):
            refused.append(f"{meta['name']}: {why}")
    return sorted(adopt, key=lambda e: e["name"]), sorted(refused)


def adoption_patch(exporter_set, exporter):
    """The metadata patch that adopts ``exporter``: the set as its controller
    owner (other owner references kept), its set label, and its
    resourceVersion as precondition."""
    meta = exporter["metadata"]
    references = [dict(ref) for ref in meta.get("ownerReferences") or () if not ref.get("controller")]
    references.append(ownership.controller_reference(exporter_set))
    return {"metadata": {"resourceVersion": meta["resourceVersion"], "ownerReferences": references,
                         "labels": {constants.LABEL_EXPORTER_SET: exporter_set["metadata"]["name"]}}}


def selector_mismatch(exporter_set):
    """Why the set's non-empty selector does not select its own template's
    labels, or None. The CRD refuses such a set at admission (CEL); beside
    upstream's CRD, which has no such rule, the set says so instead."""
    selector = _selector(exporter_set)
    if selectors.selector_is_empty(selector):
        return None
    labels = selectors.exporter_labels(exporter_set, constants.LABEL_EXPORTER_SET)
    if selectors.selector_matches(selector, labels):
        return None
    return (f"spec.selector ({selectors.selector_to_string(selector)}) does not select "
            "spec.template.metadata.labels: leases asked with it do not find this set's Exporters")


def _named(messages):
    named = messages[:_NAMED_AT_MOST]
    more = f" and {len(messages) - len(named)} more" if len(messages) > len(named) else ""
    return "; ".join(named) + more


def _overlap_message(overlaps, refused, withheld=()):
    parts = []
    if overlaps:
        parts.append("spec.selector overlaps " + "; ".join(overlaps))
    if refused:
        parts.append("spec.selector matches Exporters this set does not adopt: " + _named(refused))
    if withheld:
        parts.append("spec.template.metadata.labels satisfy pending leases that are not this set's "
                     "demand, because Exporters no set controls satisfy them too: " + _named(withheld))
    return "; ".join(parts)


def _condition(status, kind):
    return next((x for x in (status or {}).get("conditions") or () if x.get("type") == kind), {})


def apply_to_plan(plan, exporter_set, adopt, overlaps, refused, now, mismatch=None, withheld=()):
    """``plan`` with the set's adoptions and its ``SelectorOverlap`` condition.

    ``adopt`` (from ``adoption``) goes to ``plan["adopt"]`` with one Normal
    ``Adopted`` Event each, and the plan's creates are dropped for this pass.
    ``overlaps`` (``selectors.selector_overlaps``), ``refused`` and
    ``withheld`` (the pending leases its labels satisfy that are not its
    demand, ``demand.attribute_leases``) make
    ``SelectorOverlap`` True, with a Warning Event when it turns True or its
    message changes; it turns False once a set that had it True is clear.
    """
    status = plan.get("status")
    if adopt:
        plan["adopt"] = list(adopt)
        plan["create"] = []
        selector = selectors.selector_to_string(_selector(exporter_set))
        plan["events"] = [*(plan.get("events") or []), *(
            {"type": "Normal", "reason": REASON_ADOPTED, "exporter": entry["name"],
             "message": f"adopted Exporter {entry['name']}: selected by spec.selector ({selector}), "
                        "no controller owner, made by this provisioner, unleased"}
            for entry in adopt)]
        plan["changed"] = True
    if not status:
        return plan
    previous_status = exporter_set.get("status") or {}
    was = _condition(previous_status, CONDITION_SELECTOR_OVERLAP)
    update = None
    if overlaps or refused or mismatch or withheld:
        reason = (REASON_SELECTOR_MISMATCH if mismatch else REASON_SELECTOR_OVERLAP if overlaps
                  else REASON_NOT_ADOPTED if refused else REASON_LEASES_NOT_COUNTED)
        message = "; ".join(filter(None, (mismatch, _overlap_message(overlaps, refused, withheld))))
        update = make_condition(CONDITION_SELECTOR_OVERLAP, True, reason, message)
        if (was.get("status"), was.get("message")) != ("True", update["message"]):
            plan["events"] = [*(plan.get("events") or []),
                              {"type": "Warning", "reason": reason, "message": update["message"]}]
    elif was.get("status") == "True":
        update = make_condition(CONDITION_SELECTOR_OVERLAP, False, REASON_NO_OVERLAP,
                                "spec.selector overlaps no other set and selects no Exporter it does not "
                                "adopt, and no pending lease it could serve is left to another's Exporters")
    if update is None:
        return plan
    generation = exporter_set["metadata"].get("generation")
    status["conditions"] = with_set_healthy(
        merge_conditions(status.get("conditions") or [], [update], now, generation), now, generation)
    plan["changed"] = bool(plan.get("changed") or status != previous_status)
    return plan
