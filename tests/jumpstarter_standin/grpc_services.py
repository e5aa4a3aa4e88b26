"""The gRPC side of the Jumpstarter controller stand-in.

One TLS server per ``StandInController`` (so per test namespace) serves what
the controller and its router serve at jumpstarter b1f2bb41, on the
generated stubs of ``jumpstarter-protocol`` 0.9.0:

* ``jumpstarter.v1.ControllerService``: what ``jmp run`` calls (Register,
  Unregister, ReportStatus, Status, Listen, ReleaseLease as exporter) and
  what a client calls (Dial, and the older GetLease/RequestLease/
  ReleaseLease/ListLeases).
* ``jumpstarter.client.v1.ClientService``: the Exporter and Lease API of
  ``jmp`` (Get/List Exporters, Get/List/Create/Update/Delete Leases,
  RotateToken).
* ``jumpstarter.v1.RouterService.Stream``: pairs the two streams that present
  the same router token and forwards frames both ways.

Callers authenticate as the real controller has them: ``authorization:
Bearer <token>`` plus ``jumpstarter-kind``/``-namespace``/``-name`` metadata;
the token's subject must be the internal subject of the object bearing that
name now (its UID included), so the token of a deleted Exporter is refused
with PERMISSION_DENIED for as long as it is used. The status codes are the
real ones, including its plain errors (UNKNOWN): a token this controller did
not sign is "failed to authenticate token", an object that is gone is
"failed to get exporter".

This layer writes only what the real gRPC service writes (labels, devices,
lastSeen, exporterStatus, statusMessage, the Online/Registered conditions it
sets itself, Lease specs) and pokes the controller, whose reconcile loop
derives the rest.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import os
import queue
import re
import secrets
import socket
import tempfile
import threading
import time
import uuid
from concurrent import futures
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import yaml
from google.protobuf import duration_pb2, empty_pb2, timestamp_pb2
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc
from jumpstarter_protocol.jumpstarter.v1 import (
    common_pb2,
    jumpstarter_pb2,
    jumpstarter_pb2_grpc,
    kubernetes_pb2,
    router_pb2,
    router_pb2_grpc,
)
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from .controller import (
    GROUP,
    LEASE_ENDED_LABEL,
    STATUS_OFFLINE,
    VERSION,
    StandInController,
    condition_true,
    format_time,
    now_utc,
    parse_duration,
    parse_time,
    set_condition,
)
from .tokens import Signer, TokenError, subject_of

log = logging.getLogger(__name__)

LAB_HOST_ADDRESS = "10.213.0.1"
INTERNAL_PREFIX = "internal:"
LEASE_TAG_PREFIX = "metadata.jumpstarter.dev/"
MAX_TAGS = 10
HEARTBEAT = 10.0
LISTEN_BUFFER = 8

STATUS_NAMES = {
    common_pb2.EXPORTER_STATUS_OFFLINE: "Offline",
    common_pb2.EXPORTER_STATUS_AVAILABLE: "Available",
    common_pb2.EXPORTER_STATUS_BEFORE_LEASE_HOOK: "BeforeLeaseHook",
    common_pb2.EXPORTER_STATUS_LEASE_READY: "LeaseReady",
    common_pb2.EXPORTER_STATUS_AFTER_LEASE_HOOK: "AfterLeaseHook",
    common_pb2.EXPORTER_STATUS_BEFORE_LEASE_HOOK_FAILED: "BeforeLeaseHookFailed",
    common_pb2.EXPORTER_STATUS_AFTER_LEASE_HOOK_FAILED: "AfterLeaseHookFailed",
}
STATUS_VALUES = {name: value for value, name in STATUS_NAMES.items()}


class RpcAbort(Exception):
    """An RPC ends with this status code and message."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _unknown(message: str) -> RpcAbort:
    """A plain Go error returned from a handler: gRPC reports it as UNKNOWN."""
    return RpcAbort(grpc.StatusCode.UNKNOWN, message)


def _k8s_error(exc: ApiException) -> RpcAbort:
    try:
        message = json.loads(exc.body)["message"]
    except (TypeError, ValueError, KeyError):
        message = f"{exc.status} {exc.reason}"
    return _unknown(message)


@contextlib.contextmanager
def _as_rpc_status(context):
    """An RpcAbort (or an API error) raised by a handler becomes the call's
    status, as returning an error from a Go handler does."""
    try:
        yield
    except RpcAbort as exc:
        context.abort(exc.code, exc.message)
    except ApiException as exc:
        error = _k8s_error(exc)
        context.abort(error.code, error.message)


def _rpc(method):
    @functools.wraps(method)
    def wrapper(self, request, context):
        with _as_rpc_status(context):
            return method(self, request, context)
    return wrapper


def _rpc_stream(method):
    @functools.wraps(method)
    def wrapper(self, request, context):
        with _as_rpc_status(context):
            yield from method(self, request, context)
    return wrapper


# -- small conversions -----------------------------------------------------------

