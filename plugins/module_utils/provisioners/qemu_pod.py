"""``qemu.jumpstarter.dev``: QEMU in a Pod of the set's namespace.

The exporter is a native sidecar of the Pod and QEMU its main container
(k8s/pod.py renders the Pod, asking this provisioner for its parts). The Pod
is the whole instance: it goes with its Exporter and it ends with QEMU. An
in-place reset (InPlaceReuse) gives the running Pod a fresh VM: QEMU's
container runs QEMU under a small supervisor (``RUNTIME_SUPERVISOR``) that,
asked by the reset command the operator runs in the container
(``reset_in_pod``), stops QEMU, makes a fresh disk and starts QEMU again;
a QEMU that ends unasked ends the container, and so the Pod. A set's resources have no ceiling unless
the class names one (the namespace's quota and the class's
``scheduling.resources`` bound them).

The guest reaches nothing but its Pod's loopback: a TcpNetwork entry without
a host names, as upstream's provisioner reads it, the host side of QEMU's
forward to the guest's SSH (or to the guest port a ``hostfwd`` of the
template's Qemu driver gives for it); QEMU forwards a local port of the Pod
of its own choosing (``guest_port_forwards``) and the entry is pointed at it;
a set whose entry names no valid port is refused
(``guest_network_violations``).

QEMU's container (and the disk's) reads the instance's images given by url
from the node's image cache: it gets those files alone, read-only
(``PodParts.fetch_images``), whatever image it runs; a set may run it in an
image of its own only when the class allows that image (``class_images``).
Its run directory is bounded by the writable disk (``run_dir_bytes``).

Pure: no I/O.
"""

import shlex

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners import (
    qemu,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    EXPORTER_STOPPED_MARKER,
    LEASE_ENDED_MARKER,
    POD_RUN_DIR,
    Field,
    named_drivers,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    TCP_NETWORK_DRIVER_TYPE,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import argv as qemu_argv
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)

# JEP-0014's template reaches the guest's SSH with a TcpNetwork entry that
# names a port and no host. In the Pod QEMU forwards a local port of the Pod
# to the guest port of each (``guest_port_forwards``), and the entry is
# pointed at it (``network_driver_overrides``).
GUEST_SSH_PORT = 22
# The first local port a guest port is forwarded to; the next ones follow.
FORWARD_BASE_PORT = 22000
FORWARD_HOST = "127.0.0.1"

# The file in the run directory that asks the supervisor for a fresh VM.
RESET_REQUEST = "reset-requested"
# How long the reset command waits for the fresh QEMU's QMP socket.
RESET_TIMEOUT_SECONDS = 120
# Room in the run directory beside the writable disk: the sockets, the links
# to the images, the serial log and the qcow2 overlay's own tables.
RUN_DIR_HEADROOM = 1 << 30

# QEMU's container: the supervisor is PID 1 and QEMU ("$@") its child.
# SIGTERM (the Pod's end) is passed on to QEMU and the container ends with
# it. SIGUSR1 (the reset command) stops QEMU too; once it has ended with the
# reset file present, the supervisor removes the old sockets, makes a fresh
# disk ({disk}), removes the reset file and starts QEMU again. Each start
# gets a fresh UEFI variable store first ({uefi_vars}) when the guest boots
# the default UEFI. A QEMU that
# ends without being asked (crashed, killed, powered off) ends the
# container with QEMU's code: the Pod ends and the instance is replaced,
# never started again on a used disk.
RUNTIME_SUPERVISOR = (
    'run="{run}"; qemu=; term=; '
    "trap 'term=1; [ -n \"$qemu\" ] && kill -TERM $qemu 2>/dev/null' TERM INT; "
    "trap '[ -n \"$qemu\" ] && kill -TERM $qemu 2>/dev/null' USR1; "
    "while :; do "
    'rm -f "$run/{qmp}" "$run/{serial}"; '
    "{uefi_vars}"
    '"$@" & qemu=$!; '
    "while :; do wait $qemu; code=$?; kill -0 $qemu 2>/dev/null || break; done; "
    'if [ -n "$term" ] || [ ! -e "$run/{reset}" ]; then exit $code; fi; '
    'echo "reset in place: a fresh disk and a fresh QEMU"; '
    'rm -f "$run/{qmp}" "$run/{serial}"; '
    "{disk}"
    'rm -f "$run/{reset}"; '
    "done"
)

