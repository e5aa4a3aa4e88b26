#!/usr/bin/python
# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

DOCUMENTATION = r"""
---
module: exporterset_apply
short_description: Apply the Kubernetes side of an ExporterSet scale plan in one call
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
  - With I(finalizer), a normal run adds that finalizer to the set first (a set being
    deleted gets none), and a teardown that left nothing held removes it, so the set
    is gone once its instances are released; the operator uses the same finalizer
    (C(plugins/module_utils/k8s/lifecycle.py)), so either may tear down a set the other made.
  - With I(outcome), only the outcome of the whole reconcile is recorded - C(Successful)
    (reason C(LastReconcileSucceeded)) once everything, backends included, is done, or
    C(Failure) (reason C(ReconcileFailed)) with I(failure_message) and a Warning Event; a set
    being deleted gets a C(TeardownFailed) Event and no condition. A C(Successful) run then
    writes, as the operator does, the finalizer and status of the set's class and the status
    of the ExporterSetPolicies naming the set. With I(records=operator) nothing is recorded.
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
  teardown:
    description:
      - C(none) applies the plan.
      - C(delete) deletes every Exporter the set owns (the set is being deleted, reclaimPolicy Delete),
        each only on a fresh read that shows it disabled and unleased from both sides; a leased one
        (disabled or not) is held until its leases end, with a C(WaitingForLeases) condition and Event
        on the set, and the finalizer stays. With I(teardown_only), only those Exporters are deleted.
      - C(detach) removes the set's owner reference from every Exporter it owns, so they
        outlive the set (reclaimPolicy Retain); the dormant Exporter is deleted.
    type: str
    choices: [none, delete, detach]
    default: none
  owned_exporters:
    description: The Exporters the set owns; needed for I(teardown).
    type: list
    elements: dict
    default: []
  write_outcome:
    description:
      - Add the Ansible Operator SDK C(Successful) outcome condition to the status the plan writes.
      - The reconcile role leaves it off and records the outcome with I(outcome) once the
        backends are made.
    type: bool
    default: true
  finalizer:
    description:
      - The finalizer to keep on the set - added before the plan is applied, removed after a
        I(teardown) that left nothing held. Empty leaves the set's finalizers alone.
    type: str
    default: ""
  outcome:
    description:
      - C(none) applies the plan (or the I(teardown)).
      - C(Successful) or C(Failure) records only the outcome of the reconcile (see the
        description); I(plan) is not applied.
    type: str
    choices: [none, Successful, Failure]
    default: none
  failure_message:
    description: With I(outcome=Failure), what failed (the role names the failing step first).
    type: str
    default: ""
  confirm_only:
    description:
      - Check the plan's C(delete) and C(recycle) entries against lease safety on a fresh
        read and return the plan keeping only those allowed now (RV(plan)); apply nothing.
      - With I(teardown), return in RV(releasable) the owned Exporters whose backends may be
        released now; an enabled unleased one is disabled (and released by a later run).
    type: bool
    default: false
  teardown_only:
    description:
      - With I(teardown=delete), the Exporters to delete (RV(releasable) of a I(confirm_only) run,
        whose backends were released); the others are held. Unset, the confirmation is made here.
    type: list
    elements: str
  add_class_finalizer:
    description:
      - With I(outcome=Successful) and I(records=run), add the in-use finalizer to the set's class
        (the class's status is always written, and an unused class released).
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
- name: Apply the Exporter side of the plan and write the status
  jumpstarter.virtual_exporters.exporterset_apply:
    exporterset: "{{ _virtualtarget_jumpstarter_dev_exporterset }}"
    plan: "{{ exporterset_plan }}"
    provisioner: "{{ virtual_target_class.spec.provisioner }}"

- name: Record that the whole reconcile succeeded, backends included
  jumpstarter.virtual_exporters.exporterset_apply:
    exporterset: "{{ _virtualtarget_jumpstarter_dev_exporterset }}"
    plan: {}
    provisioner: "{{ virtual_target_class.spec.provisioner }}"
    outcome: Successful

- name: Detach every Exporter of a set that is deleted with reclaimPolicy Retain
  jumpstarter.virtual_exporters.exporterset_apply:
    exporterset: "{{ _virtualtarget_jumpstarter_dev_exporterset }}"
    plan: {}
    provisioner: qemu.jumpstarter.dev
    teardown: detach
    owned_exporters: "{{ owned_exporters }}"
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
releasable:
  description: With I(confirm_only) and I(teardown), the owned Exporters whose backends may be released now.
  returned: when confirm_only and teardown is not none
  type: list
  elements: str
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
outcome_changed:
  description: With I(outcome), whether the outcome condition was written.
  returned: when outcome is not none
  type: bool
class_changed:
  description: With I(outcome), whether the finalizer or status of the set's class was written.
  returned: when outcome is not none
  type: bool
policies_changed:
  description: With I(outcome), the names of the ExporterSetPolicies whose status was written.
  returned: when outcome is not none
  type: list
  elements: str
"""

