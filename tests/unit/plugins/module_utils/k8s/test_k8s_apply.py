"""PlanApplier against the in-memory API server (fake_kube.py): write order,
orphaning deletes with preconditions, what goes with an Exporter, names
blocked by a stale credential."""

import copy

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import apply as k8s_apply
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import projection
from fake_kube import FakeKube

NAMESPACE = "lab"
THE_SET = {"apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1", "kind": "ExporterSet",
           "metadata": {"name": "rpi4", "namespace": NAMESPACE, "uid": "set-uid",
                        "annotations": {}},
           "spec": {}}


@pytest.fixture
def api():
    api = FakeKube(NAMESPACE)
    yield api
    # Every Exporter delete orphans (its Leases stay), and of core/v1 only Events are made.
    assert {r.body["propagationPolicy"] for r in api.requests if (r.verb, r.kind) == ("delete", "Exporter")} <= {
        "Orphan"}
    assert {r.kind for r in api.requests if r.verb == "create"} <= {"Exporter", "Event"}


def owned_by(uid, name="rpi4-0"):
    return {"ownerReferences": [{"kind": "Exporter", "name": name, "uid": uid,
                                 "controller": True}]}


def exporter(api, name, lease=None, enabled=True, annotations=None):
    """An Exporter; ``lease`` names the lease in its status.leaseRef."""
    status = {"leaseRef": {"name": lease}} if lease else {}
    return api.put("Exporter", name, spec={"enabled": enabled}, status=status,
                   metadata={"annotations": dict(annotations or {})})


def apply(api, plan, provisioner=c.PROVISIONER_QEMU, check_mode=False):
    applier = k8s_apply.PlanApplier(api.api_client(), THE_SET, check_mode=check_mode)
    applier.apply_plan(plan, provisioner)
    return applier.result


def create_entry(name, **annotations):
    return {"name": name, "labels": {c.LABEL_EXPORTER_SET: "rpi4"}, "annotations": annotations}


def test_delete_orphans_leases_and_removes_what_belongs_to_the_exporter(api):
    gone = exporter(api, "rpi4-0", enabled=False)
    uid = gone["metadata"]["uid"]
    api.put("Secret", "rpi4-0-exporter", metadata=owned_by(uid))
    api.put("Secret", "rpi4-0-config", metadata=owned_by(uid))
    api.put("Pod", "rpi4-0", metadata=owned_by(uid))
    api.put("Pod", "unrelated")
    # The controller owns each Lease by its Exporter; an ended one is the lessee's record.
    api.put("Lease", "ended", status={"exporterRef": {"name": "rpi4-0"}, "ended": True},
            metadata={"labels": {"jumpstarter.dev/lease-ended": "true"}, **owned_by(uid)})
    result = apply(api, {"delete": [{"name": "rpi4-0", "reason": "ScaleDown", "uid": uid}]})
    assert result["deleted"] == ["rpi4-0"]
    api.collect_garbage()
    assert set(api.objects) == {("Pod", "unrelated"), ("Lease", "ended")}
    assert "ownerReferences" not in api.objects[("Lease", "ended")]["metadata"]
    # Read before the Exporter goes (orphaning strips the owner references), deleted after.
    exporter_gone = api.calls.index(("delete", "Exporter", "rpi4-0"))
    assert api.calls.index(("get", "Secret", "rpi4-0-exporter")) < exporter_gone
    assert api.calls.index(("delete", "Secret", "rpi4-0-exporter")) > exporter_gone


def test_objects_of_a_namesake_are_left(api):
    gone = exporter(api, "rpi4-0", enabled=False)
    api.put("Secret", "rpi4-0-exporter", metadata=owned_by("someone-else"))
    api.put("Pod", "rpi4-0", metadata=owned_by("someone-else"))
    apply(api, {"delete": [{"name": "rpi4-0", "reason": "ScaleDown",
                            "uid": gone["metadata"]["uid"]}]})
    assert set(api.objects) == {("Secret", "rpi4-0-exporter"), ("Pod", "rpi4-0")}


def test_bare_metal_exporters_have_no_pod_to_look_for(api):
    gone = exporter(api, "rpi4-0", enabled=False)
    apply(api, {"delete": [{"name": "rpi4-0", "reason": "ScaleDown"}]},
          provisioner=c.PROVISIONER_QEMU_BAREMETAL)
    assert ("get", "Pod", "rpi4-0") not in api.calls
    assert ("Exporter", "rpi4-0") not in api.objects and gone


