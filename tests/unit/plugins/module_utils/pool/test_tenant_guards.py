"""The pure parts of three tenant guards: template labels that collide with
another set's selector or carry reserved keys (selectors.py, the plan), the
operator's ceiling on replicas per set (plan.py, lifecycle.plan_options), and
what a teardown must wait for (lifecycle.py)."""

import copy

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import lifecycle
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import plan as pool_plan
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import selectors
from hypothesis import given, settings
from hypothesis import strategies as st
from pool_builders import NOW, exporter, exporter_set, lease, target_class


def a_set(name, created, labels, selector=None):
    the_set = exporter_set(name=name, labels=labels)
    the_set["metadata"]["creationTimestamp"] = created
    the_set["spec"]["selector"] = {"matchLabels": dict(selector if selector is not None else labels)}
    return the_set


def conflicts(the_set, sets):
    return selectors.template_label_conflicts(the_set, sets, c.LABEL_EXPORTER_SET)


VICTIM = a_set("victim", "2026-11-20T08:00:00Z", {"board": "rpi4"})


def test_a_later_set_with_the_labels_of_another_is_refused_and_the_first_is_not():
    thief = a_set("thief", "2026-11-21T08:00:00Z", {"board": "rpi4", "extra": "x"}, {"extra": "x"})
    sets = [VICTIM, thief]
    (message,) = conflicts(thief, sets)
    assert message.startswith("spec.template.metadata.labels:") and "ExporterSet victim" in message
    assert conflicts(VICTIM, sets) == []


def test_a_later_selector_that_takes_anothers_exporters_is_refused():
    # Its own labels differ, but its selector picks the victim's Exporters.
    grabber = a_set("grabber", "2026-11-21T08:00:00Z", {"board": "rpi4-b"}, {})
    grabber["spec"]["selector"] = {"matchExpressions": [
        {"key": "board", "operator": "In", "values": ["rpi4", "rpi4-b"]}]}
    (message,) = conflicts(grabber, [VICTIM, grabber])
    assert message.startswith("spec.selector:") and "victim" in message


def test_the_same_second_is_decided_by_name_and_distinct_sets_pass():
    twin_a = a_set("a", "2026-11-21T08:00:00Z", {"board": "same"})
    twin_b = a_set("b", "2026-11-21T08:00:00Z", {"board": "same"})
    assert conflicts(twin_a, [twin_b, twin_a]) == [] and len(conflicts(twin_b, [twin_a, twin_b])) == 1
    other = a_set("other", "2026-11-22T08:00:00Z", {"board": "jetson"})
    assert conflicts(other, [VICTIM, other]) == []
    # A selector that names the set label tells two sets with equal template labels apart.
    keyed = a_set("keyed", "2026-11-22T08:00:00Z", {"board": "rpi4"},
                  {"board": "rpi4", c.LABEL_EXPORTER_SET: "keyed"})
    first = a_set("first", "2026-11-19T08:00:00Z", {"board": "rpi4"},
                  {"board": "rpi4", c.LABEL_EXPORTER_SET: "first"})
    assert conflicts(keyed, [first, keyed]) == []


@pytest.mark.parametrize("key", [c.LABEL_EXPORTER_SET, c.LABEL_HOST, "jumpstarter.dev/name",
                                 "Virtualtarget.Jumpstarter.dev/anything", "x.jumpstarter.dev/y"])
def test_reserved_label_keys_are_refused_naming_the_key(key):
    the_set = a_set("pool", "2026-11-21T08:00:00Z", {"board": "alone", key: "v"}, {"board": "alone"})
    (message,) = conflicts(the_set, [the_set])
    assert message.startswith(f"spec.template.metadata.labels.{key}: reserved")


@pytest.mark.parametrize("key", ["board", "example.com/jumpstarter.dev", "notjumpstarter.dev/x"])
def test_other_keys_are_free(key):
    assert not selectors.reserved_label(key)


# The real controller derives an Exporter's credential subject from the first
# two; the others are this operator's own notes on an Exporter.
@pytest.mark.parametrize("key", ["jumpstarter.dev/migrated-namespace", "jumpstarter.dev/migrated-uid",
                                 c.ANNOTATION_DORMANT, c.ANNOTATION_PROVISIONER, c.ANNOTATION_FIRST_READY,
                                 "Lab.Jumpstarter.Dev/x"])