def go_duration(delta: timedelta) -> str:
    """time.Duration.String() for whole milliseconds: 1h0m0s, 1m30s, 500ms, 0s."""
    total_ms = round(delta.total_seconds() * 1000)
    if total_ms == 0:
        return "0s"
    sign = "-" if total_ms < 0 else ""
    total_ms = abs(total_ms)
    if total_ms < 1000:
        return f"{sign}{total_ms}ms"
    hours, rest = divmod(total_ms, 3600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds = f"{rest // 1000}" if rest % 1000 == 0 else f"{rest / 1000:.3f}".rstrip("0")
    text = f"{seconds}s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


def uuid7() -> str:
    """A time-ordered UUIDv7, as the controller names Leases."""
    value = (int(time.time() * 1000) & ((1 << 48) - 1)) << 80
    value |= secrets.randbits(80)
    value &= ~(0xF << 76)
    value |= 0x7 << 76
    value &= ~(0x3 << 62)
    value |= 0x2 << 62
    return str(uuid.UUID(int=value))


def _timestamp(text: str | None) -> timestamp_pb2.Timestamp | None:
    moment = parse_time(text)
    if moment is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def _duration_pb(delta: timedelta) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    value.FromTimedelta(delta)
    return value


_SET_TERM = re.compile(r"^\s*([^\s!=()]+)\s+(in|notin)\s*\((.*)\)\s*$")


def parse_label_selector(text: str) -> dict:
    """A label selector string (``k=v,k!=v,k in (a,b),k,!k``) as a
    metav1.LabelSelector, the way the controller converts it."""
    terms, depth, current = [], 0, ""
    for char in text or "":
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    match_labels: dict[str, str] = {}
    expressions: list[dict] = []
    not_equals: dict[str, list[str]] = {}
    for raw in terms:
        term = raw.strip()
        if not term:
            if raw or len(terms) > 1:
                raise _unknown(f"failed to parse label selector: found '', expected: identifier in {text!r}")
            continue
        if found := _SET_TERM.match(term):
            key, operator, values = found.group(1), found.group(2), found.group(3)
            listed = [v.strip() for v in values.split(",") if v.strip()]
            expressions.append({"key": key, "operator": "In" if operator == "in" else "NotIn", "values": listed})
        elif "!=" in term:
            key, value = (part.strip() for part in term.split("!=", 1))
            if value not in not_equals.setdefault(key, []):
                not_equals[key].append(value)
        elif "=" in term:
            key, value = (part.strip() for part in re.split(r"==?", term, maxsplit=1))
            if key in match_labels and match_labels[key] != value:
                raise _unknown(f"invalid selector: label {key} cannot have multiple equality requirements with "
                               f"different values ({match_labels[key]} and {value})")
            match_labels[key] = value
        elif term.startswith("!"):
            expressions.append({"key": term[1:].strip(), "operator": "DoesNotExist", "values": []})
        elif re.fullmatch(r"[A-Za-z0-9._/-]+", term):
            expressions.append({"key": term, "operator": "Exists", "values": []})
        else:
            raise _unknown(f"failed to parse label selector: unsupported requirement {term!r}")
    for key, values in not_equals.items():
        expressions.append({"key": key, "operator": "NotIn", "values": values})
    selector: dict = {}
    if match_labels:
        selector["matchLabels"] = match_labels
    if expressions:
        selector["matchExpressions"] = expressions
    return selector


def format_label_selector(selector: dict | None) -> str:
    """metav1.FormatLabelSelector: requirements sorted by key, ``<none>`` if empty."""
    selector = selector or {}
    requirements = [(key, f"{key}={value}") for key, value in (selector.get("matchLabels") or {}).items()]
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression["key"], expression["operator"]
        values = ",".join(sorted(expression.get("values") or ()))
        rendered = {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})", "Exists": key,
                    "DoesNotExist": f"!{key}"}[operator]
        requirements.append((key, rendered))
    text = ",".join(rendered for _, rendered in sorted(requirements, key=lambda r: r[0]))
    return text or "<none>"


def _selector_string(selector: dict) -> str:
    """A selector as the API server's labelSelector parameter takes it."""
    text = format_label_selector(selector)
    return "" if text == "<none>" else text


def parse_identifier(identifier: str, kind: str) -> tuple[str, str]:
    parts = identifier.split("/")
    if len(parts) != 4:
        raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT,
                       f"invalid {kind[:-1]} identifier {identifier!r}, expected namespaces/<ns>/{kind}/<name>")
    if parts[0] != "namespaces" or parts[2] != kind:
        raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT,
                       f"invalid {kind[:-1]} identifier {identifier!r}, expected namespaces/<ns>/{kind}/<name>")
    return parts[1], parts[3]


def parse_namespace(identifier: str) -> str:
    parts = identifier.split("/")
    if len(parts) != 2 or parts[0] != "namespaces":
        raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT,
                       f"invalid namespace identifier {identifier!r}, expected namespaces/<ns>")
    return parts[1]


def _conditions_pb(obj: dict) -> list[kubernetes_pb2.Condition]:
    result = []
    for condition in (obj.get("status") or {}).get("conditions") or ():
        moment = parse_time(condition.get("lastTransitionTime"))
        seconds = int(moment.timestamp()) if moment else 0
        result.append(kubernetes_pb2.Condition(
            type=condition.get("type", ""), status=condition.get("status", ""),
            observedGeneration=int(condition.get("observedGeneration") or 0),
            lastTransitionTime=kubernetes_pb2.Time(seconds=seconds, nanos=0),
            reason=condition.get("reason", ""), message=condition.get("message", "")))
    return result


def exporter_to_pb(exporter: dict) -> client_pb2.Exporter:
    meta, status = exporter["metadata"], exporter.get("status") or {}
    return client_pb2.Exporter(
        name=f"namespaces/{meta['namespace']}/exporters/{meta['name']}",
        labels=meta.get("labels") or {},
        online=condition_true(exporter, "Online"),
        status=STATUS_VALUES.get(status.get("exporterStatus"), common_pb2.EXPORTER_STATUS_UNSPECIFIED),
        status_message=status.get("statusMessage") or "",
        enabled=(exporter.get("spec") or {}).get("enabled") is not False,
    )


def lease_to_pb(lease: dict) -> client_pb2.Lease:
    meta, spec, status = lease["metadata"], lease.get("spec") or {}, lease.get("status") or {}
    namespace = meta["namespace"]
    result = client_pb2.Lease(
        name=f"namespaces/{namespace}/leases/{meta['name']}",
        selector=format_label_selector(spec.get("selector")),
        client=f"namespaces/{namespace}/clients/{(spec.get('clientRef') or {}).get('name', '')}",
        conditions=_conditions_pb(lease),
        tags=spec.get("tags") or {},
        allow_disabled=bool(spec.get("allowDisabled")),
    )
    if spec.get("exporterRef"):
        result.exporter_name = spec["exporterRef"]["name"]
    if (duration := parse_duration(spec.get("duration"))) is not None:
        result.duration.CopyFrom(_duration_pb(duration))
    for field, key in (("begin_time", "beginTime"), ("end_time", "endTime")):
        if (stamp := _timestamp(spec.get(key))) is not None:
            getattr(result, field).CopyFrom(stamp)
    begin = parse_time(status.get("beginTime"))
    if begin is not None:
        result.effective_begin_time.CopyFrom(_timestamp(status["beginTime"]))
        end = datetime.now(UTC)
        if status.get("endTime"):
            end = parse_time(status["endTime"])
            result.effective_end_time.CopyFrom(_timestamp(status["endTime"]))
        result.effective_duration.CopyFrom(_duration_pb(max(end - begin, timedelta())))
    if status.get("exporterRef"):
        result.exporter = f"namespaces/{namespace}/exporters/{status['exporterRef']['name']}"
    return result