def lease_object(api, name, exporter_name, ended=False):
    labels = {"jumpstarter.dev/lease-ended": "true"} if ended else {}
    return api.put("Lease", name, status={"exporterRef": {"name": exporter_name}, "ended": ended},
                   metadata={"labels": labels})


@pytest.mark.parametrize(("lease", "lease_side", "enabled", "planned_uid", "why"), [
    ("taken-since", None, False, None, "leased by taken-since"),   # leaseRef written since the plan
    (None, "assigned", False, None, "leased by assigned"),         # the Lease names it, leaseRef not yet
    (None, None, True, None, "still enabled"),                     # never deleted while enabled
    (None, None, False, "an-older-uid", "replaced by a new Exporter"),  # re-made under the same name
    (None, "ended", False, None, None),                            # an ended Lease holds nothing
    (None, None, False, None, None),
])
def test_delete_is_held_unless_disabled_and_unleased_from_both_sides(api, lease, lease_side, enabled,
                                                                     planned_uid, why):
    exporter(api, "rpi4-0", lease=lease, enabled=enabled)
    if lease_side:
        lease_object(api, lease_side, "rpi4-0", ended=lease_side == "ended")
    result = apply(api, {"delete": [{"name": "rpi4-0", "reason": "ScaleDown",
                                     **({"uid": planned_uid} if planned_uid else {})}]})
    assert (("Exporter", "rpi4-0") in api.objects) is bool(why)
    assert (result["held"] == ["rpi4-0"]) is bool(why)
    if why:
        # Said in a Normal Event naming the Exporter and why.
        (event,) = api.events
        assert event["reason"] == "ExporterHeld" and why in event["message"] and "rpi4-0" in event["message"]


def test_a_delete_refused_by_its_precondition_is_not_forced(api):
    exporter(api, "rpi4-0", enabled=False)
    # The controller writes the Exporter between the fresh read and the delete.
    api.before("delete", "Exporter", lambda name: api.write("Exporter", name, {"status": {"devices": []}},
                                                            subresource="status"))
    result = apply(api, {"delete": [{"name": "rpi4-0", "reason": "Recycle"}]})
    assert ("Exporter", "rpi4-0") in api.objects
    assert result["held"] == ["rpi4-0"] and result["conflicts"] == 1
    assert [call for call in api.calls if call[0] == "delete"] == [("delete", "Exporter", "rpi4-0")]


@pytest.mark.parametrize(("lease", "lease_side", "held"), [
    ("taken-since", None, True),
    (None, "assigned", True),
    (None, None, False),
])
def test_disable_only_while_unleased_from_both_sides(api, lease, lease_side, held):
    exporter(api, "rpi4-0", lease=lease)
    if lease_side:
        lease_object(api, lease_side, "rpi4-0")
    result = apply(api, {"disable": ["rpi4-0"],
                         "exporter_annotations": {"rpi4-0": {c.ANNOTATION_RETIRING: "Recycle"}}})
    current = api.objects[("Exporter", "rpi4-0")]
    assert current["spec"]["enabled"] is held
    # The disable carries the annotation that says why, in the same write.
    assert (c.ANNOTATION_RETIRING in current["metadata"]["annotations"]) is not held
    assert (result["held"] == ["rpi4-0"]) is held


def test_a_disable_records_the_lease_list_that_showed_it_unleased_and_an_enable_drops_it(api):
    exporter(api, "rpi4-0")
    lease_object(api, "elsewhere", "rpi4-9")
    read_at = str(api.revision)
    apply(api, {"disable": ["rpi4-0"]})
    notes = api.objects[("Exporter", "rpi4-0")]["metadata"]["annotations"]
    assert notes[c.ANNOTATION_LEASES_CHECKED_AT] == read_at
    apply(api, {"enable": ["rpi4-0"]})
    current = api.objects[("Exporter", "rpi4-0")]
    assert current["spec"]["enabled"] is True
    assert c.ANNOTATION_LEASES_CHECKED_AT not in current["metadata"]["annotations"]


def test_a_disable_refused_by_its_precondition_is_not_forced(api):
    exporter(api, "rpi4-0")
    api.before("patch", "Exporter", lambda name: api.write("Exporter", name, {"metadata": {"labels": {"a": "b"}}}))
    result = apply(api, {"disable": ["rpi4-0"]})
    assert api.objects[("Exporter", "rpi4-0")]["spec"]["enabled"] is True
    assert result["held"] == ["rpi4-0"] and result["conflicts"] == 1


