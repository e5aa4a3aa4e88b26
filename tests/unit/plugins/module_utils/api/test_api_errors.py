"""api/errors.py: the one message of an API error, and the ``errors=``
pairs that fail a module with it, run through ``module_base.call`` and
the in-process stand-in of plugin_utils/module_work.py as a module's
action plugin runs them."""

import importlib.util
import json
import sys

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import module_base
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import errors, writer
from ansible_collections.jumpstarter.virtual_exporters.plugins.plugin_utils.module_work import Ended, TaskModule
from kubernetes.client.rest import ApiException

FORBIDDEN = json.dumps(
    {
        "kind": "Status",
        "status": "Failure",
        "reason": "Forbidden",
        "code": 403,
        "message": 'exportersets.jumpstarter.dev "pool" is forbidden: User "u" cannot get it',
    }
)


def failure(error, module_errors):
    """The result of a module whose work raises ``error``."""

    def run(module):
        raise error

    with pytest.raises(Ended) as ended:
        module_base.call(run, TaskModule({}, check_mode=False), module_errors)
    return ended.value.result


def test_a_bare_api_exception_says_its_status_reason_and_the_servers_message():
    error = ApiException(status=403, reason="Forbidden", body=FORBIDDEN)
    assert failure(error, errors.module_errors()) == {
        "failed": True,
        "msg": '403 Forbidden: exportersets.jumpstarter.dev "pool" is forbidden: User "u" cannot get it',
    }
    assert failure(error, errors.module_errors("ExporterSet pass"))["msg"].startswith(
        "ExporterSet pass: 403 Forbidden: "
    )


@pytest.mark.parametrize("body", [None, "", "<html>bad gateway</html>", "[]", json.dumps({"kind": "Status"})])
def test_without_a_status_message_it_is_the_status_and_reason(body):
    error = ApiException(status=502, reason="Bad Gateway", body=body)
    assert errors.message(error) == "502 Bad Gateway"
    assert errors.message(error, "ExporterSet pass") == "ExporterSet pass: 502 Bad Gateway"


def test_a_write_error_names_its_verb_kind_and_object():
    error = writer.error(
        "patch", "Exporter", "ns", "pool-1", ApiException(status=422, reason="Unprocessable Entity", body=FORBIDDEN)
    )
    assert failure(error, errors.module_errors())["msg"] == "patch Exporter ns/pool-1: 422 Unprocessable Entity"
    assert (
        errors.message(error, "ExporterSet pass")
        == "ExporterSet pass: patch Exporter ns/pool-1: 422 Unprocessable Entity"
    )


def test_an_api_error_keeps_the_modules_words_for_the_call():
    error = errors.ApiError("reading Secret ns/ssh", ApiException(status=403, reason="Forbidden", body=FORBIDDEN))
    assert failure(error, errors.module_errors("ignored for an ApiError")) == {
        "failed": True,
        "msg": "reading Secret ns/ssh: 403 Forbidden",
    }
    assert (error.status, error.reason) == (403, "Forbidden")


def test_other_errors_pass_through_to_the_modules_own_pairs():
    own = (*errors.module_errors(), (ValueError, None))
    assert failure(ValueError("bad denied_permissions"), own)["msg"] == "bad denied_permissions"
    with pytest.raises(RuntimeError):
        failure(RuntimeError("a bug"), own)
    assert errors.message(RuntimeError("x"), "finishing") == "finishing: x"


def test_without_the_client_the_pairs_catch_no_more_than_the_api_error(monkeypatch):
    """The fallback of a missing client is no type at all, never ``Exception``."""
    for name in ("kubernetes", "kubernetes.client", "kubernetes.client.rest"):
        monkeypatch.setitem(sys.modules, name, None)
    spec = importlib.util.spec_from_file_location("errors_without_client", errors.__file__)
    without = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(without)
    assert without.CLIENT_ERRORS == ()
    with pytest.raises(RuntimeError):
        failure(RuntimeError("not an API error"), without.module_errors())
    error = without.ApiError("reading ExporterSet ns/pool", ApiException(status=500, reason="Internal Server Error"))
    assert failure(error, without.module_errors())["msg"] == "reading ExporterSet ns/pool: 500 Internal Server Error"
