"""Objects and fixtures shared by the operator tests."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from jumpstarter_standin import wait_for
from operator_process import OperatorProcess

GROUP = ("virtualtarget.jumpstarter.dev", "v1alpha1")
SET_LABEL = "virtualtarget.jumpstarter.dev/exporterset"

QEMU_PARAMETERS = {"arch": "x86_64", "machineType": "q35", "resources": {"cpu": 1, "memory": "256Mi"}}


def make_class(custom, namespace, name="qemu-small", parameters=None, **spec):
    body = {
        "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1",
        "kind": "VirtualTargetClass",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"provisioner": "qemu.jumpstarter.dev", "parameters": parameters or QEMU_PARAMETERS, **spec},
    }
    return custom.create_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", body)


def make_owned_exporter(custom, namespace, the_set, name="pool-0", board="qemu-x86"):
    """An enabled Exporter of ``the_set`` (labelled, annotated with the
    QEMU provisioner, owned by the set), as the set's reconcile makes it."""
    return custom.create_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters", {
        "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
        "metadata": {"name": name, "labels": {"board": board, SET_LABEL: the_set["metadata"]["name"]},
                     "annotations": {"virtualtarget.jumpstarter.dev/provisioner": "qemu.jumpstarter.dev"},
                     "ownerReferences": [{"apiVersion": "/".join(GROUP), "kind": "ExporterSet",
                                          "name": the_set["metadata"]["name"], "uid": the_set["metadata"]["uid"],
                                          "controller": True}]},
        "spec": {"enabled": True}})


def give_credential(api_client, namespace, exporter, token="a-token", endpoint="grpc.example:443"):
    """What the Jumpstarter controller gives a new Exporter: its credential
    Secret (owned by it) and ``status.credential``; returns the Exporter."""
    from kubernetes import client

    name = exporter["metadata"]["name"]
    client.CoreV1Api(api_client).create_namespaced_secret(namespace, {
        "metadata": {"name": f"{name}-exporter", "ownerReferences": [{
            "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter", "name": name,
            "uid": exporter["metadata"]["uid"], "controller": True}]},
        "stringData": {"token": token}})
    return client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        "jumpstarter.dev", "v1alpha1", namespace, "exporters", name,
        {"status": {"credential": {"name": f"{name}-exporter"}, "endpoint": endpoint}})


def make_set(custom, namespace, name="pool", board="qemu-x86", **spec):
    body = {
        "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1",
        "kind": "ExporterSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "virtualTargetClassName": "qemu-small",
            "minReplicas": 0,
            "maxReplicas": 6,
            "minAvailableReplicas": 2,
            "scaleDownCooldown": "2s",
            "selector": {"matchLabels": {"board": board}},
            "template": {
                "metadata": {"labels": {"board": board, "virtual": "true"}},
                "spec": {"drivers": [{"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu"}]},
            },
            **spec,
        },
    }
    return custom.create_namespaced_custom_object(*GROUP, namespace, "exportersets", body)


def get_set(custom, namespace, name="pool"):
    return custom.get_namespaced_custom_object(*GROUP, namespace, "exportersets", name)


def condition(obj, kind):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


@pytest.fixture
def api(testbed):
    with testbed.api_client() as api_client:
        yield api_client


@pytest.fixture
def operator(testbed, namespace, tmp_path):
    processes = []

    def start(*extra, **kwargs):
        proc = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, *extra, **kwargs).start()
        processes.append(proc)
        proc.wait_ready()
        return proc

    start.processes = processes  # for the failure report (tests/conftest.py)
    yield start
    for proc in processes:
        proc.stop()
    for proc in processes:
        print(f"--- operator log {proc.log_path} ---\n{proc.log_tail(200)}")


def settle_pool(standin, available, custom, namespace, name="pool", timeout=90, **expected):
    """Until the set reports ``available`` warm exporters and every other
    status field in ``expected`` (e.g. ``leasedReplicas=1``). The controller
    stand-in and the Pods' exporter processes run on their own (the
    ``standin`` fixture)."""
    assert standin.controller is not None, "settle_pool needs the running `standin` fixture"
    expected["availableReplicas"] = available

    def step():
        status = get_set(custom, namespace, name).get("status") or {}
        return status if all(status.get(k) == v for k, v in expected.items()) else None

    return wait_for(step, timeout=timeout, message=f"{expected} in {name}")


# kind -> (group, version, plural); "" group is the core API.
WATCHABLE = {
    "ExporterSet": ("virtualtarget.jumpstarter.dev", "v1alpha1", "exportersets"),
    "VirtualTargetClass": ("virtualtarget.jumpstarter.dev", "v1alpha1", "virtualtargetclasses"),
    "Exporter": ("jumpstarter.dev", "v1alpha1", "exporters"),
    "Lease": ("jumpstarter.dev", "v1alpha1", "leases"),
    "Pod": ("", "v1", "pods"),
    "Secret": ("", "v1", "secrets"),
    "Event": ("", "v1", "events"),
}