def test_an_event_about_a_held_exporter_waits_for_the_plan_that_acts(api):
    """Two leases ended; one Exporter was taken again before the disable. Its
    Recycling Event is not written (the next plan, which acts, writes it once);
    the other's is, and the held one is said in ExporterHeld."""
    exporter(api, "rpi4-0")
    exporter(api, "rpi4-1")
    lease_object(api, "taken-again", "rpi4-0")
    recycling = [{"type": "Normal", "reason": "Recycling", "exporter": name,
                  "message": "lease l1 ended, replacing the exporter (ExitAndReplace)"}
                 for name in ("rpi4-0", "rpi4-1")]
    result = apply(api, {"disable": ["rpi4-0", "rpi4-1"], "events": recycling})
    assert result["held"] == ["rpi4-0"]
    assert sorted((e["reason"], e["related"]["name"]) for e in api.events) == [
        ("ExporterHeld", "rpi4-0"), ("Recycling", "rpi4-1")]


def test_confirm_keeps_only_what_may_be_removed_or_reset_now(api):
    exporter(api, "gone-ok", enabled=False)
    exporter(api, "reset-ok", enabled=False)
    exporter(api, "leased-since", enabled=False)
    lease_object(api, "l9", "leased-since")
    exporter(api, "enabled-again")
    applier = k8s_apply.PlanApplier(api.api_client(), THE_SET)
    plan = {"delete": [{"name": "gone-ok", "reason": "Recycle"}, {"name": "enabled-again", "reason": "Failed"},
                       {"name": "never-there", "reason": "Recycle"}],
            "recycle": [{"name": "reset-ok", "strategy": "InPlaceReuse"},
                        {"name": "leased-since", "strategy": "InPlaceReuse"}]}
    confirmed = applier.confirm(plan)
    assert [d["name"] for d in confirmed["delete"]] == ["gone-ok", "never-there"]
    assert [r["name"] for r in confirmed["recycle"]] == ["reset-ok"]
    assert sorted(applier.result["held"]) == ["enabled-again", "leased-since"]
    assert not [call for call in api.calls if call[0] in ("create", "patch", "delete")]


def test_a_reset_a_lease_stopped_keeps_the_exporter_marked(api):
    """A lease given to a disabled Exporter (allowDisabled) after the plan
    stops its reset: the plan's bookkeeping for the reset (the retiring mark
    cleared, reused-after) is not written, so the Exporter is not left
    disabled without a mark (never touched again) and a later plan resets it."""
    exporter(api, "rpi4-0", enabled=False, annotations={c.ANNOTATION_RETIRING: "InPlaceReuse"})
    lease_object(api, "allow-disabled", "rpi4-0")
    plan = {"recycle": [{"name": "rpi4-0", "strategy": "InPlaceReuse"}],
            "exporter_annotations": {"rpi4-0": {c.ANNOTATION_RETIRING: None, c.ANNOTATION_REUSED_AFTER: "x"}},
            "events": [{"type": "Normal", "reason": "Recycling", "message": "m", "exporter": "rpi4-0"}]}
    confirmed = k8s_apply.PlanApplier(api.api_client(), THE_SET).confirm(plan)
    assert confirmed["recycle"] == [] and confirmed["exporter_annotations"] == {} and confirmed["events"] == []
    apply(api, confirmed)
    kept = api.objects[("Exporter", "rpi4-0")]
    assert kept["spec"]["enabled"] is False
    assert kept["metadata"]["annotations"] == {c.ANNOTATION_RETIRING: "InPlaceReuse"}


def test_a_reset_exporter_leased_since_is_neither_enabled_nor_marked_reset(api):
    """Its reset was held by the lease (the backend's own fresh check): it
    keeps its retiring mark and stays disabled under the lease."""
    exporter(api, "rpi4-0", enabled=False, annotations={c.ANNOTATION_RETIRING: "InPlaceReuse"})
    lease_object(api, "allow-disabled", "rpi4-0")
    result = apply(api, {"recycle": [{"name": "rpi4-0", "strategy": "InPlaceReuse"}],
                         "exporter_annotations": {"rpi4-0": {c.ANNOTATION_RETIRING: None,
                                                             c.ANNOTATION_REUSED_AFTER: "x"}}})
    kept = api.objects[("Exporter", "rpi4-0")]
    assert kept["spec"]["enabled"] is False
    assert kept["metadata"]["annotations"] == {c.ANNOTATION_RETIRING: "InPlaceReuse"}
    assert result["held"] == ["rpi4-0"]


