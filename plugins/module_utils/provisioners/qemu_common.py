"""What the two QEMU provisioners share: their parameters, driver types and
rules (``qemu_pod`` runs QEMU in a Pod, ``qemu_baremetal`` on lab hosts),
what a set may not change of its class (``QemuProvisioner``, their common
base), and how the template's QEMU drivers become the instance's
(``qemu_driver_overrides``).

The machine types by architecture, the default memory and how merged
parameters name the guest's (``guest_arch``, ``guest_memory``) are the
command line's (``qemu/argv.py``, below this package), read here by the
schema and the rules.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    Field,
    Provisioner,
    named_drivers,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.qemu import argv as qemu_argv
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.qemu.argv import (
    DEFAULT_MEMORY,
    DISK_NODE,
    MACHINE_TYPES_BY_ARCH,
    QMP_SOCKET,
    SERIAL_LOG,
    SERIAL_SOCKET,
    guest_arch,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.quantity import (
    parse_quantity,
)

ROOT = "parameters"
MIN_MEMORY_BYTES = 64 * 2**20
DEFAULT_CPU = 1

# The driver the QEMU provisioners give the lessee: it drives the VM the
# provisioner runs (drivers/jumpstarter-driver-virtual-qemu).
VIRTUAL_QEMU_DRIVER_TYPE = "jumpstarter_driver_virtual_qemu.driver.VirtualQemu"
# Template driver types that stand for "the VM of this instance". The
# upstream Qemu driver would start a QEMU of its own, so an entry of its type
# is replaced by the virtual QEMU driver.
QEMU_DRIVER_TYPES = ("jumpstarter_driver_qemu.driver.Qemu", VIRTUAL_QEMU_DRIVER_TYPE)
# JEP-0014's examples list a serial driver beside the Qemu driver; no driver
# package has this class. It stands for the VM's serial console, which the
# virtual QEMU driver has as its ``console`` child: the entry becomes a ref
# to it.
QEMU_SERIAL_DRIVER_TYPE = "jumpstarter_driver_serial.driver.QemuSerial"
# JEP-0014's template reaches the guest's SSH with a TcpNetwork entry that
# names a port and no host (qemu_pod.py points it at the guest).
TCP_NETWORK_DRIVER_TYPE = "jumpstarter_driver_network.driver.TcpNetwork"
# The driver types a set may use when its class names none: those the
# provisioner renders itself (a QEMU driver becomes the virtual QEMU driver
# of the instance), and the network and serial drivers JEP-0014's examples
# give (TcpNetwork connects to a host and port, never to a file or a socket
# on the host; QemuSerial becomes a ref to the QEMU driver's console, so it
# needs a QEMU driver in the template; a class that wants none of it names
# its own list).
QEMU_COMPANION_DRIVER_TYPES = (TCP_NETWORK_DRIVER_TYPE, QEMU_SERIAL_DRIVER_TYPE)
DEFAULT_DRIVER_TYPES = QEMU_DRIVER_TYPES + QEMU_COMPANION_DRIVER_TYPES
# JEP-0014's seed examples also name a power driver that no driver package
# provides: its refusal says what to write instead.
DRIVER_TYPE_HINTS = {
    "jumpstarter_driver_power.driver.QemuPower": (
        "JEP-0014's QemuPower is the power of the QEMU driver: list "
        "jumpstarter_driver_qemu.driver.Qemu and, to have it at the root, an entry "
        "{ref: <that driver's name>.power}"),
}

_GUEST_READS = "a file on the machine that runs QEMU, read as its user, reaches the guest"
# Parameters that name a file, a program or a directory where the instance
# runs (qemu/argv.py, baremetal_targets): set by the class only, for both
# QEMU provisioners, whether or not the provisioner's schema lists them.
PATH_PARAMETERS = {
    ("disk", "path"): _GUEST_READS,
    ("kernel", "path"): _GUEST_READS,
    ("initrd", "path"): _GUEST_READS,
    ("firmware", "path"): _GUEST_READS,
    ("disk", "format"): "how QEMU reads the backing file: raw reads any file as it is",
    ("runtime", "binary"): "the program that runs as the runtime's user on the host",
    ("workDir",): "where every instance's state and tokens are written on the host",
}

_IMAGE_URL = Field(
    "string",
    "Where the image is fetched from before boot: http(s)://... or an OCI artifact "
    "(oci://registry/repository:tag, or registry/repository:tag); cached per host or node "
    "by digest. No other scheme (file://, ftp://...) is accepted.",
    format="image-url",
)
_IMAGE_DIGEST = Field(
    "string",
    "sha256:<64 hex digits> of the image; required with url, checked before boot "
    "(a mismatch boots nothing and is a ReplicaFailure).",
)
_IMAGE_PLAIN_HTTP = Field(
    "boolean", "Talk to the OCI registry of url over plain HTTP (the digest still guards "
    "the content).", default=False,
)


CLASS_ONLY = " Set by the class only: an ExporterSet may not change it (docs/security.md)."


def _file_ref(description, what, **more):
    """A file QEMU reads: fetched from ``url`` (checked by ``digest``) or a ``path``."""
    return Field(
        "object",
        description,
        properties={
            "url": _IMAGE_URL,
            "path": Field("string", f"Local file path of the {what}." + CLASS_ONLY,
                          format="absolute-path"),
            "digest": _IMAGE_DIGEST,
            "plainHTTP": _IMAGE_PLAIN_HTTP,
            **more,
        },
    )


def _image_ref(description, **more):
    return _file_ref(description + " Give `url` (OCI or HTTP reference) or `path` (file on the runtime).",
                     "image", **more)


QEMU_PROPERTIES = {
    "arch": Field(
        "string",
        "Guest architecture. Without it, the machine type decides (virt: aarch64, q35 or pc: "
        "x86_64), then the hosts' arch when they all give the same one (qemu-baremetal), "
        "then x86_64.",
        default="from machineType, else x86_64",
        enum=tuple(MACHINE_TYPES_BY_ARCH),
    ),
    "machineType": Field(
        "string",
        "QEMU machine type; q35 or pc for x86_64, virt for aarch64 (default: q35 or virt, "
        "after the arch).",
        enum=("q35", "pc", "virt"),
    ),
    "cpuModel": Field("string", "QEMU -cpu model, e.g. max or host: one name of letters, digits, '.', "
                      "'_' and '-' (no feature list: no ',' or '=')."),
    "firmware": _file_ref("Firmware blob loaded at boot.", "firmware"),
    "kernel": _image_ref("Kernel for direct boot."),
    "initrd": _image_ref("Initial ramdisk for direct boot."),
    "disk": _image_ref(
        "Baseline disk image (lessees may flash their own).",
        format=Field("string", "Format of the baseline image, under the instance's qcow2 "
                     "overlay." + CLASS_ONLY, default="qcow2", enum=("qcow2", "raw")),
    ),
    "kernelArgs": Field("string", "Kernel command line for direct boot."),
    "resources": Field(
        "object",
        "Resources of one virtual target. On qemu-baremetal an ExporterSet may not ask for "
        "more than the class gives (or the class's max.resources.* ceiling); on "
        "qemu.jumpstarter.dev only above a ceiling the class names.",
        properties={
            "cpu": Field("cpu", "Virtual CPUs (integer >= 1, or a quantity such as 2).",
                         default=DEFAULT_CPU),
            "memory": Field("quantity", "Guest memory, at least 64Mi.", default=DEFAULT_MEMORY),
            "storage": Field("quantity", "Size of the writable disk."),
        },
    ),
    "kvm": Field("boolean", "Use KVM acceleration; false means TCG emulation.", default=False),
    "bootTimeout": Field("duration", "How long the guest may take to boot."),
}


# Cross-field rules run even when single fields failed, so that one pass
# lists every problem; each rule skips values whose type is already reported.


def _machine_type_fits_arch(parameters, errors):
    arch = guest_arch(parameters)
    machine = parameters.get("machineType")
    if arch not in MACHINE_TYPES_BY_ARCH or machine not in QEMU_PROPERTIES["machineType"].enum:
        return
    if machine not in MACHINE_TYPES_BY_ARCH[arch]:
        allowed = ", ".join(MACHINE_TYPES_BY_ARCH[arch])
        errors.append(f"{ROOT}.machineType: {machine!r} does not fit arch {arch} (use {allowed})")


def _memory_at_least_minimum(parameters, errors):
    resources = parameters.get("resources")
    memory = resources.get("memory") if isinstance(resources, dict) else None
    try:
        too_small = parse_quantity(memory) < MIN_MEMORY_BYTES
    except ValueError:
        return
    if too_small:
        shown = f'"{memory}"' if isinstance(memory, str) else repr(memory)
        errors.append(f"{ROOT}.resources.memory: {shown} is below the minimum 64Mi")


def _image_refs_name_a_source(parameters, errors):
    for name in ("kernel", "initrd", "disk"):
        ref = parameters.get(name)
        if isinstance(ref, dict) and not ref.get("url") and not ref.get("path"):
            errors.append(f"{ROOT}.{name}: needs url or path")


def _values_fit_the_command_line(parameters, errors):
    """Every value that reaches QEMU's command line is within its grammar
    (``qemu_argv.value_problems``, which the argv builder applies again);
    a field the schema already refused is not named twice."""
    named = {error.split(":", 1)[0] for error in errors}
    errors.extend(f"{field}: {problem}" for field, problem in qemu_argv.value_problems(parameters)
                  if field not in named)


QEMU_RULES = (_machine_type_fits_arch, _memory_at_least_minimum, _image_refs_name_a_source,
              _values_fit_the_command_line)

# What a set may not raise above its class (``Provisioner.resource_ceilings``):
# a missing value is the schema's default, so dropping the class's value
# raises nothing either; a missing storage is none.
RESOURCE_CEILINGS = {
    ("resources", "cpu"): (DEFAULT_CPU, "max.resources.cpu"),
    ("resources", "memory"): (DEFAULT_MEMORY, "max.resources.memory"),
    ("resources", "storage"): (None, "max.resources.storage"),
}


def serial_console_violations(drivers):
    """A serial entry (``QEMU_SERIAL_DRIVER_TYPE``) is the console of the
    template's QEMU driver: without one, each is refused, naming the field."""
    types = [driver.get("type") if isinstance(driver, dict) else None for driver in drivers]
    if any(kind in QEMU_DRIVER_TYPES for kind in types):
        return {}
    return {index: (f"spec.template.spec.drivers[{index}].type: '{QEMU_SERIAL_DRIVER_TYPE}' is the "
                    f"serial console of the instance's QEMU driver, and the template lists none: add "
                    f"an entry of type {QEMU_DRIVER_TYPES[0]}")
            for index, kind in enumerate(types) if kind == QEMU_SERIAL_DRIVER_TYPE}


