"""spec.selector as in a ReplicaSet, on the bed with the operator running.

- An Exporter a qemu pool made, left without a controller owner (as a
  detach leaves it), that the set's selector selects is adopted: the set
  becomes its controller owner, a Normal ``Adopted`` Event names it, and the
  set makes no Exporter of its own for the need the adopted one fills.
- One the selector selects that has a controller owner, or that no pool of
  the set's provisioner made (a physical board), is never taken: the set's
  ``SelectorOverlap`` condition names each with why.
- Two sets whose selectors select each other's Exporters are reported on
  both (``SelectorOverlap`` and a Warning Event each); the later one is the
  one refused (``TemplateLabelConflict``).

The admission side (the CEL rules that refuse a selector that does not
select the template's labels) is in tests/controller/test_crds.py; the pure rules in
tests/unit/plugins/module_utils/pool/test_adoption.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import adoption
from jumpstarter_standin import wait_for
from kubernetes import client
from pool_helpers import condition, get_set, make_class, make_set

BOARD = "adopt-board"
EXPORTERS = ("jumpstarter.dev", "v1alpha1")


# The labels of a board or another controller's Exporter: none of the set's
# template (a set sharing a label with an Exporter no set controls is refused,
# TemplateLabelConflict, tests/hostile/test_hostile_label_overlap.py), though the
# set's selector (WIDE) selects them.
APART = {"board": "adopt-bench", "lab": "bench"}
WIDE = {"matchExpressions": [{"key": "board", "operator": "Exists"}]}


def make_exporter(custom, namespace, name, annotations=None, owner=None, labels=None):
    metadata = {"name": name, "labels": labels or {"board": BOARD, "virtual": "true"},
                "annotations": annotations or {}}
    if owner:
        metadata["ownerReferences"] = [owner]
    return custom.create_namespaced_custom_object(*EXPORTERS, namespace, "exporters", {
        "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter", "metadata": metadata,
        "spec": {"enabled": True}})


def controller_of(custom, namespace, name):
    exporter = custom.get_namespaced_custom_object(*EXPORTERS, namespace, "exporters", name)
    return next((ref for ref in exporter["metadata"].get("ownerReferences") or () if ref.get("controller")), None)


def set_events(core, namespace, name, reason):
    return [e for e in core.list_namespaced_event(namespace).items
            if e.involved_object.name == name and e.reason == reason]


def test_an_orphan_is_adopted_others_are_never_taken_and_overlaps_show_on_both(api, namespace, operator):
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    made_by_qemu = {c.ANNOTATION_PROVISIONER: c.PROVISIONER_QEMU}
    make_exporter(custom, namespace, "stray-0", made_by_qemu)
    make_exporter(custom, namespace, "board-1", labels=APART)  # a physical board: no pool made it
    holder = core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="holder")))
    make_exporter(custom, namespace, "held-0", made_by_qemu, owner={
        "apiVersion": "v1", "kind": "ConfigMap", "name": "holder", "uid": holder.metadata.uid,
        "controller": True}, labels=APART)
    make_class(custom, namespace)
    make_set(custom, namespace, board=BOARD, minAvailableReplicas=1, maxReplicas=3, selector=WIDE)
    operator()

    pool = wait_for(lambda: (controller_of(custom, namespace, "stray-0") or {}).get("name") == "pool"
                    and get_set(custom, namespace), timeout=60, message="stray-0 adopted")
    stray = custom.get_namespaced_custom_object(*EXPORTERS, namespace, "exporters", "stray-0")
    assert controller_of(custom, namespace, "stray-0")["uid"] == pool["metadata"]["uid"]
    assert stray["metadata"]["labels"][c.LABEL_EXPORTER_SET] == "pool"
    adopted = wait_for(lambda: set_events(core, namespace, "pool", adoption.REASON_ADOPTED),
                       timeout=30, message="the Adopted Event")
    assert len(adopted) == 1 and adopted[0].type == "Normal" and "stray-0" in adopted[0].message

    # The adopted Exporter fills the need: the set made none of its own.
    wait_for(lambda: (get_set(custom, namespace).get("status") or {}).get("replicas") == 1,
             timeout=30, message="replicas 1")
    exporters = custom.list_namespaced_custom_object(*EXPORTERS, namespace, "exporters")["items"]
    assert sorted(e["metadata"]["name"] for e in exporters) == ["board-1", "held-0", "stray-0"]
    # Never taken: the one with a controller, the physical board; named why.
    assert controller_of(custom, namespace, "held-0")["name"] == "holder"
    assert controller_of(custom, namespace, "board-1") is None
    overlap = wait_for(lambda: condition(get_set(custom, namespace), adoption.CONDITION_SELECTOR_OVERLAP),
                       timeout=30, message="SelectorOverlap on pool")
    assert (overlap["status"], overlap["reason"]) == ("True", adoption.REASON_NOT_ADOPTED)
    assert "board-1: not made by a pool" in overlap["message"]
    assert "held-0: controlled by ConfigMap holder" in overlap["message"]

    # A later set whose labels the first one's selector selects. Later by its
    # creationTimestamp, whole seconds: in the same second the tie goes by
    # name, and "copy" sorts first.
    created = datetime.fromisoformat(get_set(custom, namespace)["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    wait_for(lambda: datetime.now(UTC) >= created + timedelta(seconds=1), timeout=5, interval=0.05,
             message="a second after the first set's creationTimestamp")
    make_set(custom, namespace, name="copy", board=BOARD, minAvailableReplicas=1, maxReplicas=3)

    def overlapping(name):
        found = condition(get_set(custom, namespace, name), adoption.CONDITION_SELECTOR_OVERLAP) or {}
        return found if found.get("reason") == adoption.REASON_SELECTOR_OVERLAP else None

    for name, other, refused in (("pool", "copy", "ExporterSet copy"), ("copy", "pool", "this set")):
        found = wait_for(lambda name=name: overlapping(name), timeout=30, message=f"overlap on {name}")
        assert found["status"] == "True"
        assert f"ExporterSet {other}" in found["message"] and f"{refused}, created later" in found["message"]
        warnings = wait_for(lambda name=name: set_events(core, namespace, name, adoption.REASON_SELECTOR_OVERLAP),
                            timeout=30, message=f"the SelectorOverlap Event of {name}")
        assert warnings[0].type == "Warning" and f"ExporterSet {other}" in warnings[-1].message
    assert condition(get_set(custom, namespace, "copy"), "Degraded")["reason"] == "TemplateLabelConflict"
    assert condition(get_set(custom, namespace, "pool"), "Degraded")["status"] == "False"
    # The refused set adopted nothing and made nothing; the first kept its own.
    assert controller_of(custom, namespace, "stray-0")["name"] == "pool"
    exporters = custom.list_namespaced_custom_object(*EXPORTERS, namespace, "exporters")["items"]
    assert not [e for e in exporters if (controller_of(custom, namespace, e["metadata"]["name"]) or {}).get(
        "name") == "copy"]
