"""Every write of the collection to the API server, of every kind.

The pool's custom kinds (a ``constants.GVR``: ExporterSets, Exporters...)
through the client's ``CustomObjectsApi``, the core kinds (a kind of
``core.KINDS``, or a GVR of group ``""``: Pods, Secrets, ConfigMaps, Events)
through ``core.CoreApi``. Each write

- in check mode writes nothing and is taken as done (``WRITTEN``);
- records what it changes (or would) in ``changes`` (a
  ``module_diff.Changes``), under ``Kind/name``, once it is done, or for a
  delete once the object is gone either way;
- answers one of ``WRITTEN``, ``CONFLICT`` (409: a precondition, a
  resourceVersion or uid, no longer holds), ``GONE`` (404) and, for a
  create, ``EXISTS`` (409 AlreadyExists);
- raises ``WriteError`` for any other answer, whose message names the verb,
  the kind and namespace/name. It is also the client's ``ApiException``
  (same ``status``, ``reason``, ``body``), for the callers that catch that.

Needs the ``kubernetes`` client; takes an ``ApiClient``.
"""

import functools
from typing import NamedTuple

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import core

WRITTEN = "written"
CONFLICT = "conflict"
GONE = "gone"
EXISTS = "exists"

# What a write records for --diff when the caller gives nothing.
DEFAULT = object()


class WriteError(Exception):
    """An answer of the API server that is none of the outcomes."""

    def __init__(self, verb, kind, namespace, name, cause):
        # Not ApiException's __init__ (whose arguments are an answer's).
        Exception.__init__(self, verb, kind, namespace, name)
        self.verb, self.kind, self.namespace, self.name = verb, kind, namespace, name
        self.status = getattr(cause, "status", None)
        self.reason = getattr(cause, "reason", None)
        self.body = getattr(cause, "body", None)
        self.headers = getattr(cause, "headers", None)
        self.data = getattr(cause, "data", None)

    def __str__(self):
        said = " ".join(str(part) for part in (self.status, self.reason) if part)
        return f"{self.verb} {self.kind} {self.namespace}/{self.name}: {said or 'failed'}"


@functools.cache
def _raised_type():
    """WriteError as an ``ApiException`` too (made once the client is there)."""
    from kubernetes.client.rest import ApiException

    class ApiWriteError(WriteError, ApiException):
        pass

    ApiWriteError.__name__ = ApiWriteError.__qualname__ = "WriteError"
    return ApiWriteError


def error(verb, kind, namespace, name, cause):
    return _raised_type()(verb, kind, namespace, name, cause)


class Outcome(NamedTuple):
    status: str  # WRITTEN, CONFLICT, GONE or EXISTS
    obj: dict | None = None  # what the API server answered (None in check mode or unwritten)
    error: Exception | None = None  # for CONFLICT, GONE, EXISTS: the WriteError, to raise if it is one

    @property
    def written(self):
        return self.status == WRITTEN

    @property
    def version(self):
        """The resourceVersion the write left, when it answered one."""
        return ((self.obj or {}).get("metadata") or {}).get("resourceVersion") if isinstance(self.obj, dict) else None


def _kind_of(resource):
    return resource if isinstance(resource, str) else resource.kind


def _is_core(resource):
    return isinstance(resource, str) or not resource.group


def patch_record(body):
    """What a merge patch ``body`` changes, for the diff: without its
    resourceVersion precondition, without empty parts."""
    metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k != "resourceVersion"}
    return {k: v for k, v in {**body, "metadata": metadata}.items() if v}


