#!/usr/bin/python
# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

DOCUMENTATION = r"""
---
module: exporterset_apply
short_description: Apply a scale plan, or a part of one, to an ExporterSet in one call
version_added: 0.1.0
description:
  - Applies what every provisioner shares in a scale plan (see the
    C(jumpstarter.virtual_exporters.scale_plan) filter), that is, it creates
    the set's dormant Exporter when the plan asks for one (first, so that
    leases for the set keep waiting), deletes the Exporters the plan removes,
    disables and re-enables Exporters, creates the new Exporters (owned by the
    set, labelled and annotated), removes a dormant Exporter no longer needed,
    patches bookkeeping annotations on Exporters and on the set, writes the
    set's status through the status subresource and records Kubernetes Events.
  - Exporters are deleted with C(propagationPolicy=Orphan), so the Leases the
    Jumpstarter controller made them own stay as lease history, and with the
    UID and resourceVersion of a fresh read as preconditions. The instance Pod,
    config Secret and credential Secret that name the Exporter's UID as owner
    are deleted after it.
  - Lease safety, on a fresh read before each write (docs/pool-semantics.md) -
    an Exporter is disabled only while no lease holds it from either side (its
    C(status.leaseRef), or a Lease that has not ended naming it in
    C(status.exporterRef)), with its resourceVersion as precondition; it is
    deleted only when it is also seen disabled. An Exporter that fails the
    check, or a write refused with 409 Conflict, is left alone (RV(held)), with
    a Normal C(ExporterHeld) Event naming why; nothing is forced.
  - With I(confirm_only) nothing is written but those Events - RV(plan) is the plan
    keeping only the deletes and in-place resets lease safety allows now, for the
    provisioner role to remove or reset backends before this module applies it.
  - A new Exporter is not created while a credential Secret of its name
    (C(<name>-exporter)) exists (RV(blocked)); that Secret is deleted when no
    live Exporter owns it, so the next reconcile may use the name.
  - Backends (Pods, lab host processes, cloud instances) are left to the
    provisioner role; run its teardown before this module and its provisioning after.
  - A whole reconcile pass (observe, decide, the pool writes, the backends, the outcome,
    a teardown) is M(jumpstarter.virtual_exporters.exporterset_pass)'s; this module writes
    a given plan or part of one, as the provisioner roles and single-purpose playbooks do
    (a Corellium refusal recorded on the set, a drained host's Exporters deleted).
  - With I(finalizer), the run adds that finalizer to the set first (a set being
    deleted gets none).
  - Writes are batched into one module run, which matters because every module
    run costs a Python start.
  - The status write is guarded by the object's resourceVersion and retried
    on a 409 Conflict with a fresh read.
author:
  - Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
attributes:
  idempotent:
    support: full
    description: Applying the same plan to the state it produced reports no change.
options:
  exporterset:
    description: The ExporterSet object as read from the API (metadata with uid is required).
    type: dict
    required: true
  plan:
    description: The scale plan for this set.
    type: dict
    required: true
  provisioner:
    description: Provisioner string of the set's class, recorded on new Exporters.
    type: str
    required: true
  owned_exporters:
    description: The Exporters the set owns, as read (the writes' diff starts from them).
    type: list
    elements: dict
    default: []
  write_outcome:
    description:
      - Add the Ansible Operator SDK C(Successful) outcome condition to the status the plan writes.
    type: bool
    default: true
  finalizer:
    description:
      - The finalizer to keep on the set, added before the plan is applied. Empty leaves the
        set's finalizers alone.
    type: str
    default: ""
  confirm_only:
    description:
      - Check the plan's C(delete) and C(recycle) entries against lease safety on a fresh
        read and return the plan keeping only those allowed now (RV(plan)); apply nothing.
    type: bool
    default: false
extends_documentation_fragment:
  - jumpstarter.virtual_exporters.attributes.diff
  - jumpstarter.virtual_exporters.kubernetes
  - jumpstarter.virtual_exporters.exporterset.denied
"""

