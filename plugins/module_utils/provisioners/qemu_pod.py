"""``qemu.jumpstarter.dev``: QEMU in a Pod of the set's namespace.

The exporter is a native sidecar of the Pod and QEMU its main container
(k8s/pod.py renders the Pod, asking this provisioner for its parts). The Pod
is the whole instance: it goes with its Exporter, an in-place reset is a
fresh Pod, and it ends with QEMU. A set's resources have no ceiling unless
the class names one (the namespace's quota and the class's
``scheduling.resources`` bound them).

The guest reaches nothing but its Pod's loopback: a TcpNetwork entry without
a host names a port of the guest, which QEMU forwards from a local port of
the Pod (``guest_port_forwards``); a set whose entry names no valid port is
refused (``guest_network_violations``).

Pure: no I/O.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import (
    qemu_common,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    POD_RUN_DIR,
    Field,
    named_drivers,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_common import (
    TCP_NETWORK_DRIVER_TYPE,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.qemu import argv as qemu_argv

# JEP-0014's template reaches the guest's SSH with a TcpNetwork entry that
# names a port and no host. In the Pod QEMU forwards a local port of the Pod
# to each such guest port (``guest_port_forwards``), and the entry is pointed
# at it (``network_driver_overrides``).
GUEST_SSH_PORT = 22
# The first local port a guest port is forwarded to; the next ones follow.
FORWARD_BASE_PORT = 22000
FORWARD_HOST = "127.0.0.1"


class QemuPod(qemu_common.QemuProvisioner):
    name = constants.PROVISIONER_QEMU
    role = "jumpstarter.virtual_exporters.qemu_pod"
    schema = Field("object", "qemu.jumpstarter.dev parameters.", properties=qemu_common.QEMU_PROPERTIES)
    cross_field_rules = qemu_common.QEMU_RULES

    has_pods = True
    removed_with_exporter = True
    resets_with_fresh_pod = True

    # QEMU that ends is not started again on the used disk: the Pod ends.
    pod_restart_policy = "Never"
    # A reset in place is a fresh Pod (roles/qemu_pod/tasks/reset.yml), so the
    # used VM never takes a second lease.
    serves_one_lease = True
    # An exporter registers once QEMU listens on QMP: never Online (and so
    # leased) before the VM it drives exists.
    exporter_waits_for = (qemu_argv.QMP_SOCKET,)

    def driver_overrides(self, drivers, parameters, instance_name):
        """The exporter sidecar drives the QEMU of the Pod through the sockets
        in the shared run directory, and each TcpNetwork entry without a host
        reaches the guest through QEMU's forward on the Pod's loopback."""
        overrides = qemu_common.qemu_driver_overrides(drivers, POD_RUN_DIR)
        overrides.update(network_driver_overrides(drivers))
        return overrides

    def pod_containers(self, pod):
        """The exporter as a native sidecar (an init container that restarts)
        and QEMU as the main container, sharing the run directory's sockets;
        first the disk's init container when the guest has a disk, and the
        images given by url fetched into the node's cache before that."""
        runtime_mounts = [pod.run_mount]
        files = qemu_argv.runtime_files(pod.parameters, POD_RUN_DIR)
        if files:
            runtime_mounts = [pod.run_mount, pod.fetch_images(files)]
        init_containers = []
        disk_argv = qemu_argv.disk_create_argv(pod.parameters, POD_RUN_DIR)
        if disk_argv:
            init_containers.append(
                pod.container("disk", pod.images["runtime"], {"command": disk_argv, "volumeMounts": runtime_mounts}))
        pod.exporter["restartPolicy"] = "Always"
        init_containers.append(pod.exporter)
        runtime = pod.container(
            "qemu",
            pod.images["runtime"],
            {
                "command": qemu_argv.qemu_argv(pod.parameters, run_dir=POD_RUN_DIR, name=pod.name, accel=pod.accel,
                                               port_forwards=guest_port_forwards(pod.drivers)),
                "volumeMounts": runtime_mounts,
            },
        )
        if pod.resources:
            runtime["resources"] = pod.resources
        return init_containers, [runtime]

    def template_violations(self, drivers):
        return guest_network_violations(drivers)


def _guest_network_entries(drivers):
    """``(index, name, guest port)`` of each TcpNetwork entry that names no host."""
    entries = []
    for index, driver in enumerate(named_drivers(drivers)):
        if not isinstance(driver, dict) or driver.get("type") != TCP_NETWORK_DRIVER_TYPE:
            continue
        config = driver.get("config") or {}
        if not isinstance(config, dict) or config.get("host"):
            continue
        port = config.get("port")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"drivers[{index}].config.port: a TcpNetwork entry without a host reaches "
                             f"this port of the guest: an integer from 1 to 65535, not {port!r}")
        entries.append((index, driver.get("name"), port))
    return entries


def guest_network_violations(drivers):
    """The template's TcpNetwork entries without a host whose port is not a
    guest port, as messages naming the field (empty when all are)."""
    try:
        _guest_network_entries(drivers)
    except ValueError as exc:
        return [f"spec.template.spec.{exc}"]
    return []


def guest_port_forwards(drivers):
    """Local port -> guest port: what QEMU forwards in the instance's Pod.

    The guest's SSH port always, and each port a TcpNetwork entry without a
    host names; local ports from ``FORWARD_BASE_PORT`` up, in the order of
    the guest ports, so the same template always gives the same map.
    """
    ports = sorted({GUEST_SSH_PORT} | {port for _, _, port in _guest_network_entries(drivers)})
    return {FORWARD_BASE_PORT + offset: port for offset, port in enumerate(ports)}


def network_driver_overrides(drivers):
    """Each TcpNetwork entry without a host, pointed at its forward to the guest.

    An entry that names a host is the template's own and is kept as it is:
    it reaches whatever the Pod reaches (docs/security.md).
    """
    local = {guest: local for local, guest in guest_port_forwards(drivers).items()}
    return {name: {"config": {"host": FORWARD_HOST, "port": local[port]}}
            for _, name, port in _guest_network_entries(drivers) if isinstance(name, str) and name}
