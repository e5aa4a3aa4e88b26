# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""exporterset_apply's work (its ``run``; the API server only) in the task's
process on a local connection."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.modules import exporterset_apply
from ansible_collections.jumpstarter.virtual_exporters.plugins.plugin_utils.module_work import action_for

ActionModule = action_for(exporterset_apply)
