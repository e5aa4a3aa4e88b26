"""Kubernetes label selectors (metav1.LabelSelector) as plain dicts."""

from collections import deque

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.ownership import (
    controller_of,
    controller_ref,
)

_SET_OPERATORS = ("In", "NotIn")


def selector_matches(selector, labels):
    """True when ``labels`` satisfy ``selector``.

    An empty or missing selector matches everything, as for Kubernetes
    label selectors. An unknown operator matches nothing, so a malformed
    selector never widens what it selects.
    """
    labels = labels or {}
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or ():
        if not _requirement_matches(requirement, labels):
            return False
    return True


def _requirement_matches(requirement, labels):
    key = requirement.get("key")
    operator = requirement.get("operator")
    values = requirement.get("values") or ()
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def selector_to_string(selector):
    """The selector in kubectl's string form, e.g. ``a=b,c in (d,e),!f``.

    Requirements are sorted by key (then operator) like the API machinery
    does, so equal selectors always render the same string.
    """
    if not selector:
        return ""
    requirements = [
        (key, "=", [value]) for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for requirement in selector.get("matchExpressions") or ():
        requirements.append(
            (requirement.get("key"), requirement.get("operator"), requirement.get("values") or [])
        )
    parts = []
    for key, operator, values in sorted(requirements, key=lambda r: (r[0], r[1], r[2])):
        if operator == "=":
            parts.append(f"{key}={values[0]}")
        elif operator in _SET_OPERATORS:
            word = "in" if operator == "In" else "notin"
            parts.append(f"{key} {word} ({','.join(sorted(values))})")
        elif operator == "Exists":
            parts.append(key)
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


class LabelIndex:
    """Objects grouped by their labels, for taking the first that a selector
    matches again and again.

    A pool's Exporters share a few label sets, so a selector is matched once
    per label set, not once per object: taking from N objects for M
    selectors costs M times the number of label sets, not M times N.
    """

    def __init__(self, objects, key):
        """``objects`` are dicts with ``metadata.labels``; ``key`` orders them."""
        groups = {}
        for obj in sorted(objects, key=key):
            labels = obj["metadata"].get("labels") or {}
            group = groups.get(frozenset(labels.items()))
            if group is None:
                group = groups[frozenset(labels.items())] = (labels, deque())
            group[1].append(obj)
        self._groups = list(groups.values())
        self._key = key

    def take_first(self, selector):
        """Remove and return the first object (by ``key``) whose labels
        satisfy ``selector``, or None."""
        best = None
        for labels, members in self._groups:
            if members and (best is None or self._key(members[0]) < self._key(best[0])) \
                    and selector_matches(selector, labels):
                best = members
        return best.popleft() if best is not None else None



# Label and annotation keys under these DNS names are written by Jumpstarter
# and by this operator (the set label, the host label, the provisioner and
# dormant annotations, and the real controller's
# ``jumpstarter.dev/migrated-namespace`` and ``-uid``, from which it derives
# an Exporter's credential subject); a set's template may not carry them.
RESERVED_LABEL_DOMAINS = ("jumpstarter.dev",)
TEMPLATE_LABELS_FIELD = "spec.template.metadata.labels"
TEMPLATE_ANNOTATIONS_FIELD = "spec.template.metadata.annotations"


def reserved_label(key):
    """Whether the label or annotation ``key`` is one a set's template may
    not carry: its prefix is ``jumpstarter.dev`` or a subdomain of it
    (``virtualtarget.jumpstarter.dev/exporterset``...)."""
    prefix, slash, _ = str(key).rpartition("/")
    if not slash:
        return False
    prefix = prefix.lower()
    return any(prefix == domain or prefix.endswith("." + domain) for domain in RESERVED_LABEL_DOMAINS)


def _template_metadata(exporter_set, kind):
    spec = exporter_set.get("spec") or {}
    found = (((spec.get("template") or {}).get("metadata") or {}).get(kind)) or {}
    return found if isinstance(found, dict) else {}


def _template_labels(exporter_set):
    return _template_metadata(exporter_set, "labels")


def unowned_label_sets(exporters):
    """``[(labels, name)]``: each distinct label set of the live Exporters no
    ExporterSet controls (a lab's physical boards, an Exporter of upstream's
    controller, one detached from its set), with the first such Exporter
    (by name) that carries it. Exporters without labels are left out: no
    lease selector (never empty) selects them by label."""
    first = {}
    for exporter in exporters or ():
        meta = exporter.get("metadata") or {}
        labels = meta.get("labels") or {}
        if not labels or meta.get("deletionTimestamp") or controller_of(exporter, constants.EXPORTER_SET.kind):
            continue
        key = frozenset(labels.items())
        if key not in first or meta["name"] < first[key][1]:
            first[key] = (labels, meta["name"])
    return sorted(first.values(), key=lambda pair: pair[1])


def unowned_match(selector, unowned):
    """The name of the first Exporter of ``unowned`` (``unowned_label_sets``)
    that ``selector`` (a lease's, never empty) selects, or None."""
    if selector_is_empty(selector):
        return None
    return next((name for labels, name in unowned if selector_matches(selector, labels)), None)


def exporter_labels(exporter_set, set_label):
    """The labels every Exporter of ``exporter_set`` carries: its template's,
    and ``set_label`` naming the set (what plan.py writes)."""
    labels = dict(_template_labels(exporter_set))
    labels[set_label] = exporter_set["metadata"]["name"]
    return labels


def selector_is_empty(selector):
    return not selector or not ((selector.get("matchLabels") or {}) or (selector.get("matchExpressions") or []))


def _created_first_key(exporter_set):
    meta = exporter_set.get("metadata") or {}
    return (meta.get("creationTimestamp") or "", meta.get("name") or "")


def board_labels(labels):
    """The labels a lessee asks for an Exporter by: all but the reserved keys
    (the set label, the host label...: Jumpstarter's and this operator's)."""
    return {key: value for key, value in (labels or {}).items() if not reserved_label(key)}


def exporter_groups(exporters):
    """The live Exporters of a namespace as ``template_label_conflicts`` reads
    them: ``[(board labels, controller reference or None, whether a pool made
    it (its provisioner annotation), its set label, namespace, name)]``, one
    entry per distinct first five (a pool's Exporters share them), with the
    first name.
    Exporters without board labels are left out: no lease asks for them by
    label without naming a reserved one."""
    first = {}
    for exporter in exporters or ():
        meta = exporter.get("metadata") or {}
        board = board_labels(meta.get("labels"))
        if not board or meta.get("deletionTimestamp"):
            continue
        ref = controller_ref(exporter)
        pool_made = constants.ANNOTATION_PROVISIONER in (meta.get("annotations") or {})
        key = (frozenset(board.items()),
               None if ref is None else (ref.get("kind"), ref.get("name"), ref.get("uid")),
               pool_made, (meta.get("labels") or {}).get(constants.LABEL_EXPORTER_SET), meta.get("namespace"))
        if key not in first or meta["name"] < first[key][5]:
            first[key] = (board, ref, pool_made, key[3], key[4], meta["name"])
    return sorted(first.values(), key=lambda group: group[5])


def _outside(exporter_set, ref, pool_made, named, created_first):
    """Whether Exporters of a group (``exporter_groups``) are outside
    ``exporter_set`` and protected from its labels: not its own (controlled
    by it, or made by a pool, controlled by nothing and labelled for no
    other set: what it may adopt), and not another set's created after it
    (``created_first``: its sets by name; that set is the one refused)."""
    meta = exporter_set["metadata"]
    if ref is None:
        return not (pool_made and named in (None, meta["name"]))
    if (ref.get("uid") and ref.get("uid") == meta.get("uid")) or ref.get("name") == meta["name"]:
        return False
    if ref.get("kind") != constants.EXPORTER_SET.kind:
        return True
    owner_key = created_first.get(ref.get("name"))
    return owner_key is None or owner_key < _created_first_key(exporter_set)


def _set_controlled(ref):
    return ref is not None and ref.get("kind") == constants.EXPORTER_SET.kind


def foreign_label_overlaps(exporter_set, exporter_sets, groups, consented=frozenset()):
    """``[(name, board labels, shared)]``: the first Exporter of each group
    (``exporter_groups``) outside ``exporter_set`` that a lease could ask for
    by labels the set's Exporters carry too, with those labels (``shared``).

    Exporters no set controls (a lab's physical board, another controller's,
    one detached from another set) have no selector that says how they are
    asked for: each of their board labels may be, so sharing any one of them
    (key and value) is an overlap; a lease naming it (``board=rpi4``) matches
    both. Those of a set created before this one are asked for by that set's
    selector (``template_label_conflicts`` compares the two); they overlap
    when the template carries every one of their board labels, so that even
    the narrowest lease for them matches this set's Exporters. ``consented``:
    the ``(key, value)`` labels the set's class lets it share with Exporters
    no set controls (its ``shared-labels`` entry, pool/set_overrides.py)."""
    mine = _template_labels(exporter_set)
    if not mine:
        return []
    namespace = exporter_set["metadata"].get("namespace")
    created_first = {(s.get("metadata") or {}).get("name"): _created_first_key(s) for s in exporter_sets or ()
                     if (s.get("metadata") or {}).get("namespace") == namespace}
    found = []
    for board, ref, pool_made, named, where, name in groups or ():
        if where not in (None, namespace) or not _outside(exporter_set, ref, pool_made, named, created_first):
            continue
        foreign = not _set_controlled(ref)
        shared = {key: value for key, value in board.items()
                  if mine.get(key) == value and not (foreign and (key, value) in consented)}
        if shared and (len(shared) == len(board) or foreign):
            found.append((name, board, shared))
    return found


def _overlap_message(name, board, shared):
    shown = selector_to_string({"matchLabels": board})
    if len(shared) == len(board):
        return (f"{TEMPLATE_LABELS_FIELD}: the set's Exporters would carry every label of Exporter {name} "
                f"({shown}), which is not the set's; leases asked for it could be given this set's Exporters")
    asked = selector_to_string({"matchLabels": shared})
    return (f"{TEMPLATE_LABELS_FIELD}: the set's Exporters would carry {asked} of Exporter {name} ({shown}), "
            f"which no set controls; a lease asking for {asked} matches both, and the controller could "
            "give it this set's Exporters")


def template_label_conflicts(exporter_set, exporter_sets, set_label, groups=(), consented=frozenset()):
    """Why ``exporter_set``'s template labels may not be used, each message
    naming the field; empty when they may.

    Refused: a reserved label or annotation key (``reserved_label``), and a
    collision with a set of the same namespace created before it (``exporter_sets``: at least
    that namespace's sets, itself among them or not). Two sets collide when
    either's selector selects the other's Exporters (``exporter_labels``): a
    lease asked for one could be given the other's. Of two that collide, the
    one created later (creationTimestamp, then name) is refused and the other
    is left as it is, so the answer does not depend on who looks first. An
    empty selector selects nothing a lease can ask for (the controller
    refuses an empty lease selector) and collides with nothing.

    Refused too: template labels a lease could ask for an Exporter outside
    the set by (``foreign_label_overlaps`` over ``groups``, the namespace's
    ``exporter_groups``): any board label of one no set controls (a lab's
    physical board, another controller's Exporter, one detached from another
    set) unless the class consents (``consented``), every board label of one
    of a set created before this one. Such a lease could be given this set's
    Exporters instead.
    """
    meta = exporter_set["metadata"]
    errors = [
        f"{TEMPLATE_LABELS_FIELD}.{key}: reserved (label keys under jumpstarter.dev and its "
        "subdomains are written by Jumpstarter and this operator)"
        for key in sorted(_template_labels(exporter_set)) if reserved_label(key)
    ]
    errors += [
        f"{TEMPLATE_ANNOTATIONS_FIELD}.{key}: reserved (annotation keys under jumpstarter.dev and "
        "its subdomains are written by Jumpstarter and this operator; the controller derives an "
        "Exporter's identity from some of them)"
        for key in sorted(_template_metadata(exporter_set, "annotations")) if reserved_label(key)
    ]
    errors += [_overlap_message(*found)
               for found in foreign_label_overlaps(exporter_set, exporter_sets, groups, consented)]
    mine = exporter_labels(exporter_set, set_label)
    my_selector = (exporter_set.get("spec") or {}).get("selector") or {}
    my_key = _created_first_key(exporter_set)
    for other in sorted(exporter_sets or (), key=_created_first_key):
        other_meta = other.get("metadata") or {}
        if other_meta.get("namespace") != meta.get("namespace") or other_meta.get("name") == meta["name"]:
            continue
        if _created_first_key(other) >= my_key:
            continue
        other_selector = (other.get("spec") or {}).get("selector") or {}
        if not selector_is_empty(other_selector) and selector_matches(other_selector, mine):
            errors.append(
                f"{TEMPLATE_LABELS_FIELD}: the set's Exporters would match the selector "
                f"({selector_to_string(other_selector)}) of ExporterSet {other_meta['name']}, "
                "created before it; leases for that set could be given this set's Exporters")
        elif not selector_is_empty(my_selector) and selector_matches(
                my_selector, exporter_labels(other, set_label)):
            errors.append(
                f"spec.selector: the set's selector ({selector_to_string(my_selector)}) "
                f"matches the Exporters of ExporterSet {other_meta['name']}, created before it; "
                "leases for this set could be given that set's Exporters")
    return errors


def selector_overlaps(exporter_set, exporter_sets, set_label):
    """The other sets of ``exporter_set``'s namespace whose selectors overlap
    its own, each as a message naming that set and which of the two
    ``template_label_conflicts`` refuses; empty when none.

    Two sets overlap when either's non-empty selector selects the other's
    Exporters (``exporter_labels``), which is the collision
    ``template_label_conflicts`` refuses in the later set. This is the same
    test from both sides, so both sets report it; a set being deleted still
    counts until it is gone.
    """
    meta = exporter_set["metadata"]
    mine = exporter_labels(exporter_set, set_label)
    my_selector = (exporter_set.get("spec") or {}).get("selector") or {}
    my_key = _created_first_key(exporter_set)
    messages = []
    for other in sorted(exporter_sets or (), key=_created_first_key):
        other_meta = other.get("metadata") or {}
        if other_meta.get("namespace") != meta.get("namespace") or other_meta.get("name") == meta["name"]:
            continue
        other_selector = (other.get("spec") or {}).get("selector") or {}
        theirs_selects_mine = not selector_is_empty(other_selector) and selector_matches(other_selector, mine)
        mine_selects_theirs = not selector_is_empty(my_selector) and selector_matches(
            my_selector, exporter_labels(other, set_label))
        if not (theirs_selects_mine or mine_selects_theirs):
            continue
        refused = "this set" if _created_first_key(other) < my_key else f"ExporterSet {other_meta['name']}"
        how = " and ".join(filter(None, (
            "its selector selects this set's Exporters" if theirs_selects_mine else "",
            "this set's selector selects its Exporters" if mine_selects_theirs else "")))
        messages.append(f"ExporterSet {other_meta['name']} ({how}); {refused}, created later, "
                        "is refused (TemplateLabelConflict)")
    return messages
