"""What the Jumpstarter controller does to Exporters and Leases, for tests.

The real controller cannot be built here (its Go module is not served by the
module proxy this machine reaches), so tests play its part through the same
API calls it makes: it creates the exporter credential Secret and names it in
``status.credential``, reports Registered/Online conditions through the
status subresource, and assigns a lease by setting ``status.leaseRef`` on the
Exporter and ``status.exporterRef`` on the Lease.
"""

from __future__ import annotations

import base64
import secrets
import time
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

JS = ("jumpstarter.dev", "v1alpha1")
ENDPOINT = "grpc.jumpstarter.test:443"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class JumpstarterStandIn:
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

    def pods(self, label_selector: str = "virtualtarget.jumpstarter.dev/exporterset") -> list:
        return self.core.list_namespaced_pod(self.namespace, label_selector=label_selector).items

    # -- what the controller writes -----------------------------------------
    def _patch_status(self, plural: str, name: str, status: dict) -> None:
        self.custom.patch_namespaced_custom_object_status(
            *JS, self.namespace, plural, name, {"status": status}
        )

    def issue_credentials(self) -> list[str]:
        """Credential Secret + status.credential for every Exporter lacking one."""
        issued = []
        for exporter in self.exporters():
            name = exporter["metadata"]["name"]
            if ((exporter.get("status") or {}).get("credential") or {}).get("name"):
                continue
            secret_name = f"{name}-exporter"
            token = secrets.token_urlsafe(24)
            body = client.V1Secret(
                metadata=client.V1ObjectMeta(name=secret_name, namespace=self.namespace),
                data={"token": base64.b64encode(token.encode()).decode()},
            )
            try:
                self.core.create_namespaced_secret(self.namespace, body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
            self._patch_status("exporters", name, {"credential": {"name": secret_name}, "endpoint": ENDPOINT})
            issued.append(name)
        return issued

    def set_online(self, name: str, online: bool = True) -> None:
        value = "True" if online else "False"
        conditions = [
            {"type": kind, "status": value, "reason": "Seen" if online else "NotSeen",
             "message": "", "lastTransitionTime": _now()}
            for kind in ("Registered", "Online")
        ]
        self._patch_status(
            "exporters", name,
            {"conditions": conditions, "exporterStatus": "Available" if online else "Offline",
             "lastSeen": _now()},
        )

    def bring_online_running(self) -> list[str]:
        """Mark online every Exporter whose Pod is Running, like a registered exporter."""
        running = {
            p.metadata.labels.get("virtualtarget.jumpstarter.dev/exporter")
            for p in self.pods()
            if p.status and p.status.phase == "Running" and not p.metadata.deletion_timestamp
        }
        marked = []
        for exporter in self.exporters():
            name = exporter["metadata"]["name"]
            conditions = {c["type"]: c["status"] for c in (exporter.get("status") or {}).get("conditions") or []}
            if name in running and conditions.get("Online") != "True":
                self.set_online(name)
                marked.append(name)
        return marked

    def create_lease(self, name: str, match_labels: dict, begin_time: str | None = None) -> dict:
        body = {
            "apiVersion": "jumpstarter.dev/v1alpha1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "clientRef": {"name": "test-client"},
                "duration": "1h",
                "selector": {"matchLabels": match_labels},
            },
        }
        if begin_time:
            body["spec"]["beginTime"] = begin_time
        return self.custom.create_namespaced_custom_object(*JS, self.namespace, "leases", body)

    def assign(self, lease: str, exporter: str) -> None:
        self._patch_status("exporters", exporter, {"leaseRef": {"name": lease}, "exporterStatus": "LeaseReady"})
        self._patch_status(
            "leases", lease,
            {"exporterRef": {"name": exporter}, "beginTime": _now(), "ended": False,
             "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                             "lastTransitionTime": _now()}]},
        )

    def assign_pending(self) -> list[tuple[str, str]]:
        """Give every pending lease an available exporter its selector matches,
        as the controller's lease scheduler does; oldest lease first."""
        from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.exporter_state import (
            is_available,
        )
        from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.selectors import (
            selector_matches,
        )

        leases = self.custom.list_namespaced_custom_object(*JS, self.namespace, "leases")["items"]
        pending = sorted(
            (lease for lease in leases
             if not (lease.get("status") or {}).get("exporterRef") and not (lease.get("status") or {}).get("ended")),
            key=lambda lease: (lease["metadata"]["creationTimestamp"], lease["metadata"]["name"]),
        )
        free = sorted((e for e in self.exporters() if is_available(e)), key=lambda e: e["metadata"]["name"])
        assigned = []
        for lease in pending:
            selector = (lease.get("spec") or {}).get("selector") or {}
            match = next((e for e in free if selector_matches(selector, e["metadata"].get("labels") or {})), None)
            if match is None:
                continue
            free.remove(match)
            self.assign(lease["metadata"]["name"], match["metadata"]["name"])
            assigned.append((lease["metadata"]["name"], match["metadata"]["name"]))
        return assigned

    def release(self, lease: str, exporter: str) -> None:
        # A null in a merge patch removes the field.
        self._patch_status("exporters", exporter, {"leaseRef": None, "exporterStatus": "Available"})
        self._patch_status("leases", lease, {"ended": True, "endTime": _now()})


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
