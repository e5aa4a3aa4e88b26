"""Adoption by selector and the SelectorOverlap condition (pool/adoption.py,
selectors.selector_overlaps), through k8s/observe.py as the operator and the
playbook both plan. The API server's side (CEL) is in tests/controller/test_crds.py,
the writes and Events on a real bed in tests/pool/test_selector_adoption.py."""

import copy

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import adoption, selectors
from pool_builders import NOW, TEMPLATE_LABELS, exporter, exporter_set, lease, target_class


def apart(obj):
    """``obj`` labelled as a board or another controller's Exporter is: with
    no label of the set's template (a set sharing a label with an Exporter
    no set controls is refused, test_label_overlap.py), but selected by a
    ``wide`` set's selector."""
    labels = obj["metadata"].get("labels", {})
    obj["metadata"]["labels"] = {**{k: v for k, v in labels.items() if k not in TEMPLATE_LABELS},
                                 "board": "bench-rpi4", "lab": "bench"}
    return obj


def wide(the_set):
    """``the_set`` selecting every Exporter with a ``board`` label."""
    the_set["spec"]["selector"] = {"matchExpressions": [{"key": "board", "operator": "Exists"}]}
    return the_set


def orphan(name, **changes):
    """An Exporter a qemu pool made, without a controller owner (as a detach leaves it)."""
    obj = exporter(name, owner=None, annotations={c.ANNOTATION_PROVISIONER: c.PROVISIONER_QEMU})
    obj["metadata"]["uid"] = f"uid-{name}"
    obj["metadata"]["resourceVersion"] = "7"
    for key, value in changes.items():
        obj["metadata"][key] = value
    return obj


def observe(the_set, exporters, sets=None, leases=()):
    objects = {"VirtualTargetClass": [target_class()], "ExporterSet": sets or [the_set],
               "Exporter": list(exporters), "Lease": list(leases), "Pod": [], "ExporterSetPolicy": []}
    return k8s_observe.observe(the_set, objects, NOW)


def plan(the_set, exporters, **kwargs):
    observed = observe(the_set, exporters, **kwargs)
    return observed, k8s_observe.plan_for(the_set, observed)


def test_an_orphan_the_selector_selects_is_adopted_with_an_event_and_nothing_is_created():
    the_set = exporter_set(min_available=2)
    observed, result = plan(the_set, [orphan("stray-0")])
    assert result["adopt"] == [{"name": "stray-0", "uid": "uid-stray-0", "resourceVersion": "7"}]
    assert result["create"] == []
    events = [e for e in result["events"] if e["reason"] == adoption.REASON_ADOPTED]
    assert [e["exporter"] for e in events] == ["stray-0"] and events[0]["type"] == "Normal"
    assert "stray-0" in events[0]["message"]
    pool, _ = k8s_observe.split_plan(result, the_set, c.PROVISIONER_QEMU)
    assert pool["adopt"] == result["adopt"] and pool["changed"]
    # Without the adoption the pass creates instead.
    assert plan(the_set, [])[1]["create"]


def test_the_adoption_patch_sets_the_controller_and_the_set_label_and_keeps_other_owners():
    the_set = exporter_set()
    stray = orphan("stray-0", ownerReferences=[{"kind": "ConfigMap", "name": "x", "uid": "u"}])
    patch = adoption.adoption_patch(the_set, stray)
    refs = patch["metadata"]["ownerReferences"]
    assert refs[0] == {"kind": "ConfigMap", "name": "x", "uid": "u"}
    assert refs[1]["uid"] == "uid-rpi4" and refs[1]["controller"]
    assert patch["metadata"]["labels"] == {c.LABEL_EXPORTER_SET: "rpi4"}
    assert patch["metadata"]["resourceVersion"] == "7"


def _not_adopted(the_set, exporters, **kwargs):
    observed = observe(the_set, exporters, **kwargs)
    return observed["adopt"], observed["not_adopted"]


def test_one_with_a_controller_owner_is_never_taken():
    other = apart(copy.deepcopy(orphan("theirs-0")))
    other["metadata"]["ownerReferences"] = [{"kind": "Thing", "name": "t", "uid": "u", "controller": True}]
    adopt, refused = _not_adopted(wide(exporter_set()), [other])
    assert adopt == [] and refused == ["theirs-0: controlled by Thing t"]
    # Another set's Exporter is not listed: the overlap of the two sets says so.
    owned = orphan("pool-0")
    owned["metadata"]["ownerReferences"] = [{"kind": "ExporterSet", "name": "b", "uid": "uid-b", "controller": True}]
    assert _not_adopted(exporter_set(), [owned]) == ([], [])


def test_only_of_its_namespace_of_its_provisioner_and_not_named_for_another_set():
    elsewhere = orphan("a", namespace="other")
    physical = apart(orphan("board-1", annotations={}))
    corellium = orphan("c-0", annotations={c.ANNOTATION_PROVISIONER: c.PROVISIONER_CORELLIUM})
    detached = apart(orphan("old-0", labels={"board": "rpi4", c.LABEL_EXPORTER_SET: "older"}))
    adopt, refused = _not_adopted(wide(exporter_set()), [elsewhere, physical, corellium, detached])
    assert adopt == []
    assert refused == [
        "a: in namespace other",
        f"board-1: not made by a pool (no {c.ANNOTATION_PROVISIONER} annotation)",
        f"c-0: not made by {c.PROVISIONER_QEMU} (its {c.ANNOTATION_PROVISIONER} annotation is "
        f"'{c.PROVISIONER_CORELLIUM}')",
        f"old-0: its {c.LABEL_EXPORTER_SET} label names ExporterSet older",
    ]
    # Detached from a set of this name: it comes back.
    mine = orphan("old-0", labels={"board": "rpi4", c.LABEL_EXPORTER_SET: "rpi4"})
    assert [e["name"] for e in _not_adopted(exporter_set(), [mine])[0]] == ["old-0"]


