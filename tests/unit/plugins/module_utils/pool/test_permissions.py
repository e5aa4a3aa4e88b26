"""pool/permissions.py: what a SelfSubjectRulesReview's rules grant, which
features are off without a grant, and what the set's condition says."""

from __future__ import annotations

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import permissions
from hypothesis import given
from hypothesis import strategies as st
from upstream_slot import SLOT_RULES

G = "virtualtarget.jumpstarter.dev"
SLOT = [{"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
        for group, resources, verbs in SLOT_RULES]
# Every grant any feature needs.
NEEDS = sorted({need for feature in permissions.FEATURES for need in feature.needs})


def test_the_slot_role_turns_off_what_it_does_not_grant_and_nothing_else():
    lacking = permissions.missing(SLOT)
    assert lacking == {
        "set-finalizer": [(G, "exportersets", "patch")],
        "class-finalizer": [(G, "virtualtargetclasses", "patch")],
        "class-status": [(G, "virtualtargetclasses/status", "patch")],
        "policies": [(G, "exportersetpolicies", "list"), (G, "exportersetpolicies", "watch")],
        "policy-status": [(G, "exportersetpolicies/status", "patch")],
        "exec-reset": [("", "pods/exec", "create"), ("", "pods/exec", "get")],
        "secret-delete": [("", "secrets", "delete")],
    }


def test_a_subresource_is_not_granted_by_its_resource_nor_the_resource_by_a_subresource():
    pods = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]}]
    assert not permissions.allows(pods, "", "pods/exec", "create")
    assert permissions.allows([{"apiGroups": [""], "resources": ["pods/*"], "verbs": ["*"]}], "", "pods/exec", "get")
    assert not permissions.allows([{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["*"]}],
                                  "", "pods", "get")


def test_wildcards_grant_and_resource_names_do_not():
    assert permissions.missing([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]) == {}
    named = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["delete"], "resourceNames": ["one"]}]
    assert not permissions.allows(named, "", "secrets", "delete")
    # The group matters: a rule of another group grants nothing here.
    assert not permissions.allows([{"apiGroups": ["apps"], "resources": ["secrets"], "verbs": ["delete"]}],
                                  "", "secrets", "delete")


rule = st.fixed_dictionaries({
    "apiGroups": st.lists(st.sampled_from(["", G, "*", "apps"]), min_size=1, max_size=2),
    "resources": st.lists(st.sampled_from(["pods", "pods/exec", "pods/*", "secrets", "*", "exportersets",
                                           "virtualtargetclasses/status", "exportersetpolicies"]),
                          min_size=1, max_size=3),
    "verbs": st.lists(st.sampled_from(["get", "list", "watch", "create", "patch", "delete", "*"]),
                      min_size=1, max_size=3),
})


@given(st.lists(rule, max_size=6), st.lists(rule, max_size=3))
def test_more_rules_never_turn_a_feature_off(rules, more):
    fewer = permissions.missing(rules)
    assert set(permissions.missing(rules + more)) <= set(fewer)
    # A feature is off exactly when one of its needs is not granted.
    for feature in permissions.FEATURES:
        assert (feature.name in fewer) == any(not permissions.allows(rules, *n) for n in feature.needs)


@given(st.sets(st.sampled_from(NEEDS)))
def test_denied_round_trips_as_a_run_gets_it(granted):
    found = permissions.Permissions.from_rules(
        [{"apiGroups": [g], "resources": [r], "verbs": [v]} for g, r, v in granted])
    again = permissions.Permissions.from_denied(found.as_denied())
    assert again.lacking == found.lacking
    for feature in permissions.FEATURES:
        assert again.on(feature.name) == all(n in granted for n in feature.needs)


def test_denied_naming_no_feature_is_refused():
    with pytest.raises(ValueError, match="names no feature"):
        permissions.Permissions.from_denied(["teleport: pods create"])
    with pytest.raises(KeyError):
        permissions.Permissions().on("teleport")


def test_the_condition_names_each_missing_grant_and_what_is_off():
    limited = permissions.condition(permissions.Permissions.from_rules(SLOT))
    assert (limited["type"], limited["status"], limited["reason"]) == ("PermissionsLimited", "True",
                                                                      "MissingPermission")
    for words in ("delete secrets", "create pods/exec", "patch exportersets.virtualtarget.jumpstarter.dev",
                  "list exportersetpolicies.virtualtarget.jumpstarter.dev",
                  "patch virtualtargetclasses.virtualtarget.jumpstarter.dev/status",
                  "the instance's Pod is made afresh", "garbage collection"):
        assert words in limited["message"], words
    assert permissions.condition(permissions.Permissions())["status"] == "False"


def test_the_condition_is_due_once_and_a_fully_granted_set_never_gets_one():
    slot = permissions.Permissions.from_rules(SLOT)
    fresh = {"status": {"conditions": [{"type": "Available", "status": "True"}]}}
    assert permissions.condition_due(fresh, permissions.Permissions()) is None
    due = permissions.condition_due(fresh, slot)
    assert due["status"] == "True"
    written = {"status": {"conditions": [dict(due, lastTransitionTime="2026-12-01T00:00:00Z")]}}
    assert permissions.condition_due(written, slot) is None
    # Granted since: it turns False, once.
    cleared = permissions.condition_due(written, permissions.Permissions())
    assert (cleared["status"], cleared["reason"]) == ("False", "AllPermitted")