class Writer:
    def __init__(self, api_client, check_mode=False, changes=None):
        self.api_client = api_client
        self.check_mode = check_mode
        self.changes = changes

    @functools.cached_property
    def custom(self):
        from kubernetes import client

        return client.CustomObjectsApi(self.api_client)

    @functools.cached_property
    def core(self):
        return core.CoreApi(self.api_client)

    def _record(self, resource, name, record, default):
        if self.changes is None or record is None:
            return
        before, after = default() if record is DEFAULT else record
        self.changes.record(f"{_kind_of(resource)}/{name}", before, after)

    def _write(self, verb, resource, namespace, name, call, on_conflict=CONFLICT):
        if self.check_mode:
            return Outcome(WRITTEN)
        from kubernetes.client.rest import ApiException

        try:
            return Outcome(WRITTEN, call())
        except ApiException as exc:
            failure = error(verb, _kind_of(resource), namespace, name, exc)
            if exc.status == 409:
                return Outcome(on_conflict, None, failure)
            if exc.status == 404:
                return Outcome(GONE, None, failure)
            raise failure from exc

    def create(self, resource, namespace, body, record=DEFAULT):
        """Create ``body``; ``EXISTS`` when the name is taken. ``record``: the
        (before, after) to record, None for nothing (by default None and the body)."""
        name = body["metadata"]["name"]
        if _is_core(resource):
            def call():
                return self.core.create(_kind_of(resource), namespace, body)
        else:
            def call():
                return self.custom.create_namespaced_custom_object(*resource.at(namespace), body)
        outcome = self._write("creating", resource, namespace, name, call, on_conflict=EXISTS)
        if outcome.written:
            self._record(resource, name, record, lambda: (None, body))
        return outcome

    def patch(self, resource, namespace, name, body, resource_version=None, current=None, record=DEFAULT,
              status=False):
        """A JSON merge patch of the object (of its status subresource with
        ``status``), guarded by ``resource_version`` when given. ``current``
        is the object as last read, for the diff's before."""
        if resource_version:
            body = {**body, "metadata": {**(body.get("metadata") or {}), "resourceVersion": resource_version}}
        if _is_core(resource):
            if status:
                raise ValueError(f"no status patch of the core kind {_kind_of(resource)}")

            def call():
                return self.core.patch(_kind_of(resource), namespace, name, body)
        else:
            write = self.custom.patch_namespaced_custom_object_status if status else \
                self.custom.patch_namespaced_custom_object

            def call():
                return write(*resource.at(namespace), name, body)
        outcome = self._write("patching the status of" if status else "patching", resource, namespace, name, call)
        if outcome.written and self.changes is not None and record is not None:
            if record is DEFAULT:
                self.changes.patch(f"{_kind_of(resource)}/{name}", current, patch_record(body))
            else:
                self._record(resource, name, record, None)
        return outcome

    def patch_status(self, resource, namespace, name, body, resource_version=None, current=None, record=DEFAULT):
        return self.patch(resource, namespace, name, body, resource_version, current, record, status=True)

    def replace(self, resource, namespace, name, body, current=None, record=DEFAULT):
        """Replace the object with ``body`` (its resourceVersion, if any, the precondition)."""
        if _is_core(resource):
            def call():
                return self.core.replace(_kind_of(resource), namespace, name, body)
        else:
            def call():
                return self.custom.replace_namespaced_custom_object(*resource.at(namespace), name, body)
        outcome = self._write("replacing", resource, namespace, name, call)
        if outcome.written:
            self._record(resource, name, record, lambda: (current, body))
        return outcome

    def delete(self, resource, namespace, name, uid=None, resource_version=None, propagation_policy=None,
               grace_period_seconds=None, record=DEFAULT):
        """Delete the object, with ``uid`` and ``resource_version`` as
        preconditions when given (``CONFLICT`` when one no longer holds)."""
        options = core.delete_options(uid=uid, resource_version=resource_version,
                                      propagation_policy=propagation_policy)
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if _is_core(resource):
            def call():
                return self.core.delete(_kind_of(resource), namespace, name, body=options)
        else:
            def call():
                return self.custom.delete_namespaced_custom_object(*resource.at(namespace), name, body=options)
        outcome = self._write("deleting", resource, namespace, name, call)
        if outcome.status in (WRITTEN, GONE):
            self._record(resource, name, record, lambda: ({"metadata": {"uid": uid}} if uid else None, None))
        return outcome
