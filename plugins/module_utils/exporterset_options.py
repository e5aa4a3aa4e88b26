"""Argument specs of the options several modules share, each documented
once by a doc fragment in ``plugins/doc_fragments/exporterset.py``."""

# jumpstarter.virtual_exporters.exporterset: the set a module acts for, by name.
SET_NAME = dict(
    namespace=dict(type="str", required=True),
    exporterset=dict(type="str", required=True),
)

# jumpstarter.virtual_exporters.exporterset.provisioner: what a provisioner's
# entry-point module plans from.
PROVISIONER = dict(
    exporterset=dict(type="dict", required=True),
    virtual_target_class=dict(type="dict", required=True),
    owned_exporters=dict(type="list", elements="dict", required=True),
    exporters=dict(type="list", elements="str", required=True),
    parameters=dict(type="dict", default={}),
)

# Who records a reconcile's outcome, the status and in-use finalizer of its
# class and the status of the ExporterSetPolicies naming it: the run itself
# ("run": by hand, an AWX job), or the operator that started the run
# ("operator": it records them in process, k8s/reconcile_pass.py).
RECORDED_BY_RUN = "run"
RECORDED_BY_OPERATOR = "operator"
RECORDS = dict(
    records=dict(type="str", choices=[RECORDED_BY_RUN, RECORDED_BY_OPERATOR], default=RECORDED_BY_RUN),
)


def records_here(records):
    """Whether a run told ``records`` records the outcome, the class's and
    the policies' status itself (else the operator that started it does)."""
    choices = RECORDS["records"]["choices"]
    if records not in choices:
        raise ValueError(f"records: {records!r} is not one of {choices}")
    return records == RECORDED_BY_RUN

# jumpstarter.virtual_exporters.exporterset.denied: what the caller's account
# may not do (pool/permissions.py ``Permissions.as_denied``).
DENIED = dict(
    denied_permissions=dict(type="list", elements="str", default=[]),
)
