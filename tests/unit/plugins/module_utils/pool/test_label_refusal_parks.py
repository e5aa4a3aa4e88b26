"""A set whose template labels came to be refused after it had Exporters (a
lab's board registered later with one of its labels) keeps none enabled but
the leased ones: a lease asking for the board by that label would land on
any of them (``plan._park_while_labels_refused``). Once fixed, they serve
again."""

from __future__ import annotations

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import plan as pool_plan
from hypothesis import given, settings
from hypothesis import strategies as st
from pool_builders import NOW, apply_annotation_patches, exporter, exporter_set, lease, target_class

CONFLICT = ["spec.template.metadata.labels: the set's Exporters would carry board=rpi4 of Exporter bench-rpi4"]


def plan(the_set, exporters, leases=(), conflicts=CONFLICT):
    return pool_plan.scale_plan(the_set, target_class(), exporters, [], NOW, leases=list(leases),
                                options={"label_conflicts": list(conflicts)})


def test_a_served_set_whose_labels_are_refused_later_parks_its_idle_exporters_not_its_leased():
    the_set = exporter_set(min_available=2, max_replicas=4)
    exporters = [exporter("pool-0"), exporter("pool-1"), exporter("pool-2", lease="theirs"),
                 exporter("pool-3", ready=False, created=-60)]
    result = plan(the_set, exporters, [lease("theirs", assigned="pool-2")])
    assert sorted(result["disable"]) == ["pool-0", "pool-1", "pool-3"]
    assert result["enable"] == [] and result["create"] == [] and result["create_dormant"] == []
    parked = {name for name, notes in result["exporter_annotations"].items() if c.ANNOTATION_SCALE_DOWN in notes}
    assert parked == {"pool-0", "pool-1", "pool-3"}
    assert "ScalingDown" in [e["reason"] for e in result["events"]]
    # Fixed (no refusal): the parked ones are enabled again, as many as the set wants.
    apply_annotation_patches({e["metadata"]["name"]: e for e in exporters}, result["exporter_annotations"])
    for e in exporters:
        if e["metadata"]["name"] in result["disable"]:
            e["spec"]["enabled"] = False
    again = plan(the_set, exporters, [lease("theirs", assigned="pool-2")], conflicts=())
    assert len(again["enable"]) == 2 and again["disable"] == []
    # Still refused: nothing re-enabled, nothing deleted, nothing made.
    still = plan(the_set, exporters, [lease("theirs", assigned="pool-2")])
    assert still["enable"] == [] and still["delete"] == [] and still["create"] == []


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()), max_size=8),
       st.integers(0, 4), st.booleans())
def test_while_refused_no_unleased_exporter_of_the_set_stays_or_becomes_enabled(members, buffer, refused):
    """Any pool: with the labels refused, every enabled Exporter of the set
    that no lease holds is disabled, none is enabled or made, no leased one
    is disabled; without the refusal none of them is disabled for it."""
    exporters, leases = [], []
    for i, (ready, enabled, leased, parked) in enumerate(members):
        name = f"pool-{i}"
        notes = {c.ANNOTATION_SCALE_DOWN: NOW} if parked and not enabled else None
        exporters.append(exporter(name, ready=ready, enabled=enabled, lease=f"l-{i}" if leased else None,
                                  annotations=notes))
        if leased:
            leases.append(lease(f"l-{i}", assigned=name))
    the_set = exporter_set(min_available=buffer, max_replicas=8)
    result = plan(the_set, exporters, leases, conflicts=CONFLICT if refused else ())
    enabled_unleased = {f"pool-{i}" for i, (_, enabled, leased, _) in enumerate(members) if enabled and not leased}
    leased_names = {f"pool-{i}" for i, m in enumerate(members) if m[2]}
    disabled = set(result["disable"])
    assert not disabled & leased_names
    if refused:
        assert enabled_unleased <= disabled
        assert result["enable"] == [] and result["create"] == [] and result["create_dormant"] == []

