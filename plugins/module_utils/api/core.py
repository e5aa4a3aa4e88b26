"""The few core/v1 calls the collection makes, on plain dicts.

Pods, Secrets, ConfigMaps and Events are read, created, replaced, deleted
and listed through the kubernetes client's ``ApiClient`` and nothing else.
The client's generated ``CoreV1Api`` is not used on the path of a module:
since the client validates every call with pydantic, building that one class
(about 800 methods) costs 0.6 CPU-s, more than the rest of a module run,
and a module pays it in every run (measured with kubernetes 37.0.2; see
bench/README.md). ``CustomObjectsApi`` is small and stays in use.

Every call returns the object as a dict (or None for a read that finds
nothing, with ``missing_ok``), and raises the client's ``ApiException`` for
any other answer than 2xx, as the generated calls do. It needs the client
the collection pins (requirements.txt): one whose ``ApiClient`` has
``param_serialize`` and ``call_api``.
"""

import json
import time

# kind -> its plural in URLs
KINDS = {"Pod": "pods", "Secret": "secrets", "ConfigMap": "configmaps", "Event": "events"}
# The characters of an exec's output kept, its last ones: a command in a
# tenant's Pod that writes without end costs this much, not all it wrote.
EXEC_OUTPUT_LIMIT = 64 * 1024


def delete_options(uid=None, resource_version=None, propagation_policy=None):
    """A DeleteOptions body with the preconditions given."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions"}
    preconditions = {key: value for key, value in (("uid", uid), ("resourceVersion", resource_version))
                     if value}
    if preconditions:
        body["preconditions"] = preconditions
    if propagation_policy:
        body["propagationPolicy"] = propagation_policy
    return body


def exec_stream(configuration, url, headers):
    """The client's WebSocket of an exec, made to keep nothing by itself and
    to read one frame per ``update``: the client's own reads every frame that
    is already there before it returns, which a command writing fast enough
    never lets end (and so never lets a timeout or a bound be checked)."""
    from kubernetes.stream import ws_client

    class OneFrameAtATime(ws_client.WSClient):
        def _frames_immediately_available(self):
            return False

    return OneFrameAtATime(configuration, ws_client.get_websocket_url(url), headers, False)


def read_bounded(stream, timeout, limit=EXEC_OUTPUT_LIMIT, clock=time.monotonic):
    """Read ``stream`` (``exec_stream``) until it ends or ``timeout`` seconds
    pass; the last ``limit`` characters of its stdout and stderr, after a line
    that says how many came before them."""
    from kubernetes.stream import ws_client

    kept, dropped = "", 0
    deadline = clock() + timeout
    while stream.is_open():
        remaining = deadline - clock()
        if remaining <= 0:
            break
        stream.update(timeout=remaining)
        for channel in (ws_client.STDOUT_CHANNEL, ws_client.STDERR_CHANNEL):
            kept += stream.read_channel(channel)
        if len(kept) > limit:
            dropped += len(kept) - limit
            kept = kept[-limit:]
    return f"[{dropped} characters of output left out]\n{kept}" if dropped else kept


class CoreApi:
    def __init__(self, api_client):
        if not hasattr(api_client, "param_serialize"):
            raise RuntimeError("the kubernetes Python client is older than this collection needs "
                               "(its ApiClient has no param_serialize); install the version in "
                               "requirements.txt")
        self.api_client = api_client

    def _request(self, method, kind, namespace, name=None, body=None, query=None, content_type="application/json"):
        from kubernetes.client.rest import ApiException

        path = f"/api/v1/namespaces/{namespace}/{KINDS[kind]}" + (f"/{name}" if name else "")
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api_client.param_serialize(
            method=method, resource_path=path, query_params=list((query or {}).items()),
            header_params=headers, body=body, auth_settings=["BearerToken"])
        response = self.api_client.call_api(*request)
        data = response.read()
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=response)
        return json.loads(data) if data else None

    def read(self, kind, namespace, name, missing_ok=False):
        """The object, or None when it does not exist and ``missing_ok``."""
        from kubernetes.client.rest import ApiException

        try:
            return self._request("GET", kind, namespace, name)
        except ApiException as exc:
            if missing_ok and exc.status == 404:
                return None
            raise

    def list(self, kind, namespace, label_selector=None):
        query = {"labelSelector": label_selector} if label_selector else None
        return self._request("GET", kind, namespace, query=query)

    def create(self, kind, namespace, body):
        return self._request("POST", kind, namespace, body=body)

    def replace(self, kind, namespace, name, body):
        return self._request("PUT", kind, namespace, name, body=body)

    def patch(self, kind, namespace, name, body):
        """A JSON merge patch."""
        return self._request("PATCH", kind, namespace, name, body=body, content_type="application/merge-patch+json")

    def delete(self, kind, namespace, name, body=None, grace_period_seconds=None):
        # The API server reads DeleteOptions from the body when there is one
        # and then ignores the query's: the grace period goes where it is read.
        query = None
        if grace_period_seconds is not None and body is not None:
            body = {**body, "gracePeriodSeconds": grace_period_seconds}
        elif grace_period_seconds is not None:
            query = {"gracePeriodSeconds": grace_period_seconds}
        return self._request("DELETE", kind, namespace, name, body=body, query=query)

    def exec(self, namespace, name, container, command, timeout):
        """Run ``command`` (an argv) in ``container`` of Pod ``name`` through
        the API server's exec (a WebSocket), waiting up to ``timeout`` seconds.

        ``(exit code, output)``: the code is None when the command could not
        be run or did not end in time (the output then says why).
        """
        from kubernetes.stream import ws_client

        query = [("container", container), ("stdout", "true"), ("stderr", "true")]
        query += [("command", arg) for arg in command]
        _method, url, headers, _body, _post = self.api_client.param_serialize(
            method="GET", resource_path=f"/api/v1/namespaces/{namespace}/pods/{name}/exec",
            query_params=query, header_params={}, auth_settings=["BearerToken"])
        try:
            stream = exec_stream(self.api_client.configuration, url, headers)
        except Exception as exc:  # noqa: BLE001 - any failure to connect is the answer
            return None, str(getattr(exc, "reason", None) or exc)
        try:
            output = read_bounded(stream, timeout)
            if stream.is_open():
                return None, f"{output}(no end after {timeout} s)"
            # The status the API server or the kubelet ended with (a JSON
            # Status), read before returncode takes it.
            status = stream.peek_channel(ws_client.ERROR_CHANNEL)
            try:
                code = stream.returncode
            except (KeyError, IndexError, TypeError, ValueError, AttributeError):
                try:
                    said = (json.loads(status) or {}).get("message") or status
                except ValueError:
                    said = status
                return None, f"{output}{said or 'no exit status'}"
            return code, output
        finally:
            # Not the client's 3 s for the answer to its close: a command that
            # did not end may never give one.
            stream.close(timeout=1)
