#!/usr/bin/python
# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

DOCUMENTATION = r"""
---
module: exporterset_pass
short_description: Observe an ExporterSet, decide its reconcile pass and do it, around its backends
version_added: 0.1.0
description:
  - One pass of the reconcile role in at most two calls, around the provisioner role's backend tasks.
    The pass is decided and done in the one order the operator's is (C(plugins/module_utils/pool/decision.py)).
  - The first call (I(name), I(namespace)) reads the set, its VirtualTargetClass and the Exporters, Leases,
    ExporterSetPolicies and instance Pods of its namespace, plans with the pool logic the operator uses,
    and decides the pass. It then adds the set's C(virtualtarget.jumpstarter.dev/teardown) finalizer
    (a set whose class exists), writes the pool part of the plan (Exporters created, enabled and
    disabled, Exporters whose instance is their Pod deleted with it, annotations, the set's status and
    Events) and checks the deletes and resets that need the provisioner's backends against lease safety
    on a fresh read (docs/pool-semantics.md). It returns what the backends may do now (RV(backends)).
  - A set being deleted that carries the finalizer is torn down by the class's C(reclaimPolicy) - an
    enabled unleased Exporter is disabled, and looked at again a second later on fresh reads; a leased
    one waits for its leases to end (a C(WaitingForLeases) condition and Event) and the finalizer stays.
    RV(backends)'s C(release) names the Exporters whose backends may be released now.
  - When nothing is left for the backends the first call finishes the pass itself. Otherwise, once the
    backends ran, a second call with the first call's RV(state) as I(finish) does the rest - the
    Exporters whose backends were removed are deleted and those reset in place enabled again (a
    teardown's Exporters deleted or detached, the finalizer removed once nothing is held), then the
    outcome (C(Successful), reason C(LastReconcileSucceeded)), the finalizer and status of the set's class
    and the status of the ExporterSetPolicies naming the set, as the operator writes them. RV(finish)
    says whether that call has anything to do.
  - With I(failure) the second call records the failure instead - C(Failure) (reason C(ReconcileFailed))
    naming the step, and a Warning Event (C(TeardownFailed) for a set being deleted). A write of the
    first call that fails is recorded the same way before the module fails.
  - Exporters are deleted with C(propagationPolicy=Orphan), so the Jumpstarter controller's Leases stay,
    with the UID and resourceVersion of a fresh read as preconditions; a write refused with 409 Conflict,
    or an Exporter lease safety forbids touching now, is left alone (C(held)) with a Normal
    C(ExporterHeld) Event, and a later pass looks again.
author:
  - Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
attributes:
  idempotent:
    support: full
    description: A pass over the state a pass produced writes nothing.
options:
  name:
    description: Name of the ExporterSet (the first call).
    type: str
  namespace:
    description: Namespace of the ExporterSet (the first call).
    type: str
  plan_options:
    description:
      - Options of the scale plan over the pool logic's defaults (burst 20, startup_timeout 300,
        offline_timeout 300, failure_threshold 3, ...), the same the operator uses.
      - An unknown option, or a value that is not a number >= 0, fails naming it.
    type: dict
    default: {}
  finish:
    description:
      - The second call - the RV(state) the first call returned (or the operator's
        C(exporterset_pass_begun.state)), once the backend tasks ran.
    type: dict
  failure:
    description: With I(finish), what failed (the role names the failing step first); recorded instead.
    type: str
  write_outcome:
    description: Write the outcome conditions (the watch's C(manageStatus)).
    type: bool
    default: true
  add_class_finalizer:
    description:
      - Add the in-use finalizer to the set's class when the run records (the class's status is always
        written, and an unused class released).
      - Only where an operator runs that removes it once the class's last set is deleted.
    type: bool
    default: false
extends_documentation_fragment:
  - jumpstarter.virtual_exporters.attributes.diff
  - jumpstarter.virtual_exporters.kubernetes
  - jumpstarter.virtual_exporters.exporterset.records
  - jumpstarter.virtual_exporters.exporterset.denied
"""

EXAMPLES = r"""
- name: Observe, decide and do the pool part of the pass
  jumpstarter.virtual_exporters.exporterset_pass:
    name: rpi4-virtual
    namespace: jumpstarter
  register: begun

- name: Make the backends of the new Exporters
  when: begun.backends.provision | default([]) | length > 0
  ansible.builtin.include_role:
    name: jumpstarter.virtual_exporters.qemu_pod
    tasks_from: provision
  vars:
    provisioner_exporters: "{{ begun.backends.provision }}"

- name: Finish the pass once the backends ran
  when: begun.finish | default(false)
  jumpstarter.virtual_exporters.exporterset_pass:
    finish: "{{ begun.state }}"
"""

