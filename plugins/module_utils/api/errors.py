"""What a module says of an API server's refusal: the one message of an
API error, and the ``errors=`` pairs of ``module_base`` that fail a module
with it (a module's ``ERRORS``, for its ``main`` and its action plugin).

The message is what was asked, then the answer's status and reason: a
``writer.WriteError`` names its verb, kind and namespace/name; an
``ApiError`` what the module was doing (``reading Secret ns/name``); a
bare ``ApiException`` of the client (a read the code did not wrap) is
followed by the API server's message of its body, which names the object.

Without the kubernetes client nothing raises an ``ApiException`` (and
``module_api_client`` fails first): ``CLIENT_ERRORS`` is then empty, so the
pairs catch nothing more."""

import json

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import writer

try:
    from kubernetes.client.rest import ApiException
except ImportError:
    CLIENT_ERRORS = ()
else:
    CLIENT_ERRORS = (ApiException,)


def answer(error):
    """The status and reason of the API error ``error``."""
    return " ".join(str(part) for part in (error.status, error.reason) if part) or "failed"


class ApiError(Exception):
    """The API server's refusal of ``what`` (the module's words for the call)."""

    def __init__(self, what, cause):
        super().__init__(f"{what}: {answer(cause)}")
        self.status, self.reason = cause.status, cause.reason


def _body_message(error):
    """The ``message`` of the Status an API server answers with, or None."""
    try:
        status = json.loads(error.body)
    except (TypeError, ValueError):
        return None
    return status.get("message") if isinstance(status, dict) else None


def message(error, what=None):
    """What a module says of ``error``, after ``what`` (the call, when the
    module knows it): ``str`` of an error that names its call (a
    ``WriteError``, an ``ApiError``, any other); a bare ``ApiException``'s
    status and reason and its body's message."""
    said = (str(error),)
    if isinstance(error, CLIENT_ERRORS) and not isinstance(error, writer.WriteError):
        said = (answer(error), _body_message(error))
    return ": ".join(part for part in (what, *said) if part)


def module_errors(what=None):
    """The ``errors=`` pairs of an API server's refusals, first in a
    module's ``ERRORS``; ``what`` leads the message of a client's error."""
    return ((ApiError, None), (CLIENT_ERRORS, lambda error: {"msg": message(error, what)}))
