"""module_base: the one run of every module, through a real AnsibleModule
(its arguments given as ansible-core's module tests give them) and the
in-process stand-in of plugin_utils/module_work.py."""

import json
import platform

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import module_base
from ansible_collections.jumpstarter.virtual_exporters.plugins.plugin_utils.module_work import Ended, TaskModule

SPEC = {"name": {"type": "str", "required": True}}
CONNECTION = {"host": {"type": "str"}}


class APIError(Exception):
    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


ERRORS = ((APIError, lambda error: {"status": error.status}), ((ValueError, OSError), None))


def run_module(run, args, **options):
    """The result ``module_base.main`` prints, and its exit code."""
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        module_base.main(run, SPEC, **options)
    return exited.value.code


def printed(capsys):
    return json.loads(capsys.readouterr().out)


def test_the_module_runs_in_check_mode_with_the_connection_options(capsys):
    def run(module):
        module.exit_json(changed=False, check=module.check_mode, params=module.params)

    code = run_module(run, {"name": "a", "host": "h", "_ansible_check_mode": True}, connection=CONNECTION)
    result = printed(capsys)
    assert code == 0, result
    assert result["check"] is True
    assert result["params"] == {"name": "a", "host": "h"}


def test_connection_options_may_not_shadow_the_modules_own():
    with pytest.raises(ValueError, match="name"):
        module_base.argument_spec(SPEC, {"name": {"type": "str"}})


def test_a_missing_library_fails_before_the_work_naming_it(capsys):
    ran = []
    code = run_module(ran.append, {"name": "a"}, requires=("qemu.qmp", ImportError("No module named 'qemu'")))
    result = printed(capsys)
    assert code == 1 and ran == []
    assert result["failed"] and "(qemu.qmp)" in result["msg"]
    assert f"on {platform.node()}'s Python" in result["msg"]


def test_a_present_library_lets_the_work_run(capsys):
    def run(module):
        module.exit_json(changed=True)

    assert run_module(run, {"name": "a"}, requires=("qemu.qmp", None)) == 0
    assert printed(capsys)["changed"] is True


def test_the_modules_errors_fail_it_with_their_message_and_fields(capsys):
    def run(module):
        raise APIError("GET /x: 404", 404)

    code = run_module(run, {"name": "a"}, errors=ERRORS)
    result = printed(capsys)
    assert code == 1
    assert result["msg"] == "GET /x: 404" and result["status"] == 404


@pytest.mark.parametrize("error", [ValueError("bad name"), OSError("no such file")])
def test_an_error_of_a_pair_without_fields_fails_with_its_message(error):
    def run(module):
        raise error

    with pytest.raises(Ended) as ended:
        module_base.call(run, TaskModule({}, check_mode=False), ERRORS)
    assert ended.value.result == {"failed": True, "msg": str(error)}


def test_the_first_pair_that_matches_wins():
    class Both(APIError, ValueError):
        pass

    def run(module):
        raise Both("both", 500)

    with pytest.raises(Ended) as ended:
        module_base.call(run, TaskModule({}, check_mode=False), ERRORS)
    assert ended.value.result["status"] == 500


def test_a_msg_among_the_fields_is_the_message():
    def run(module):
        raise APIError("(404)\nReason: Not Found\nHTTP response headers: ...", 404)

    said = ((APIError, lambda error: {"msg": f"reading x: {error.status}", "status": error.status}),)
    with pytest.raises(Ended) as ended:
        module_base.call(run, TaskModule({}, check_mode=False), said)
    assert ended.value.result == {"failed": True, "msg": "reading x: 404", "status": 404}


def test_other_errors_are_not_caught():
    def run(module):
        raise KeyError("x")

    with pytest.raises(KeyError):
        module_base.call(run, TaskModule({}, check_mode=False), ERRORS)
