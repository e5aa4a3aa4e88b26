"""LabelIndex: the first object a selector matches, found per label set."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import selectors
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.selectors import (
    LabelIndex,
    selector_matches,
)
from hypothesis import given
from hypothesis import strategies as st


def obj(name, labels):
    return {"metadata": {"name": name, "labels": labels}}


def by_name(o):
    return o["metadata"]["name"]


LABELS = st.dictionaries(st.sampled_from(["board", "arch", "site"]), st.sampled_from(["a", "b"]),
                         max_size=3)
SELECTORS = st.one_of(
    st.builds(lambda labels: {"matchLabels": labels}, LABELS),
    st.builds(lambda key, values, operator: {"matchExpressions": [
        {"key": key, "operator": operator, "values": values}]},
        st.sampled_from(["board", "arch", "site"]), st.lists(st.sampled_from(["a", "b"])),
        st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"])),
)


@given(st.lists(LABELS, max_size=30), st.lists(SELECTORS, max_size=30))
def test_takes_what_a_scan_by_name_takes(labels, wanted):
    objects = [obj(f"e-{i:02d}", label) for i, label in enumerate(labels)]
    index = LabelIndex(reversed(objects), key=by_name)
    left = sorted(objects, key=by_name)
    for selector in wanted:
        expected = next((o for o in left if selector_matches(selector, o["metadata"]["labels"])), None)
        if expected is not None:
            left.remove(expected)
        assert index.take_first(selector) is expected


def test_a_selector_is_matched_once_per_label_set(monkeypatch):
    calls = []
    original = selectors.selector_matches

    def counting(selector, labels):
        calls.append(labels)
        return original(selector, labels)

    monkeypatch.setattr(selectors, "selector_matches", counting)
    objects = [obj(f"e-{i:04d}", {"board": "rpi4" if i % 2 else "imx8"}) for i in range(1000)]
    index = LabelIndex(objects, key=by_name)
    assert index.take_first({"matchLabels": {"board": "none"}}) is None
    assert len(calls) == 2
    assert by_name(index.take_first({"matchLabels": {"board": "rpi4"}})) == "e-0001"
    assert by_name(index.take_first({})) == "e-0000"