def test_a_reset_exporter_is_enabled_again_with_its_bookkeeping(api):
    exporter(api, "rpi4-0", enabled=False, annotations={c.ANNOTATION_RETIRING: "InPlaceReuse"})
    apply(api, {"recycle": [{"name": "rpi4-0", "strategy": "InPlaceReuse"}],
                "exporter_annotations": {"rpi4-0": {c.ANNOTATION_RETIRING: None,
                                                    c.ANNOTATION_REUSED_AFTER: "x"}}})
    current = api.objects[("Exporter", "rpi4-0")]
    assert current["spec"]["enabled"] is True
    assert current["metadata"]["annotations"] == {c.ANNOTATION_REUSED_AFTER: "x"}
    assert [call for call in api.calls if call[0] == "patch"] == [("patch", "Exporter", "rpi4-0")]


def test_dormant_exporter_and_re_enables_come_before_removals(api):
    exporter(api, "rpi4-0")
    exporter(api, "rpi4-1", enabled=False)
    plan = {
        "create_dormant": [create_entry("rpi4-dormant-0", **{c.ANNOTATION_DORMANT: "true"})],
        "enable": ["rpi4-1"],
        "disable": ["rpi4-0"],
    }
    apply(api, plan)
    writes = [call for call in api.calls if call[0] in ("create", "patch", "delete")]
    assert writes == [("create", "Exporter", "rpi4-dormant-0"), ("patch", "Exporter", "rpi4-1"),
                      ("patch", "Exporter", "rpi4-0")]


def test_no_removal_without_the_dormant_exporter(api):
    exporter(api, "rpi4-0")
    exporter(api, "rpi4-1", enabled=False)
    api.put("Secret", "rpi4-dormant-0-exporter", metadata=owned_by("gone-uid", "rpi4-dormant-0"))
    plan = {
        "create_dormant": [create_entry("rpi4-dormant-0", **{c.ANNOTATION_DORMANT: "true"})],
        "disable": ["rpi4-0"],
        "delete": [{"name": "rpi4-1", "reason": "ScaleDown"}],
        "exporter_annotations": {"rpi4-0": {c.ANNOTATION_SCALE_DOWN: "now"}},
    }
    result = apply(api, plan)
    assert result["blocked"] == ["rpi4-dormant-0"]
    assert sorted(result["held"]) == ["rpi4-0", "rpi4-1"]
    assert api.objects[("Exporter", "rpi4-0")]["spec"]["enabled"] is True
    assert ("Exporter", "rpi4-1") in api.objects
    assert c.ANNOTATION_SCALE_DOWN not in api.objects[("Exporter", "rpi4-0")]["metadata"]["annotations"]


@pytest.mark.parametrize(("owner_alive", "secret_left"), [(False, False), (True, True)])
def test_a_stale_credential_blocks_its_name(api, owner_alive, secret_left):
    if owner_alive:
        # The Secret belongs to a live Exporter: it stays (and the name is taken anyway).
        owner = exporter(api, "rpi4-0-other")
        api.put("Secret", "rpi4-0-exporter",
                metadata=owned_by(owner["metadata"]["uid"], "rpi4-0-other"))
    else:
        api.put("Secret", "rpi4-0-exporter", metadata=owned_by("gone-uid"))
    result = apply(api, {"create": [create_entry("rpi4-0")]})
    assert result["blocked"] == ["rpi4-0"] and result["created"] == []
    assert ("Exporter", "rpi4-0") not in api.objects
    assert (("Secret", "rpi4-0-exporter") in api.objects) is secret_left


def test_a_free_name_is_created(api):
    result = apply(api, {"create": [create_entry("rpi4-0")]})
    assert result["created"] == ["rpi4-0"] and result["blocked"] == []


def test_dormant_exporter_removal_takes_its_credential(api):
    sleeper = exporter(api, "rpi4-dormant-0", annotations={c.ANNOTATION_DORMANT: "true"})
    api.put("Secret", "rpi4-dormant-0-exporter",
            metadata=owned_by(sleeper["metadata"]["uid"], "rpi4-dormant-0"))
    apply(api, {"delete_dormant": [{"name": "rpi4-dormant-0", "uid": sleeper["metadata"]["uid"]}]})
    assert api.objects == {}


