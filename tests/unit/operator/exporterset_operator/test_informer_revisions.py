"""The informer's snapshots of a namespace carry a revision that changes with
every event in that namespace and with a relist, never with another's."""

from __future__ import annotations

import json

from exporterset_operator.informer import Informer, Resource


def exporter(name, namespace="lab", version="1"):
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": version}}


def informer():
    return Informer(Resource("Exporter", "jumpstarter.dev", "v1alpha1", "exporters"), None)


def test_the_revision_holds_while_nothing_changes_and_moves_with_an_event():
    cache = informer()
    cache._apply("ADDED", exporter("a"))
    first = cache.list("lab")
    assert [e["metadata"]["name"] for e in first] == ["a"]
    assert cache.list("lab").revision == first.revision
    cache._apply("MODIFIED", exporter("a", version="2"))
    modified = cache.list("lab")
    assert modified.revision != first.revision
    cache._apply("DELETED", exporter("a", version="2"))
    deleted = cache.list("lab")
    assert list(deleted) == [] and deleted.revision not in (first.revision, modified.revision)


def test_an_event_in_another_namespace_leaves_the_revision_alone():
    cache = informer()
    cache._apply("ADDED", exporter("a"))
    before = cache.list("lab").revision
    cache._apply("ADDED", exporter("b", namespace="other"))
    assert cache.list("lab").revision == before
    assert [e["metadata"]["name"] for e in cache.list("other")] == ["b"]


def test_each_reader_gets_a_list_of_its_own():
    cache = informer()
    cache._apply("ADDED", exporter("a"))
    taken = cache.list("lab")
    taken.clear()
    assert len(cache.list("lab")) == 1


def test_a_relist_gives_every_namespace_a_new_revision(monkeypatch):
    cache = informer()
    cache._apply("ADDED", exporter("a"))
    before = cache.list("lab").revision

    class Response:
        data = json.dumps({"metadata": {"resourceVersion": "9"}, "items": [exporter("a")]}).encode()

    monkeypatch.setattr(cache, "_list_call", lambda: (lambda **kwargs: Response(), {}))
    cache._relist()
    assert cache.list("lab").revision != before
