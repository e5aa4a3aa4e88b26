# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""exporter_pods as every task runs it: on a local connection, its work
(``module_utils/k8s/exporter_pods.py``) in the task's worker process;
anywhere else, the module (``plugin_utils/module_work.py`` says when). The
reconcile role runs it once for every backend run."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import exporter_pods
from ansible_collections.jumpstarter.virtual_exporters.plugins.plugin_utils.module_work import (
    ModuleWork,
    ModuleWorkAction,
)

WORK = ModuleWork(
    "jumpstarter.virtual_exporters.exporter_pods",
    exporter_pods.ARGUMENT_SPEC,
    exporter_pods.run,
    errors=exporter_pods.ERRORS,
)
run_here = WORK.run_here


class ActionModule(ModuleWorkAction):
    WORK = WORK
