# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""A module's work in the task's worker process, for the action plugin of
the module's name: on a local connection, the work is done here; anywhere
else, the module runs.

The collection's API-side modules are each one function of their
parameters (``run(module)``) that talks to an API server only. Started as
a module on the controller, each run costs a Python interpreter, the
AnsiballZ payload, ansible's module_utils and the import of the kubernetes
client (0.7 of the 1.1 CPU-s a module task adds to a playbook on a
two-core machine). Here the work gets what the module would: the task's
arguments as JSON data, validated with the module's argument spec, check
and diff mode from the task, the values of ``no_log`` options masked in
the result, and its warnings returned with the task's result as a
module's are.

The module runs instead when the task is asynchronous, becomes another
user, sets ``environment:`` (the module's process would see it; this one
does not), runs on a connection other than ``local`` (a ``delegate_to``
another host included), names a Python interpreter other than this one,
or, for the work that needs it, when this Python has no kubernetes client.

The kubernetes client is imported when an action plugin that needs it is
loaded: ansible-playbook's strategy loads a task's action plugin in its own
process before it forks the task's worker, so every worker inherits it
instead of importing it again (0.48 CPU-s each)."""

import os
import sys

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import ansible_compat, module_base
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.client import AUTH_ARG_SPEC

COLLECTION = "jumpstarter.virtual_exporters"
_AUTO_INTERPRETERS = ("auto", "auto_legacy", "auto_silent", "auto_legacy_silent")

display = Display()


def kubernetes_client():
    """Whether this Python has the kubernetes client (imported once)."""
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        return False
    return True


class Ended(BaseException):
    """The end of the work, as a module process exits: its result."""

    def __init__(self, result):
        super().__init__(result.get("msg", ""))
        self.result = result


class TaskModule:
    """What a module's work asks of an ``AnsibleModule``, for a run in this
    process: validated parameters, check mode, diff mode, warnings kept for
    the task's result (``warn`` may be called from the work's threads), and
    ``exit_json``/``fail_json`` ending the work with a result."""

    def __init__(self, params, check_mode, diff=False):
        self.params = params
        self.check_mode = check_mode
        # What AnsibleModule keeps of ``_ansible_diff`` (ansible_compat.diff_mode).
        self._diff = diff
        self.warnings = []

    def warn(self, warning):
        self.warnings.append(str(warning))

    def exit_json(self, **result):
        raise Ended(result)

    def fail_json(self, msg, **result):
        raise Ended({**result, "failed": True, "msg": msg})


class ModuleWork:
    """The work ``run`` of the module ``name`` (its FQCN), which takes
    ``argument_spec`` (with the connection options of the kubernetes
    client when ``kubernetes``), failing on ``errors`` as its module does
    (``module_base.call``)."""

    def __init__(self, name, argument_spec, run, kubernetes=True, errors=()):
        self.name = name
        self.argument_spec = module_base.argument_spec(argument_spec, AUTH_ARG_SPEC if kubernetes else None)
        self.work = run
        self.errors = errors
        # Whether the work can run in this Python; the client is imported now.
        self.available = not kubernetes or kubernetes_client()

    def run_here(self, args, check_mode, diff=False, invocation=True):
        """The work on ``args`` (the task's arguments) in this process:
        ``(result, warnings)``, the result as the module would return it
        (with ``invocation``, the validated arguments, when asked)."""
        validation = ArgumentSpecValidator(self.argument_spec).validate(ansible_compat.module_data(args))
        params = validation.validated_parameters
        module = TaskModule(params, check_mode, diff)
        for warning in ansible_compat.alias_warnings(validation):
            module.warn(warning)
        if validation.error_messages:
            msg = validation.errors.msg
            if isinstance(validation.errors[0], UnsupportedError):
                msg = f"Unsupported parameters for ({self.name}) module: {msg}"
            result = {"failed": True, "msg": msg}
        else:
            try:
                module_base.call(self.work, module, self.errors)
                result = {"failed": True, "msg": f"{self.name} ended without a result"}
            except Ended as ended:
                result = ended.result
            except Exception as exc:  # what a module process reports as its failure
                result = {"failed": True, "msg": f"{self.name} failed: {type(exc).__name__}: {exc}"}
        if invocation:
            result["invocation"] = {"module_args": params}
        # As AnsibleModule returns it: no value of a no_log option anywhere.
        return remove_values(result, ansible_compat.no_log_values(validation)), module.warnings


class ModuleWorkAction(ActionBase):
    """The action plugin of a module whose work is ``WORK`` (a ``ModuleWork``)."""

    WORK = None
    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        if not self._in_process(task_vars):
            return merge_hash(result, self._run_module(task_vars))
        here, warnings = self.WORK.run_here(self._task.args, bool(self._task.check_mode), bool(self._task.diff),
                                            invocation=ansible_compat.inject_invocation(task_vars))
        # Said here, in the task's own thread: captured with its result, as
        # the warnings a module returns are.
        for warning in warnings:
            display.warning(warning)
        return merge_hash(result, here)

    def _run_module(self, task_vars):
        # As the normal action runs a module: asynchronously when asked, its
        # remote temporary directory removed after a synchronous run.
        wrap_async = self._task.async_val and not self._connection.has_native_async
        result = self._execute_module(module_name=self.WORK.name, module_args=self._task.args,
                                      task_vars=task_vars, wrap_async=wrap_async)
        if not wrap_async:
            self._remove_tmp_path(ansible_compat.remote_tmpdir(self._connection))
        return result

    def _in_process(self, task_vars):
        if self._connection.transport != "local" or self._task.async_val or self._play_context.become:
            return False
        if any(self._task.environment or []):
            return False
        variables = task_vars
        if self._task.delegate_to:
            variables = (task_vars.get("ansible_delegated_vars") or {}).get(self._task.delegate_to) or {}
        # The interpreter the module would run under (ansible_python_interpreter,
        # else the configuration's interpreter_python): another one may have
        # other packages.
        interpreter = ansible_compat.interpreter_python(variables)
        interpreter = str(self._templar.template(interpreter) or "").strip()
        if interpreter and interpreter not in _AUTO_INTERPRETERS and \
                os.path.realpath(os.path.expanduser(interpreter)) != os.path.realpath(sys.executable):
            return False
        # Without the client here the module may find it under its own interpreter.
        return self.WORK.available


def action_for(module, kubernetes=True):
    """The action plugin of ``module`` (one of this collection's modules,
    with ``ARGUMENT_SPEC``, ``run`` and maybe ``ERRORS``)."""
    name = f"{COLLECTION}.{module.__name__.rsplit('.', 1)[1]}"
    return type("ActionModule", (ModuleWorkAction,),
                {"WORK": ModuleWork(name, module.ARGUMENT_SPEC, module.run, kubernetes=kubernetes,
                                     errors=getattr(module, "ERRORS", ()))})
