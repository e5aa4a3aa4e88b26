#!/usr/bin/python
# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

DOCUMENTATION = r"""
---
module: virtualtargetclass_sync
short_description: Keep a VirtualTargetClass's in-use finalizer and status
version_added: 0.1.0
description:
  - Reads a VirtualTargetClass and the ExporterSets of its namespace, and
    writes what the operator writes for it (C(plugins/module_utils/pool/class_status.py)),
    with the same core (C(plugins/module_utils/k8s/reconcile_pass.py)) that the reconcile
    role's C(exporterset_apply) records the class with once a run by hand succeeds.
  - While any ExporterSet names the class (one being deleted included) the
    class carries the finalizer C(virtualtarget.jumpstarter.dev/in-use); once
    none does the finalizer is removed, and a class deleted meanwhile goes.
    With I(add_finalizer=false) a finalizer already there is kept or removed
    the same way, but none is added.
  - The status lists the sets (C(sets), C(setCount)), says whether the class's
    parameters are valid (condition C(Valid), reason C(Valid),
    C(InvalidParameters) or C(UnknownProvisioner), the message naming each
    field) and carries C(observedGeneration). A C(Valid) condition that turns
    False is also recorded as a Warning Event on the class.
  - Writes are guarded by the class's resourceVersion and retried on a 409
    Conflict with a fresh read; in check mode nothing is written and the
    result says what would be.
author:
  - Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
attributes:
  idempotent:
    support: full
    description: A second run on the state it produced reports no change.
options:
  name:
    description: Name of the VirtualTargetClass.
    type: str
    required: true
  namespace:
    description: Namespace of the VirtualTargetClass (and of the sets that may name it).
    type: str
    required: true
  add_finalizer:
    description:
      - Add the in-use finalizer to a class in use that does not have it yet.
      - Leave it C(false) where nothing runs once the last set is deleted (no
        operator), or the class would stay Terminating when deleted.
    type: bool
    default: true
extends_documentation_fragment:
  - jumpstarter.virtual_exporters.attributes.diff
  - jumpstarter.virtual_exporters.kubernetes
"""

EXAMPLES = r"""
- name: Keep the class of a set protected while the set names it
  jumpstarter.virtual_exporters.virtualtargetclass_sync:
    name: qemu-rpi4
    namespace: jumpstarter
  register: vclass

- name: Show the sets that use it
  ansible.builtin.debug:
    var: vclass.sets
"""

RETURN = r"""
exists:
  description: Whether the class exists (after the run; a deleted, unused class is gone).
  returned: always
  type: bool
sets:
  description: Names of the ExporterSets that name the class.
  returned: always
  type: list
  elements: str
finalizers:
  description: The class's finalizers as wanted.
  returned: when the class exists
  type: list
  elements: str
status:
  description: The class's status as wanted (null when the class is going).
  returned: when the class exists
  type: dict
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants, module_base
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.ansible_compat import diff_mode
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import errors as api_errors
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.client import (
    AUTH_ARG_SPEC,
    module_api_client,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import reconcile_pass
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import with_diff

ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    namespace=dict(type="str", required=True),
    add_finalizer=dict(type="bool", default=True),
)

ERRORS = api_errors.module_errors()


def run(module):
    name, namespace = module.params["name"], module.params["namespace"]
    api_client = module_api_client(module)
    before = _written_parts(_read_class(api_client, namespace, name)) if diff_mode(module) else None
    result = reconcile_pass.sync_class(api_client, namespace, name,
                                       add_finalizer=module.params["add_finalizer"], check_mode=module.check_mode)
    after = _written_parts({"metadata": {"finalizers": result.get("finalizers")}, "status": result.get("status")}
                           if result["exists"] else None)
    key = f"VirtualTargetClass/{name}"
    module.exit_json(**with_diff(module, dict(changed=result["changed"], exists=result["exists"], sets=result["sets"],
                                              finalizers=result.get("finalizers"), status=result.get("status")),
                                 {key: before}, {key: after}))


def _read_class(api_client, namespace, name):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        return client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            *constants.VIRTUAL_TARGET_CLASS.at(namespace), name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _written_parts(vclass):
    """What the module writes of a class: its finalizers and status (None: no class)."""
    if vclass is None:
        return None
    return {"metadata": {"finalizers": (vclass.get("metadata") or {}).get("finalizers") or []},
            "status": vclass.get("status") or {}}


def main():
    module_base.main(run, ARGUMENT_SPEC, connection=AUTH_ARG_SPEC, errors=ERRORS)


if __name__ == "__main__":
    main()