def test_a_leased_one_waits_for_its_lease_to_end_from_either_side():
    by_ref = orphan("held-0")
    by_ref["status"]["leaseRef"] = {"name": "l1"}
    by_lease = orphan("held-1")
    assert _not_adopted(exporter_set(), [by_ref, by_lease], leases=[lease("l2", assigned="held-1")]) == ([], [])
    ended = lease("l2", assigned="held-1", ended=True)
    assert [e["name"] for e in _not_adopted(exporter_set(), [by_lease], leases=[ended])[0]] == ["held-1"]


def test_nothing_is_adopted_by_an_empty_selector_a_refused_set_or_a_paused_one():
    empty = exporter_set()
    empty["spec"]["selector"] = {}
    assert _not_adopted(empty, [orphan("stray-0")]) == ([], [])
    first = exporter_set(name="first")
    first["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"
    later = exporter_set()
    later["metadata"]["creationTimestamp"] = "2026-11-02T00:00:00Z"
    observed, result = plan(later, [orphan("stray-0", labels={"board": "rpi4"})], sets=[first, later])
    assert observed["label_conflicts"] and observed["adopt"] == [] and not result.get("adopt")
    policy = {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSetPolicy",
              "metadata": {"name": "p", "namespace": "lab"}, "spec": {"exporterSetName": "rpi4", "paused": True}}
    objects = {"VirtualTargetClass": [target_class()], "ExporterSet": [exporter_set()],
               "Exporter": [orphan("stray-0")], "Lease": [], "Pod": [], "ExporterSetPolicy": [policy]}
    observed = k8s_observe.observe(exporter_set(), objects, NOW)
    assert observed["policy"]["paused"]
    assert not k8s_observe.plan_for(exporter_set(), observed).get("adopt")


def test_an_overlap_is_reported_on_both_sets_with_a_warning_once():
    first = exporter_set(name="first")
    first["metadata"]["creationTimestamp"] = "2026-11-01T00:00:00Z"
    later = exporter_set(name="later")
    later["metadata"]["creationTimestamp"] = "2026-11-02T00:00:00Z"
    sets = [first, later]
    for the_set, other, refused in ((first, "later", "ExporterSet later"), (later, "first", "this set")):
        _, result = plan(the_set, [], sets=sets)
        overlap = next(x for x in result["status"]["conditions"] if x["type"] == adoption.CONDITION_SELECTOR_OVERLAP)
        assert (overlap["status"], overlap["reason"]) == ("True", adoption.REASON_SELECTOR_OVERLAP)
        assert f"ExporterSet {other}" in overlap["message"] and f"{refused}, created later" in overlap["message"]
        warnings = [e for e in result["events"] if e["reason"] == adoption.REASON_SELECTOR_OVERLAP]
        assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
        # Said once: the next pass, with the condition written, has no Event.
        again = copy.deepcopy(the_set)
        again["status"] = result["status"]
        _, second = plan(again, [], sets=[again if s is the_set else s for s in sets])
        assert not [e for e in second["events"] if e["reason"] == adoption.REASON_SELECTOR_OVERLAP]
    # The first set stays healthy and serving; only the later one is refused.
    _, result = plan(first, [], sets=sets)
    by_type = {x["type"]: x for x in result["status"]["conditions"]}
    assert by_type["Degraded"]["status"] == "False" and by_type["SetHealthy"]["status"] == "True"
    # Apart, neither reports anything; once apart, True turns False.
    apart = copy.deepcopy(later)
    apart["spec"]["selector"] = {"matchLabels": {"board": "rpi5"}}
    apart["spec"]["template"]["metadata"]["labels"] = {"board": "rpi5"}
    assert selectors.selector_overlaps(first, [first, apart], c.LABEL_EXPORTER_SET) == []
    healed = copy.deepcopy(first)
    healed["status"] = result["status"]
    _, result = plan(healed, [], sets=[healed, apart])
    overlap = next(x for x in result["status"]["conditions"] if x["type"] == adoption.CONDITION_SELECTOR_OVERLAP)
    assert (overlap["status"], overlap["reason"]) == ("False", adoption.REASON_NO_OVERLAP)


def test_a_set_without_overlaps_gets_no_condition():
    _, result = plan(exporter_set(), [])
    assert adoption.CONDITION_SELECTOR_OVERLAP not in {x["type"] for x in result["status"]["conditions"]}


def test_exporters_it_will_not_take_make_the_condition_true_naming_them():
    physical = apart(orphan("board-1", annotations={}))
    _, result = plan(wide(exporter_set()), [physical])
    overlap = next(x for x in result["status"]["conditions"] if x["type"] == adoption.CONDITION_SELECTOR_OVERLAP)
    assert (overlap["status"], overlap["reason"]) == ("True", adoption.REASON_NOT_ADOPTED)
    assert "board-1: not made by a pool" in overlap["message"]


def test_a_selector_that_does_not_select_its_own_template_says_so():
    """The CRD refuses it; on upstream's CRD the set says it instead."""
    loose = exporter_set()
    loose["spec"]["selector"] = {"matchLabels": {"board": "rpi5"}}
    _, result = plan(loose, [])
    overlap = next(x for x in result["status"]["conditions"] if x["type"] == adoption.CONDITION_SELECTOR_OVERLAP)
    assert (overlap["status"], overlap["reason"]) == ("True", adoption.REASON_SELECTOR_MISMATCH)
    assert overlap["message"].startswith("spec.selector (board=rpi5) does not select spec.template.metadata.labels")
    assert adoption.selector_mismatch(exporter_set()) is None
