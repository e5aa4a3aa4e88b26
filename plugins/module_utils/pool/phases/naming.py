"""Naming: the ``create`` entries of new Exporters, named ``<set>-N`` (the
dormant one ``<set>-dormant-N``) clear of every name taken in the namespace."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.phases.model import (
    NewExporter,
)


def taken_names(options, exporters, also=()):
    """The names a new Exporter may not have: the namespace's (``taken_names``
    option), the set's Exporters (terminating ones keep theirs until they
    are gone), and ``also``."""
    taken = set(options.get("taken_names") or ())
    taken.update(e["metadata"]["name"] for e in exporters)
    taken.update(also)
    return taken


def new_exporters(exporter_set, provisioner, taken, count, template_hash=None):
    """``count`` new Exporters of the set, the lowest free numbers first."""
    names = free_names(exporter_set["metadata"]["name"], taken)
    created = []
    for _ in range(count):
        entry = new_exporter(exporter_set, provisioner, next(names))
        if template_hash is not None:
            entry.annotations[c.ANNOTATION_TEMPLATE_HASH] = template_hash
        created.append(entry)
    return created


def dormant_exporter(exporter_set, provisioner, taken):
    """The set's dormant Exporter, named clear of ``taken``."""
    name = next(free_names(f"{exporter_set['metadata']['name']}-dormant", set(taken)))
    entry = new_exporter(exporter_set, provisioner, name)
    entry.annotations[c.ANNOTATION_DORMANT] = "true"
    return entry


def free_names(prefix, taken):
    """The names ``prefix-N`` not in ``taken``, smallest N first; one pass over
    the numbers however many are taken (each name given counts as taken)."""
    index = 0
    while True:
        name = f"{prefix}-{index}"
        if name not in taken:
            yield name
        index += 1


def new_exporter(exporter_set, provisioner, name):
    """A new Exporter: the template's labels and annotations plus the pool's own."""
    set_name = exporter_set["metadata"]["name"]
    template_metadata = ((exporter_set.get("spec") or {}).get("template") or {}).get(
        "metadata") or {}
    labels = dict(template_metadata.get("labels") or {})
    labels[c.LABEL_EXPORTER_SET] = set_name
    annotations = dict(template_metadata.get("annotations") or {})
    annotations[c.ANNOTATION_SET_GENERATION] = str(exporter_set["metadata"].get("generation", ""))
    annotations[c.ANNOTATION_PROVISIONER] = provisioner
    return NewExporter(name, labels, annotations)
