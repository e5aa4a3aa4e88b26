"""``qemu.jumpstarter.dev``: QEMU in a Pod of the set's namespace.

The exporter is a native sidecar of the Pod and QEMU its main container
(k8s/pod.py renders it from the facts below). The Pod is the whole instance:
it goes with its Exporter, an in-place reset is a fresh Pod, and it ends
with QEMU. A set's resources have no ceiling unless the class names one
(the namespace's quota and the class's ``scheduling.resources`` bound them).
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import (
    qemu_common,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    Field,
    Provisioner,
)


class QemuPod(Provisioner):
    name = constants.PROVISIONER_QEMU
    role = "jumpstarter.virtual_exporters.qemu_pod"
    schema = Field("object", "qemu.jumpstarter.dev parameters.", properties=qemu_common.QEMU_PROPERTIES)
    cross_field_rules = qemu_common.QEMU_RULES

    has_pods = True
    removed_with_exporter = True
    resets_with_fresh_pod = True

    runs_qemu_in_pod = True
    renders_qemu_drivers = True

    path_parameters = qemu_common.PATH_PARAMETERS
    default_driver_types = qemu_common.DEFAULT_DRIVER_TYPES
    has_resource_ceilings = True
    forwards_guest_ports = True