import functools

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants, exporterset_options
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import lifecycle, reconcile_pass
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import status as k8s_status
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s.apply import ApplyError
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s.client import (
    k8s_module,
    module_api_client,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.module_diff import Changes, with_diff
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import decision, permissions

try:
    from kubernetes.client.rest import ApiException
except ImportError:  # reported by k8s_module, which needs the kubernetes client
    ApiException = Exception


def record_outcome(module, api_client, exporter_set):
    """What the run records once everything else ran (``outcome``): the
    core's ``finish`` (k8s/reconcile_pass.py), by who records (``records``)."""
    failed = module.params["outcome"] == "Failure"
    error = (module.params["failure_message"] or "the reconcile failed") if failed else None
    result = reconcile_pass.finish(
        api_client, exporter_set, records=module.params["records"], error=error,
        write_condition=module.params["write_outcome"], add_class_finalizer=module.params["add_class_finalizer"],
        check_mode=module.check_mode)
    result["policies_changed"] = result.pop("policies")
    result["class_changed"] = bool((result.pop("class") or {}).get("changed"))
    changes = Changes()
    if result["outcome_changed"]:
        outcome = lifecycle.outcome(exporter_set, error)
        changes.record(_set_key(exporter_set), {"status": {"outcome": _outcome_conditions(exporter_set)}},
                       {"status": {"outcome": [outcome]}})
    return with_diff(module, result, changes.before, changes.after)


def _set_key(exporter_set):
    return f"{constants.EXPORTER_SET.kind}/{(exporter_set.get('metadata') or {}).get('name')}"


def _outcome_conditions(exporter_set):
    return [c for c in (exporter_set.get("status") or {}).get("conditions") or []
            if c.get("type") in k8s_status.OUTCOME_CONDITIONS]


def _record_finalizer(applier, exporter_set, finalizer, changed, adding):
    """The finalizer change (``changed``) among the applier's changes."""
    if not changed:
        return changed
    finalizers = list((exporter_set.get("metadata") or {}).get("finalizers") or [])
    after = [*finalizers, finalizer] if adding else [f for f in finalizers if f != finalizer]
    applier.changes.record(_set_key(exporter_set), {"metadata": {"finalizers": finalizers}},
                           {"metadata": {"finalizers": after}})
    return changed


def _exit(module, applier, **result):
    module.exit_json(**with_diff(module, result, applier.changes.before, applier.changes.after))


def _permissions(module):
    try:
        return permissions.Permissions.from_denied(module.params["denied_permissions"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))


ARGUMENT_SPEC = dict(
    exporterset=dict(type="dict", required=True),
    plan=dict(type="dict", required=True),
    provisioner=dict(type="str", required=True),
    teardown=dict(type="str", choices=["none", "delete", "detach"], default="none"),
    owned_exporters=dict(type="list", elements="dict", default=[]),
    write_outcome=dict(type="bool", default=True),
    confirm_only=dict(type="bool", default=False),
    teardown_only=dict(type="list", elements="str", default=None),
    finalizer=dict(type="str", default=""),
    outcome=dict(type="str", choices=["none", "Successful", "Failure"], default="none"),
    failure_message=dict(type="str", default=""),
    add_class_finalizer=dict(type="bool", default=False),
    **exporterset_options.RECORDS,
    **exporterset_options.DENIED,
)


def run(module):
    exporterset = module.params["exporterset"]
    finalizer = module.params["finalizer"]
    api_client = module_api_client(module)
    if module.params["outcome"] != "none":
        try:
            module.exit_json(**record_outcome(module, api_client, exporterset))
        except ApiException as exc:
            meta = exporterset.get("metadata") or {}
            module.fail_json(msg=f"recording the outcome on ExporterSet {meta.get('namespace')}/{meta.get('name')}: "
                                 f"{exc.status} {exc.reason}")
    applier = reconcile_pass.pool_applier(
        api_client, exporterset, write_outcome=module.params["write_outcome"], check_mode=module.check_mode,
        permissions=_permissions(module))
    applier.seen.update({(e.get("metadata") or {}).get("name"): e for e in module.params["owned_exporters"]})
    try:
        if module.params["confirm_only"] and module.params["teardown"] != "none":
            releasable = applier.confirm_teardown(module.params["teardown"], module.params["owned_exporters"])
            if not module.check_mode and applier.held_why:
                k8s_status.emit_events(applier.api_client, module.params["exporterset"],
                                       applier.held_events())
            _exit(module, applier, changed=bool(applier.result["patched"]), releasable=releasable, **applier.result)
        if module.params["confirm_only"]:
            confirmed = applier.confirm(module.params["plan"])
            if not module.check_mode and applier.held_why:
                k8s_status.emit_events(applier.api_client, module.params["exporterset"],
                                       applier.held_events())
            _exit(module, applier, changed=False, plan=confirmed, **applier.result)
        finalizer_changed = False
        if module.params["teardown"] != "none":
            applier.teardown(module.params["teardown"], module.params["owned_exporters"],
                             module.params["provisioner"], only=module.params["teardown_only"])
            finalizer_changed = _finalizers(functools.partial(reconcile_pass.release_finalizer,
                                                              left=applier.result["held"]),
                                            api_client, exporterset, finalizer, module.check_mode)
            _record_finalizer(applier, exporterset, finalizer, finalizer_changed, adding=False)
        else:
            # The pool pass in its one order (pool/decision.py): the finalizer
            # (exporterset_info names it only for a set whose class exists or
            # that has it), then the plan's pool writes; the backends are the role's.
            writer = _PoolPassWriter(module, api_client, exporterset, applier)
            decision.execute(decision.Pass(finalizer=finalizer or None, pool_writes=decision.PoolWrites(
                module.params["plan"], module.params["write_outcome"])), writer, backends=None)
            finalizer_changed = writer.finalizer_changed
    except ApplyError as exc:
        module.fail_json(msg=str(exc), **applier.result)
    _exit(module, applier, changed=applier.changed() or finalizer_changed, finalizer_changed=finalizer_changed,
          **applier.result)


class _PoolPassWriter:
    """The writes of a pool pass (pool/decision.py ``execute``) from a playbook."""

    def __init__(self, module, api_client, exporterset, applier):
        self.module, self.api_client, self.exporterset, self.applier = module, api_client, exporterset, applier
        self.finalizer_changed = False

    def add_finalizer(self, finalizer):
        self.finalizer_changed = _finalizers(reconcile_pass.keep_finalizer, self.api_client, self.exporterset,
                                             finalizer, self.module.check_mode)
        _record_finalizer(self.applier, self.exporterset, finalizer, self.finalizer_changed, adding=True)

    def write_pool(self, plan, write_outcome):
        # The applier was made with the task's write_outcome.
        return reconcile_pass.apply_pool(self.applier, plan, self.module.params["provisioner"])


def _finalizers(change, api_client, exporterset, finalizer, check_mode):
    try:
        return change(api_client, exporterset, finalizer, check_mode=check_mode)
    except ApiException as exc:
        meta = exporterset.get("metadata") or {}
        raise ApplyError(f"finalizer {finalizer} of ExporterSet {meta.get('namespace')}/{meta.get('name')}: "
                         f"{exc.status} {exc.reason}") from exc


def main():
    run(k8s_module(ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
