"""What the operator may do, and what it turns off when it may not.

The operator asks the API server once at start-up what its account may do
in the namespace it serves (a SelfSubjectRulesReview, which every
authenticated user may ask) and hands the answer's rules here. Each
feature that needs a grant beyond what the pool itself needs (upstream's
exporter-set slot grants only the pool: docs/install.md) is then off, or
done another way that the rules allow, and every set the operator serves
says so in its ``PermissionsLimited`` condition and a Warning Event.

Pure: rules in, decisions out. A permission is ``(group, resource, verb)``,
the resource with its subresource (``pods/exec``), as RBAC spells them.
"""

from typing import NamedTuple

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants

CONDITION = "PermissionsLimited"
REASON_MISSING = "MissingPermission"
REASON_ALL_GRANTED = "AllPermitted"


class Feature(NamedTuple):
    """A feature, the grants it needs, what is off without them and what
    is done instead (empty: nothing)."""

    name: str
    needs: tuple
    off: str
    instead: str = ""


G = constants.GROUP
FEATURES = (
    Feature("set-finalizer", ((G, "exportersets", "patch"),),
            "the set's teardown finalizer: a deleted set's Exporters go with it by garbage collection, "
            "leased ones too, and no backend outside the cluster is released",
            "its Exporters and their Pods are removed by their owner references"),
    Feature("class-finalizer", ((G, "virtualtargetclasses", "patch"),),
            "the class's in-use finalizer: a class still named by a set can be deleted"),
    Feature("class-status", ((G, "virtualtargetclasses/status", "patch"),),
            "the class's status (its sets, whether its parameters are valid)",
            "the set's own conditions say whether its class is usable"),
    Feature("policies", ((G, "exportersetpolicies", "list"), (G, "exportersetpolicies", "watch")),
            "ExporterSetPolicies: every set runs with the defaults"),
    Feature("policy-status", ((G, "exportersetpolicies/status", "patch"),),
            "the ExporterSetPolicies' status"),
    Feature("exec-reset", (("", "pods/exec", "create"), ("", "pods/exec", "get")),
            "the reset of an instance inside its running Pod (InPlaceReuse)",
            "the instance's Pod is made afresh (a fresh disk and VM, the same Exporter)"),
    Feature("secret-delete", (("", "secrets", "delete"),),
            "deleting an Exporter's Secrets",
            "they are removed with their Exporter by their owner references"),
)
BY_NAME = {feature.name: feature for feature in FEATURES}


def _matches(values, value):
    return "*" in values or value in values


def allows(rules, group, resource, verb):
    """Whether any of ``rules`` (``resourceRules`` of a
    SelfSubjectRulesReview: apiGroups, resources, verbs, resourceNames)
    grants ``verb`` on every object of ``resource`` in ``group``. A rule
    limited to some resourceNames grants none of a list, create or
    delete of any other object, so it counts as not granting."""
    base = resource.split("/", 1)[0]
    for rule in rules or ():
        if rule.get("resourceNames"):
            continue
        resources = rule.get("resources") or ()
        if not (_matches(rule.get("apiGroups") or (), group) and _matches(rule.get("verbs") or (), verb)):
            continue
        if "*" in resources or resource in resources or (
                "/" in resource and f"{base}/*" in resources) or (
                "/" not in resource and f"*/{resource}" in resources):
            return True
    return False


def missing(rules, features=FEATURES):
    """``{feature name: [the permissions it lacks]}`` for every feature of
    ``features`` that ``rules`` do not fully grant."""
    lacking = {}
    for feature in features:
        absent = [need for need in feature.needs if not allows(rules, *need)]
        if absent:
            lacking[feature.name] = absent
    return lacking


class Permissions(NamedTuple):
    """What the operator found it may not do: ``{feature: [permissions]}``.
    Every feature is on when ``lacking`` is empty (the default)."""

    lacking: dict = {}

    def on(self, feature):
        if feature not in BY_NAME:
            raise KeyError(f"no feature {feature!r}; known: {', '.join(BY_NAME)}")
        return feature not in self.lacking

    @classmethod
    def from_rules(cls, rules):
        return cls(missing(rules))

    @classmethod
    def from_denied(cls, denied):
        """From ``denied`` (``as_denied``'s list), as a playbook run gets it."""
        lacking = {}
        for entry in denied or ():
            feature, _, permission = str(entry).partition(":")
            if feature not in BY_NAME:
                raise ValueError(f"denied_permissions: {entry!r} names no feature; known: {', '.join(BY_NAME)}")
            lacking.setdefault(feature, []).append(tuple(permission.split(" ", 2)) if permission else ())
        return cls(lacking)

    def as_denied(self):
        """``feature:group resource verb`` for every lacking grant, sorted."""
        return sorted(f"{feature}:{' '.join(need)}" for feature, needs in self.lacking.items() for need in needs)


# Every feature on: what an operator does before it has asked, and where it cannot.
ALL_GRANTED = Permissions()


def spell(permission):
    """``verb resource.group`` (kubectl's words: ``delete secrets``,
    ``patch virtualtargetclasses.virtualtarget.jumpstarter.dev/status``)."""
    group, resource, verb = permission
    base, _, sub = resource.partition("/")
    name = f"{base}.{group}" if group else base
    return f"{verb} {name}" + (f"/{sub}" if sub else "")


def condition(permissions):
    """The ``PermissionsLimited`` condition (status, reason, message) for
    ``permissions``: True naming each missing grant and what is off and
    done instead, False when nothing reported is missing."""
    reported = permissions.lacking
    if not reported:
        return {"type": CONDITION, "status": "False", "reason": REASON_ALL_GRANTED,
                "message": "the operator's account has every permission its features need"}
    parts = []
    for feature in FEATURES:
        needs = reported.get(feature.name)
        if needs is None:
            continue
        text = f"{', '.join(spell(n) for n in needs)} not granted: off: {feature.off}"
        if feature.instead:
            text += f"; instead {feature.instead}"
        parts.append(text)
    return {"type": CONDITION, "status": "True", "reason": REASON_MISSING, "message": ". ".join(parts)}


def condition_due(exporter_set, permissions):
    """The condition to write on ``exporter_set``, or None when its status
    already says it (or says nothing and nothing is missing: a set served
    with every grant never gets the condition)."""
    wanted = condition(permissions)
    current = next((c for c in (exporter_set.get("status") or {}).get("conditions") or ()
                    if c.get("type") == CONDITION), None)
    if current is None:
        return wanted if wanted["status"] == "True" else None
    same = all(current.get(k) == wanted[k] for k in ("status", "reason", "message"))
    return None if same else wanted