def test_reserved_annotation_keys_in_the_template_are_refused_as_reserved_labels_are(key):
    the_set = a_set("pool", "2026-11-21T08:00:00Z", {"board": "alone"})
    the_set["spec"]["template"]["metadata"]["annotations"] = {"example.com/note": "kept", key: "other-ns"}
    (message,) = conflicts(the_set, [the_set])
    assert message.startswith(f"spec.template.metadata.annotations.{key}: reserved")
    # Refused as a reserved label is: nothing made, TemplateLabelConflict naming the field.
    result = pool_plan.scale_plan(the_set, target_class(), [], [], NOW,
                                  options={"label_conflicts": [message]})
    assert result["create"] == [] and result["create_dormant"] == []
    degraded = next(x for x in result["status"]["conditions"] if x["type"] == c.CONDITION_DEGRADED)
    assert degraded["reason"] == pool_plan.REASON_LABEL_CONFLICT
    assert f"spec.template.metadata.annotations.{key}" in degraded["message"]


_DNS_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
_NAME = st.from_regex(r"[a-z0-9]([a-z0-9._-]{0,8}[a-z0-9])?", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(_DNS_LABEL, max_size=3),
       st.one_of(st.sampled_from(["jumpstarter.dev", "jumpstarter.devs", "xjumpstarter.dev", "dev",
                                  "jumpstarter.dev.example.com"]), _DNS_LABEL),
       _NAME, st.booleans())
def test_an_annotation_key_is_refused_exactly_when_its_prefix_is_jumpstarter_dev_or_below(
        subdomains, tld, name, upper):
    prefix = ".".join([*subdomains, tld])
    if upper:
        prefix = prefix.upper()
    key = f"{prefix}/{name}"
    the_set = a_set("pool", "2026-11-21T08:00:00Z", {"board": "alone"})
    the_set["spec"]["template"]["metadata"]["annotations"] = {key: "v"}
    lowered = prefix.lower()
    reserved = lowered == "jumpstarter.dev" or lowered.endswith(".jumpstarter.dev")
    assert bool(conflicts(the_set, [the_set])) is reserved
    # The same rule as for a label key.
    assert selectors.reserved_label(key) is reserved


def test_a_refused_set_creates_nothing_not_even_its_dormant_exporter():
    thief = a_set("thief", "2026-11-21T08:00:00Z", {"board": "rpi4"})
    thief["spec"]["minAvailableReplicas"] = 2
    result = pool_plan.scale_plan(thief, target_class(), [], [lease("pending-0")], NOW,
                                  options={"label_conflicts": conflicts(thief, [VICTIM, thief])})
    assert result["create"] == [] and result["create_dormant"] == []
    degraded = next(x for x in result["status"]["conditions"] if x["type"] == c.CONDITION_DEGRADED)
    assert degraded["status"] == "True" and degraded["reason"] == pool_plan.REASON_LABEL_CONFLICT
    assert "spec.template.metadata.labels" in degraded["message"]
    assert {"type": "Warning", "reason": pool_plan.REASON_LABEL_CONFLICT} in [
        {k: e[k] for k in ("type", "reason")} for e in result["events"]]


def test_observe_refuses_on_the_namespaces_sets_and_gives_no_backend():
    thief = a_set("thief", "2026-11-21T08:00:00Z", {"board": "rpi4"})
    thief["metadata"]["uid"] = "uid-thief"
    mine = copy.deepcopy(exporter("thief-0", owner="thief"))
    mine["metadata"]["ownerReferences"] = [{"kind": "ExporterSet", "name": "thief", "uid": "uid-thief",
                                            "controller": True}]
    mine["status"]["credential"] = {"name": "thief-0-exporter"}
    objects = {"VirtualTargetClass": [target_class()], "ExporterSet": [VICTIM, thief], "Exporter": [mine],
               "Lease": [], "Pod": [], "ExporterSetPolicy": []}
    observed = k8s_observe.observe(thief, objects, NOW)
    observed["controller_ca"] = {"available": True, "tls_ca": "x"}
    assert observed["label_conflicts"] and k8s_observe.unprovisioned(observed) == []
    assert k8s_observe.plan_for(thief, observed)["create"] == []