class EventRecorder:
    """Every watch event of ``kind`` in ``namespace`` from the moment it
    starts (a list gives the resourceVersion the watch starts from, so
    nothing between the two is missed), as ``(type, object as a dict)``.
    ``on_event(type, obj)`` is called from the watch thread as each arrives."""

    def __init__(self, api_client, kind, namespace, label_selector=None, on_event=None):
        from kubernetes import client

        self.api_client = api_client
        self.kind = kind
        group, version, plural = WATCHABLE[kind]
        if group:
            custom = client.CustomObjectsApi(api_client)

            def lister(**kwargs):
                return custom.list_namespaced_custom_object(group, version, namespace, plural, **kwargs)
        else:
            core = client.CoreV1Api(api_client)
            lister = getattr(core, f"list_namespaced_{plural[:-1]}")
            lister = (lambda method: lambda **kwargs: method(namespace, **kwargs))(lister)
        self._list = lister
        self._selector = label_selector
        self._on_event = on_event
        self.events: list[tuple[str, dict]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.error: BaseException | None = None
        listed = lister(label_selector=label_selector) if label_selector else lister()
        meta = listed["metadata"] if isinstance(listed, dict) else listed.metadata.to_dict()
        self._resource_version = meta["resource_version"] if "resource_version" in meta else meta["resourceVersion"]
        self._thread = threading.Thread(target=self._run, name=f"watch-{kind}", daemon=True)
        self._thread.start()

    def _run(self):
        from kubernetes import watch
        from kubernetes.client.rest import ApiException

        while not self._stop.is_set():
            # Every object as a plain dict, whatever its kind.
            stream = watch.Watch(return_type="object")
            kwargs = {"resource_version": self._resource_version, "timeout_seconds": 5,
                      "allow_watch_bookmarks": True}
            if self._selector:
                kwargs["label_selector"] = self._selector
            try:
                for event in stream.stream(self._list, **kwargs):
                    obj = event["object"]
                    self._resource_version = obj["metadata"]["resourceVersion"]
                    if event["type"] == "BOOKMARK":
                        continue
                    with self._changed:
                        if self._stop.is_set():
                            # Stopped: what arrives now is past the recorder's end.
                            stream.stop()
                            return
                        if self._on_event is not None:
                            self._on_event(event["type"], obj)
                        self.events.append((event["type"], obj))
                        self._changed.notify_all()
            except ApiException as exc:
                # 410: history compacted away; the bed keeps plenty, so a
                # test that meets it cannot tell what it missed.
                self.error = exc
                return
            except Exception:  # noqa: BLE001 (connection dropped: watch again from where it was)
                if self._stop.is_set():
                    return
                time.sleep(0.1)

    def matching(self, predicate) -> list[tuple[str, dict]]:
        with self._lock:
            return [(t, o) for t, o in self.events if predicate(t, o)]

    def wait(self, predicate, timeout: float, message: str = "an event"):
        """The first event ``predicate`` accepts, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [(t, o) for t, o in self.events if predicate(t, o)]
                if found:
                    return found[0]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no {message} within {timeout}s")
                self._changed.wait(remaining)

    def stop(self):
        """No event is recorded or handed to ``on_event`` after this returns.

        The watch thread is not waited for: blocked on a quiet watch it would
        only notice at the watch's server-side timeout (5 s), which every
        negative check (``no_event``) paid on top of its bound. It ends on
        its own at the next event or that timeout, dropping both."""
        with self._changed:
            self._stop.set()


def _describe(event):
    event_type, obj = event
    return f"{event_type} {obj.get('kind', '')} {obj['metadata'].get('name')}"


@contextlib.contextmanager
def no_event(api_client, kind, predicate, within, namespace, label_selector=None, what="event"):
    """Watch ``kind`` from the start of the block until at least ``within``
    seconds after it began; fail at once on the first event that
    ``predicate(type, obj)`` accepts (it names the event). The block is
    where the action that must have no such effect happens."""
    recorder = EventRecorder(api_client, kind, namespace, label_selector)
    started = time.monotonic()
    try:
        yield recorder
        remaining = within - (time.monotonic() - started)
        try:
            found = recorder.wait(predicate, max(remaining, 0.0))
        except AssertionError:
            found = None
        assert found is None, f"unexpected {what}: {_describe(found)}"
        assert recorder.error is None, f"the {kind} watch failed: {recorder.error}"
    finally:
        recorder.stop()


def assert_no_event(api_client, kind, predicate, within, namespace, label_selector=None, what="event"):
    """Fail if ``kind`` in ``namespace`` sees an event ``predicate(type,
    obj)`` accepts within ``within`` seconds from now (a bounded watch, not
    a sleep: it fails at the first such event)."""
    with no_event(api_client, kind, predicate, within, namespace, label_selector, what):
        pass