# The reset command, run in QEMU's container once the Exporter is disabled
# and unleased (a fresh read, k8s/apply.py): only an instance whose exporter
# has ended with its lease (the marker its afterLease hook wrote) is reset,
# once its guard says no ``jmp run`` is left (it may still be ending that
# lease); the supervisor is asked, the command waits for the fresh QEMU's
# QMP socket and then removes the marker, which lets the exporter's guard
# (k8s/pod.py) serve the fresh VM. Any other exit code than 0 means no reset
# was made: the caller replaces the Pod.
RESET_COMMAND = (
    'run="{run}"; '
    'if [ ! -e "$run/{marker}" ]; then echo "no ended lease to reset from"; exit 3; fi; '
    "waited=0; "
    'while [ ! -e "$run/{stopped}" ]; do '
    'if [ $waited -ge {timeout} ]; then echo "the exporter did not stop in {seconds} s"; exit 6; fi; '
    "sleep 0.1; waited=$((waited + 1)); done; "
    'touch "$run/{reset}" && kill -USR1 1 || exit 4; '
    "waited=0; "
    'while [ -e "$run/{reset}" ] || [ ! -S "$run/{qmp}" ]; do '
    'if [ $waited -ge {timeout} ]; then echo "QEMU did not start again in {seconds} s"; exit 5; fi; '
    "sleep 0.1; waited=$((waited + 1)); done; "
    'rm -f "$run/{marker}"; echo "reset"'
)


def runtime_command(qemu, disk, uefi_vars=None):
    """QEMU's container command: the supervisor around ``qemu`` (an argv),
    making a fresh disk with ``disk`` (an argv, or None) on each reset and
    a fresh UEFI variable store with ``uefi_vars`` (an argv, or None) before
    each start."""
    make_disk = f"{shlex.join(disk)} || exit 1; " if disk else ""
    make_vars = f"{shlex.join(uefi_vars)} || exit 1; " if uefi_vars else ""
    script = RUNTIME_SUPERVISOR.format(run=POD_RUN_DIR, qmp=qemu_argv.QMP_SOCKET, serial=qemu_argv.SERIAL_SOCKET,
                                       reset=RESET_REQUEST, disk=make_disk, uefi_vars=make_vars)
    return ["/bin/sh", "-c", script, "qemu", *qemu]


class QemuPod(qemu.QemuProvisioner):
    name = constants.PROVISIONER_QEMU
    role = "jumpstarter.virtual_exporters.qemu_pod"
    schema = Field("object", "qemu.jumpstarter.dev parameters.", properties=qemu.QEMU_PROPERTIES)
    cross_field_rules = qemu.QEMU_RULES
    class_images = {"runtime": "its containers run QEMU on the instance's images from the node's cache"}

    # The Qemu driver's hostfwd: forwards of the Pod's QEMU.
    served_qemu_config = (qemu.HOSTFWD_KEY,)

    has_pods = True
    removed_with_exporter = True
    # A Pod that cannot be reset where it runs is replaced by a fresh one.
    resets_with_fresh_pod = True

    # QEMU that ends is not started again on the used disk: the Pod ends.
    pod_restart_policy = "Never"
    # Its exporter ends with each lease and serves again only once the VM
    # is reset in place (the marker gone) or never, in a Pod that is
    # replaced: the used VM never takes a second lease.
    serves_one_lease = True
    # The container that resets the VM in a running Pod, and its command.
    reset_in_pod = ("qemu", ["/bin/sh", "-c", RESET_COMMAND.format(
        run=POD_RUN_DIR, marker=LEASE_ENDED_MARKER, stopped=EXPORTER_STOPPED_MARKER, reset=RESET_REQUEST,
        qmp=qemu_argv.QMP_SOCKET,
        timeout=RESET_TIMEOUT_SECONDS * 10, seconds=RESET_TIMEOUT_SECONDS)])
    # An exporter registers once QEMU listens on QMP: never Online (and so
    # leased) before the VM it drives exists.
    exporter_waits_for = (qemu_argv.QMP_SOCKET,)

    def driver_overrides(self, drivers, parameters, instance_name):
        """The exporter sidecar drives the QEMU of the Pod through the sockets
        in the shared run directory, and each TcpNetwork entry without a host
        reaches the guest through QEMU's forward on the Pod's loopback."""
        overrides = qemu.qemu_driver_overrides(drivers, POD_RUN_DIR)
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
            runtime_mounts = [pod.run_mount, *pod.fetch_images(files)]
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
                "command": runtime_command(
                    qemu_argv.qemu_argv(pod.parameters, run_dir=POD_RUN_DIR, name=pod.name, accel=pod.accel,
                                        port_forwards=guest_port_forwards(pod.drivers)),
                    disk_argv, qemu_argv.uefi_vars_argv(pod.parameters, POD_RUN_DIR)),
                "volumeMounts": runtime_mounts,
            },
        )
        if pod.resources:
            runtime["resources"] = pod.resources
        return init_containers, [runtime]

    def template_violations(self, drivers):
        return guest_network_violations(drivers)

    def run_dir_bytes(self, parameters, virtual_target_class):
        """The writable disk and ``RUN_DIR_HEADROOM``: the disk's
        ``resources.storage``, or without it the class's image size limit
        (an overlay grows up to the size of its base)."""
        if not qemu_argv.has_disk(parameters):
            return RUN_DIR_HEADROOM
        size = qemu_argv.storage_bytes(parameters)
        if size is None:
            size = image_fetch.class_max_bytes(virtual_target_class)
        return size + RUN_DIR_HEADROOM


