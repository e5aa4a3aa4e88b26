"""The operator's informer against a real kube-apiserver: list then watch,
resume after a watch ends, bookmarks, and a relist when the API server
answers 410 Gone (resourceVersion expired).

A 410 is provoked for real: the informer is held in a handler while its
watch ends on the server's own timeout; kube-apiserver is restarted (its
watch cache starts again at etcd's current revision, so any older
resourceVersion is "too old") and objects change in the gap; released, the
informer resumes its watch from the old resourceVersion and gets the 410.
The bed's API server is restarted, so that test runs on a bed of its own.

What the informer asks the API server is read from a recording client:
the real ApiClient, every request noted on its way out."""

from __future__ import annotations

import logging
import threading
import urllib.parse

import pytest
from exporterset_operator.informer import Informer, Resource
from kubernetes import client

pytestmark = pytest.mark.testbed

EXPORTERS = Resource("Exporter", "jumpstarter.dev", "v1alpha1", "exporters")
WAIT = 30.0  # bound of every wait for the informer or the API server


class RecordingApiClient(client.ApiClient):
    """A real ApiClient that notes each request's verb, path and query.
    Only the informer uses it; the test's own calls go through another."""

    def __init__(self, configuration):
        super().__init__(configuration)
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    def call_api(self, method, url, *args, **kwargs):
        parsed = urllib.parse.urlsplit(url)
        self.requests.append((method, parsed.path, dict(urllib.parse.parse_qsl(parsed.query))))
        return super().call_api(method, url, *args, **kwargs)

    def lists(self) -> list[dict[str, str]]:
        return [query for method, _, query in self.requests if method == "GET" and query.get("watch") != "true"]

    def watches(self) -> list[dict[str, str]]:
        return [query for method, _, query in self.requests if method == "GET" and query.get("watch") == "true"]