def _lease_client(lease: dict) -> str | None:
    """The name of the Client a Lease is for."""
    return ((lease.get("spec") or {}).get("clientRef") or {}).get("name")


def _lease_exporter(lease: dict) -> str | None:
    """The name of the Exporter a Lease is assigned to, once it is."""
    return ((lease.get("status") or {}).get("exporterRef") or {}).get("name")


def _time_fields(begin: datetime | None, end: datetime | None, duration: timedelta | None):
    """ReconcileLeaseTimeFields: derive the missing one, refuse conflicts."""
    if begin is not None and end is not None:
        calculated = end - begin
        if duration is not None and duration > timedelta() and duration != calculated:
            raise _unknown("duration conflicts with begin_time and end_time")
        duration = calculated
    elif end is not None and duration is not None and duration > timedelta():
        begin = end - duration
    if duration is None:
        raise _unknown("duration is required (must specify Duration, or both BeginTime and EndTime)")
    if duration <= timedelta():
        raise _unknown(f"duration must be positive, got {go_duration(duration)}")
    return begin, end, duration


def _pb_time(message, field: str) -> datetime | None:
    if not message.HasField(field):
        return None
    return getattr(message, field).ToDatetime(tzinfo=UTC)


# -- the services ------------------------------------------------------------------

class _ListenQueue:
    def __init__(self):
        self.items: queue.Queue = queue.Queue(maxsize=LISTEN_BUFFER)
        self.done = threading.Event()


