# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""virtualtargetclass_sync as every task runs it: on a local connection, its
work (the module's ``run``, which talks to the API server only) in the
task's worker process; anywhere else, the module
(``plugin_utils/module_work.py`` says when)."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.modules import virtualtargetclass_sync
from ansible_collections.jumpstarter.virtual_exporters.plugins.plugin_utils.module_work import (
    ModuleWork,
    ModuleWorkAction,
)


class ActionModule(ModuleWorkAction):
    WORK = ModuleWork("jumpstarter.virtual_exporters.virtualtargetclass_sync", virtualtargetclass_sync.ARGUMENT_SPEC,
                      virtualtargetclass_sync.run)