def test_check_mode_writes_nothing(api):
    gone = exporter(api, "rpi4-0", enabled=False)
    api.put("Secret", "rpi4-0-exporter", metadata=owned_by(gone["metadata"]["uid"]))
    result = apply(api, {"delete": [{"name": "rpi4-0", "reason": "ScaleDown"}],
                         "create": [create_entry("rpi4-1")]}, check_mode=True)
    assert result["deleted"] == ["rpi4-0"] and result["created"] == ["rpi4-1"]
    assert not [call for call in api.calls if call[0] in ("create", "patch", "delete")]


@pytest.mark.parametrize(("mode", "left"), [
    # Delete never destroys what is leased: the leased one waits for its lease.
    ("delete", {"rpi4-0"}),
    # Retain keeps the instance's Exporter, but never a dormant one.
    ("detach", {"rpi4-0"}),
])
def test_teardown(api, mode, left):
    exporter(api, "rpi4-0", lease="still-leased")
    kept = api.write("Exporter", "rpi4-0", {"metadata": {"ownerReferences": [
        {"apiVersion": THE_SET["apiVersion"], "kind": "ExporterSet", "name": "rpi4", "uid": "set-uid",
         "controller": True}]}})
    sleeper = exporter(api, "rpi4-dormant-0", annotations={c.ANNOTATION_DORMANT: "true"})
    _the_set(api)
    applier = k8s_apply.PlanApplier(api.api_client(), THE_SET)
    applier.teardown(mode, [copy.deepcopy(kept), copy.deepcopy(sleeper)], c.PROVISIONER_QEMU)
    assert {name for kind, name in api.objects if kind == "Exporter"} == left
    assert ("rpi4-0" in applier.result["held"]) == (mode == "delete")


def _the_set(api):
    return api.put("ExporterSet", "rpi4", spec={}, metadata={"uid": "set-uid"})


def _waiting(api):
    status = api.objects[("ExporterSet", "rpi4")].get("status") or {}
    return next((x for x in status.get("conditions") or () if x["type"] == "WaitingForLeases"), None)


@pytest.mark.parametrize("enabled", [True, False])
def test_teardown_waits_for_a_lease_from_either_side(api, enabled):
    """A leased Exporter, enabled or disabled (an allowDisabled lease), by its
    leaseRef or only by a Lease naming it, is neither deleted nor disabled:
    the set says it waits, with an Event, and keeps its finalizer (held)."""
    _the_set(api)
    by_ref = exporter(api, "rpi4-0", lease="lease-a", enabled=enabled)
    by_lease = exporter(api, "rpi4-1", enabled=enabled)
    lease_object(api, "lease-b", "rpi4-1")
    applier = k8s_apply.PlanApplier(api.api_client(), THE_SET)
    applier.teardown("delete", [copy.deepcopy(by_ref), copy.deepcopy(by_lease)], c.PROVISIONER_QEMU)
    assert {name for kind, name in api.objects if kind == "Exporter"} == {"rpi4-0", "rpi4-1"}
    assert not [call for call in api.calls if call[:2] == ("patch", "Exporter")]
    assert sorted(applier.result["held"]) == ["rpi4-0", "rpi4-1"]
    waiting = _waiting(api)
    assert waiting["status"] == "True" and waiting["reason"] == "ExportersLeased"
    assert "rpi4-0 (lease lease-a)" in waiting["message"] and "rpi4-1 (lease lease-b)" in waiting["message"]
    assert [e["reason"] for e in api.events].count("WaitingForLeases") == 1


def test_teardown_disables_first_and_deletes_once_seen_disabled(api):
    """An enabled unleased Exporter is disabled by one pass (lease-checked,
    annotated retiring Teardown) and deleted by the next; its backend is
    released only in between (confirm_teardown names it then)."""
    _the_set(api)
    api.put("Exporter", "rpi4-0", spec={"enabled": True}, status={}, metadata={"annotations": {}})
    owned = [copy.deepcopy(api.objects[("Exporter", "rpi4-0")])]
    first = k8s_apply.PlanApplier(api.api_client(), THE_SET)
    assert first.confirm_teardown("delete", owned) == []
    first.teardown("delete", owned, c.PROVISIONER_QEMU, only=[])
    now = api.objects[("Exporter", "rpi4-0")]
    assert now["spec"]["enabled"] is False
    assert now["metadata"]["annotations"][c.ANNOTATION_RETIRING] == k8s_apply.RETIRING_TEARDOWN
    assert first.result["held"] == ["rpi4-0"]
    second = k8s_apply.PlanApplier(api.api_client(), THE_SET)
    owned = [copy.deepcopy(now)]
    assert second.confirm_teardown("delete", owned) == ["rpi4-0"]
    second.teardown("delete", owned, c.PROVISIONER_QEMU, only=["rpi4-0"])
    assert ("Exporter", "rpi4-0") not in api.objects and second.result["held"] == []
    # Never waited for a lease: no WaitingForLeases condition at all.
    assert _waiting(api) is None