class _Services(jumpstarter_pb2_grpc.ControllerServiceServicer, router_pb2_grpc.RouterServiceServicer):
    """The three services over one Kubernetes client; see the module docstring."""

    def __init__(self, stand_in: GrpcStandIn):
        self.stand_in = stand_in
        self.controller = stand_in.controller
        self.namespace = self.controller.namespace
        self.custom = client.CustomObjectsApi(stand_in.api_client)
        self.core = client.CoreV1Api(stand_in.api_client)
        self.router_signer = Signer()
        self._lock = threading.Lock()
        self._listen: dict[str, _ListenQueue] = {}
        self._router_pending: dict[str, _RouterSide] = {}

    # -- kubernetes ------------------------------------------------------------
    def _get(self, plural: str, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name)

    def _patch(self, plural: str, name: str, body: dict) -> dict:
        result = self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name, body)
        self.controller.poke()
        return result

    def _patch_status(self, name: str, status: dict) -> dict:
        result = self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.namespace, "exporters", name, {"status": status})
        self.controller.poke()
        return result

    # -- authentication ----------------------------------------------------------
    @staticmethod
    def _metadata(context) -> dict[str, list[str]]:
        values: dict[str, list[str]] = {}
        for key, value in context.invocation_metadata() or ():
            values.setdefault(key.lower(), []).append(value)
        return values

    @staticmethod
    def _bearer(metadata: dict[str, list[str]]) -> str:
        authorizations = metadata.get("authorization") or []
        if not authorizations:
            raise RpcAbort(grpc.StatusCode.UNAUTHENTICATED, "missing authorization header")
        if len(authorizations) > 1:
            raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, "multiple authorization headers")
        value = authorizations[0]
        if len(value) < 7 or value[:7].lower() != "bearer ":
            raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, "malformed authorization header")
        return value[7:]

    @staticmethod
    def _one(metadata: dict[str, list[str]], key: str) -> str:
        values = metadata.get(key) or []
        if not values:
            raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, f"missing metadata: {key}")
        if len(values) > 1:
            raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, f"multiple metadata: {key}")
        return values[0]

    def _authenticate(self, context, kind: str) -> dict:
        """The Exporter or Client the call's token belongs to, as it is now."""
        metadata = self._metadata(context)
        token = self._bearer(metadata)
        try:
            claims = self.signer_claims(token)
        except TokenError as exc:
            raise _unknown("failed to authenticate token") from exc
        username = INTERNAL_PREFIX + str(claims.get("sub", ""))
        namespace = self._one(metadata, "jumpstarter-namespace")
        resource = self._one(metadata, "jumpstarter-kind")
        name = (metadata.get("jumpstarter-name") or [""])[0]
        if not name:
            raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, "resource name required for pre-existing authentication")
        if resource != kind:
            raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, "object kind mismatch")
        label = kind.lower()
        if namespace != self.namespace:
            raise RpcAbort(grpc.StatusCode.PERMISSION_DENIED,
                           f"permission denied for {label} {namespace}/{name}: namespace not served")
        try:
            obj = self._get(f"{label}s", name)
        except ApiException as exc:
            raise _unknown(f"{label} {namespace}/{name}: {_k8s_error(exc).message}") from exc
        usernames = [INTERNAL_PREFIX + subject_of(label, namespace, name, obj["metadata"]["uid"])]
        if (obj.get("spec") or {}).get("username"):
            usernames.append(obj["spec"]["username"])
        if username not in usernames:
            raise RpcAbort(grpc.StatusCode.PERMISSION_DENIED, f"permission denied for {label} {namespace}/{name}")
        return obj

    def signer_claims(self, token: str) -> dict:
        return self.controller.signer.verify(token)

    def _client_in(self, context, namespace: str) -> dict:
        jclient = self._authenticate(context, "Client")
        if namespace != jclient["metadata"]["namespace"]:
            raise RpcAbort(grpc.StatusCode.PERMISSION_DENIED, "namespace mismatch")
        return jclient

    # -- ControllerService: the exporter ----------------------------------------
    @_rpc
    def Register(self, request, context):
        exporter = self._authenticate(context, "Exporter")
        name = exporter["metadata"]["name"]
        labels = dict(exporter["metadata"].get("labels") or {})
        wanted = {k: v for k, v in labels.items() if not k.startswith("jumpstarter.dev/")}
        wanted.update({k: v for k, v in request.labels.items() if k.startswith("jumpstarter.dev/")})
        change = {k: None for k in labels if k not in wanted}
        change.update({k: v for k, v in wanted.items() if labels.get(k) != v})
        if change:
            try:
                self._patch("exporters", name, {"metadata": {"labels": change}})
            except ApiException as exc:
                raise RpcAbort(grpc.StatusCode.INTERNAL,
                               f"unable to update exporter: {_k8s_error(exc).message}") from exc
        devices = []
        for report in request.reports:
            device = {"uuid": report.uuid} if report.uuid else {}
            if report.HasField("parent_uuid"):
                device["parent_uuid"] = report.parent_uuid
            if report.labels:
                device["labels"] = dict(report.labels)
            devices.append(device)
        # An empty list is omitted by the real one's JSON, like nil.
        self._update_status(name, {"devices": devices or None})
        return jumpstarter_pb2.RegisterResponse(uuid=exporter["metadata"]["uid"])

    def _update_status(self, name: str, status: dict) -> None:
        """Patches an Exporter's status for a call that fails when it cannot."""
        try:
            self._patch_status(name, status)
        except ApiException as exc:
            raise RpcAbort(grpc.StatusCode.INTERNAL,
                           f"unable to update exporter status: {_k8s_error(exc).message}") from exc

    @staticmethod
    def _online_conditions(exporter: dict, status: dict) -> list:
        """The Exporter's conditions with Online set from the status it reports."""
        conditions = [dict(c) for c in (exporter.get("status") or {}).get("conditions") or ()]
        value = status.get("exporterStatus") or ""
        generation = exporter["metadata"].get("generation")
        if value not in ("", STATUS_OFFLINE, "Unspecified"):
            set_condition(conditions, "Online", True, "StatusReported", f"Exporter reported status: {value}",
                          generation)
        else:
            set_condition(conditions, "Online", False, "Offline", status.get("statusMessage") or "", generation)
        return conditions

    @_rpc
    def Unregister(self, request, context):
        exporter = self._authenticate(context, "Exporter")
        status = {"devices": None, "exporterStatus": STATUS_OFFLINE,
                  "statusMessage": request.reason or "Exporter unregistered"}
        conditions = self._online_conditions(exporter, status)
        set_condition(conditions, "Registered", False, "Unregister",
                      "Exporter unregistered from the controller and became offline.",
                      exporter["metadata"].get("generation"))
        status["conditions"] = conditions
        self._update_status(exporter["metadata"]["name"], status)
        return jumpstarter_pb2.UnregisterResponse()

    @_rpc
    def ReportStatus(self, request, context):
        exporter = self._authenticate(context, "Exporter")
        status = {"exporterStatus": STATUS_NAMES.get(request.status, "Unspecified"),
                  "statusMessage": request.message or None, "lastSeen": format_time(now_utc())}
        status["conditions"] = self._online_conditions(exporter, status)
        self._update_status(exporter["metadata"]["name"], status)
        if request.release_lease:
            # A failure is only logged: the client can still release it.
            with contextlib.suppress(RpcAbort, ApiException):
                lease_name = ((exporter.get("status") or {}).get("leaseRef") or {}).get("name")
                if lease_name:
                    self._release_as_exporter(exporter, lease_name)
        return jumpstarter_pb2.ReportStatusResponse()

    def _release_as_exporter(self, exporter: dict, lease_name: str) -> None:
        try:
            lease = self._get("leases", lease_name)
        except ApiException as exc:
            if exc.status == 404:
                raise RpcAbort(grpc.StatusCode.NOT_FOUND, f"lease {lease_name} not found") from exc
            raise RpcAbort(grpc.StatusCode.INTERNAL, f"failed to get lease: {_k8s_error(exc).message}") from exc
        if _lease_exporter(lease) != exporter["metadata"]["name"]:
            raise RpcAbort(grpc.StatusCode.FAILED_PRECONDITION,
                           f"lease {lease_name} is not held by exporter {exporter['metadata']['name']}")
        if (lease.get("status") or {}).get("ended") or (lease.get("spec") or {}).get("release"):
            return
        self._patch("leases", lease_name, {"spec": {"release": True}})

    @_rpc_stream
    def Status(self, request, context):
        """Lease status of the exporter whenever its leaseRef changes, and its
        lastSeen written at once (clearing a stale Offline) and every 10 s."""
        exporter = self._authenticate(context, "Exporter")
        name = exporter["metadata"]["name"]
        events: queue.Queue = queue.Queue()
        stop = threading.Event()

        def on_done():
            stop.set()
            events.put(None)

        context.add_callback(on_done)
        threading.Thread(target=self._watch_exporter, args=(name, events, stop), daemon=True,
                         name=f"standin-grpc-status-{name}").start()
        initial = {"lastSeen": format_time(now_utc())}
        if (exporter.get("status") or {}).get("exporterStatus") == STATUS_OFFLINE:
            initial.update(exporterStatus=None, statusMessage=None)
        with contextlib.suppress(ApiException):
            self._patch_status(name, initial)
        last = None
        next_beat = time.monotonic() + self.stand_in.heartbeat
        try:
            while not stop.is_set() and context.is_active():
                try:
                    event = events.get(timeout=max(next_beat - time.monotonic(), 0.0))
                except queue.Empty:
                    next_beat = time.monotonic() + self.stand_in.heartbeat
                    with contextlib.suppress(ApiException):
                        self._patch_status(name, {"lastSeen": format_time(now_utc())})
                    continue
                if event is None:
                    break
                if isinstance(event, BaseException):
                    raise _unknown(f"received error when watching exporter: {event}")
                obj = event["object"]
                lease_ref = ((obj.get("status") or {}).get("leaseRef") or {}).get("name")
                response = jumpstarter_pb2.StatusResponse(leased=bool(lease_ref))
                if lease_ref:
                    lease = self._get("leases", lease_ref)
                    response.lease_name = lease_ref
                    response.client_name = _lease_client(lease) or ""
                if response != last:
                    last = response
                    yield response
        finally:
            stop.set()

    def _watch_exporter(self, name: str, events: queue.Queue, stop: threading.Event) -> None:
        while not stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(self.custom.list_namespaced_custom_object, GROUP, VERSION,
                                           self.namespace, "exporters", field_selector=f"metadata.name={name}",
                                           timeout_seconds=15):
                    if stop.is_set():
                        break
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        events.put(event)
            except Exception as exc:  # noqa: BLE001 - a broken watch is restarted
                if stop.is_set():
                    return
                log.debug("status watch of %s restarted: %s", name, exc)
                time.sleep(0.5)
            finally:
                stream.stop()

    @_rpc_stream
    def Listen(self, request, context):
        lease_name, _ = self._held_lease(context, request, "Exporter")
        mine = _ListenQueue()
        with self._lock:
            previous = self._listen.get(lease_name)
            self._listen[lease_name] = mine
        if previous is not None:
            previous.done.set()
            with contextlib.suppress(queue.Full):
                previous.items.put_nowait(None)
        stop = threading.Event()

        def on_done():
            stop.set()
            with contextlib.suppress(queue.Full):
                mine.items.put_nowait(None)

        context.add_callback(on_done)
        try:
            while not stop.is_set():
                try:
                    item = mine.items.get(timeout=1.0)
                except queue.Empty:
                    continue
                if item is not None:
                    yield item
                elif mine.done.is_set():
                    # Superseded: what is buffered still goes out.
                    while True:
                        try:
                            item = mine.items.get_nowait()
                        except queue.Empty:
                            return
                        if item is not None:
                            yield item
        finally:
            with self._lock:
                mine.done.set()
                if self._listen.get(lease_name) is mine:
                    del self._listen[lease_name]

    def _held_lease(self, context, request, kind: str) -> tuple[str, dict]:
        """The name and object of the lease a Listen (``kind`` Exporter) or
        Dial (``kind`` Client) names, which the caller must hold."""
        caller = self._authenticate(context, kind)
        if not request.lease_name:
            raise _unknown("empty lease name")
        lease = self._get("leases", request.lease_name)
        holder = _lease_exporter(lease) if kind == "Exporter" else _lease_client(lease)
        if holder != caller["metadata"]["name"]:
            raise _unknown("permission denied")
        return request.lease_name, lease

    def _send_to_listener(self, lease_name: str, response) -> None:
        with self._lock:
            target = self._listen.get(lease_name)
            if target is None or target.done.is_set():
                raise RpcAbort(grpc.StatusCode.UNAVAILABLE, f"exporter is not listening on lease {lease_name}")
            try:
                target.items.put_nowait(response)
            except queue.Full as exc:
                raise RpcAbort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"listener buffer full on lease {lease_name}") from exc

    @_rpc
    def ReleaseLease(self, request, context):
        if self._metadata(context).get("jumpstarter-kind") == ["Exporter"]:
            exporter = self._authenticate(context, "Exporter")
            self._release_as_exporter(exporter, request.name)
            return jumpstarter_pb2.ReleaseLeaseResponse()
        jclient = self._authenticate(context, "Client")
        lease = self._get("leases", request.name)
        if _lease_client(lease) != jclient["metadata"]["name"]:
            raise _unknown("ReleaseLease permission denied")
        if not (lease.get("status") or {}).get("ended") and not (lease.get("spec") or {}).get("release"):
            self._patch("leases", request.name, {"spec": {"release": True}})
        return jumpstarter_pb2.ReleaseLeaseResponse()

    # -- ControllerService: the client ------------------------------------------
    @_rpc
    def Dial(self, request, context):
        lease_name, lease = self._held_lease(context, request, "Client")
        exporter_name = _lease_exporter(lease)
        if not exporter_name:
            raise _unknown("lease not active")
        exporter = self._get("exporters", exporter_name)
        # Available is the moment between assignment and LeaseReady: retried
        # server-side for up to 30 s; every other refusal is final.
        delay, deadline = 0.5, time.monotonic() + 30.0
        while True:
            value = (exporter.get("status") or {}).get("exporterStatus") or ""
            refusal = _dial_refusal(value)
            if refusal is None or value != "Available" or time.monotonic() + delay > deadline:
                break
            if not context.is_active():
                raise RpcAbort(grpc.StatusCode.CANCELLED, "context canceled")
            time.sleep(delay)
            delay = min(delay * 2, 3.0)
            exporter = self._get("exporters", exporter_name)
        if refusal is not None:
            raise RpcAbort(grpc.StatusCode.FAILED_PRECONDITION, refusal)
        token = self.router_signer.issue(str(uuid.uuid4()))
        endpoint = self.stand_in.router_endpoint
        self._send_to_listener(lease_name, jumpstarter_pb2.ListenResponse(router_endpoint=endpoint,
                                                                          router_token=token))
        return jumpstarter_pb2.DialResponse(router_endpoint=endpoint, router_token=token)

    @_rpc
    def GetLease(self, request, context):
        jclient = self._authenticate(context, "Client")
        lease = self._get("leases", request.name)
        spec, status = lease.get("spec") or {}, lease.get("status") or {}
        if _lease_client(lease) != jclient["metadata"]["name"]:
            raise _unknown("GetLease permission denied")
        selector = spec.get("selector") or {}
        response = jumpstarter_pb2.GetLeaseResponse(
            selector=kubernetes_pb2.LabelSelector(
                match_labels=selector.get("matchLabels") or {},
                match_expressions=[kubernetes_pb2.LabelSelectorRequirement(
                    key=e["key"], operator=e["operator"], values=e.get("values") or [])
                    for e in selector.get("matchExpressions") or ()]),
            conditions=_conditions_pb(lease))
        for field, key in (("begin_time", "beginTime"), ("end_time", "endTime")):
            if (stamp := _timestamp(status.get(key))) is not None:
                getattr(response, field).CopyFrom(stamp)
        if status.get("exporterRef"):
            try:
                exporter = self._get("exporters", status["exporterRef"]["name"])
            except ApiException as exc:
                raise _unknown("GetLease fetch exporter uuid failed") from exc
            response.exporter_uuid = exporter["metadata"]["uid"]
        if (duration := parse_duration(spec.get("duration"))) is not None:
            response.duration.CopyFrom(_duration_pb(duration))
        return response

    @_rpc
    def RequestLease(self, request, context):
        jclient = self._authenticate(context, "Client")
        selector: dict = {}
        if request.HasField("selector"):
            if request.selector.match_labels:
                selector["matchLabels"] = dict(request.selector.match_labels)
            if request.selector.match_expressions:
                selector["matchExpressions"] = [
                    {"key": e.key, "operator": e.operator, "values": list(e.values)}
                    for e in request.selector.match_expressions]
        spec = {"clientRef": {"name": jclient["metadata"]["name"]}, "selector": selector}
        if request.HasField("duration"):
            spec["duration"] = go_duration(request.duration.ToTimedelta())
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Lease",
                "metadata": {"name": uuid7(), "namespace": self.namespace}, "spec": spec}
        created = self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "leases", body)
        self.controller.poke()
        return jumpstarter_pb2.RequestLeaseResponse(name=created["metadata"]["name"])

    @_rpc
    def ListLeases(self, request, context):
        jclient = self._authenticate(context, "Client")
        leases = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "leases", label_selector=f"!{LEASE_ENDED_LABEL}")["items"]
        names = [x["metadata"]["name"] for x in leases
                 if _lease_client(x) == jclient["metadata"]["name"]]
        return jumpstarter_pb2.ListLeasesResponse(names=names)

    # -- ClientService -----------------------------------------------------------
    @_rpc
    def GetExporter(self, request, context):
        return exporter_to_pb(self._get_as_client(context, request.name, "exporters"))

    @_rpc
    def ListExporters(self, request, context):
        namespace = parse_namespace(request.parent)
        self._client_in(context, namespace)
        _selector_string(parse_label_selector(request.filter))  # refused as the real one refuses it
        items, next_page = self._list_page(namespace, "exporters", request, request.filter)
        return client_pb2.ListExportersResponse(exporters=[exporter_to_pb(e) for e in items],
                                                next_page_token=next_page)

    def _get_as_client(self, context, identifier: str, plural: str) -> dict:
        """The object ``namespaces/<namespace>/<plural>/<name>`` names, for a
        Client of that namespace."""
        namespace, name = parse_identifier(identifier, plural)
        self._client_in(context, namespace)
        return self._get(plural, name)

    def _list_page(self, namespace: str, plural: str, request, label_selector: str) -> tuple[list, str]:
        """One page of a list request (``page_size``, ``page_token``): its
        items and the token of the next page."""
        kwargs = {"label_selector": label_selector} if label_selector else {}
        if request.page_size:
            kwargs["limit"] = request.page_size
        if request.page_token:
            kwargs["_continue"] = request.page_token
        listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural, **kwargs)
        return listed["items"], (listed.get("metadata") or {}).get("continue") or ""

    @_rpc
    def ListLeasesClient(self, request, context):
        namespace = parse_namespace(request.parent)
        self._client_in(context, namespace)
        selectors = [request.filter] if request.filter else []
        parse_label_selector(request.filter)
        if request.tag_filter:
            tags = parse_label_selector(request.tag_filter)
            prefixed = {"matchLabels": {LEASE_TAG_PREFIX + k: v for k, v in (tags.get("matchLabels") or {}).items()},
                        "matchExpressions": [{**e, "key": LEASE_TAG_PREFIX + e["key"]}
                                             for e in tags.get("matchExpressions") or ()]}
            selectors.append(_selector_string(prefixed))
        if not request.HasField("only_active") or request.only_active:
            selectors.append(f"!{LEASE_ENDED_LABEL}")
        items, next_page = self._list_page(namespace, "leases", request, ",".join(selectors))
        return client_pb2.ListLeasesResponse(leases=[lease_to_pb(x) for x in items], next_page_token=next_page)

    @_rpc
    def GetLeaseClient(self, request, context):
        return lease_to_pb(self._get_as_client(context, request.name, "leases"))

    @_rpc
    def CreateLease(self, request, context):
        lease = request.lease if request.HasField("lease") else None
        if lease is None:
            raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, "lease is required")
        if not lease.selector and not lease.exporter_name:
            raise RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, "one of selector or exporter_name is required")
        _validate_tags(dict(lease.tags))
        namespace = parse_namespace(request.parent)
        jclient = self._client_in(context, namespace)
        name = request.lease_id or uuid7()
        selector = parse_label_selector(lease.selector)
        begin, end, duration = _time_fields(
            _pb_time(lease, "begin_time"), _pb_time(lease, "end_time"),
            lease.duration.ToTimedelta() if lease.HasField("duration") else None)
        labels = {k: v for k, v in (selector.get("matchLabels") or {}).items() if not k.startswith(LEASE_TAG_PREFIX)}
        labels.update({LEASE_TAG_PREFIX + k: v for k, v in lease.tags.items()})
        spec: dict = {"clientRef": {"name": jclient["metadata"]["name"]}, "duration": go_duration(duration),
                      "selector": selector}
        if lease.tags:
            spec["tags"] = dict(lease.tags)
        if lease.exporter_name:
            spec["exporterRef"] = {"name": lease.exporter_name}
        if lease.allow_disabled:
            spec["allowDisabled"] = True
        if begin is not None:
            spec["beginTime"] = format_time(begin)
        if end is not None:
            spec["endTime"] = format_time(end)
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec}
        created = self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "leases", body)
        self.controller.poke()
        return lease_to_pb(created)

    @_rpc
    def UpdateLease(self, request, context):
        namespace, name = parse_identifier(request.lease.name, "leases")
        jclient = self._client_in(context, namespace)
        current = self._get("leases", name)
        spec, status = dict(current.get("spec") or {}), current.get("status") or {}
        if _lease_client(current) != jclient["metadata"]["name"]:
            raise _unknown("UpdateLease permission denied")
        wanted = request.lease
        times = any(wanted.HasField(f) for f in ("begin_time", "duration", "end_time"))
        patch: dict = {}
        if times:
            begin = parse_time(spec.get("beginTime"))
            end = parse_time(spec.get("endTime"))
            duration = parse_duration(spec.get("duration"))
            if wanted.HasField("begin_time"):
                desired = _pb_time(wanted, "begin_time").replace(microsecond=0)
                if status.get("exporterRef") and begin != desired:
                    raise _unknown("cannot update BeginTime: lease has already started")
                begin = desired
            if wanted.HasField("duration"):
                duration = wanted.duration.ToTimedelta()
            if wanted.HasField("end_time"):
                end = _pb_time(wanted, "end_time").replace(microsecond=0)
            begin, end, duration = _time_fields(begin, end, duration)
            patch.update(duration=go_duration(duration),
                         beginTime=format_time(begin) if begin else None, endTime=format_time(end) if end else None)
        if wanted.client:
            if not status.get("exporterRef"):
                raise _unknown("cannot transfer lease: lease has not started yet")
            if status.get("ended"):
                raise _unknown("cannot transfer lease: lease has already ended")
            target_ns, target = parse_identifier(wanted.client, "clients")
            if target_ns != namespace:
                raise _unknown("cannot transfer lease to client in different namespace")
            try:
                self._get("clients", target)
            except ApiException as exc:
                raise _unknown(f"target client not found: {_k8s_error(exc).message}") from exc
            patch["clientRef"] = {"name": target}
        updated = self._patch("leases", name, {"spec": patch}) if patch else current
        return lease_to_pb(updated)

    @_rpc
    def DeleteLease(self, request, context):
        namespace, name = parse_identifier(request.name, "leases")
        jclient = self._client_in(context, namespace)
        lease = self._get("leases", name)
        if _lease_client(lease) != jclient["metadata"]["name"]:
            raise _unknown("DeleteLease permission denied")
        if (lease.get("spec") or {}).get("release"):
            raise RpcAbort(grpc.StatusCode.FAILED_PRECONDITION, f"lease {request.name!r} has already been released")
        self._patch("leases", name, {"spec": {"release": True}})
        return empty_pb2.Empty()

    @_rpc
    def RotateToken(self, request, context):
        namespace = parse_namespace(request.parent)
        jclient = self._client_in(context, namespace)
        meta = jclient["metadata"]
        token = self.controller.signer.issue(subject_of("client", meta["namespace"], meta["name"], meta["uid"]))
        secret = f"{meta['name']}-client"
        try:
            self.core.patch_namespaced_secret(secret, namespace,
                                              {"data": {"token": base64.b64encode(token.encode()).decode()}})
        except ApiException as exc:
            raise RpcAbort(grpc.StatusCode.INTERNAL,
                           f"failed to update credential secret: {_k8s_error(exc).message}") from exc
        expiry = timestamp_pb2.Timestamp(seconds=int(self.controller.signer.verify(token)["exp"]))
        return client_pb2.RotateTokenResponse(token=token, expiry=expiry)

    # -- RouterService -----------------------------------------------------------
    def Stream(self, request_iterator, context):
        try:
            token = self._bearer(self._metadata(context))
            stream_id = self.router_signer.verify(token)["sub"]
        except (RpcAbort, TokenError, KeyError):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid jwt token")
        me = _RouterSide()
        with self._lock:
            first = self._router_pending.pop(stream_id, None)
            if first is None:
                self._router_pending[stream_id] = me
        context.add_callback(me.end)
        if first is not None:
            me.pair(first)
        threading.Thread(target=me.pump, args=(request_iterator, context), daemon=True,
                         name=f"standin-router-{stream_id[:8]}").start()
        try:
            while True:
                item = me.outbox.get()
                if item is None:
                    return
                yield item
        finally:
            me.end()
            with self._lock:
                if self._router_pending.get(stream_id) is me:
                    del self._router_pending[stream_id]


