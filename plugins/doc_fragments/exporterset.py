# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)


class ModuleDocFragment:
    # The set a module acts for, by name: modules that run on lab hosts or
    # write one annotation, and so need no object from the API.
    DOCUMENTATION = r"""
options:
  namespace:
    description: Namespace of the ExporterSet.
    type: str
    required: true
  exporterset:
    description: Name of the ExporterSet.
    type: str
    required: true
"""

    # What a provisioner's entry-point module plans from, as the reconcile
    # role holds it: the set, its class and the Exporters it owns, the names
    # of those to act on and the class parameters with the set's overrides.
    PROVISIONER = r"""
options:
  exporterset:
    description: The ExporterSet object, as read from the API.
    type: dict
    required: true
  virtual_target_class:
    description: The set's VirtualTargetClass object.
    type: dict
    required: true
  owned_exporters:
    description: The Exporter objects the set owns, as read from the API.
    type: list
    elements: dict
    required: true
  exporters:
    description: Names of the Exporters the provisioner's entry point acts on.
    type: list
    elements: str
    required: true
  parameters:
    description: The class parameters with the set's overrides deep-merged over them.
    type: dict
    default: {}
"""

    # Who records a reconcile's outcome, its class's status and finalizer and
    # its policies' status (plugins/module_utils/exporterset_options.py).
    RECORDS = r"""
options:
  records:
    description:
      - Who records the outcome of the reconcile, the status and in-use finalizer of the set's
        class and the status of the ExporterSetPolicies naming the set.
      - C(run) - this run does (the reconcile playbook run by hand or by an AWX job).
      - C(operator) - nothing is recorded here; the operator that started the run records them
        in process (C(plugins/module_utils/k8s/reconcile_pass.py)).
    type: str
    choices: [run, operator]
    default: run
"""

    # What the operator's account may not do (plugins/module_utils/pool/permissions.py).
    DENIED = r"""
options:
  denied_permissions:
    description:
      - The grants the caller's account lacks, each C(feature:group resource verb), as the operator
        passes them to its runs (C(denied_permissions)) after asking the API server at start-up;
        the features they name are done within what is granted (docs/install.md).
      - C(secret-delete) - an Exporter is deleted with C(propagationPolicy=Background) and its
        Secrets go by garbage collection, not one by one.
      - C(exec-reset) - an instance is reset by a fresh Pod, not in its running Pod.
    type: list
    elements: str
    default: []
"""