def test_teardown_deletes_once_the_lease_ended(api):
    _the_set(api)
    exporter(api, "rpi4-0", enabled=False)
    lease_object(api, "lease-a", "rpi4-0")
    owned = [copy.deepcopy(api.objects[("Exporter", "rpi4-0")])]
    k8s_apply.PlanApplier(api.api_client(), THE_SET).teardown("delete", owned, c.PROVISIONER_QEMU)
    assert _waiting(api)["status"] == "True"
    api.write("Lease", "lease-a", {"metadata": {"labels": {"jumpstarter.dev/lease-ended": "true"}}})
    applier = k8s_apply.PlanApplier(api.api_client(), THE_SET)
    applier.teardown("delete", owned, c.PROVISIONER_QEMU)
    assert ("Exporter", "rpi4-0") not in api.objects and applier.result["held"] == []
    assert _waiting(api)["status"] == "False"


def test_check_mode_changes_are_what_a_run_writes(api):
    """The parts ``--check --diff`` shows after are what the same plan leaves
    when it runs; before, what was there."""
    gone = exporter(api, "rpi4-0", enabled=False)
    api.put("Secret", "rpi4-0-exporter", metadata=owned_by(gone["metadata"]["uid"]))
    exporter(api, "rpi4-1")
    exporter(api, "rpi4-2", enabled=False)
    exporter(api, "rpi4-3", annotations={c.ANNOTATION_REUSED_AFTER: "x"})
    plan = {"delete": [{"name": "rpi4-0", "reason": "ScaleDown"}], "disable": ["rpi4-1"], "enable": ["rpi4-2"],
            "create": [create_entry("rpi4-4")],
            "exporter_annotations": {"rpi4-1": {c.ANNOTATION_SCALE_DOWN: "now"},
                                     "rpi4-3": {c.ANNOTATION_REUSED_AFTER: None}}}
    before = copy.deepcopy(api.objects)
    checked = k8s_apply.PlanApplier(api.api_client(), THE_SET, check_mode=True)
    # As exporterset_apply gives it the owned Exporters it was handed.
    checked.seen.update({name: copy.deepcopy(obj) for (kind, name), obj in before.items() if kind == "Exporter"})
    checked.apply_plan(copy.deepcopy(plan), c.PROVISIONER_QEMU)
    assert api.objects == before
    ran = k8s_apply.PlanApplier(api.api_client(), THE_SET)
    ran.apply_plan(copy.deepcopy(plan), c.PROVISIONER_QEMU)
    changes = checked.changes
    assert sorted(changes.after) == ["Exporter/rpi4-0", "Exporter/rpi4-1", "Exporter/rpi4-2", "Exporter/rpi4-3",
                                     "Exporter/rpi4-4", "Secret/rpi4-0-exporter"]
    # The same, but for the Lease list each read (the run's own writes moved it on).
    assert without_lease_list(changes.after) == without_lease_list(ran.changes.after)
    for key, after in changes.after.items():
        kind, name = key.split("/")
        if after is None:
            assert (kind, name) not in api.objects and (kind, name) in before
            assert changes.before[key] == {"metadata": {"uid": before[(kind, name)]["metadata"]["uid"]}}
        elif changes.before[key] is None:
            assert api.objects[(kind, name)]["spec"] == after["spec"]
        else:
            # A merge patch: its nulls are keys gone (None in the projection too).
            assert projection(api.objects[(kind, name)], after) == ran.changes.after[key]
            assert changes.before[key] == projection(before[(kind, name)], after)
    assert changes.before["Exporter/rpi4-1"]["spec"] == {"enabled": True}
    assert changes.after["Exporter/rpi4-1"]["spec"] == {"enabled": False}


def without_lease_list(afters):
    return {key: after if after is None else {**after, "metadata": {
        "annotations": {k: v for k, v in (after.get("metadata") or {}).get("annotations", {}).items()
                        if k != c.ANNOTATION_LEASES_CHECKED_AT}}} for key, after in afters.items()}

