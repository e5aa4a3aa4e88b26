"""A set may not carry every board label of an Exporter outside it
(``selectors.foreign_label_overlaps`` through ``template_label_conflicts``;
sharing one label of an Exporter no set controls: test_label_overlap.py):
every lease asked for that Exporter by its labels would be satisfied by the
set's Exporters too, and the controller could hand it to the tenant. The
set's own Exporters, and those it may adopt (made by a pool, controlled by
nothing, labelled for no other set), are not outside it; of two sets, the
later one is refused."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import selectors
from hypothesis import given, settings
from hypothesis import strategies as st

SET_LABEL = constants.LABEL_EXPORTER_SET
FIELD = "spec.template.metadata.labels"


def a_set(name, labels, created="2026-01-02T00:00:00Z", uid=None):
    return {"metadata": {"name": name, "namespace": "lab", "uid": uid or f"uid-{name}", "creationTimestamp": created},
            "spec": {"selector": {"matchLabels": {"set-only": name}},
                     "template": {"metadata": {"labels": {**labels, "set-only": name}}}}}


def an_exporter(name, labels, owner=None, pool_made=False, set_label=None):
    meta = {"name": name, "namespace": "lab", "labels": dict(labels)}
    if set_label is not None:
        meta["labels"][SET_LABEL] = set_label
    if owner is not None:
        kind, owner_name = owner
        meta["ownerReferences"] = [{"kind": kind, "name": owner_name, "uid": f"uid-{owner_name}", "controller": True}]
    if pool_made:
        meta["annotations"] = {constants.ANNOTATION_PROVISIONER: constants.PROVISIONER_QEMU}
    return {"metadata": meta}


def refusals(exporter_set, sets, exporters):
    return [m for m in selectors.template_label_conflicts(exporter_set, sets, SET_LABEL,
                                                          selectors.exporter_groups(exporters))
            if "would carry every label of Exporter" in m]


def test_a_set_copying_a_boards_labels_is_refused_naming_the_field_and_the_board():
    tenant = a_set("tenant", {"board": "rpi4", "lab": "bench", "virtual": "true"})
    board = an_exporter("bench-rpi4", {"board": "rpi4", "lab": "bench"})
    assert refusals(tenant, [tenant], [board]) == [
        f"{FIELD}: the set's Exporters would carry every label of Exporter bench-rpi4 (board=rpi4,lab=bench), "
        "which is not the set's; leases asked for it could be given this set's Exporters"]
    # A board with a label the set does not carry can be asked for apart.
    ground_truth = an_exporter("bench-rpi4", {"board": "rpi4", "fidelity": "full"})
    assert refusals(tenant, [tenant], [ground_truth]) == []


def test_its_own_and_adoptable_exporters_and_a_later_sets_do_not_refuse_it():
    labels = {"board": "rpi4"}
    tenant = a_set("tenant", labels, uid="uid-tenant")
    later = a_set("later", labels, created="2026-03-01T00:00:00Z")
    exporters = [
        an_exporter("tenant-0", labels, owner=("ExporterSet", "tenant"), pool_made=True, set_label="tenant"),
        an_exporter("stray-0", labels, pool_made=True),  # adoptable: made by a pool, no set label
        an_exporter("detached-0", labels, pool_made=True, set_label="tenant"),
        an_exporter("later-0", labels, owner=("ExporterSet", "later"), pool_made=True, set_label="later"),
    ]
    assert refusals(tenant, [tenant, later], exporters) == []
    # The later set is the one refused, for the earlier one's Exporters, the detached one too.
    assert [m.split(" (")[0].rsplit(" ", 1)[1] for m in refusals(later, [tenant, later], exporters)] == [
        "detached-0", "tenant-0"]


def test_one_message_per_kind_of_exporter_and_reserved_labels_do_not_count():
    tenant = a_set("tenant", {"board": "rpi4"})
    exporters = [an_exporter(f"bench-{n}", {"board": "rpi4", constants.LABEL_HOST: f"h{n}"}) for n in range(50)]
    assert [m.split(" (")[0].rsplit(" ", 1)[1] for m in refusals(tenant, [tenant], exporters)] == ["bench-0"]
    only_reserved = an_exporter("ours", {constants.LABEL_HOST: "h1"})
    assert selectors.exporter_groups([only_reserved]) == []


# Who an Exporter is, from the tenant set's side.
OWNERS = {
    "nobody": {},  # a hand-registered board
    "other controller": {"owner": ("Jumpstarter", "upstream")},
    "earlier set": {"owner": ("ExporterSet", "earlier"), "pool_made": True, "set_label": "earlier"},
    "later set": {"owner": ("ExporterSet", "later"), "pool_made": True, "set_label": "later"},
    "detached from another": {"pool_made": True, "set_label": "earlier"},
    "detached from it": {"pool_made": True, "set_label": "tenant"},
    "adoptable": {"pool_made": True},
    "its own": {"owner": ("ExporterSet", "tenant"), "pool_made": True, "set_label": "tenant"},
}
OUTSIDE = {"nobody", "other controller", "earlier set", "detached from another"}
LABELS = st.dictionaries(st.sampled_from(["board", "lab", "arch", "virtual"]), st.sampled_from(["a", "b"]), max_size=3)


@settings(max_examples=200, deadline=None)
@given(mine=LABELS, theirs=LABELS, who=st.sampled_from(sorted(OWNERS)))
def test_refused_exactly_when_the_exporters_own_labels_as_a_lease_selector_select_the_sets(mine, theirs, who):
    """For an Exporter outside the set, the set is refused exactly when the
    lease that asks for that Exporter by all its labels (the narrowest a
    lessee can write) is satisfied by the set's Exporters; for one that is
    the set's, never."""
    earlier = a_set("earlier", {}, created="2026-01-01T00:00:00Z")
    tenant = a_set("tenant", mine)
    later = a_set("later", {}, created="2026-03-01T00:00:00Z")
    exporter = an_exporter("x-0", theirs, **OWNERS[who])
    refused = refusals(tenant, [earlier, tenant, later], [exporter])
    ask = {"matchLabels": selectors.board_labels(exporter["metadata"]["labels"])}
    captures = bool(theirs) and selectors.selector_matches(ask, selectors.exporter_labels(tenant, SET_LABEL))
    assert bool(refused) == (who in OUTSIDE and captures)