def _guest_network_entries(drivers):
    """``(index, name, host-side port, guest port)`` of each TcpNetwork entry
    that names no host.

    As upstream's provisioner reads it, the entry's ``port`` is the host side
    of QEMU's forward to the guest: to the guest port a ``hostfwd`` of the
    template's Qemu driver gives for that host port, else to the guest's SSH.
    """
    hostfwd, errors = qemu.qemu_hostfwd(drivers)
    if errors:
        raise ValueError(errors[0].removeprefix("spec.template.spec."))
    entries = []
    for index, driver in enumerate(named_drivers(drivers)):
        if not isinstance(driver, dict) or driver.get("type") != TCP_NETWORK_DRIVER_TYPE:
            continue
        config = driver.get("config") or {}
        if not isinstance(config, dict) or config.get("host"):
            continue
        port = config.get("port")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"drivers[{index}].config.port: a TcpNetwork entry without a host names the "
                             f"host side of QEMU's forward to the guest's SSH (or to a hostfwd's guestport): "
                             f"an integer from 1 to 65535, not {port!r}")
        entries.append((index, driver.get("name"), port, hostfwd.get(port, GUEST_SSH_PORT)))
    return entries


def guest_network_violations(drivers):
    """The template's TcpNetwork entries without a host whose port is not a
    port, and its Qemu driver's ``hostfwd`` entries that are not forwards, as
    messages naming the field (empty when all are)."""
    try:
        _guest_network_entries(drivers)
    except ValueError as exc:
        return [f"spec.template.spec.{exc}"]
    return []


def _forwarded(drivers):
    """Host-side port -> guest port: each TcpNetwork entry's, each hostfwd of
    the Qemu driver, and the guest's SSH port always."""
    hostfwd, _ = qemu.qemu_hostfwd(drivers)
    wanted = dict(hostfwd)
    wanted.update({host: guest for _, _, host, guest in _guest_network_entries(drivers)})
    if GUEST_SSH_PORT not in wanted.values():
        wanted[None] = GUEST_SSH_PORT
    return wanted


def _local_ports(drivers):
    """Host-side port (None: the SSH forward the template does not name) ->
    the local port of the Pod QEMU listens on: from ``FORWARD_BASE_PORT`` up,
    in the order of the host-side ports, so the same template always gives
    the same map. The Pod's port is the provisioner's (unprivileged, never one
    of a sidecar's); the entry is pointed at it."""
    wanted = _forwarded(drivers)
    order = sorted(wanted, key=lambda host: (host is not None, host or 0))
    return {host: FORWARD_BASE_PORT + offset for offset, host in enumerate(order)}, wanted


def guest_port_forwards(drivers):
    """Local port -> guest port: what QEMU forwards in the instance's Pod."""
    local, wanted = _local_ports(drivers)
    return {local[host]: guest for host, guest in wanted.items()}


def network_driver_overrides(drivers):
    """Each TcpNetwork entry without a host, pointed at its forward to the guest.

    An entry that names a host is the template's own and is kept as it is:
    it reaches whatever the Pod reaches (docs/security.md).
    """
    local, _ = _local_ports(drivers)
    return {name: {"config": {"host": FORWARD_HOST, "port": local[host]}}
            for _, name, host, _ in _guest_network_entries(drivers) if isinstance(name, str) and name}
