"""The exporter process of Pods that kwok runs without containers.

kwok marks a Pod ``Running`` but runs none of its containers, so nothing
would ever talk to the controller for it. ``PodExporters`` plays the Pod's
``jmp run`` container, and only with what that container would have: the
ExporterConfig file its command names, read from the Secret volume mounted
at that path. It dials the config's ``endpoint`` over TLS trusting only the
config's ``tls.ca`` (no ``tls.ca``: the system roots, which do not know the
controller's private CA, so the connection fails as the real one does) and
authenticates with the config's ``token``. What follows is what ``jmp run``
0.9.0 does over gRPC: Register (its drivers as device reports),
ReportStatus ``Available``, the Status stream; ``LeaseReady`` when the
stream says it is leased; at lease end, with an afterLease hook that
fails with ``onFailure: exit`` (the one the operator writes for QEMU Pods
and ExitAndReplace sets), the hook's statuses, Offline and Unregister, and
the Pod's exporter never serves again; else with ``exitOnLeaseEnd`` the
process exits (Offline while its container restarts), otherwise
``Available`` again. A Pod that stops running, is deleted, or loses its config Secret
ends its exporter: Unregister, as on SIGTERM.

A token the controller refuses (another Exporter's UID, a deleted
Exporter) fails at Register, and the player retries with backoff as the
container would restart: the Exporter never becomes Registered.
"""

from __future__ import annotations

import base64
import logging
import threading
import time

import grpc
import yaml
from jumpstarter_protocol.jumpstarter.v1 import common_pb2, jumpstarter_pb2, jumpstarter_pb2_grpc
from kubernetes import client
from kubernetes.client.rest import ApiException

from .controller import wake_on_events

log = logging.getLogger(__name__)

RESTART_DELAY = 1.0
MAX_RESTART_DELAY = 10.0
RPC_TIMEOUT = 10.0


# What ``_serve`` returns when the process ended for good with its lease.
SERVED_ONCE = "served once"


def ends_with_its_lease(config: dict) -> bool:
    """Whether the config's afterLease hook ends the exporter (``onFailure: exit``)."""
    hook = ((config.get("hooks") or {}).get("afterLease")) or {}
    return hook.get("onFailure") == "exit"


def exporter_command_config(pod) -> tuple[str, str] | None:
    """(volume name, file name) of the ExporterConfig the Pod's ``jmp run`` reads."""
    spec = pod.spec
    for container in [*(spec.init_containers or []), *(spec.containers or [])]:
        command = list(container.command or []) + list(container.args or [])
        if "run" not in command or "--exporter-config" not in command:
            continue
        path = command[command.index("--exporter-config") + 1]
        directory, _, filename = path.rpartition("/")
        for mount in container.volume_mounts or []:
            if mount.mount_path.rstrip("/") == directory:
                return mount.name, filename
    return None


