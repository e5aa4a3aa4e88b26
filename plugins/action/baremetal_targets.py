# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""baremetal_targets's work (its ``run``; the API server and the controller's
lab-host SSH files only) in the task's process on a local connection."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.modules import baremetal_targets
from ansible_collections.jumpstarter.virtual_exporters.plugins.plugin_utils.module_work import action_for

ActionModule = action_for(baremetal_targets)