@pytest.mark.parametrize(("max_replicas", "ceiling", "created", "reason"), [
    (0, 5, 5, pool_plan.REASON_REPLICA_CEILING),
    (8, 5, 5, pool_plan.REASON_REPLICA_CEILING),
    (3, 5, 3, c.REASON_MAX_REPLICAS_REACHED),
    (0, 0, 20, None),
])
def test_the_operators_ceiling_caps_every_set(max_replicas, ceiling, created, reason):
    the_set = exporter_set(max_replicas=max_replicas, min_available=20)
    result = pool_plan.scale_plan(the_set, target_class(), [], [], NOW,
                                  options={"max_replicas_per_set": ceiling, "burst": 50})
    assert len(result["create"]) == created
    limited = next(x for x in result["status"]["conditions"] if x["type"] == c.CONDITION_SCALING_LIMITED)
    assert limited["reason"] == (reason or "WithinLimits")
    if reason == pool_plan.REASON_REPLICA_CEILING:
        assert "--max-replicas-per-set" in limited["message"]


def test_the_ceiling_defaults_to_100_and_counts_what_exists():
    assert lifecycle.plan_options()["max_replicas_per_set"] == 100
    the_set = exporter_set(max_replicas=0, min_available=4)
    have = [exporter(f"rpi4-{i}") for i in range(3)]
    result = pool_plan.scale_plan(the_set, target_class(), have, [], NOW, options={"max_replicas_per_set": 4})
    assert len(result["create"]) == 1
    with pytest.raises(lifecycle.LifecycleError, match="max_replicas_per_set"):
        lifecycle.plan_options({"max_replicas_per_set": -1})


def _observed(exporters, leases, policy="Delete"):
    vclass = target_class()
    vclass["spec"]["reclaimPolicy"] = policy
    pods = [{"metadata": {"name": e["metadata"]["name"], "labels": {c.LABEL_EXPORTER: e["metadata"]["name"]}}}
            for e in exporters]
    return {"class": vclass, "owned": exporters, "pods": pods, "leases": leases}


def test_a_teardown_waits_only_for_what_is_leased():
    held = exporter("rpi4-0", lease="lease-a", enabled=False)  # an allowDisabled lease
    named = exporter("rpi4-1", enabled=False)
    free = exporter("rpi4-2", enabled=False)
    by_lease = lease("lease-b")
    by_lease["status"] = {"exporterRef": {"name": "rpi4-1"}}
    observed = _observed([held, named, free], [by_lease])
    assert lifecycle.teardown_leased(observed) == {"rpi4-0": ["lease-a"], "rpi4-1": ["lease-b"]}
    assert lifecycle.teardown_actionable(observed) == ["rpi4-2"]
    only_leased = _observed([held], [])
    assert lifecycle.teardown_remaining(only_leased) and lifecycle.teardown_actionable(only_leased) == []
    # Retain destroys nothing: nothing to wait for.
    assert lifecycle.teardown_leased(_observed([held], [], policy="Retain")) == {}
    waiting = lifecycle.waiting_for_leases_condition(lifecycle.teardown_leased(observed))
    assert waiting["status"] == "True" and "rpi4-0 (lease lease-a)" in waiting["message"]


def test_a_pending_lease_is_never_demand_for_a_refused_set():
    # The thief would have more headroom (no ceiling), so it would win the lease.
    thief = a_set("thief", "2026-11-21T08:00:00Z", {"board": "rpi4"})
    victim = copy.deepcopy(VICTIM)
    victim["spec"]["maxReplicas"] = 2
    objects = {"VirtualTargetClass": [target_class()], "ExporterSet": [victim, thief], "Exporter": [],
               "Lease": [lease("wanted")], "Pod": [], "ExporterSetPolicy": []}
    assert [x["metadata"]["name"] for x in k8s_observe.observe(victim, objects, NOW)["pending"]] == ["wanted"]
    assert k8s_observe.observe(thief, objects, NOW)["pending"] == []