class Events:
    """The informer's handler: records (type, name, object, previous) and
    lets a test wait on them. ``hold`` names an object whose event blocks
    the informer until ``release`` is set."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict, dict | None]] = []
        self.cond = threading.Condition()
        self.hold: str | None = None
        self.held = threading.Event()
        self.release = threading.Event()

    def __call__(self, event_type: str, obj: dict, previous: dict | None) -> None:
        name = obj["metadata"]["name"]
        with self.cond:
            self.seen.append((event_type, name, obj, previous))
            self.cond.notify_all()
        if name == self.hold:
            self.held.set()
            assert self.release.wait(WAIT * 4)

    def wait_for(self, predicate, what: str) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: predicate(self.seen), WAIT):
                pytest.fail(f"informer never delivered {what}; saw {self.summary()}")

    def wait_event(self, event_type: str, name: str) -> tuple[dict, dict | None]:
        self.wait_for(lambda seen: any(e[:2] == (event_type, name) for e in seen), f"{event_type} {name}")
        return next((obj, previous) for t, n, obj, previous in self.seen if (t, n) == (event_type, name))

    def summary(self) -> list[tuple[str, str]]:
        return [(t, n) for t, n, _, _ in self.seen]

    def count(self, event_type: str, name: str) -> int:
        return self.summary().count((event_type, name))


def wait_until(predicate, what: str) -> None:
    pause = threading.Event()
    for _ in range(int(WAIT / 0.05)):
        if predicate():
            return
        pause.wait(0.05)
    pytest.fail(f"timed out waiting for {what}")


class Exporters:
    def __init__(self, api: client.ApiClient, namespace: str):
        self.api = client.CustomObjectsApi(api)
        self.namespace = namespace

    def create(self, name: str, namespace: str | None = None) -> dict:
        body = {"apiVersion": EXPORTERS.api_version, "kind": "Exporter", "metadata": {"name": name}, "spec": {}}
        return self.api.create_namespaced_custom_object(
            EXPORTERS.group, EXPORTERS.version, namespace or self.namespace, EXPORTERS.plural, body
        )

    def label(self, name: str, value: str) -> dict:
        return self.api.patch_namespaced_custom_object(
            EXPORTERS.group,
            EXPORTERS.version,
            self.namespace,
            EXPORTERS.plural,
            name,
            {"metadata": {"labels": {"mark": value}}},
        )

    def delete(self, name: str) -> None:
        self.api.delete_namespaced_custom_object(
            EXPORTERS.group, EXPORTERS.version, self.namespace, EXPORTERS.plural, name
        )

    def server_state(self) -> dict[str, str]:
        items = self.api.list_namespaced_custom_object(
            EXPORTERS.group, EXPORTERS.version, self.namespace, EXPORTERS.plural
        )["items"]
        return {item["metadata"]["name"]: item["metadata"]["resourceVersion"] for item in items}


def cache_state(informer: Informer) -> dict[str, str]:
    return {obj["metadata"]["name"]: obj["metadata"]["resourceVersion"] for obj in informer.list()}


def recording_client(bed) -> RecordingApiClient:
    with bed.api_client() as plain:
        return RecordingApiClient(plain.configuration)


@pytest.fixture
def run_informer():
    """Starts informers and stops them (their threads joined) after the test."""
    started: list[tuple[Informer, threading.Thread]] = []

    def start(informer: Informer) -> Informer:
        started.append((informer, informer.start()))
        return informer

    yield start
    for informer, _thread in started:
        informer.stop()
    for informer, thread in started:
        thread.join(WAIT)
        informer.api_client.close()
        assert not thread.is_alive(), f"the {informer.resource.kind} informer did not stop"


def test_list_then_watch_fills_the_cache_and_hands_each_change_to_the_handlers(testbed, namespace, run_informer):
    api = recording_client(testbed)
    exporters = Exporters(testbed.api_client(), namespace)
    for name in ("e0", "e1"):
        exporters.create(name)
    events = Events()
    informer = run_informer(Informer(EXPORTERS, api, namespace=namespace, handlers=[events]))
    assert informer.synced.wait(WAIT)
    assert sorted(events.summary()) == [("ADDED", "e0"), ("ADDED", "e1")]
    assert all(previous is None for _, _, _, previous in events.seen)
    assert cache_state(informer) == exporters.server_state()

    created = exporters.create("e2")
    obj, previous = events.wait_event("ADDED", "e2")
    assert previous is None
    assert obj["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    before = informer.get(namespace, "e0")
    changed = exporters.label("e0", "one")
    obj, previous = events.wait_event("MODIFIED", "e0")
    assert obj["metadata"]["labels"] == {"mark": "one"}
    assert previous == before
    assert informer.get(namespace, "e0")["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]

    last_seen = informer.get(namespace, "e1")
    exporters.delete("e1")
    obj, previous = events.wait_event("DELETED", "e1")
    assert previous == last_seen
    assert informer.get(namespace, "e1") is None
    assert cache_state(informer) == exporters.server_state()
    # The cache keeps what the operator reads, not the field managers.
    assert all("managedFields" not in obj["metadata"] for obj in informer.list())
    # One list, then watches only.
    assert len(api.lists()) == 1 and informer.relists == 1


def test_a_watch_that_ends_is_resumed_from_the_last_resource_version_without_a_relist(testbed, namespace, run_informer):
    api = recording_client(testbed)
    exporters = Exporters(testbed.api_client(), namespace)
    events = Events()
    # The server ends each watch after a second (too short for a bookmark).
    informer = run_informer(Informer(EXPORTERS, api, namespace=namespace, handlers=[events], watch_timeout=1))
    assert informer.synced.wait(WAIT)
    # Synced once listed; the first watch starts a moment later.
    wait_until(lambda: api.watches(), "the informer's first watch")
    list_version = api.watches()[0]["resourceVersion"]

    created = exporters.create("e0")
    events.wait_event("ADDED", "e0")
    # Wait until the watch that delivered e0 has ended and another is open.
    watches_then = len(api.watches())
    wait_until(lambda: len(api.watches()) > watches_then, "the informer to watch again")
    resumed = api.watches()[watches_then]
    assert resumed["resourceVersion"] == created["metadata"]["resourceVersion"] != list_version

    exporters.create("e1")
    events.wait_event("ADDED", "e1")
    # Nothing replayed, nothing listed again.
    assert events.summary() == [("ADDED", "e0"), ("ADDED", "e1")]
    assert len(api.lists()) == 1 and informer.relists == 1
    assert cache_state(informer) == exporters.server_state()


def test_a_bookmark_moves_the_resource_version_without_an_event(testbed, namespace, run_informer):
    """Exporters change only in another namespace: the informer sees no
    event, yet a later watch starts past them, from the bookmark the API
    server sends shortly before the watch's timeout."""
    api = recording_client(testbed)
    exporters = Exporters(testbed.api_client(), namespace)
    exporters.create("e0")
    events = Events()
    informer = run_informer(Informer(EXPORTERS, api, namespace=namespace, handlers=[events], watch_timeout=4))
    assert informer.synced.wait(WAIT)
    wait_until(lambda: api.watches(), "the informer's first watch")
    first = api.watches()[0]["resourceVersion"]

    elsewhere = f"{namespace}-other"
    core = client.CoreV1Api(exporters.api.api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=elsewhere)))
    try:
        moved = int(exporters.create("x0", namespace=elsewhere)["metadata"]["resourceVersion"])
        assert int(first) < moved
        wait_until(
            lambda: any(int(w["resourceVersion"]) >= moved for w in api.watches()[1:]),
            "a watch from a bookmark's resourceVersion",
        )
    finally:
        core.delete_namespace(elsewhere)
    assert events.summary() == [("ADDED", "e0")]
    assert len(api.lists()) == 1 and informer.relists == 1


