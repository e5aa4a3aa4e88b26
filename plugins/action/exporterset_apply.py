# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""exporterset_apply as every task runs it: the module, except for a run
that has nothing to record. The reconcile role runs the same tasks whoever
calls it; the operator's backend runs pass ``records: operator`` (it
records the outcome, the class's and the policies' status in process), and
their outcome task is answered here, on the controller, without starting a
module process for it (0.7 CPU-s a run on this machine)."""

from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import ansible_compat, exporterset_options

MODULE = "jumpstarter.virtual_exporters.exporterset_apply"


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        records = args.get("records", exporterset_options.RECORDS["records"]["default"])
        try:
            here = args.get("outcome", "none") == "none" or exporterset_options.records_here(records)
        except ValueError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        if not here:
            result.update(changed=False, outcome_changed=False, events=0, class_changed=False,
                          policies_changed=[])
            return result
        # As the normal action runs a module: asynchronously when asked, its
        # remote temporary directory removed after a synchronous run.
        wrap_async = self._task.async_val and not self._connection.has_native_async
        result = merge_hash(result, self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars,
                                                         wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(ansible_compat.remote_tmpdir(self._connection))
        return result
