"""The provisioners the collection knows, by their ``spec.provisioner`` string.

The one place a provisioner is registered: ``REGISTRY`` below. The core asks
``get(name)`` and reads the ``Provisioner`` interface (base.py); it never
compares provisioner names.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    Provisioner,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import (
    Corellium,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    QemuBaremetal,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_pod import (
    QemuPod,
)

REGISTRY = {provisioner.name: provisioner for provisioner in (QemuPod(), QemuBaremetal(), Corellium())}
# What an unknown name gets from ``get``: a provisioner with no schema, no
# backends and nothing a set may use, so the core needs no special case.
UNKNOWN = Provisioner()
# The instance failure reasons no retry mends, whichever backend reports them.
UNRECOVERABLE_REASONS = frozenset().union(*(p.unrecoverable_reasons for p in REGISTRY.values()))


def get(name):
    """The provisioner of ``name``; ``UNKNOWN`` (falsy ``known(name)``) for any other value."""
    return REGISTRY.get(name, UNKNOWN) if isinstance(name, str) else UNKNOWN


def known(name):
    return isinstance(name, str) and name in REGISTRY


def names():
    """The known provisioner strings, sorted."""
    return sorted(REGISTRY)