def _dial_refusal(value: str) -> str | None:
    """Why an exporter in this status takes no driver calls, or None."""
    if value in ("LeaseReady", "BeforeLeaseHook", "AfterLeaseHook", "Unspecified", ""):
        return None
    known = {"Offline": "exporter is offline",
             "Available": "exporter is not ready (status: Available)",
             "BeforeLeaseHookFailed": "exporter beforeLease hook failed",
             "AfterLeaseHookFailed": "exporter afterLease hook failed"}
    return known.get(value, f"exporter not ready (status: {value})")


def _validate_tags(tags: dict[str, str]) -> None:
    def invalid(message):
        return RpcAbort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid lease tags: {message}")
    if len(tags) > MAX_TAGS:
        raise invalid(f"too many tags: {len(tags)} (maximum {MAX_TAGS})")
    for key, value in tags.items():
        if key.startswith((LEASE_TAG_PREFIX, "jumpstarter.dev/")):
            raise invalid(f"tag key {key!r} must not use reserved prefix")
        if "/" in key:
            raise invalid(f"tag key {key!r} must not contain '/' (use simple names without prefix)")
        if not re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)", key):
            raise invalid(f"tag key {key!r} is not a valid label key")
        if value and not re.fullmatch(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)", value):
            raise invalid(f"tag value for key {key!r} is not a valid label value")


