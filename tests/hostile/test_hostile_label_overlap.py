"""A tenant's set that shares one label with a lab's board (an Exporter no set
controls), against the real operator and the controller stand-in on the bed.

The controller gives a Lease any Exporter its selector matches, so a lease
asking for the board by that label (``board=<b>``) would match the set's
Exporters too. The set is refused (``TemplateLabelConflict`` naming the
field, the shared label and the board, a Warning Event), nothing is made for
it, and the board's waiting lease stays the board's; a set with the same key
and another value beside it is served. The pure rule and its Hypothesis
property: tests/unit/plugins/module_utils/pool/test_label_overlap.py.
"""

from __future__ import annotations

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from jumpstarter_standin import wait_for
from kubernetes import client
from pool_helpers import condition, get_set, make_class, make_set

EXPORTERS = ("jumpstarter.dev", "v1alpha1")
BOARD = {"board": "overlap-rpi4", "lab": "bench"}
FIELD = "spec.template.metadata.labels"


def test_a_set_sharing_a_boards_label_is_refused_and_its_lease_stays_the_boards(api, namespace, standin, operator):
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    custom.create_namespaced_custom_object(*EXPORTERS, namespace, "exporters", {
        "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
        "metadata": {"name": "bench-rpi4", "labels": BOARD}, "spec": {"enabled": True}})
    standin.create_lease("theirs", {"board": BOARD["board"]})
    make_class(custom, namespace)
    # Shares board=overlap-rpi4 (not lab=bench): the lease above matches it.
    make_set(custom, namespace, name="tenant", board=BOARD["board"], minAvailableReplicas=1, maxReplicas=2)
    # The same key with another value: no lease for the board matches it.
    make_set(custom, namespace, name="apart", board="overlap-rpi4-virtual", minAvailableReplicas=1, maxReplicas=2)
    operator()

    def refused():
        found = condition(get_set(custom, namespace, "tenant"), "Degraded") or {}
        return found if found.get("reason") == "TemplateLabelConflict" else None

    told = (f"{FIELD}: the set's Exporters would carry board=overlap-rpi4 of Exporter bench-rpi4 "
            "(board=overlap-rpi4,lab=bench), which no set controls")
    found = wait_for(refused, timeout=60, message="tenant: Degraded/TemplateLabelConflict")
    assert found["status"] == "True" and found["message"].startswith(told), found["message"]
    events = wait_for(lambda: [e for e in core.list_namespaced_event(namespace).items
                               if e.reason == "TemplateLabelConflict" and e.involved_object.name == "tenant"],
                      timeout=30, message="the Warning Event of tenant")
    assert events[0].type == "Warning" and events[0].message.startswith(told)

    # The other set is served: its Exporters are made, it is not refused.
    wait_for(lambda: standin.exporters(f"{c.LABEL_EXPORTER_SET}=apart"), timeout=60, message="apart's Exporters")
    assert condition(get_set(custom, namespace, "apart"), "Degraded")["status"] == "False"
    # Nothing for the refused set (not even a dormant Exporter: it would carry
    # the label), the lease waits for the board, which is left as it was.
    assert standin.exporters(f"{c.LABEL_EXPORTER_SET}=tenant") == []
    assert standin.pods(f"{c.LABEL_EXPORTER_SET}=tenant") == []
    assert standin.exporter_of("theirs") is None and not (standin.lease("theirs").get("status") or {}).get("ended")
    board = custom.get_namespaced_custom_object(*EXPORTERS, namespace, "exporters", "bench-rpi4")
    assert board["metadata"].get("ownerReferences") is None and board["spec"]["enabled"] is True


LATE_BOARD = {"board": "late-rpi4", "lab": "bench"}


def test_a_board_registered_after_a_set_takes_its_labels_leaves_none_of_its_exporters_enabled(
        api, namespace, standin, operator):
    """The set is served first; then a board with one of its labels is
    registered. From then on the set is refused, and its idle Exporters are
    parked: a lease asking for the board by that label finds only the
    board (offline: it waits), none of the set's."""
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, name="early", board=LATE_BOARD["board"], minAvailableReplicas=1, maxReplicas=2)
    operator()
    selector = f"{c.LABEL_EXPORTER_SET}=early"
    wait_for(lambda: [e for e in standin.exporters(selector) if e["spec"].get("enabled") is not False
                      and c.ANNOTATION_DORMANT not in (e["metadata"].get("annotations") or {})
                      and standin.online(e["metadata"]["name"])],
             timeout=90, message="early: an enabled Exporter online")

    custom.create_namespaced_custom_object(*EXPORTERS, namespace, "exporters", {
        "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
        "metadata": {"name": "bench-late", "labels": LATE_BOARD}, "spec": {"enabled": True}})

    def refused():
        found = condition(get_set(custom, namespace, "early"), "Degraded") or {}
        return found if found.get("reason") == "TemplateLabelConflict" else None

    found = wait_for(refused, timeout=60, message="early: Degraded/TemplateLabelConflict")
    assert "Exporter bench-late" in found["message"], found["message"]
    wait_for(lambda: all(e["spec"].get("enabled") is False for e in standin.exporters(selector)),
             timeout=60, message="early's Exporters disabled")
    assert standin.exporters(selector), "early's Exporters were deleted, not parked"

    standin.create_lease("for-the-board", {"board": LATE_BOARD["board"]})

    def decided():
        lease = standin.lease("for-the-board")
        conditions = {x["type"]: x for x in (lease.get("status") or {}).get("conditions") or []}
        return standin.exporter_of("for-the-board") or conditions.get("Pending")

    verdict = wait_for(decided, timeout=60, message="the controller's verdict on the board's lease")
    assert not isinstance(verdict, str), f"the board's lease landed on {verdict}"
    assert verdict["reason"] == "Offline" and "bench-late" in verdict["message"], verdict
