"""The dormant Exporter: one without a backend, kept while no other Exporter
of the set is enabled, so that a lease for the set waits instead of being
ended by the controller (see pool/plan.py)."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    read_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases import naming
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.model import (
    Removal,
)


def keep_one_enabled(exporter_set, provisioner, exporters, dormant, enabled_before,
                     enabled_after, options, draft, refused=False):
    """The dormant Exporter exists exactly while no other Exporter of the set is enabled.

    ``dormant`` is the survey's (Exporter, leased) pairs of dormant ones.
    ``enabled_after`` counts the other Exporters that are enabled once the
    plan's disables, deletes and re-enables are done; Exporters the plan
    creates count only once they are seen, so an existing dormant Exporter
    stays until then. A new one is not made for a set that has no enabled
    Exporter yet and gets some in this plan: the creates come in the same
    write, and nothing enabled goes meanwhile. A dormant Exporter that holds
    a lease (it should never be Online) is left alone. A set whose template
    labels are ``refused`` (another set's, or reserved) gets none: it would
    carry those labels.
    """
    deleting = bool(exporter_set["metadata"].get("deletionTimestamp"))
    wanted = not deleting and not refused and enabled_after == 0
    removable = sorted((e for e, leased in dormant if not leased),
                       key=lambda e: e["metadata"]["name"])
    if wanted and not dormant and (enabled_before > 0 or not draft.create):
        taken = naming.taken_names(options, exporters, (entry.name for entry in draft.create))
        draft.create_dormant.append(naming.dormant_exporter(exporter_set, provisioner, taken))
        return
    keep = 1 if wanted and len(removable) == len(dormant) else 0
    for exporter in removable[keep:]:
        draft.delete_dormant.append(Removal.of(exporter))


def needs_dormant_exporter(exporters, leaving):
    """Whether a set whose Exporters ``leaving`` are disabled or deleted is left
    with no enabled Exporter and no dormant one (terminating ones do not count)."""
    for exporter in exporters:
        name, _, _, enabled, _, terminating = read_exporter(exporter)
        if terminating:
            continue
        if c.ANNOTATION_DORMANT in (exporter["metadata"].get("annotations") or {}):
            return False
        if enabled and name not in leaving:
            return False
    return True