class ExporterProcess:
    """One Pod's ``jmp run``, as a thread."""

    def __init__(self, owner: PodExporters, pod):
        self.owner = owner
        self.pod_name = pod.metadata.name
        self.pod_uid = pod.metadata.uid
        self.stop_event = threading.Event()
        self.unregister_on_stop = True
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"pod-exporter-{self.pod_name}")

    def start(self) -> ExporterProcess:
        self.thread.start()
        return self

    def stop(self, unregister: bool = True) -> None:
        self.unregister_on_stop = unregister
        self.stop_event.set()

    # -- the container ---------------------------------------------------------
    def _run(self) -> None:
        # The container's start: a real one takes seconds before it dials.
        if self.stop_event.wait(self.owner.start_delay):
            return
        delay = RESTART_DELAY
        while not self.stop_event.is_set():
            config = self.owner.read_config(self.pod_name, self.pod_uid)
            if config is None:
                self.stop_event.wait(delay)
                continue
            try:
                clean = self._serve(config)
                if clean is SERVED_ONCE:
                    return
            except grpc.RpcError as exc:
                # The process exits on an RPC failure; its container restarts.
                log.debug("exporter of Pod %s: %s: %s", self.pod_name, exc.code().name, exc.details())
                clean = False
            except Exception:  # noqa: BLE001 - a crashed process is restarted, as a container is
                log.exception("exporter of Pod %s crashed", self.pod_name)
                clean = False
            delay = RESTART_DELAY if clean else min(delay * 2, MAX_RESTART_DELAY)
            self.stop_event.wait(delay)

    def _serve(self, config: dict) -> bool:
        """One life of the process; True when it ended as it means to."""
        tls = config.get("tls") or {}
        if tls.get("insecure"):
            credentials = grpc.ssl_channel_credentials()
        else:
            roots = base64.b64decode(tls["ca"]) if tls.get("ca") else None
            credentials = grpc.ssl_channel_credentials(root_certificates=roots)
        # What jmp sends with every call: its token and who it says it is.
        identity = config.get("metadata") or {}
        metadata = (("authorization", f"Bearer {config.get('token') or ''}"),
                    ("jumpstarter-kind", "Exporter"),
                    ("jumpstarter-namespace", identity.get("namespace") or ""),
                    ("jumpstarter-name", identity.get("name") or ""))
        reports = [
            jumpstarter_pb2.DriverInstanceReport(uuid=f"{self.pod_uid}-{index}", labels={"jumpstarter.dev/name": name})
            for index, name in enumerate(sorted(config.get("export") or {}))
        ]
        with grpc.secure_channel(config["endpoint"], credentials) as channel:
            stub = jumpstarter_pb2_grpc.ControllerServiceStub(channel)
            stub.Register(jumpstarter_pb2.RegisterRequest(labels={}, reports=reports),
                          metadata=metadata, timeout=RPC_TIMEOUT)
            self._report(stub, metadata, common_pb2.EXPORTER_STATUS_AVAILABLE, "Exporter registered and available")
            stream = stub.Status(jumpstarter_pb2.StatusRequest(), metadata=metadata)
            stopper = threading.Thread(target=self._cancel_on_stop, args=(stream,), daemon=True)
            stopper.start()
            leased = False
            try:
                for update in stream:
                    if update.leased and not leased:
                        self._report(stub, metadata, common_pb2.EXPORTER_STATUS_LEASE_READY, "Ready for commands")
                    elif leased and not update.leased:
                        if ends_with_its_lease(config):
                            # Its afterLease hook fails with onFailure exit
                            # (k8s/exporter_config.lease_end_hooks): jmp run
                            # reports the failure, goes Offline, unregisters
                            # and exits, and its container, started again,
                            # never runs it (the guard of k8s/pod.py).
                            self._report(stub, metadata, common_pb2.EXPORTER_STATUS_AFTER_LEASE_HOOK,
                                         "Running afterLease hooks")
                            self._report(stub, metadata, common_pb2.EXPORTER_STATUS_AFTER_LEASE_HOOK_FAILED,
                                         "afterLease hook failed (on_failure=exit, shutting down)")
                            self._report(stub, metadata, common_pb2.EXPORTER_STATUS_OFFLINE,
                                         "Exporter shutting down due to afterLease hook failure")
                            stub.Unregister(jumpstarter_pb2.UnregisterRequest(reason="Exporter shutdown"),
                                            metadata=metadata, timeout=RPC_TIMEOUT)
                            stream.cancel()
                            return SERVED_ONCE
                        if config.get("exitOnLeaseEnd"):
                            # The process exits with its lease; until its
                            # container has restarted it is offline.
                            self._report(stub, metadata, common_pb2.EXPORTER_STATUS_OFFLINE,
                                         "Exporter exited after its lease")
                            stream.cancel()
                            return True
                        self._report(stub, metadata, common_pb2.EXPORTER_STATUS_AVAILABLE, "Available for a new lease")
                    leased = update.leased
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.CANCELLED:
                    raise
            if self.stop_event.is_set() and self.unregister_on_stop:
                try:
                    stub.Unregister(jumpstarter_pb2.UnregisterRequest(reason="Exporter shutdown"),
                                    metadata=metadata, timeout=RPC_TIMEOUT)
                except grpc.RpcError as exc:
                    log.debug("unregister of Pod %s: %s", self.pod_name, exc)
            return self.stop_event.is_set()

    def _cancel_on_stop(self, stream) -> None:
        while not self.stop_event.wait(0.5):
            if stream.done():
                return
        stream.cancel()

    @staticmethod
    def _report(stub, metadata, status, message) -> None:
        stub.ReportStatus(jumpstarter_pb2.ReportStatusRequest(status=status, message=message),
                          metadata=metadata, timeout=RPC_TIMEOUT)


