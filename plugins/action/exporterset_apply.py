# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""exporterset_apply as every task runs it: on a local connection, its
work (the module's ``run``, which talks to the API server only) in the
task's worker process; anywhere else, the module
(``plugin_utils/module_work.py`` says when). The reconcile role runs the
same tasks whoever calls it; the operator's backend runs pass ``records:
operator`` (it records the outcome, the class's and the policies' status
in process), and their outcome task is answered here, without the work."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import exporterset_options
from ansible_collections.jumpstarter.virtual_exporters.plugins.modules import exporterset_apply
from ansible_collections.jumpstarter.virtual_exporters.plugins.plugin_utils.module_work import (
    ModuleWork,
    ModuleWorkAction,
)


class ActionModule(ModuleWorkAction):
    WORK = ModuleWork("jumpstarter.virtual_exporters.exporterset_apply", exporterset_apply.ARGUMENT_SPEC,
                      exporterset_apply.run)

    def answer_here(self):
        args = self._task.args
        records = args.get("records", exporterset_options.RECORDS["records"]["default"])
        try:
            if args.get("outcome", "none") == "none" or exporterset_options.records_here(records):
                return None
        except ValueError as exc:
            return {"failed": True, "msg": str(exc)}
        return {"changed": False, "outcome_changed": False, "events": 0, "class_changed": False,
                "policies_changed": []}