class _RouterSide:
    """One of the two streams of a router token: what is to be sent to it,
    and the peer its frames go to."""

    def __init__(self):
        self.outbox: queue.Queue = queue.Queue()
        self.peer: _RouterSide | None = None
        self.paired = threading.Event()
        self.ended = threading.Event()
        self.eof = threading.Event()

    def pair(self, other: _RouterSide) -> None:
        self.peer, other.peer = other, self
        other.paired.set()
        self.paired.set()
        if other.ended.is_set():
            # The first side went away while it waited: so does this one.
            self.end()

    def end(self) -> None:
        """This stream is over: its response stream ends, and so does the peer's."""
        if self.ended.is_set():
            return
        self.ended.set()
        self.outbox.put(None)
        if self.peer is not None:
            self.peer.end()

    def pump(self, request_iterator, context) -> None:
        while not self.paired.wait(timeout=1.0):
            if self.ended.is_set() or not context.is_active():
                return
        try:
            for message in request_iterator:
                self.peer.outbox.put(router_pb2.StreamResponse(payload=message.payload,
                                                               frame_type=message.frame_type))
        except Exception:  # noqa: BLE001 - a broken side ends the pair, as an error does there
            self.end()
            return
        # EOF: this direction is done; the pair ends when both are.
        self.eof.set()
        if self.peer.eof.is_set():
            self.end()


