"""A faithful stand-in for the Jumpstarter controller, for tests.

The real controller cannot be built here (its Go module is not served by the
module proxy this machine reaches), so the tests run this one: it serves one
namespace, watches the API and reconciles on its own (``controller``), serves
the controller's gRPC services over TLS with a private CA (``grpc_services``)
so that real ``jmp run`` exporters register and a real ``jmp`` client leases,
and plays the exporter process of Pods that kwok runs without containers
(``pod_exporters``). What it does, failures included, is listed in
docs/controller.md.

``JumpstarterStandIn`` is what a test does as a user or admin would: read
Exporters and Pods, create and release Leases.
"""

from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client.rest import ApiException

from .controller import GROUP, LEASE_ENDED_LABEL, VERSION, StandInController, condition_true

JS = (GROUP, VERSION)

__all__ = ["JS", "LEASE_ENDED_LABEL", "JumpstarterStandIn", "StandInController", "condition_true", "wait_for",
           "wait_gone"]


class JumpstarterStandIn:
    """A user's and an admin's view of the namespace the controller serves.

    The ``standin`` fixture also sets ``controller`` (the reconcile loops),
    ``grpc`` (the gRPC services, with ``endpoint`` and ``ca_pem``) and
    ``pod_exporters`` (the exporter processes of kwok's Pods).
    """

    controller = None
    grpc = None
    pod_exporters = None

    def __init__(self, api_client: client.ApiClient, namespace: str):
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace

    # -- reads ---------------------------------------------------------------
    def exporters(self, label_selector: str | None = None) -> list[dict]:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        return self.custom.list_namespaced_custom_object(*JS, self.namespace, "exporters", **kwargs)["items"]

    def exporter(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(*JS, self.namespace, "exporters", name)

    def leases(self) -> list[dict]:
        return self.custom.list_namespaced_custom_object(*JS, self.namespace, "leases")["items"]

    def lease(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(*JS, self.namespace, "leases", name)

    def pods(self, label_selector: str = "virtualtarget.jumpstarter.dev/exporterset") -> list:
        return self.core.list_namespaced_pod(self.namespace, label_selector=label_selector).items

    def online(self, name: str) -> bool:
        return _registered_and_online(self.exporter(name))

    def wait_online(self, name: str, online: bool = True, timeout: float = 60.0) -> dict:
        """Until the controller shows ``name`` Registered and Online (or not)."""
        def seen():
            exporter = self.exporter(name)
            return _registered_and_online(exporter) == online and exporter
        return wait_for(seen, timeout=timeout, message=f"exporter {name} {'online' if online else 'offline'}")

    # -- what happens to an exporter process -------------------------------------
    def kill_pod_exporter(self, pod: str, unregister: bool = True) -> None:
        """The ``jmp run`` container of Pod ``pod`` exits and stays down (see
        ``PodExporters.kill``); the Pod itself keeps running."""
        self.pod_exporters.kill(pod, unregister=unregister)

    # -- what a user does ------------------------------------------------------
    def create_lease(self, name: str, match_labels: dict, begin_time: str | None = None,
                     duration: str = "1h", exporter: str | None = None, client_name: str = "test-client",
                     allow_disabled: bool = False) -> dict:
        body = {
            "apiVersion": "jumpstarter.dev/v1alpha1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "clientRef": {"name": client_name},
                "duration": duration,
                "selector": {"matchLabels": match_labels},
            },
        }
        if begin_time:
            body["spec"]["beginTime"] = begin_time
        if exporter:
            body["spec"]["exporterRef"] = {"name": exporter}
        if allow_disabled:
            # jmp create lease --allow-disabled (jumpstarter-cli 0.9.0): a
            # disabled Exporter may be given.
            body["spec"]["allowDisabled"] = True
        return self.custom.create_namespaced_custom_object(*JS, self.namespace, "leases", body)

    def release(self, lease: str) -> None:
        """What `jmp delete lease` asks for: the controller ends the lease."""
        self.custom.patch_namespaced_custom_object(*JS, self.namespace, "leases", lease,
                                                   {"spec": {"release": True}})

    def exporter_of(self, lease: str) -> str | None:
        return ((self.lease(lease).get("status") or {}).get("exporterRef") or {}).get("name")

    def wait_assigned(self, lease: str, timeout: float = 60.0) -> str:
        """The Exporter the controller gave ``lease``, once it is Ready."""
        def assigned():
            obj = self.lease(lease)
            status = obj.get("status") or {}
            if status.get("ended"):
                raise AssertionError(f"lease {lease} ended unassigned: {status.get('conditions')}")
            return condition_true(obj, "Ready") and status["exporterRef"]["name"]
        return wait_for(assigned, timeout=timeout, message=f"lease {lease} Ready")


def _registered_and_online(exporter: dict) -> bool:
    return condition_true(exporter, "Registered") and condition_true(exporter, "Online")


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.25, message: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; fail with ``message``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}; last value: {last!r}")


def wait_gone(read, timeout: float = 60.0, interval: float = 0.25, message: str = "object gone") -> None:
    """Poll ``read`` (a call that reads one object) until the API answers 404."""
    def gone():
        try:
            read()
        except ApiException as exc:
            return exc.status == 404
        return False
    wait_for(gone, timeout=timeout, interval=interval, message=message)
