"""The planner's memory of pools (pool/pool_index.py): an unchanged pool is not
read again, and nothing it read is reused for an object that changed. The
memory is a SurveyCache its caller owns; without one every plan reads the
pool afresh."""

import copy
import hashlib
import itertools
import json

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import pool_index
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases import (
    survey as survey_module,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import (
    scale_plan,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    format_time,
)
from hypothesis import given
from pool_builders import NOW, exporter, exporter_set, lease, target_class
from test_plan_properties import EVENTS, PROPERTY_SETTINGS, World, spec_and_pool

CACHE = pool_index.SurveyCache()


@pytest.fixture(autouse=True)
def _forget_pools():
    CACHE.clear()
    yield
    CACHE.clear()


def versioned(obj, version="1"):
    """``obj`` as the API server returns it: with a uid and a resourceVersion."""
    obj["metadata"]["uid"] = "uid-" + obj["metadata"]["name"]
    obj["metadata"]["resourceVersion"] = version
    return obj


def new_version(obj, version):
    """A new version of ``obj`` as an informer holds it: a new dict."""
    fresh = copy.deepcopy(obj)
    fresh["metadata"]["resourceVersion"] = version
    return fresh


def set_ready(obj, ready):
    for condition in obj["status"]["conditions"]:
        condition["status"] = "True" if ready else "False"


def pool(size=4):
    return [versioned(exporter(f"rpi4-{i}")) for i in range(size)]


def plan(exporters, instances=None, leases=None, the_set=None, surveys=CACHE):
    return scale_plan(the_set or exporter_set(min_available=2), target_class(), exporters, [],
                      NOW, instances=instances, leases=leases, surveys=surveys)


def counter(monkeypatch, module, name, label):
    seen = []
    original = getattr(module, name)

    def counting(*args):
        seen.append(label(*args))
        return original(*args)

    monkeypatch.setattr(module, name, counting)
    return seen


@pytest.fixture()
def reads(monkeypatch):
    """The Exporters the planner read (not taken from a digest)."""
    return counter(monkeypatch, pool_index, "read_exporter", lambda obj: obj["metadata"]["name"])


@pytest.fixture()
def surveys(monkeypatch):
    """The surveys of a pool the planner made."""
    return counter(monkeypatch, survey_module, "survey", lambda *args: len(args[0]))


def test_an_unchanged_pool_is_not_read_again(reads, surveys):
    exporters = pool()
    first = plan(exporters)
    assert (len(reads), surveys) == (4, [4])
    # The informer hands the same objects again, in a new list.
    assert plan(list(exporters)) == first
    assert (len(reads), surveys) == (4, [4])


def test_only_the_changed_exporter_is_read_again(reads, surveys):
    exporters = pool()
    plan(exporters)
    exporters[2] = new_version(exporters[2], "2")
    plan(exporters)
    assert reads[4:] == ["rpi4-2"]
    assert surveys == [4, 4]


def test_without_a_cache_every_plan_reads_the_pool(reads, surveys):
    """The planner keeps nothing between plans of its own: the survey cache is its caller's."""
    exporters = pool()
    first = plan(exporters, surveys=None)
    assert plan(exporters, surveys=None) == first
    assert (len(reads), surveys) == (8, [4, 4])
    plan(exporters)
    plan(exporters)
    assert (len(reads), surveys) == (12, [4, 4, 4])


def test_a_new_version_with_a_new_status_is_seen():
    exporters = pool()
    assert plan(exporters)["status"]["readyReplicas"] == 4
    offline = new_version(exporters[1], "2")
    set_ready(offline, False)
    exporters[1] = offline
    assert plan(exporters)["status"]["readyReplicas"] == 3


def test_a_version_changed_in_place_is_seen():
    exporters = pool()
    plan(exporters)
    exporters[0]["metadata"]["resourceVersion"] = "2"
    exporters[0]["spec"]["enabled"] = False
    assert plan(exporters)["status"]["exportersDisabled"] == 1


_revision = itertools.count(1)


def test_a_snapshot_at_the_same_revision_is_not_surveyed_again(monkeypatch, surveys):
    """The operator's caches hand the planner snapshots with their revision:
    the same revision means the same pool, known without reading one
    object's version; a new revision is surveyed again."""
    passes = counter(monkeypatch, pool_index, "versions", lambda objects: len(objects))
    exporters = pool()
    first = plan(pool_index.Snapshot(exporters, 1), leases=pool_index.Snapshot((), 2))
    assert plan(pool_index.Snapshot(exporters, 1), leases=pool_index.Snapshot((), 2)) == first
    assert surveys == [4] and passes == [4]  # the versions, read once for the digests
    offline = new_version(exporters[1], "2")
    set_ready(offline, False)
    changed = plan(pool_index.Snapshot([*exporters[:1], offline, *exporters[2:]], 3),
                   leases=pool_index.Snapshot((), 2))
    assert changed["status"]["readyReplicas"] == 3
    assert surveys == [4, 4]


def test_a_snapshot_without_a_revision_is_read_by_versions(surveys):
    exporters = pool()
    plan(pool_index.Snapshot(exporters), leases=pool_index.Snapshot(()))
    plan(pool_index.Snapshot(exporters), leases=pool_index.Snapshot(()))
    assert surveys == [4]


def test_a_derived_snapshot_carries_what_it_was_selected_by():
    snapshot = pool_index.Snapshot(pool(), 7)
    owned = snapshot.derived(lambda e: e["metadata"]["name"] != "rpi4-0", "set-uid")
    assert [e["metadata"]["name"] for e in owned] == ["rpi4-1", "rpi4-2", "rpi4-3"]
    assert owned.revision == (7, "set-uid")
    assert pool_index.Snapshot(pool()).derived(bool).revision is None


def test_objects_without_a_version_are_read_every_time(reads):
    exporters = [exporter(f"rpi4-{i}") for i in range(3)]
    assert plan(exporters)["status"]["readyReplicas"] == 3
    set_ready(exporters[0], False)
    assert plan(exporters)["status"]["readyReplicas"] == 2
    assert len(reads) == 6


def test_instances_changed_in_place_are_seen():
    exporters = pool()
    instances = {e["metadata"]["name"]: {"phase": "Running"} for e in exporters}
    assert plan(exporters, instances)["status"]["podsRunning"] == 4
    instances["rpi4-3"]["phase"] = "Failed"
    again = plan(exporters, instances)
    assert again["status"]["podsFailed"] == 1
    assert "rpi4-3" in again["disable"]


def test_a_lease_that_ended_is_seen():
    exporters = pool()
    held = versioned(lease("l1", assigned="rpi4-0", created=-60))
    held["status"]["beginTime"] = held["metadata"]["creationTimestamp"]
    assert "rpi4-0" not in plan(exporters, leases=[held])["disable"]
    ended = new_version(held, "2")
    ended["status"]["ended"] = True
    assert "rpi4-0" in plan(exporters, leases=[ended])["disable"]


def test_a_changed_recycle_strategy_is_seen():
    exporters = pool()
    ended = versioned(lease("l1", assigned="rpi4-0", created=-60, ended=True))
    ended["status"]["beginTime"] = ended["metadata"]["creationTimestamp"]
    replacing = plan(exporters, leases=[ended], the_set=exporter_set(min_available=2))
    assert replacing["exporter_annotations"]["rpi4-0"][c.ANNOTATION_RETIRING] == c.DELETE_RECYCLE
    reusing = plan(exporters, leases=[ended],
                   the_set=exporter_set(min_available=2, recycle=c.RECYCLE_IN_PLACE_REUSE))
    assert reusing["exporter_annotations"]["rpi4-0"][c.ANNOTATION_RETIRING] \
        == c.RECYCLE_IN_PLACE_REUSE


def _as_served(obj):
    """A copy with a uid and a resourceVersion that changes with its content."""
    served = copy.deepcopy(obj)
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]
    served["metadata"]["uid"] = "uid-" + obj["metadata"]["name"]
    served["metadata"]["resourceVersion"] = digest
    return served