# Two services share method names (GetLease, ListLeases): the ClientService is
# served by a view whose methods are the client API's, bound to _Services.
_CLIENT_SERVICE_METHODS = {
    "GetExporter": "GetExporter", "ListExporters": "ListExporters", "GetLease": "GetLeaseClient",
    "ListLeases": "ListLeasesClient", "CreateLease": "CreateLease", "UpdateLease": "UpdateLease",
    "DeleteLease": "DeleteLease", "RotateToken": "RotateToken",
}


def _client_service_view(services: _Services) -> client_pb2_grpc.ClientServiceServicer:
    view = client_pb2_grpc.ClientServiceServicer()
    for method, target in _CLIENT_SERVICE_METHODS.items():
        setattr(view, method, getattr(services, target))
    return view


# -- the server ------------------------------------------------------------------------

def default_host() -> str:
    """10.213.0.1 where lab hosts reach this machine, if it is ours; else loopback."""
    with socket.socket() as sock:
        try:
            sock.bind((LAB_HOST_ADDRESS, 0))
        except OSError:
            return "127.0.0.1"
    return LAB_HOST_ADDRESS


class DaemonThreadPool(futures.Executor):
    """The gRPC server's executor, its threads daemons: an RPC stream a
    client left open (an Exporter's Listen, whose process or simulated
    client outlived a stand-in never stopped) does not hold the test
    process's exit, as ThreadPoolExecutor's threads, joined at exit, would.
    Threads are started up to ``max_workers`` while none is idle."""

    def __init__(self, max_workers: int, thread_name_prefix: str):
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def submit(self, fn, /, *args, **kwargs):
        future: futures.Future = futures.Future()
        self._work.put((future, fn, args, kwargs))
        with self._lock:
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._max_workers:
                thread = threading.Thread(target=self._run, name=f"{self._prefix}_{len(self._threads)}",
                                          daemon=True)
                thread.start()
                self._threads.append(thread)
        return future

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # the future carries it, as ThreadPoolExecutor's does
                    future.set_exception(exc)
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                thread.join()


