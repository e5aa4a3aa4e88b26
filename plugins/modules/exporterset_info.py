#!/usr/bin/python
# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

DOCUMENTATION = r"""
---
module: exporterset_info
short_description: Observe an ExporterSet and plan its next reconcile
version_added: 0.1.0
description:
  - Reads an ExporterSet, its VirtualTargetClass, the Exporters, Leases,
    ExporterSetPolicies and instance Pods of its namespace, and computes the scale plan with the same
    pool logic the operator uses in process.
  - Returns the variables the operator passes to C(playbooks/reconcile.yml), so
    the playbook run by hand does exactly what the operator would do.
  - Decides the set's lifecycle as the operator does
    (C(plugins/module_utils/k8s/lifecycle.py)) - whether the run is a teardown (the set
    is being deleted and carries the C(virtualtarget.jumpstarter.dev/teardown) finalizer)
    and which finalizer the run keeps on the set (RV(finalizer)).
  - When the reconcile is about to make backends, reads the Jumpstarter controller's
    CA from its ConfigMap (by name, as the operator does; see
    C(plugins/module_utils/k8s/controller_ca.py)); an unavailable CA shows in the plan's
    C(Degraded) condition and no backend is made.
author:
  - Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
attributes:
  check_mode:
    support: full
    description: Reads only.
  diff_mode:
    support: none
    description: Returns no diff.
  idempotent:
    support: full
    description: Reads only.
options:
  name:
    description: Name of the ExporterSet.
    type: str
    required: true
  namespace:
    description: Namespace of the ExporterSet.
    type: str
    required: true
  plan_options:
    description:
      - Options of the scale plan over the pool logic's defaults (burst 20, startup_timeout 300,
        offline_timeout 300, failure_threshold 3, failure_backoff_base 10, failure_backoff_max 300,
        min_failing_duration 0, unschedulable_backoff_base 30, unschedulable_backoff_max 600),
        the same the operator uses; a set's ExporterSetPolicy C(healing) overrides the last four.
      - An unknown option, or a value that is not a number >= 0, fails naming it.
    type: dict
    default: {}
extends_documentation_fragment:
  - jumpstarter.virtual_exporters.kubernetes
"""

EXAMPLES = r"""
- name: Plan the next reconcile of one set
  jumpstarter.virtual_exporters.exporterset_info:
    name: rpi4-virtual
    namespace: jumpstarter
  register: observed

- name: Show what it would create
  ansible.builtin.debug:
    var: observed.variables.exporterset_plan.create
"""

RETURN = r"""
exists:
  description: Whether the ExporterSet exists.
  returned: always
  type: bool
variables:
  description:
    - The reconcile playbook's inputs, keyed by variable name
      (C(_virtualtarget_jumpstarter_dev_exporterset), C(ansible_operator_meta),
      C(virtual_target_class), C(owned_exporters), C(owned_pods),
      C(exporterset_plan), C(exporterset_teardown), C(unprovisioned_exporters),
      C(exporters_with_backends), C(controller_tls_ca), C(merged_parameters),
      C(merged_images) and the snake_cased spec).
  returned: when the set exists
  type: dict
deleting:
  description: Whether the set is being deleted.
  returned: when the set exists
  type: bool
finalizer:
  description:
    - The finalizer this reconcile keeps on the set - added on a normal reconcile,
      removed once a teardown is done - or an empty string when the set's class does
      not exist and the set carries none.
  returned: when the set exists
  type: str
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import module_base
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import errors as api_errors
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.client import (
    AUTH_ARG_SPEC,
    module_api_client,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import lifecycle, reconcile_pass
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe

ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    namespace=dict(type="str", required=True),
    plan_options=dict(type="dict", default={}),
)

ERRORS = (*api_errors.module_errors(), (lifecycle.LifecycleError, None))


def run(module):
    name, namespace = module.params["name"], module.params["namespace"]
    options = lifecycle.plan_options(module.params["plan_options"], where="plan_options")
    read = reconcile_pass.observe_by_name(module_api_client(module), namespace, name, options)
    if read is None:
        module.exit_json(changed=False, exists=False)
    exporter_set, observed, plan, _ = read
    teardown = lifecycle.tears_down(exporter_set)
    keeps = observed["class"] is not None or lifecycle.has_finalizer(exporter_set)
    variables = k8s_observe.playbook_variables(exporter_set, observed, plan, teardown=teardown)
    module.exit_json(changed=False, exists=True, variables=variables, deleting=lifecycle.deleting(exporter_set),
                     finalizer=lifecycle.FINALIZER if keeps else "")


def main():
    module_base.main(run, ARGUMENT_SPEC, connection=AUTH_ARG_SPEC, errors=ERRORS)


if __name__ == "__main__":
    main()
