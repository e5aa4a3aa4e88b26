"""Client for the Corellium public REST API (``https://<host>/api/v1``).

The standard library and Ansible's HTTP client (``ansible.module_utils.urls``,
which sanity asks of module code) only: the Corellium modules and the tests
share this one client.

Behaviour the callers rely on:

* 401, and 403 with a token error, raise :class:`AuthError` at once; retrying
  cannot fix a bad token.
* A refused creation because the project is out of quota raises
  :class:`QuotaError` carrying the API's own message.
* 429 and 5xx (and connection failures) are retried with exponential backoff
  and full jitter, never sooner than ``Retry-After`` says, within the
  :class:`RetryPolicy` budget; then :class:`RetryBudgetExhausted`.
* Deleting an instance that is already gone is a success that changed nothing.
* The API token is never part of an exception, a ``repr`` or a log record.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import ssl
import time
import urllib.error
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ansible.module_utils.urls import Request
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import backoff_delay

LOG = logging.getLogger(__name__)

# Every state the API reports for an instance (the ``InstanceState`` enum).
INSTANCE_STATES = frozenset(
    {"on", "off", "booting", "deleting", "creating", "restoring", "paused", "rebooting", "error"}
)
# Pseudo state used by wait_for_state: the instance no longer exists.
ABSENT = "absent"
# States an instance passes through on its own; anything else is where it rests.
TRANSITIONAL_STATES = frozenset({"creating", "booting", "deleting", "restoring", "rebooting"})

_REDACTED = "<redacted>"


class CorelliumError(Exception):
    """An API call failed. ``status`` is the HTTP status (None without a response)."""

    def __init__(self, message: str, *, status: int | None = None, error_id: str | None = None,
                 method: str | None = None, path: str | None = None):
        self.message = message
        self.status = status
        self.error_id = error_id
        self.method = method
        self.path = path
        where = f"{method} {path}: " if method else ""
        code = f" (HTTP {status}{', ' + error_id if error_id else ''})" if status else ""
        super().__init__(f"{where}{message}{code}")

    def as_dict(self) -> dict:
        """A JSON-friendly summary; ``kind`` names the exception class."""
        return {
            "kind": type(self).__name__,
            "message": self.message,
            "status": self.status,
            "error_id": self.error_id,
        }


class AuthError(CorelliumError):
    """The token was rejected (missing, wrong or without access)."""


class QuotaError(CorelliumError):
    """The project has no quota left for another instance; ``message`` is the API's."""


class NotFoundError(CorelliumError):
    """The addressed object does not exist."""


class ConflictError(CorelliumError):
    """The instance cannot do that now (busy with another task, or wrong state)."""


class RetryBudgetExhausted(CorelliumError):
    """A retryable failure (429, 5xx, network) outlasted the retry policy."""


class StateTimeout(CorelliumError):
    """wait_for_state reached its deadline; ``last_state`` is what was seen last."""

    def __init__(self, message: str, *, last_state: str | None, **kwargs):
        self.last_state = last_state
        super().__init__(message, **kwargs)


class InstanceFailed(CorelliumError):
    """The instance went to the ``error`` state while waiting for another one."""


def _error_fields(error):
    return {"corellium_error": error.as_dict()}