class QemuProvisioner(Provisioner):
    """What both QEMU provisioners say of a set's policy (pool/set_overrides.py):
    the paths are the class's, the driver types are the QEMU driver's and the
    JEP's companions (a serial entry only beside a QEMU driver), and the
    guest's resources have ceilings."""

    path_parameters = PATH_PARAMETERS
    default_driver_types = DEFAULT_DRIVER_TYPES
    driver_type_hints = DRIVER_TYPE_HINTS
    resource_ceilings = RESOURCE_CEILINGS

    def allowed_driver_violations(self, drivers):
        return serial_console_violations(drivers)


def qemu_driver_overrides(drivers, run_dir):
    """Every QEMU driver of the template, pointed at this instance's VM.

    Each template entry of a ``QEMU_DRIVER_TYPES`` type becomes the virtual
    QEMU driver with the instance's run directory (where the provisioner's
    QEMU has its QMP and serial sockets and serial log) and disk block node;
    settings a template gives the virtual QEMU driver itself are kept.
    """
    config = {
        "run_dir": run_dir.rstrip("/") or "/",
        "qmp_socket": QMP_SOCKET,
        "serial_socket": SERIAL_SOCKET,
        "serial_log": SERIAL_LOG,
        "disk_node": DISK_NODE,
    }
    named = [driver for driver in named_drivers(drivers) if isinstance(driver, dict) and driver.get("name")]
    overrides = {
        driver["name"]: {"type": VIRTUAL_QEMU_DRIVER_TYPE, "config": dict(config)}
        for driver in named if driver.get("type") in QEMU_DRIVER_TYPES
    }
    if overrides:
        # The serial console of the first QEMU driver (a serial entry in a
        # template that has none is refused: serial_console_violations).
        console = next(iter(overrides)) + ".console"
        overrides.update({driver["name"]: {"ref": console}
                          for driver in named if driver.get("type") == QEMU_SERIAL_DRIVER_TYPE})
    return overrides
