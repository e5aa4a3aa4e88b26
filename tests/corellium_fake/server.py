"""An HTTPS stand-in for the Corellium REST API, for tests on loopback.

Endpoints, request and response shapes follow Corellium's published OpenAPI
description (``https://app.corellium.com/api``): projects, models,
instances (list, create, get, delete), instance state, reboot and the console
URL. Instances move through the API's states on their own after configurable
delays: creating -> booting -> on, on -> off, off -> booting -> on,
rebooting -> on, deleting -> gone.

Beyond the API, tests can inject failures (N answers with a given status,
optionally with ``Retry-After``, optionally after the request took effect),
cap a project's instance count (the refusal is the quota error) and read the
recorded requests to prove that nothing happened twice.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import ssl
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from . import certs

DEFAULT_TOKEN = "fake-corellium-token-6b1f0c"

PERMISSION_DENIED = {
    "error": "Invalid or missing authorization token",
    "errorID": "PermissionDenied",
    "originalError": "Invalid or missing authorization token",
}


@dataclass
class Delays:
    """Seconds each transition takes; 0 makes it immediate."""

    create: float = 0.05  # creating -> booting
    boot: float = 0.05  # booting -> on
    stop: float = 0.05  # on -> off
    delete: float = 0.05  # deleting -> gone
    reboot: float = 0.05  # rebooting -> on


@dataclass
class Project:
    id: str
    name: str
    instance_quota: int = 10


@dataclass
class Injection:
    status: int
    remaining: int
    method: str | None = None
    path: re.Pattern | None = None
    retry_after: str | None = None
    after_commit: bool = False

    def matches(self, method: str, path: str) -> bool:
        return ((self.method is None or self.method == method)
                and (self.path is None or self.path.fullmatch(path) is not None))


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: str
    status: int
    body: dict | None


DEFAULT_MODELS = (
    {"type": "iot", "name": "rd1ae", "flavor": "kronos",
     "description": "Arm Kronos reference design", "model": "kronos", "peripherals": False,
     "quotas": {"cores": 4, "cpus": 4}},
    {"type": "iot", "name": "rpi4b", "flavor": "rpi4b", "description": "Raspberry Pi 4",
     "model": "rpi4b", "peripherals": False, "quotas": {"cores": 4, "cpus": 4}},
)


def _iso(moment: float) -> str:
    stamp = datetime.datetime.fromtimestamp(moment, datetime.UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class _Instance:
    record: dict
    # (due monotonic time, next state or None for "gone")
    plan: list[tuple[float, str | None]] = field(default_factory=list)


class FakeCorellium:
    """The fake service. Use as a context manager or call start()/stop()."""

    def __init__(self, *, token: str = DEFAULT_TOKEN, projects: list[Project] | None = None,
                 models: tuple[dict, ...] = DEFAULT_MODELS, delays: Delays | None = None):
        self.token = token
        self.projects = projects or [
            Project("778f00af-5e9b-40e6-8e7f-c4f14b632e9c", "Default Project"),
            Project("e2fdb33c-37ae-4b22-878d-49e4758a51f0", "OtherProject"),
        ]
        self.models = [dict(model) for model in models]
        self.delays = delays or Delays()
        self._instances: dict[str, _Instance] = {}
        self._injections: list[Injection] = []
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._workdir: Path | None = None
        self.cert_files: certs.CertFiles | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> FakeCorellium:
        self._workdir = Path(tempfile.mkdtemp(prefix="corellium-fake-"))
        self.cert_files = certs.generate(self._workdir)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_files.cert, self.cert_files.key)
        server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        # The handshake runs in the handler thread, so a stalled client cannot
        # block the accept loop.
        server.socket = context.wrap_socket(server.socket, server_side=True,
                                            do_handshake_on_connect=False)
        self._server = server
        # A short poll keeps stop() quick; tests start one fake each.
        self._thread = threading.Thread(target=server.serve_forever, args=(0.02,),
                                        name="corellium-fake", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> FakeCorellium:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def host(self) -> str:
        """``host:port`` as clients put it after ``https://``."""
        return f"127.0.0.1:{self._server.server_address[1]}"

    @property
    def ca_path(self) -> str:
        return str(self.cert_files.ca)

    # -- test controls -------------------------------------------------------

    def inject(self, status: int, times: int = 1, *, method: str | None = None,
               path: str | None = None, retry_after: str | None = None,
               after_commit: bool = False) -> None:
        """Answer the next ``times`` matching requests with ``status``.

        ``path`` is a regular expression over the path after ``/api`` (for
        example ``/v1/instances``). With ``after_commit`` the request takes
        effect first and only its answer is replaced, like a gateway timing
        out on a request the backend completed.
        """
        with self._lock:
            self._injections.append(Injection(
                status=status, remaining=times, method=method,
                path=re.compile(path) if path else None,
                retry_after=retry_after, after_commit=after_commit,
            ))

    def set_quota(self, project_id: str, instances: int) -> None:
        with self._lock:
            self._project(project_id).instance_quota = instances

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def count(self, method: str, path: str | None = None) -> int:
        """How many requests with this method (and exact path after /api) arrived."""
        return sum(1 for request in self.requests
                   if request.method == method and (path is None or request.path == path))

    def request_counts(self) -> Counter:
        return Counter((request.method, request.path) for request in self.requests)

    def instances(self) -> list[dict]:
        """A snapshot of the instances that exist right now."""
        with self._lock:
            self._advance_all()
            return [dict(instance.record) for instance in self._instances.values()]

    # -- state machine ---------------------------------------------------------

    def _project(self, ref: str) -> Project | None:
        return next((p for p in self.projects if ref in (p.id, p.name)), None)

    def _advance(self, instance_id: str, now: float) -> _Instance | None:
        instance = self._instances.get(instance_id)
        while instance is not None and instance.plan and instance.plan[0][0] <= now:
            _, next_state = instance.plan.pop(0)
            if next_state is None:
                del self._instances[instance_id]
                return None
            instance.record["state"] = next_state
            instance.record["stateChanged"] = _iso(time.time())
            if next_state == "on":
                instance.record["startedAt"] = _iso(time.time())
            instance.record["taskState"] = "processing" if instance.plan else "none"
        return instance

    def _advance_all(self) -> None:
        now = time.monotonic()
        for instance_id in list(self._instances):
            self._advance(instance_id, now)

    def _schedule(self, instance: _Instance, state: str, steps: list[tuple[float, str | None]]):
        now = time.monotonic()
        instance.record["state"] = state
        instance.record["stateChanged"] = _iso(time.time())
        instance.record["taskState"] = "processing" if steps else "none"
        due = now
        instance.plan = []
        for delay, next_state in steps:
            due += delay
            instance.plan.append((due, next_state))
        self._advance(instance.record["id"], now)

    def _live_count(self, project_id: str) -> int:
        return sum(1 for i in self._instances.values() if i.record["project"] == project_id)

    # -- request handling (called with the lock held) ---------------------------

    def handle(self, method: str, raw_path: str, headers, body: dict | None):
        """Returns (status, json body or None, extra headers)."""
        parsed = urllib.parse.urlsplit(raw_path)
        path = parsed.path[len("/api"):] if parsed.path.startswith("/api/") else parsed.path
        query = urllib.parse.parse_qs(parsed.query)
        injection = next((i for i in self._injections if i.matches(method, path)), None)
        if injection is not None:
            injection.remaining -= 1
            if injection.remaining <= 0:
                self._injections.remove(injection)
        if injection is not None and not injection.after_commit:
            status, payload, extra = self._injected(injection)
        else:
            status, payload, extra = self._route(method, path, query, headers, body)
            if injection is not None:
                status, payload, extra = self._injected(injection)
        self._requests.append(RecordedRequest(method, path, parsed.query, status, body))
        return status, payload, extra

    @staticmethod
    def _injected(injection: Injection):
        extra = {"Retry-After": injection.retry_after} if injection.retry_after else {}
        if injection.status == 429:
            payload = {"error": "Too many requests, please try again later",
                       "errorID": "RateLimited"}
        elif injection.status in (401, 403):
            payload = dict(PERMISSION_DENIED)
        else:
            payload = {"error": "Internal server error", "errorID": "InternalError"}
        return injection.status, payload, extra

    def _route(self, method, path, query, headers, body):
        if not _bearer_matches(headers.get("Authorization"), self.token):
            return 403, dict(PERMISSION_DENIED), {}
        self._advance_all()
        if path == "/v1/projects" and method == "GET":
            return self._list_projects(query)
        if path == "/v1/models" and method == "GET":
            return 200, [dict(model) for model in self.models], {}
        if path == "/v1/instances" and method == "GET":
            names = query.get("name")
            found = [dict(i.record) for i in self._instances.values()
                     if not names or i.record["name"] == names[0]]
            return 200, found, {}
        if path == "/v1/instances" and method == "POST":
            return self._create(body or {})
        match = re.fullmatch(r"/v1/instances/([^/]+)(/state|/reboot|/console)?", path)
        if match is None:
            return 404, {"error": f"Cannot {method} /api{path}", "errorID": "NotFound"}, {}
        instance_id, action = urllib.parse.unquote(match.group(1)), match.group(2)
        instance = self._instances.get(instance_id)
        if action == "/state" and method == "PUT":
            return self._set_state(instance, (body or {}).get("state"))
        if instance is None:
            return 404, {
                "error": f"Instance with instanceId={instance_id} not found",
                "errorID": "InstanceNotFound", "name": "Instance",
                "params": {"instanceId": instance_id},
            }, {}
        if action is None and method == "GET":
            return 200, dict(instance.record), {}
        if action is None and method == "DELETE":
            if instance.record["state"] != "deleting":
                self._schedule(instance, "deleting", [(self.delays.delete, None)])
            return 204, None, {}
        if action == "/reboot" and method == "POST":
            if instance.record["state"] != "on":
                return 400, _user_error("Instance is not running", "InstanceId"), {}
            self._schedule(instance, "rebooting", [(self.delays.reboot, "on")])
            return 204, None, {}
        if action == "/console" and method == "GET":
            kind = (query.get("type") or ["1-cons"])[0]
            url = f"wss://{headers.get('Host', 'localhost')}/console/{instance_id}/{kind}"
            return 200, {"url": url}, {}
        return 404, {"error": f"Cannot {method} /api{path}", "errorID": "NotFound"}, {}

    def _list_projects(self, query):
        names = query.get("name")
        projects = [p for p in self.projects if not names or p.name == names[0]]
        if query.get("ids_only", ["false"])[0] == "true":
            return 200, [{"id": p.id} for p in projects], {}
        return 200, [{
            "id": p.id, "name": p.name,
            "settings": {"internet-access": True, "dhcp": True},
            "quotas": {"cores": 4 * p.instance_quota, "instances": p.instance_quota,
                       "ram": 6144 * p.instance_quota},
            "quotasUsed": {"cores": 4 * self._live_count(p.id),
                           "instances": self._live_count(p.id),
                           "ram": 6144 * self._live_count(p.id), "gpu": 0},
        } for p in projects], {}

    def _create(self, body: dict):
        for required in ("project", "flavor", "os"):
            if not body.get(required):
                return 400, _user_error(f"Missing required field {required}", required), {}
        project = next((p for p in self.projects if p.id == body["project"]), None)
        if project is None:
            return 404, _user_error("Project not found", "project"), {}
        model = next((m for m in self.models if m["flavor"] == body["flavor"]), None)
        if model is None:
            return 400, _user_error("Unsupported device model", "flavor"), {}
        used = self._live_count(project.id)
        if used >= project.instance_quota:
            # Corellium's OpenAPI text does not document this refusal; the
            # shape follows its other errors (error text plus errorID).
            return 403, {
                "error": f"Not enough quota in project {project.name}: instances quota "
                         f"{project.instance_quota} reached ({used} in use)",
                "errorID": "QuotaExceeded",
                "originalError": "instances quota exceeded",
            }, {}
        instance_id = str(uuid.uuid4())
        now = _iso(time.time())
        record = {
            "id": instance_id, "name": body.get("name") or f"{model['name']} {instance_id[:8]}",
            "key": None, "flavor": model["flavor"], "flavorName": model["name"],
            "type": model["type"], "project": project.id, "state": "creating",
            "stateChanged": now, "startedAt": None, "userTask": None, "taskState": "processing",
            "error": None, "bootOptions": {}, "serviceIp": "10.11.0.2", "wifiIp": "10.11.1.2",
            "secondaryIp": None, "services": {"vpn": {"proxy": [], "listeners": []}},
            "panicked": False, "created": now, "model": model["model"],
            "fwpackage": None, "os": body["os"], "osbuild": body.get("osbuild"),
            "agent": None, "exposePort": None, "fault": None, "patches": [],
            "consoles": [
                {"name": "Primary Compute Non-Secure", "id": "port-1-cons", "port": "4001"},
                {"name": "Secondary Compute", "id": "port-2-cons", "port": "4002"},
            ],
            "createdBy": {"id": "0b8a0b6e-3c1d-4a38-9a59-f35a2cbd1a40",
                          "username": "ci@example.com", "label": "CI"},
        }
        instance = _Instance(record)
        self._instances[instance_id] = instance
        self._schedule(instance, "creating",
                       [(self.delays.create, "booting"), (self.delays.boot, "on")])
        return 200, {"id": instance_id, "state": instance.record["state"]}, {}

    def _set_state(self, instance: _Instance | None, wanted: str | None):
        if instance is None:
            return 404, _user_error("Instance not found", "InstanceId"), {}
        current = instance.record["state"]
        if wanted not in ("on", "off", "paused"):
            return 409, _user_error("Instance cannot transition to that state", "state"), {}
        if current in ("creating", "booting", "deleting", "restoring", "rebooting"):
            return 400, _user_error(
                "Instance is currently attempting to process a different task", "InstanceId"
            ), {}
        if wanted == current:
            return 204, None, {}
        if wanted == "on":
            self._schedule(instance, "booting", [(self.delays.boot, "on")])
        elif wanted == "off":
            self._schedule(instance, current, [(self.delays.stop, "off")])
        else:
            self._schedule(instance, "paused", [])
        return 204, None, {}


def _user_error(message: str, field_name: str) -> dict:
    return {"error": message, "errorID": "UserError", "field": field_name}


def _bearer_matches(header: str | None, token: str) -> bool:
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and value.strip() == token


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """Clients that reject the certificate or hang up early are part of the tests."""


def _handler_for(fake: FakeCorellium):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "corellium-fake"

        def _serve(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                self._reply(400, _user_error("Malformed JSON body", "body"), {})
                return
            with fake._lock:
                status, payload, extra = fake.handle(self.command, self.path, self.headers, body)
            self._reply(status, payload, extra)

        def _reply(self, status: int, payload, extra: dict):
            data = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            if payload is not None:
                self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _serve

        def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
            """Requests are recorded by the fake; stderr stays quiet."""

    return Handler
