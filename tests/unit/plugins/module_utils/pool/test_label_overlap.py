"""A set may share no label with an Exporter no set controls
(``selectors.foreign_label_overlaps`` through ``template_label_conflicts``).

The controller gives a Lease any approved Exporter its selector matches
(docs/CONTROLLER.md of the stand-in): a lease asking for a lab's board by
one of its labels (``board=rpi4``) matches every Exporter carrying that
label, so a set whose template copies it would have its Exporters handed
the board's leases. A selector that matches the board and the set's
Exporters without naming a label both carry has to accept a value the
board lacks (``board in (rpi4,rpi4-virtual)``, ``board``) or only exclude
(``!x``): it asks for more than the board."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import selectors
from hypothesis import given, settings
from hypothesis import strategies as st
from pool_builders import NOW, exporter_set, lease, target_class
from test_label_capture import a_set, an_exporter

SET_LABEL = constants.LABEL_EXPORTER_SET
FIELD = "spec.template.metadata.labels"


def overlaps(tenant, sets, exporters):
    return [m for m in selectors.template_label_conflicts(tenant, sets, SET_LABEL, selectors.exporter_groups(exporters))
            if m.startswith(FIELD + ":")]


def test_a_set_sharing_one_label_of_a_board_is_refused_naming_the_label_and_the_board():
    tenant = a_set("tenant", {"board": "rpi4", "virtual": "true"})
    board = an_exporter("bench-rpi4", {"board": "rpi4", "lab": "bench"})
    assert overlaps(tenant, [tenant], [board]) == [
        f"{FIELD}: the set's Exporters would carry board=rpi4 of Exporter bench-rpi4 (board=rpi4,lab=bench), "
        "which no set controls; a lease asking for board=rpi4 matches both, and the controller could give it "
        "this set's Exporters"]
    # That lease: the board's and the set's Exporters both satisfy it.
    asked = {"matchLabels": {"board": "rpi4"}}
    assert selectors.selector_matches(asked, board["metadata"]["labels"])
    assert selectors.selector_matches(asked, selectors.exporter_labels(tenant, SET_LABEL))


def test_another_controllers_and_a_detached_exporter_count_as_boards():
    tenant = a_set("tenant", {"arch": "arm64", "board": "rpi4-virtual"})
    theirs = [an_exporter("upstream-0", {"arch": "arm64", "board": "x"}, owner=("Jumpstarter", "upstream")),
              an_exporter("old-0", {"arch": "arm64", "board": "y"}, pool_made=True, set_label="gone")]
    assert [m.split(" of Exporter ")[1].split(" ")[0] for m in overlaps(tenant, [tenant], theirs)] == [
        "old-0", "upstream-0"]


def test_a_key_with_another_value_its_own_adoptable_and_other_sets_exporters_do_not_refuse_it():
    tenant = a_set("tenant", {"board": "rpi4-virtual", "lab": "bench"}, uid="uid-tenant")
    earlier = a_set("earlier", {}, created="2026-01-01T00:00:00Z")
    exporters = [
        an_exporter("bench-rpi4", {"board": "rpi4"}),  # the same key, another value
        an_exporter("tenant-0", {"lab": "bench"}, owner=("ExporterSet", "tenant"), pool_made=True,
                    set_label="tenant"),
        an_exporter("stray-0", {"lab": "bench"}, pool_made=True),  # adoptable
        # An earlier set's is asked for by that set's selector: refused only
        # when the template carries all of its labels (test_label_capture.py).
        an_exporter("earlier-0", {"lab": "bench", "tier": "a"}, owner=("ExporterSet", "earlier"),
                    pool_made=True, set_label="earlier"),
    ]
    assert overlaps(tenant, [earlier, tenant], exporters) == []


def test_the_refused_set_counts_no_lease_and_its_condition_names_the_board():
    """Through k8s/observe.py, as the operator and the playbook plan: the
    set is held (nothing made) and the board's waiting lease is nobody's."""
    the_set = exporter_set(min_available=1)  # board=rpi4, virtual=true
    board = {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
             "metadata": {"name": "bench-rpi4", "namespace": "lab", "labels": {"board": "rpi4", "lab": "bench"}},
             "spec": {"enabled": True}, "status": {}}
    objects = {"VirtualTargetClass": [target_class()], "ExporterSet": [the_set], "Exporter": [board],
               "Lease": [lease("theirs", selector={"board": "rpi4"})], "Pod": [], "ExporterSetPolicy": []}
    observed = k8s_observe.observe(the_set, objects, NOW)
    assert [m.split(";")[0] for m in observed["label_conflicts"]] == [
        f"{FIELD}: the set's Exporters would carry board=rpi4 of Exporter bench-rpi4 (board=rpi4,lab=bench), "
        "which no set controls"]
    assert observed["pending"] == [] and k8s_observe.held(observed)
    result = k8s_observe.plan_for(the_set, observed)
    assert result["create"] == [] and result["create_dormant"] == []
    degraded = next(x for x in result["status"]["conditions"] if x["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "TemplateLabelConflict")
    assert "bench-rpi4" in degraded["message"]


def test_the_class_may_consent_to_labels_its_sets_share_with_boards():
    """An admin who wants leases for board=rpi4 served by a physical or a
    virtual rpi4 (JEP-0014's fallback) says so on the class; the set still
    may not share a label the class does not name."""
    the_set = exporter_set(labels={"board": "rpi4", "lab": "bench", "virtual": "true"})
    board = {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
             "metadata": {"name": "bench-rpi4", "namespace": "lab", "labels": {"board": "rpi4", "lab": "bench"}},
             "spec": {"enabled": True}, "status": {}}
    vclass = target_class()
    vclass["metadata"]["annotations"] = {constants.ANNOTATION_SET_OVERRIDABLE: "shared-labels=board=rpi4"}
    objects = {"VirtualTargetClass": [vclass], "ExporterSet": [the_set], "Exporter": [board],
               "Lease": [], "Pod": [], "ExporterSetPolicy": []}
    assert [m.split(";")[0] for m in k8s_observe.observe(the_set, objects, NOW)["label_conflicts"]] == [
        f"{FIELD}: the set's Exporters would carry lab=bench of Exporter bench-rpi4 (board=rpi4,lab=bench), "
        "which no set controls"]
    vclass["metadata"]["annotations"] = {constants.ANNOTATION_SET_OVERRIDABLE: "shared-labels=board=rpi4|lab=bench"}
    assert k8s_observe.observe(the_set, objects, NOW)["label_conflicts"] == []
    # Consent covers boards, not another set's Exporters, nor another class's sets.
    earlier = a_set("earlier", {}, created="2026-01-01T00:00:00Z")
    theirs = an_exporter("earlier-0", {"board": "rpi4"}, owner=("ExporterSet", "earlier"), pool_made=True,
                         set_label="earlier")
    tenant = a_set("tenant", {"board": "rpi4"})
    groups = selectors.exporter_groups([theirs])
    assert selectors.template_label_conflicts(tenant, [earlier, tenant], SET_LABEL, groups,
                                              frozenset({("board", "rpi4")}))


KEYS = ["board", "lab", "arch", "virtual"]
VALUES = ["a", "b", "c"]
LABELS = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=4)
REQUIREMENT = st.one_of(
    st.builds(lambda k, vs, op: {"key": k, "operator": op, "values": vs}, st.sampled_from(KEYS),
              st.lists(st.sampled_from(VALUES), min_size=1, max_size=3, unique=True), st.sampled_from(["In", "NotIn"])),
    st.builds(lambda k, op: {"key": k, "operator": op}, st.sampled_from(KEYS),
              st.sampled_from(["Exists", "DoesNotExist"])))
SELECTOR = st.builds(lambda labels, expressions: {"matchLabels": labels, "matchExpressions": expressions},
                     LABELS, st.lists(REQUIREMENT, max_size=3))
# Exporters no set controls, as the tenant's set sees them.
FOREIGN = {"nobody": {}, "other controller": {"owner": ("Jumpstarter", "upstream")},
           "detached from another": {"pool_made": True, "set_label": "earlier"}}


def pins_a_value(selector):
    """Whether the selector names a label by one value (``k=v``, ``k in (v)``),
    the way a lessee asks for a board (``jmp shell -l board=rpi4``)."""
    return bool(selector["matchLabels"]) or any(
        r["operator"] == "In" and len(r["values"]) == 1 for r in selector["matchExpressions"])


@settings(max_examples=300, deadline=None)
@given(mine=LABELS, theirs=LABELS, who=st.sampled_from(sorted(FOREIGN)), selector=SELECTOR)
def test_no_lease_naming_a_boards_label_matches_an_accepted_sets_exporters(mine, theirs, who, selector):
    """Accepted: every selector that names a label by one value and matches
    the board misses the set's Exporters. Refused: the labels the message
    names, as a lease, match both."""
    tenant = a_set("tenant", mine)
    exporter = an_exporter("x-0", theirs, **FOREIGN[who])
    board = exporter["metadata"]["labels"]
    ours = selectors.exporter_labels(tenant, SET_LABEL)
    found = selectors.foreign_label_overlaps(tenant, [tenant], selectors.exporter_groups([exporter]))
    assert bool(overlaps(tenant, [tenant], [exporter])) == bool(found)
    if not found:
        if pins_a_value(selector) and selectors.selector_matches(selector, board):
            assert not selectors.selector_matches(selector, ours)
    else:
        [(name, _, shared)] = found
        assert name == "x-0" and shared
        assert selectors.selector_matches({"matchLabels": shared}, board)
        assert selectors.selector_matches({"matchLabels": shared}, ours)