RETURN = r"""
exists:
  description: Whether the ExporterSet exists (the first call).
  returned: always
  type: bool
deleting:
  description: Whether the set is being deleted.
  returned: when the set exists
  type: bool
teardown:
  description: Whether this pass tears the set down (it is deleted and carries the finalizer).
  returned: when the set exists
  type: bool
variables:
  description:
    - What the provisioner roles read, under the names the operator passes them as extra vars
      (C(_virtualtarget_jumpstarter_dev_exporterset), C(virtual_target_class), C(owned_exporters),
      C(merged_parameters), C(merged_images), C(controller_tls_ca), C(provisioner_role), ...).
  returned: when the set exists (the first call)
  type: dict
backends:
  description:
    - What the backend tasks may do now, each checked against lease safety on a fresh read -
      C(remove), C(reset), C(provision), C(resync) (Exporter names of a living set), C(release) and
      C(tasks) (a teardown's Exporters and the provisioner role's tasks file, C(remove) or C(retain)).
  returned: when the set exists (the first call)
  type: dict
finish:
  description: Whether a second call has anything to do once the backends ran.
  returned: when the set exists (the first call)
  type: bool
state:
  description: What the second call finishes from (its I(finish)); none once the pass is finished.
  returned: when the set exists (the first call)
  type: dict
report:
  description:
    - What the pass wrote - C(created), C(deleted), C(patched), C(blocked) (a credential Secret of the
      name in the way), C(held) (left alone by lease safety or a 409) Exporter names, C(conflicts),
      C(status_changed), C(events), C(finalizer_changed), C(outcome_changed), C(class_changed) and
      C(policies_changed) (names); a second call's counts the first call's in.
  returned: always
  type: dict
"""

from datetime import UTC, datetime

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import exporterset_options, module_base
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import errors as api_errors
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.client import (
    AUTH_ARG_SPEC,
    module_api_client,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import lifecycle, reconcile_pass
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s.apply import ApplyError
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import with_diff
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import permissions


def _exit(module, writer, **result):
    report = writer.report
    before, after = writer.changes.before, writer.changes.after
    module.exit_json(**with_diff(module, {**result, "changed": report.changed(), "report": report.to_dict()},
                                 before, after))


def first_call(module, api_client):
    params = module.params
    options = lifecycle.plan_options(params["plan_options"], where="plan_options")
    denied = permissions.Permissions.from_denied(params["denied_permissions"])
    records_here = exporterset_options.records_here(params["records"])
    read = reconcile_pass.observe_by_name(api_client, params["namespace"], params["name"], options)
    if read is None:
        module.exit_json(changed=False, exists=False, report=reconcile_pass.Report().to_dict())
    exporter_set, observed, plan, objects = read
    deleting = lifecycle.deleting(exporter_set)
    if deleting and not lifecycle.tears_down(exporter_set):
        # Deleted without the finalizer: not this pass's to tear down.
        module.exit_json(changed=False, exists=True, deleting=True, teardown=False, variables={},
                         backends=reconcile_pass.Handoff().to_dict(), finish=False, state={},
                         report=reconcile_pass.Report().to_dict())
    writer, finished = reconcile_pass.begin(
        api_client, exporter_set, observed, plan, objects, records=params["records"],
        write_outcome=params["write_outcome"], add_class_finalizer=params["add_class_finalizer"],
        permissions=denied, check_mode=module.check_mode)
    variables = k8s_observe.playbook_variables(exporter_set, observed, plan, teardown=bool(writer.teardown))
    due = not finished and writer.finish_due(objects if records_here else None, datetime.now(UTC))
    _exit(module, writer, exists=True, deleting=deleting, teardown=bool(writer.teardown), variables=variables,
          **reconcile_pass.begun(writer, due, finished))


def second_call(module, api_client):
    state = module.params["finish"]
    try:
        writer = reconcile_pass.RunWriter.from_state(api_client, state, check_mode=module.check_mode)
    except (KeyError, TypeError, ValueError) as exc:
        module.fail_json(msg=f"finish: not the state of a begun pass ({exc})")
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import decision

    try:
        decision.finish(writer.decided(), writer, error=module.params["failure"])
    except (ApplyError, *api_errors.CLIENT_ERRORS) as exc:
        meta = writer.exporter_set.get("metadata") or {}
        message = api_errors.message(
            exc, f"finishing the pass of ExporterSet {meta.get('namespace')}/{meta.get('name')}"
        )
        if module.params["failure"] is None and writer.decided().records:
            writer.record(message)
        module.fail_json(msg=message, report=writer.report.to_dict())
    _exit(module, writer)


ARGUMENT_SPEC = dict(
    name=dict(type="str"),
    namespace=dict(type="str"),
    plan_options=dict(type="dict", default={}),
    finish=dict(type="dict"),
    failure=dict(type="str"),
    write_outcome=dict(type="bool", default=True),
    add_class_finalizer=dict(type="bool", default=False),
    **exporterset_options.RECORDS,
    **exporterset_options.DENIED,
)

# The options that do not parse are a ValueError (plan_options a LifecycleError);
# a failed write of the first call's (reconcile_pass.begin) an ApplyError.
ERRORS = (*api_errors.module_errors("ExporterSet pass"), (ApplyError, lambda error: {"report": {}}), (ValueError, None))


def run(module):
    params = module.params
    if (params["finish"] is None) == (params["name"] is None):
        module.fail_json(msg="one of name (with namespace: the first call) or finish (the second) is required")
    if params["name"] is not None and not params["namespace"]:
        module.fail_json(msg="namespace: required with name")
    if params["failure"] is not None and params["finish"] is None:
        module.fail_json(msg="failure: only with finish")
    api_client = module_api_client(module)
    if params["finish"] is not None:
        second_call(module, api_client)
    else:
        first_call(module, api_client)


def main():
    module_base.main(run, ARGUMENT_SPEC, connection=AUTH_ARG_SPEC, errors=ERRORS)


if __name__ == "__main__":
    main()