class GrpcStandIn:
    """The controller's gRPC endpoint (and router) for one StandInController.

    ``GrpcStandIn(controller).start()`` serves on ``0.0.0.0:<free port>`` with
    a certificate from a private CA for localhost, 127.0.0.1 and 10.213.0.1,
    and makes ``endpoint`` the controller's (so Exporters and Clients get it
    in ``status.endpoint``).
    """

    # Every exporter holds its Status stream open, and each stream takes a
    # thread here; the real controller serves a stream per goroutine, so no
    # pool a test or bench makes may run out of them (at 64, the 65th
    # exporter's Register waited for a free thread and timed out).
    def __init__(self, controller: StandInController, host: str | None = None, heartbeat: float = HEARTBEAT,
                 max_workers: int = 1024):
        self.controller = controller
        self.host = host or default_host()
        self.heartbeat = heartbeat
        self.max_workers = max_workers
        self.directory = Path(tempfile.mkdtemp(prefix=f"standin-grpc-{controller.namespace}-"))
        self.api_client = client.ApiClient(controller.api_client.configuration)
        self.port: int | None = None
        self.ca_pem = ""
        self._server: grpc.Server | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def router_endpoint(self) -> str:
        return self.endpoint

    @property
    def ca_path(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_b64(self) -> str:
        """The CA as an exporter or client config's ``tls.ca`` takes it."""
        return base64.b64encode(self.ca_pem.encode()).decode()

    def start(self) -> GrpcStandIn:
        from corellium_fake.certs import generate

        # The host it is reached at too (e.g. a real node's bridge address, for Pods).
        hosts = tuple(dict.fromkeys(("localhost", "127.0.0.1", LAB_HOST_ADDRESS, self.host)))
        files = generate(self.directory, hosts=hosts)
        self.ca_pem = files.ca.read_text()
        credentials = grpc.ssl_server_credentials([(files.key.read_bytes(), files.cert.read_bytes())])
        server = grpc.server(
            DaemonThreadPool(max_workers=self.max_workers, thread_name_prefix="standin-grpc"),
            options=[
                # As the controller's keepalive settings: clients ping every 20 s.
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 1000),
                ("grpc.http2.max_ping_strikes", 0),
            ])
        services = _Services(self)
        jumpstarter_pb2_grpc.add_ControllerServiceServicer_to_server(services, server)
        client_pb2_grpc.add_ClientServiceServicer_to_server(_client_service_view(services), server)
        router_pb2_grpc.add_RouterServiceServicer_to_server(services, server)
        self.port = server.add_secure_port("0.0.0.0:0", credentials)
        server.start()
        self._server = server
        self.services = services
        self.controller.endpoint = self.endpoint
        self.controller.poke()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=1).wait(timeout=5)
            self._server = None
        self.api_client.close()

    def __enter__(self) -> GrpcStandIn:
        return self.start() if self._server is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- configs for jmp -----------------------------------------------------
    def credential_token(self, kind: str, name: str, timeout: float = 30.0) -> str:
        """The token in the credential Secret the controller made for an
        Exporter or Client (``kind`` "exporter" or "client")."""
        core = client.CoreV1Api(self.api_client)
        deadline = time.monotonic() + timeout
        while True:
            try:
                secret = core.read_namespaced_secret(f"{name}-{kind}", self.controller.namespace)
                token = (secret.data or {}).get("token")
                if token:
                    return base64.b64decode(token).decode()
            except ApiException as exc:
                if exc.status != 404:
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"no credential Secret {name}-{kind} after {timeout}s")
            time.sleep(0.25)

    def _write_config(self, path: str | os.PathLike, kind: str, name: str, token: str | None, with_ca: bool,
                      rest: dict) -> Path:
        """A ClientConfig or ExporterConfig (``kind`` client or exporter) of
        the named object, reaching this endpoint with its token, then ``rest``."""
        body = {
            "apiVersion": "jumpstarter.dev/v1alpha1",
            "kind": f"{kind.capitalize()}Config",
            "metadata": {"namespace": self.controller.namespace, "name": name},
            "endpoint": self.endpoint,
            "tls": {"ca": self.ca_b64 if with_ca else "", "insecure": False},
            "token": token or self.credential_token(kind, name),
            "grpcOptions": {},
            **rest,
        }
        target = Path(path)
        target.write_text(yaml.safe_dump(body, sort_keys=False))
        return target

    def write_client_config(self, path: str | os.PathLike, client_name: str, allow: list[str] | None = None,
                            unsafe: bool = True, token: str | None = None, with_ca: bool = True) -> Path:
        """A ClientConfig for ``jmp --client-config`` as the Client's user would get it."""
        return self._write_config(path, "client", client_name, token, with_ca,
                                  {"drivers": {"allow": list(allow or []), "unsafe": unsafe}})

    def write_exporter_config(self, path: str | os.PathLike, exporter_name: str, export: dict | None = None,
                              token: str | None = None, with_ca: bool = True) -> Path:
        """An ExporterConfig for ``jmp run --exporter-config``; ``export``
        defaults to one MockPower driver named ``power``."""
        export = export or {"power": {"type": "jumpstarter_driver_power.driver.MockPower"}}
        return self._write_config(path, "exporter", exporter_name, token, with_ca, {"export": export})
