# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""corellium_instance's work (its ``run``; the Corellium REST API only) in the
task's process on a local connection."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.modules import corellium_instance
from ansible_collections.jumpstarter.virtual_exporters.plugins.plugin_utils.module_work import action_for

ActionModule = action_for(corellium_instance, kubernetes=False)