EXAMPLES = r"""
- name: Apply the Exporter side of the plan and write the status
  jumpstarter.virtual_exporters.exporterset_apply:
    exporterset: "{{ _virtualtarget_jumpstarter_dev_exporterset }}"
    plan: "{{ exporterset_plan }}"
    provisioner: "{{ virtual_target_class.spec.provisioner }}"

- name: Keep the resets lease safety allows now
  jumpstarter.virtual_exporters.exporterset_apply:
    exporterset: "{{ _virtualtarget_jumpstarter_dev_exporterset }}"
    plan:
      recycle: "{{ owned_exporters | map(attribute='metadata') | selectattr('name', 'in', names) | list }}"
    provisioner: "{{ virtual_target_class.spec.provisioner }}"
    confirm_only: true
  register: resettable
"""

RETURN = r"""
created:
  description: Names of the Exporters created.
  returned: always
  type: list
  elements: str
deleted:
  description: Names of the Exporters deleted (or already gone).
  returned: always
  type: list
  elements: str
patched:
  description: Names of the Exporters whose spec or annotations changed.
  returned: always
  type: list
  elements: str
blocked:
  description: Names not used for a new Exporter because a credential Secret of that name exists.
  returned: always
  type: list
  elements: str
held:
  description:
    - Exporters the plan removes, resets or disables that were left alone, because lease
      safety forbids it now (leased from either side, still enabled), they changed since
      they were read (a new UID, a 409 Conflict) or the dormant Exporter could not be
      created first.
  returned: always
  type: list
  elements: str
conflicts:
  description: Writes refused by their resourceVersion precondition (409 Conflict).
  returned: always
  type: int
plan:
  description: With I(confirm_only), the plan keeping only the deletes and resets allowed now.
  returned: when confirm_only
  type: dict
status_changed:
  description: Whether the set's status was written.
  returned: always
  type: bool
events:
  description: Number of Events recorded.
  returned: always
  type: int
finalizer_changed:
  description: Whether the set's finalizers were changed (added or removed).
  returned: always
  type: bool
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import exporterset_options, module_base
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import errors as api_errors
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.client import (
    AUTH_ARG_SPEC,
    module_api_client,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import reconcile_pass
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s.apply import ApplyError
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import with_diff
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import decision, permissions


def _exit(module, applier, **result):
    module.exit_json(**with_diff(module, result, applier.changes.before, applier.changes.after))


ARGUMENT_SPEC = dict(
    exporterset=dict(type="dict", required=True),
    plan=dict(type="dict", required=True),
    provisioner=dict(type="str", required=True),
    owned_exporters=dict(type="list", elements="dict", default=[]),
    write_outcome=dict(type="bool", default=True),
    confirm_only=dict(type="bool", default=False),
    finalizer=dict(type="str", default=""),
    **exporterset_options.DENIED,
)

# denied_permissions that do not parse are a ValueError.
ERRORS = (*api_errors.module_errors(), ((ApplyError, ValueError), None))


def run(module):
    exporterset = module.params["exporterset"]
    api_client = module_api_client(module)
    denied = permissions.Permissions.from_denied(module.params["denied_permissions"])
    if module.params["confirm_only"]:
        applier = reconcile_pass.pool_applier(api_client, exporterset, check_mode=module.check_mode,
                                              permissions=denied)
        confirmed = applier.confirm(module.params["plan"])
        if not module.check_mode and applier.held_why:
            k8s_status.emit_events(applier.api_client, exporterset, applier.held_events())
        _exit(module, applier, changed=False, plan=confirmed, **applier.result)
    # The finalizer first, then the plan's writes (pool/decision.py's order).
    writer = reconcile_pass.RunWriter(
        api_client, exporterset, module.params["provisioner"], records=reconcile_pass.RECORDED_BY_OPERATOR,
        write_outcome=module.params["write_outcome"], permissions=denied, check_mode=module.check_mode,
        finalizer=None, seen=module.params["owned_exporters"])
    decision.execute(decision.Pass(finalizer=module.params["finalizer"] or None, pool_writes=decision.PoolWrites(
        module.params["plan"], module.params["write_outcome"])), writer, backends=None)
    report = writer.report
    result = {key: getattr(report, key) for key in (*report.LISTS, "conflicts", "status_changed", "events")}
    module.exit_json(**with_diff(module, {**result, "changed": report.changed(),
                                          "finalizer_changed": report.finalizer_changed},
                                 writer.changes.before, writer.changes.after))


def main():
    module_base.main(run, ARGUMENT_SPEC, connection=AUTH_ARG_SPEC, errors=ERRORS)


if __name__ == "__main__":
    main()
