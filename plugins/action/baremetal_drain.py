# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""baremetal_drain as every task runs it: on a local connection, its work (the
module's ``run``, which talks to the API server only) in the task's worker
process; anywhere else, the module (``plugin_utils/module_work.py`` says
when)."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.modules import baremetal_drain
from ansible_collections.jumpstarter.virtual_exporters.plugins.plugin_utils.module_work import (
    ModuleWork,
    ModuleWorkAction,
)


class ActionModule(ModuleWorkAction):
    WORK = ModuleWork("jumpstarter.virtual_exporters.baremetal_drain", baremetal_drain.ARGUMENT_SPEC,
                      baremetal_drain.run)
