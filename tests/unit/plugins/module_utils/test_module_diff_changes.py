"""module_diff: the parts of an object a merge patch replaces (``projection``)
and the record of one run's writes (``Changes``) that ``--diff`` returns."""

import copy

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import Changes, projection
from hypothesis import given, settings
from hypothesis import strategies as st

KEYS = st.sampled_from(["metadata", "spec", "labels", "enabled", "a", "b"])
LEAVES = st.none() | st.booleans() | st.integers() | st.text(max_size=4)
# A patch's maps are never empty (an empty one patches nothing, and says so
# of no path).
DOCS = st.recursive(LEAVES, lambda inner: st.dictionaries(KEYS, inner, min_size=1, max_size=4), max_leaves=12)
PATCHES = st.dictionaries(KEYS, DOCS, max_size=4)


def merge_patch(target, patch):
    """RFC 7386, as the API server applies a merge patch: null removes."""
    if not isinstance(patch, dict):
        return patch
    base = target if isinstance(target, dict) else {}
    merged = {key: value for key, value in base.items() if key not in patch}
    merged.update({key: merge_patch(base.get(key), value) for key, value in patch.items() if value is not None})
    return merged


def paths(doc, prefix=()):
    """The paths to the leaves of ``doc`` (none of an empty map)."""
    if not isinstance(doc, dict):
        yield prefix
        return
    for key, value in doc.items():
        yield from paths(value, (*prefix, key))


def at(doc, path):
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


@given(DOCS, PATCHES)
def test_projection_has_the_shape_of_the_patch_and_the_values_of_the_object(obj, patch):
    before = projection(obj, patch)
    assert set(before) == set(patch)
    for path in paths(patch):
        assert at(before, path) == at(obj, path)


@given(DOCS, PATCHES)
def test_patching_the_projection_gives_the_patched_object_at_the_patched_paths(obj, patch):
    after = merge_patch(obj, patch)
    # What a diff's ``after`` (the patch) says is what the object then holds,
    # a null meaning the key is gone.
    for path in paths(patch):
        assert at(after, path) == at(patch, path)
    assert projection(obj, {}) == {}


def test_projection_copies_and_does_not_touch_the_object():
    obj = {"spec": {"drivers": [{"name": "a"}]}, "status": {"x": 1}}
    kept = copy.deepcopy(obj)
    part = projection(obj, {"spec": {"drivers": []}, "metadata": {"labels": {"h": "lab1"}}})
    assert part == {"spec": {"drivers": [{"name": "a"}]}, "metadata": {"labels": {"h": None}}}
    part["spec"]["drivers"].append("changed")
    assert obj == kept


@settings(max_examples=50)
@given(st.lists(st.tuples(st.sampled_from(["Exporter/a", "Exporter/b", "Pod/a"]), PATCHES, PATCHES | st.none()),
                max_size=6))
def test_changes_keep_the_first_before_and_the_merged_afters(writes):
    changes = Changes()
    for key, before, after in writes:
        changes.record(key, before, after)
    assert bool(changes) == bool(writes)
    for key in {key for key, _, _ in writes}:
        mine = [(before, after) for k, before, after in writes if k == key]
        assert changes.before[key] == mine[0][0]
        assert changes.after[key] == _merged_all([after for _, after in mine])


def _merged_all(afters):
    merged = None
    for after in afters:
        merged = after if not isinstance(merged, dict) or not isinstance(after, dict) else _deep(merged, after)
    return merged


def _deep(base, patch):
    out = dict(base)
    for key, value in patch.items():
        out[key] = _deep(base[key], value) if isinstance(base.get(key), dict) and isinstance(value, dict) else value
    return out


def test_a_patch_records_what_it_replaces():
    changes = Changes()
    exporter = {"metadata": {"name": "pool-0", "labels": {}}, "spec": {"enabled": True}}
    changes.patch("Exporter/pool-0", exporter, {"spec": {"enabled": False}})
    changes.patch("Exporter/pool-0", {"spec": {"enabled": False}}, {"metadata": {"labels": {"h": "lab1"}}})
    assert changes.before == {"Exporter/pool-0": {"spec": {"enabled": True}}}
    assert changes.after == {"Exporter/pool-0": {"spec": {"enabled": False}, "metadata": {"labels": {"h": "lab1"}}}}