# What a Corellium module fails with for each error (module_base.call): the
# message, and for an API error its summary too.
MODULE_ERRORS = ((CorelliumError, _error_fields), ((ValueError, OSError), None))


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds for retrying one request.

    ``attempts`` counts every try including the first; ``deadline`` bounds the
    whole request, sleeps included; backoff for retry n (0-based) is a uniform
    draw from [0, min(max_delay, base_delay * 2**n)], raised to ``Retry-After``
    when the server sends one.
    """

    attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 30.0
    deadline: float = 120.0
    request_timeout: float = 30.0


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    wall_now = time.time() if now is None else now
    return max(0.0, when.timestamp() - wall_now)


def _mentions_quota(error_id: str, message: str) -> bool:
    text = f"{error_id} {message}".lower()
    return "quota" in text or "limit exceeded" in text or "not enough" in text


def classify_error(status: int, body: dict, method: str, path: str) -> CorelliumError:
    """Turn an error response into the exception callers branch on."""
    if not isinstance(body, dict):
        body = {}
    message = str(body.get("error") or body.get("message") or f"HTTP {status}")
    error_id = body.get("errorID")
    kwargs = {"status": status, "error_id": error_id, "method": method, "path": path}
    # A quota refusal may come with 403 like a token error; the body tells them apart.
    if 400 <= status < 500 and status != 429 and _mentions_quota(error_id or "", message):
        return QuotaError(message, **kwargs)
    if status in (401, 403):
        return AuthError(message, **kwargs)
    if status == 404:
        return NotFoundError(message, **kwargs)
    if status in (400, 409) and method == "PUT":
        return ConflictError(message, **kwargs)
    return CorelliumError(message, **kwargs)


class _Retryable(Exception):
    def __init__(self, error: CorelliumError, retry_after: float | None):
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after


class CorelliumClient:
    """One Corellium endpoint and token.

    ``sleep``, ``clock`` and ``jitter`` are injectable so tests can observe the
    backoff without waiting for it. ``ca_path`` (a PEM file) and ``ca_data``
    (PEM text, as a ConfigMap holds it) add certificate authorities to trust;
    ``validate_certs=False`` disables verification (lab use only).
    """

    def __init__(self, host: str, token: str, *, ca_path: str | None = None,
                 ca_data: str | None = None, validate_certs: bool = True, retry: RetryPolicy | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 jitter: Callable[[], float] = random.random,
                 logger: logging.Logger | None = None):
        if not host:
            raise ValueError("Corellium API host is empty")
        if not token:
            raise ValueError("Corellium API token is empty")
        self.host = host
        self.__token = token
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._clock = clock
        self._jitter = jitter
        self._log = logger or LOG
        self._ssl = ssl.create_default_context(cafile=ca_path, cadata=ca_data or None)
        if not validate_certs:
            self._ssl.check_hostname = False
            self._ssl.verify_mode = ssl.CERT_NONE

    def __repr__(self) -> str:
        return f"CorelliumClient(host={self.host!r}, token={_REDACTED})"

    @property
    def base_url(self) -> str:
        return f"https://{self.host}/api"

    # -- transport ---------------------------------------------------------

    def _scrub(self, text: str) -> str:
        return text.replace(self.__token, _REDACTED)

    def _send_once(self, method: str, path: str, body: dict | None, timeout: float):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.__token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            # No .netrc: its credentials would replace the bearer token.
            with Request().open(method, self.base_url + path, data=data, headers=headers, timeout=timeout,
                                context=self._ssl, use_netrc=False) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            payload = error.read()
            status = error.code
            parsed = _json_or_empty(payload)
            failure = classify_error(status, parsed, method, path)
            if status == 429 or status >= 500:
                retry_after = parse_retry_after(error.headers.get("Retry-After"))
                raise _Retryable(failure, retry_after) from None
            raise failure from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            failure = CorelliumError(self._scrub(f"connection failed: {reason}"),
                                     method=method, path=path)
            # An untrusted certificate stays untrusted; only transport hiccups are retried.
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise failure from None
            raise _Retryable(failure, None) from None

    def request(self, method: str, path: str, body: dict | None = None):
        """Send one API request with the retry policy; returns the decoded JSON (or None)."""
        policy = self.retry
        started = self._clock()
        for attempt in range(policy.attempts):
            remaining = policy.deadline - (self._clock() - started)
            timeout = max(0.1, min(policy.request_timeout, remaining))
            try:
                status, payload = self._send_once(method, path, body, timeout)
            except _Retryable as retryable:
                last = retryable.error
                delay = backoff_delay(attempt + 1, policy.base_delay, policy.max_delay, jitter=self._jitter())
                if retryable.retry_after is not None:
                    delay = max(delay, retryable.retry_after)
                remaining = policy.deadline - (self._clock() - started)
                self._log.warning("corellium %s %s failed (attempt %d/%d): %s",
                                  method, path, attempt + 1, policy.attempts, last.message)
                if attempt + 1 >= policy.attempts or delay >= remaining:
                    raise RetryBudgetExhausted(
                        f"gave up after {attempt + 1} attempt(s): {last.message}",
                        status=last.status, error_id=last.error_id, method=method, path=path,
                    ) from None
                self._sleep(delay)
                self._before_retry(method, path, body)
                continue
            self._log.debug("corellium %s %s -> %d", method, path, status)
            return _json_or_empty(payload) if payload else None
        raise AssertionError("unreachable: the loop returns or raises")

    def _before_retry(self, method: str, path: str, body: dict | None) -> None:
        """Stop a retried creation from making a second instance.

        A POST that failed with 5xx or a dropped connection may still have
        created the instance; if one with that name now exists in the
        project, report it instead of posting again.
        """
        if method == "POST" and path == "/v1/instances" and body:
            existing = self.find_instance(body["project"], body["name"])
            if existing is not None:
                raise _AlreadyCreated(existing)

    # -- projects and models ------------------------------------------------

    def list_projects(self) -> list[dict]:
        return self.request("GET", "/v1/projects") or []

    def get_project(self, ref: str) -> dict | None:
        """The project whose id or name is ``ref``."""
        return _first_with(self.list_projects(), ref, ("id", "name"))

    def list_models(self) -> list[dict]:
        return self.request("GET", "/v1/models") or []

    def get_model(self, flavor: str) -> dict | None:
        """The model whose flavor or model name is ``flavor``."""
        return _first_with(self.list_models(), flavor, ("flavor", "model"))

    # -- instances ------------------------------------------------------------

    def list_instances(self, project: str | None = None, name: str | None = None) -> list[dict]:
        """Instances visible to the token, optionally only one project's or one name's."""
        path = "/v1/instances"
        if name is not None:
            path += "?" + urllib.parse.urlencode({"name": name})
        instances = self.request("GET", path) or []
        return [
            instance for instance in instances
            if (project is None or instance.get("project") == project)
            and (name is None or instance.get("name") == name)
        ]

    def find_instance(self, project: str, name: str) -> dict | None:
        """The instance called ``name`` in ``project``; CorelliumError if the name is ambiguous."""
        matches = self.list_instances(project=project, name=name)
        if len(matches) > 1:
            ids = ", ".join(sorted(instance["id"] for instance in matches))
            raise CorelliumError(f"{len(matches)} instances are named {name!r} in project "
                                 f"{project}: {ids}")
        return matches[0] if matches else None

    def get_instance(self, instance_id: str) -> dict | None:
        """The instance, or None when it does not exist (any more)."""
        try:
            return self.request("GET", f"/v1/instances/{_quote(instance_id)}")
        except NotFoundError:
            return None

    def create_instance(self, project: str, name: str, flavor: str, os: str,
                        osbuild: str | None = None) -> dict:
        """Create an instance; returns ``{"id": ..., "state": ...}``.

        Retries never create a second instance: see ``_before_retry``.
        """
        body = {"project": project, "name": name, "flavor": flavor, "os": os}
        if osbuild:
            body["osbuild"] = osbuild
        try:
            return self.request("POST", "/v1/instances", body)
        except _AlreadyCreated as already:
            return {"id": already.instance["id"], "state": already.instance.get("state")}

    def set_state(self, instance_id: str, state: str) -> None:
        """Ask for a state change (``on``, ``off``, ...); it happens asynchronously."""
        if state not in INSTANCE_STATES:
            raise ValueError(f"unknown instance state {state!r}")
        self.request("PUT", f"/v1/instances/{_quote(instance_id)}/state", {"state": state})

    def reboot(self, instance_id: str) -> None:
        self.request("POST", f"/v1/instances/{_quote(instance_id)}/reboot")

    def delete_instance(self, instance_id: str) -> bool:
        """Start deleting; False (nothing changed) when the instance was already gone."""
        try:
            self.request("DELETE", f"/v1/instances/{_quote(instance_id)}")
        except NotFoundError:
            return False
        return True

    def wait_for_state(self, instance_id: str, states: Iterable[str], timeout: float,
                       poll_interval: float = 2.0) -> dict | None:
        """Poll until the instance is in one of ``states``; returns it (None for ABSENT).

        Raises StateTimeout after ``timeout`` seconds and InstanceFailed when
        the instance lands in ``error`` unless ``error`` was asked for.
        """
        wanted = frozenset(states)
        unknown = wanted - INSTANCE_STATES - {ABSENT}
        if unknown:
            raise ValueError(f"unknown instance states {sorted(unknown)}")
        started = self._clock()
        while True:
            instance = self.get_instance(instance_id)
            state = ABSENT if instance is None else instance.get("state")
            if state in wanted:
                return instance
            if state == "error":
                raise InstanceFailed(f"instance {instance_id} is in state error "
                                     f"(wanted {', '.join(sorted(wanted))})")
            if state == ABSENT:
                raise NotFoundError(f"instance {instance_id} disappeared while waiting for "
                                    f"{', '.join(sorted(wanted))}")
            waited = self._clock() - started
            if waited >= timeout:
                raise StateTimeout(
                    f"instance {instance_id} still {state} after {waited:.1f}s "
                    f"(wanted {', '.join(sorted(wanted))})",
                    last_state=state,
                )
            self._sleep(min(poll_interval, timeout - waited))


class _AlreadyCreated(Exception):
    def __init__(self, instance: dict):
        super().__init__(instance["id"])
        self.instance = instance


def _first_with(items: list[dict], value: str, keys: tuple[str, ...]) -> dict | None:
    """The first of ``items`` that has ``value`` under one of ``keys``."""
    return next((item for item in items if value in (item.get(key) for key in keys)), None)


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _json_or_empty(payload: bytes):
    try:
        return json.loads(payload) if payload else {}
    except ValueError:
        return {}
