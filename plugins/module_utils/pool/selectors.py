"""Kubernetes label selectors (metav1.LabelSelector) as plain dicts."""

from collections import deque

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