class PodExporters:
    """Runs an ``ExporterProcess`` for every running exporter Pod of a namespace."""

    def __init__(self, api_client: client.ApiClient, namespace: str, start_delay: float = 0.0):
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        # Seconds from a Pod running to its exporter dialling the controller.
        self.start_delay = start_delay
        self.processes: dict[str, ExporterProcess] = {}
        # Pods whose exporter a test stopped: not restarted while the Pod lives.
        self.held: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> PodExporters:
        for target in (self._watch, self._loop):
            thread = threading.Thread(target=target, daemon=True, name=f"pod-exporters-{self.namespace}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        with self._lock:
            for process in self.processes.values():
                process.stop(unregister=False)
        self._threads[-1].join(timeout=10)

    def kill(self, pod_name: str, unregister: bool = True) -> None:
        """The Pod's exporter process ends and stays down while the Pod lives
        (``unregister``: it says goodbye, as on SIGTERM; otherwise it just
        vanishes and the controller notices only when its lastSeen runs out)."""
        with self._lock:
            process = self.processes.pop(pod_name, None)
            if process is not None:
                self.held[pod_name] = process.pod_uid
                process.stop(unregister=unregister)

    def read_config(self, pod_name: str, pod_uid: str) -> dict | None:
        """The ExporterConfig file the Pod's container would read, if it can."""
        try:
            pod = self.core.read_namespaced_pod(pod_name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        if pod.metadata.uid != pod_uid:
            return None
        where = exporter_command_config(pod)
        if where is None:
            return None
        volume_name, filename = where
        volume = next((v for v in pod.spec.volumes or [] if v.name == volume_name), None)
        if volume is None or volume.secret is None:
            return None
        try:
            secret = self.core.read_namespaced_secret(volume.secret.secret_name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        data = (secret.data or {}).get(filename)
        if not data:
            return None
        return yaml.safe_load(base64.b64decode(data))

    # -- the Pods ------------------------------------------------------------------
    def _watch(self) -> None:
        # Every Pod of the namespace: ``jmp run`` starts with its container,
        # whatever labels the controller that made the Pod gave it.
        wake_on_events(self._stop, self._wake, self.core.list_namespaced_pod, self.namespace)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=5)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._sync()
            except Exception as exc:  # noqa: BLE001 - retried on the next event
                log.debug("pod exporters sync: %s", exc)
                time.sleep(0.5)
                self._wake.set()

    def _sync(self) -> None:
        pods = self.core.list_namespaced_pod(self.namespace).items
        running = {p.metadata.name: p for p in pods
                   if p.status and p.status.phase == "Running" and not p.metadata.deletion_timestamp
                   and exporter_command_config(p) is not None}
        with self._lock:
            for name, process in list(self.processes.items()):
                pod = running.get(name)
                if pod is None or pod.metadata.uid != process.pod_uid:
                    process.stop(unregister=True)
                    del self.processes[name]
            for name, uid in list(self.held.items()):
                if name not in running or running[name].metadata.uid != uid:
                    del self.held[name]
            for name, pod in running.items():
                if name not in self.processes and name not in self.held:
                    self.processes[name] = ExporterProcess(self, pod).start()