def without_uids(plan):
    """The plan as for objects without uids (entries that name one carry it)."""
    plan = copy.deepcopy(plan)
    for key in ("delete", "recycle", "delete_dormant"):
        for entry in plan[key]:
            entry.pop("uid", None)
    return plan


@PROPERTY_SETTINGS
@given(spec_and_pool(), EVENTS)
def test_plans_from_kept_surveys_equal_plans_read_afresh(scenario, events):
    """Through random events, a plan over versioned objects (surveys and
    digests kept between plans) equals the plan over the same objects read
    afresh."""
    CACHE.clear()
    the_set, klass, exporters, options = scenario
    world = World(the_set, klass, exporters, options)
    served = {}  # the objects as an informer holds them: replaced only when changed

    revisions = {}  # kind -> (versions it was given for, revision), as a cache counts

    def informer(objects, snapshot):
        out = []
        for obj in objects:
            fresh = _as_served(obj)
            key = (obj["kind"], obj["metadata"]["name"])
            kept = served.get(key)
            if kept is None or kept["metadata"]["resourceVersion"] != fresh["metadata"]["resourceVersion"]:
                served[key] = kept = fresh
            out.append(kept)
        if not snapshot:
            return out
        # A cache's revision changes whenever one of its objects does.
        kind = "Lease" if objects is world.leases else "Exporter"
        seen = tuple(obj["metadata"]["resourceVersion"] for obj in out)
        if revisions.get(kind, (None,))[0] != seen:
            revisions[kind] = (seen, next(_revision))
        return pool_index.Snapshot(out, revisions[kind][1])

    for kind, index in [*events, ("advance", 0)]:
        afresh = world.plan()
        for snapshot in (False, True):
            from_cache = scale_plan(world.set, world.klass, informer(world.sorted_exporters(), snapshot),
                                    world.pending_for_set(), format_time(world.now),
                                    instances=world.instances, options=world.options,
                                    leases=informer(world.leases, snapshot), surveys=CACHE)
            assert without_uids(from_cache) == afresh
        world.apply(afresh)
        world.event(kind, index)