def test_a_pod_informer_caches_plain_objects_of_the_selected_pods_only(testbed, namespace, run_informer):
    """The core API path: Pods chosen by label, cached and handed out as
    plain dicts like custom objects, not as the client's model classes."""
    core = client.CoreV1Api(testbed.api_client())

    def pod(name: str, labels: dict) -> dict:
        body = {
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]},
        }
        return core.create_namespaced_pod(namespace, body)

    pod("mine-0", {"pick": "yes"})
    pod("other", {"pick": "no"})
    events = Events()
    pods = Resource("Pod", "", "v1", "pods", label_selector="pick=yes")
    informer = run_informer(Informer(pods, recording_client(testbed), namespace=namespace, handlers=[events]))
    assert informer.synced.wait(WAIT)
    pod("mine-1", {"pick": "yes"})
    obj, _ = events.wait_event("ADDED", "mine-1")
    assert isinstance(obj, dict) and obj["spec"]["containers"][0]["name"] == "c"
    assert sorted(o["metadata"]["name"] for o in informer.list(namespace)) == ["mine-0", "mine-1"]
    assert all(isinstance(o, dict) for o in informer.list())
    assert {n for _, n in events.summary()} == {"mine-0", "mine-1"}
    # Delivered by the watch, not by a relist after the watch failed.
    assert informer.relists == 1


@pytest.fixture
def own_bed(testbed_factory):
    """A bed of this test's own: its API server is restarted."""
    return testbed_factory("informer", controllers=False)


def test_an_expired_watch_relists_and_the_cache_catches_up_with_the_gap(own_bed, run_informer, caplog):
    namespace = "gap"
    api = recording_client(own_bed)
    plain = own_bed.api_client()
    client.CoreV1Api(plain).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    exporters = Exporters(plain, namespace)
    for name in ("keep", "changed", "gone-0", "gone-1"):
        exporters.create(name)
    events = Events()
    events.hold = "hold"
    informer = run_informer(Informer(EXPORTERS, api, namespace=namespace, handlers=[events], watch_timeout=3))
    assert informer.synced.wait(WAIT)
    caplog.set_level(logging.INFO, logger="exporterset_operator.informer")

    # Hold the informer in its handler, mid-watch.
    exporters.create("hold")
    assert events.held.wait(WAIT)
    old_version = informer.get(namespace, "hold")["metadata"]["resourceVersion"]
    # The server ends that watch at its timeout; wait until it has no
    # Exporter watch left, so the informer will resume, not reconnect.
    wait_until(lambda: exporter_watchers(own_bed) == 0, "the server to end the informer's watch")
    own_bed.restart_apiserver()
    # The gap: deletions, a change and a creation the informer does not see.
    exporters.delete("gone-0")
    exporters.delete("gone-1")
    changed = exporters.label("changed", "in-the-gap")
    exporters.create("new")
    events.release.set()

    wait_until(lambda: informer.relists == 2, "a relist")
    events.wait_event("ADDED", "new")
    assert cache_state(informer) == exporters.server_state()
    assert set(cache_state(informer)) == {"keep", "changed", "hold", "new"}
    # The watch resumed from where the informer was, and was told 410.
    resumed = [w for w in api.watches() if w.get("resourceVersion") == old_version]
    assert resumed, api.watches()
    logged = [(r.levelname, r.getMessage(), getattr(r, "error", None)) for r in caplog.records]
    assert ("INFO", "watch expired; relisting", None) in logged, logged
    # An expiry is no failure: no warning, no backoff before the relist.
    assert not [entry for entry in logged if entry[0] not in ("DEBUG", "INFO")], logged
    # Handlers saw the gap: the deleted gone, the changed with its old
    # state as previous, and no object added twice.
    for name in ("gone-0", "gone-1"):
        obj, previous = events.wait_event("DELETED", name)
        assert previous["metadata"]["name"] == name
    obj, previous = events.wait_event("MODIFIED", "changed")
    assert obj["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]
    assert "labels" not in previous["metadata"]
    for name in ("keep", "changed", "gone-0", "gone-1", "hold", "new"):
        assert events.count("ADDED", name) == 1, events.summary()
    assert events.count("MODIFIED", "keep") == 0
    assert events.count("MODIFIED", "hold") == 0


def exporter_watchers(bed) -> int | None:
    """Open Exporter watches on the bed's API server (its own metrics);
    None while the API server reports none of them at all."""
    with bed.api_client() as api:
        response = api.call_api("GET", f"{bed.server}/metrics")
        text = response.read().decode()
    series = [
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("apiserver_longrunning_requests{")
        and 'resource="exporters"' in line
        and 'verb="WATCH"' in line
    ]
    return sum(series) if series else None
