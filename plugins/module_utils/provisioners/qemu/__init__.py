"""What the two QEMU provisioners share: their parameters, driver types and
rules (``qemu_pod`` runs QEMU in a Pod, ``qemu_baremetal`` on lab hosts),
what a set may not change of its class (``QemuProvisioner``, their common
base), and how the template's QEMU drivers become the instance's
(``qemu_driver_overrides``).

The machine types by architecture, the default memory and how merged
parameters name the guest's (``guest_arch``, ``guest_memory``) are the
command line's (``argv.py``, with the image fetch ``images.py`` and the QMP
client ``qmp.py`` the QEMU library of this package, below this module),
read here by the schema and the rules.
"""

import re

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    Field,
    Provisioner,
    named_drivers,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import argv as qemu_argv
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu.argv import (
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
# JEP-0014's examples list a power and a serial driver beside (or, in its
# seed revision, instead of) the Qemu driver; no driver package has these
# classes. They stand for the VM's power and serial console, which the
# virtual QEMU driver has as its ``power`` and ``console`` children: each
# entry becomes a ref to that child (``qemu_driver_overrides``), and a
# template that lists no QEMU driver gets one (``companion_host_name``).
QEMU_POWER_DRIVER_TYPE = "jumpstarter_driver_power.driver.QemuPower"
QEMU_SERIAL_DRIVER_TYPE = "jumpstarter_driver_serial.driver.QemuSerial"
# Companion type -> the virtual QEMU driver's child it stands for.
QEMU_COMPANION_CHILDREN = {QEMU_POWER_DRIVER_TYPE: "power", QEMU_SERIAL_DRIVER_TYPE: "console"}
# JEP-0014's template reaches the guest's SSH with a TcpNetwork entry that
# names a port and no host (qemu_pod.py points it at the guest).
TCP_NETWORK_DRIVER_TYPE = "jumpstarter_driver_network.driver.TcpNetwork"
# The driver types a set may use when its class names none: those the
# provisioner renders itself (a QEMU driver becomes the virtual QEMU driver
# of the instance), and the network, power and serial drivers JEP-0014's
# examples give (TcpNetwork connects to a host and port, never to a file or
# a socket on the host; QemuPower and QemuSerial become refs to the virtual
# QEMU driver's children; a class that wants none of it names its own list).
# Resolving these names is not importing them: no entry of these types
# reaches the exporter as a class to load.
QEMU_COMPANION_DRIVER_TYPES = (TCP_NETWORK_DRIVER_TYPE, *QEMU_COMPANION_CHILDREN)
DEFAULT_DRIVER_TYPES = QEMU_DRIVER_TYPES + QEMU_COMPANION_DRIVER_TYPES
# The upstream Qemu driver's ``config`` keys that describe the machine, and
# the parameter each becomes (``template_parameters``): JEP-0014's
# DriverConfig example sizes its VM there. ``hostfwd`` is read by the
# provisioner that forwards ports (qemu_pod.py).
UPSTREAM_QEMU_DRIVER_TYPE = QEMU_DRIVER_TYPES[0]
QEMU_CONFIG_PARAMETERS = {
    "arch": ("arch",),
    "cpu": ("cpuModel",),
    "smp": ("resources", "cpu"),
    "mem": ("resources", "memory"),
    "disk_size": ("resources", "storage"),
}
HOSTFWD_KEY = "hostfwd"
# QEMU's size suffixes are powers of 1024; a bare -m value counts MiB, a
# bare disk size bytes.
_QEMU_SIZE_UNITS = {"": "", "K": "Ki", "M": "Mi", "G": "Gi", "T": "Ti", "P": "Pi", "E": "Ei"}

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
        "then x86_64. arm is 32-bit ARM (qemu-system-arm, machine virt), which boots the "
        "kernel or firmware it is given.",
        default="from machineType, else x86_64",
        enum=tuple(MACHINE_TYPES_BY_ARCH),
    ),
    "machineType": Field(
        "string",
        "QEMU machine type; q35 or pc for x86_64, virt for aarch64 and arm (default: q35 or virt, "
        "after the arch). An aarch64 virt guest given neither firmware nor kernel boots UEFI: "
        "Debian's AAVMF (qemu-efi-aarch64), /usr/share/AAVMF/AAVMF_CODE.fd read-only, and a "
        "variable store of the instance's own, a copy of AAVMF_VARS.fd made fresh at every "
        "QEMU start in a Pod and at every reset (the runtime image and lab_bootstrap install "
        "it; a host without it needs firmware or a kernel).",
        enum=("q35", "pc", "virt"),
    ),
    "cpuModel": Field("string", "QEMU -cpu model, e.g. max or host: one name of letters, digits, '.', "
                      "'_' and '-' (no feature list: no ',' or '='). Default: host under KVM; "
                      "under TCG max for x86_64, cortex-a57 for aarch64 (an aarch64 max "
                      "emulates pointer authentication, which slows a boot several times) and "
                      "cortex-a15 for arm."),
    "firmware": _file_ref("Firmware blob loaded at boot (QEMU's -bios); replaces the default "
                          "UEFI of an aarch64 virt guest (machineType).", "firmware"),
    "kernel": _image_ref("Kernel for direct boot (an aarch64 guest given one boots it without UEFI)."),
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


def _arm_guest_has_something_to_boot(parameters, errors):
    """A 32-bit arm guest boots what it is given: no UEFI for it is installed
    where QEMU runs (the runtime image and lab_bootstrap carry aarch64's)."""
    if guest_arch(parameters) == "arm" and not parameters.get("kernel") and not parameters.get("firmware"):
        errors.append(f"{ROOT}.kernel: an arm guest needs a kernel or firmware to boot (no default UEFI "
                      "is installed for 32-bit arm, as AAVMF is for aarch64)")


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


def _digests_are_sha256(parameters, errors):
    """Each image's digest is ``sha256:<64 lowercase hex>``, as the admission
    policy (config/tenancy/image_digest_policy.yaml) says where it is
    installed: a placeholder (``sha256:abc...``) would fail every fetch."""
    for name in ("firmware", "kernel", "initrd", "disk"):
        ref = parameters.get(name)
        digest = ref.get("digest") if isinstance(ref, dict) else None
        if digest is not None and not (isinstance(digest, str) and _SHA256.match(digest)):
            errors.append(f"{ROOT}.{name}.digest: {digest!r} is not sha256:<64 lowercase hex digits> "
                          f"(a placeholder fetches nothing; give the image's real digest)")


_SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")


def _values_fit_the_command_line(parameters, errors):
    """Every value that reaches QEMU's command line is within its grammar
    (``qemu_argv.value_problems``, which the argv builder applies again);
    a field the schema already refused is not named twice."""
    named = {error.split(":", 1)[0] for error in errors}
    errors.extend(f"{field}: {problem}" for field, problem in qemu_argv.value_problems(parameters)
                  if field not in named)


QEMU_RULES = (_machine_type_fits_arch, _arm_guest_has_something_to_boot, _memory_at_least_minimum,
              _image_refs_name_a_source, _digests_are_sha256, _values_fit_the_command_line)

# What a set may not raise above its class (``Provisioner.resource_ceilings``):
# a missing value is the schema's default, so dropping the class's value
# raises nothing either; a missing storage is none.
RESOURCE_CEILINGS = {
    ("resources", "cpu"): (DEFAULT_CPU, "max.resources.cpu"),
    ("resources", "memory"): (DEFAULT_MEMORY, "max.resources.memory"),
    ("resources", "storage"): (None, "max.resources.storage"),
}


def qemu_size(value, bare_unit):
    """A QEMU size (``2G``, ``512M``, ``1024``; an integer) as a Kubernetes
    quantity: QEMU's suffixes are binary, a bare number counts
    ``bare_unit`` (``Mi`` for memory, ``""`` bytes for a disk)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size")
    if isinstance(value, int):
        return f"{value}{bare_unit}" if value > 0 else _no_size(value)
    match = _QEMU_SIZE.match(value) if isinstance(value, str) else None
    if not match or int(match.group(1)) <= 0:
        return _no_size(value)
    number, unit = match.group(1), match.group(2).upper()
    return f"{int(number)}{_QEMU_SIZE_UNITS[unit] if unit else bare_unit}"


def _no_size(value):
    raise ValueError(f"{value!r} is not a QEMU size (a positive number with K, M, G or T)")


_QEMU_SIZE = re.compile(r"^([0-9]{1,15})([KMGTPEkmgtpe]?)[Bb]?$")


def _qemu_entries(drivers):
    """``(index, config)`` of each upstream Qemu driver entry of the template."""
    for index, driver in enumerate(drivers if isinstance(drivers, list) else ()):
        if isinstance(driver, dict) and driver.get("type") == UPSTREAM_QEMU_DRIVER_TYPE:
            yield index, driver.get("config")


def template_parameters(drivers, served=()):
    """What the template's Qemu driver ``config`` says of the machine:
    ``(parameters, warnings, errors)``.

    Each key of ``QEMU_CONFIG_PARAMETERS`` becomes its parameter (``mem``
    and ``disk_size`` QEMU sizes as quantities); the keys in ``served`` are
    read elsewhere by the provisioner; every other key is named in a
    warning, since the instance's QEMU is the provisioner's and that
    driver's own settings (its user, its flashing) do not apply. Messages
    name the field (``spec.template.spec.drivers[i].config.<key>``).
    """
    parameters, warnings, errors = {}, [], []
    for index, config in _qemu_entries(drivers):
        where = f"spec.template.spec.drivers[{index}].config"
        if config is None:
            continue
        if not isinstance(config, dict):
            errors.append(f"{where}: must be a mapping")
            continue
        for key, value in config.items():
            path = QEMU_CONFIG_PARAMETERS.get(key)
            if path is None:
                if key not in served:
                    warnings.append(f"{where}.{key}: ignored (the instance's QEMU is the provisioner's; "
                                    f"of this driver's config it reads {', '.join(_read_keys(served))})")
                continue
            try:
                if key == "mem":
                    value = qemu_size(value, "Mi")
                elif key == "disk_size":
                    value = qemu_size(value, "")
            except ValueError as exc:
                errors.append(f"{where}.{key}: {exc}")
                continue
            node = parameters
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = value
    return parameters, warnings, errors


def _read_keys(served):
    return sorted([*QEMU_CONFIG_PARAMETERS, *served])


def qemu_hostfwd(drivers):
    """Host-side port -> guest port of the template's Qemu driver's
    ``hostfwd`` (``{name: {hostport, guestport}}``, the upstream driver's
    shape), and the errors naming the field of each entry that is not."""
    forwards, errors = {}, []
    for index, config in _qemu_entries(drivers):
        hostfwd = config.get(HOSTFWD_KEY) if isinstance(config, dict) else None
        if hostfwd is None:
            continue
        where = f"spec.template.spec.drivers[{index}].config.{HOSTFWD_KEY}"
        if not isinstance(hostfwd, dict):
            errors.append(f"{where}: must be a mapping of name to {{hostport, guestport}}")
            continue
        for name, entry in hostfwd.items():
            ports = [entry.get(key) if isinstance(entry, dict) else None for key in ("hostport", "guestport")]
            if not all(_is_port(port) for port in ports) or (entry.get("protocol") or "tcp") != "tcp":
                errors.append(f"{where}.{name}: needs hostport and guestport, integers from 1 to 65535 "
                              f"(protocol tcp)")
                continue
            forwards[ports[0]] = ports[1]
    return forwards, errors


def _is_port(port):
    return isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535


class QemuProvisioner(Provisioner):
    """What both QEMU provisioners say of a set's policy (pool/set_overrides.py):
    the paths are the class's, the driver types are the QEMU driver's and the
    JEP's companions, the guest's resources have ceilings, and the template's
    Qemu driver config sizes the machine."""

    path_parameters = PATH_PARAMETERS
    default_driver_types = DEFAULT_DRIVER_TYPES
    resource_ceilings = RESOURCE_CEILINGS
    # The rule lives with the fetch code, which applies it again before any request.
    value_formats = {"image-url": image_fetch.url_problem}
    # A wrong digest or an image that is not one fails every retry alike.
    unrecoverable_reasons = image_fetch.UNRECOVERABLE_REASONS
    # Keys of the Qemu driver's config this provisioner reads besides
    # ``QEMU_CONFIG_PARAMETERS``.
    served_qemu_config = ()

    def template_parameters(self, drivers):
        return template_parameters(drivers, self.served_qemu_config)


def hostless_tcp_networks(drivers):
    """``(index, name)`` of each TcpNetwork entry of the template that names
    no host: upstream's provisioner reads its ``port`` as the host side of
    QEMU's forward to the guest."""
    return [(index, driver["name"]) for index, driver in enumerate(named_drivers(drivers))
            if isinstance(driver, dict) and driver.get("type") == TCP_NETWORK_DRIVER_TYPE
            and isinstance(driver.get("config") or {}, dict) and not (driver.get("config") or {}).get("host")]


def companion_host_name(drivers):
    """The name of the virtual QEMU driver the JEP's companions (power,
    serial) are children of: the template's first QEMU driver's, or, in a
    template that lists none, a name no entry has (``qemu``, else
    ``qemu_2``...), under which the provisioner adds one; None without
    companions."""
    named = [driver for driver in named_drivers(drivers) if isinstance(driver, dict)]
    if not any(driver.get("type") in QEMU_COMPANION_CHILDREN for driver in named):
        return None
    own = next((driver["name"] for driver in named if driver.get("type") in QEMU_DRIVER_TYPES), None)
    return own or named_drivers([*named, {"type": UPSTREAM_QEMU_DRIVER_TYPE}])[-1]["name"]


def qemu_driver_overrides(drivers, run_dir):
    """Every QEMU driver of the template, pointed at this instance's VM.

    Each template entry of a ``QEMU_DRIVER_TYPES`` type becomes the virtual
    QEMU driver with the instance's run directory (where the provisioner's
    QEMU has its QMP and serial sockets and serial log) and disk block node;
    the upstream driver's own config (its machine) is read as parameters
    (``template_parameters``), not by the exporter. A power or serial entry
    (``QEMU_COMPANION_CHILDREN``) becomes a ref to that child of the first
    QEMU driver, added under ``companion_host_name`` when the template lists
    none.
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
    host = companion_host_name(drivers)
    if host is not None:
        overrides.setdefault(host, {"type": VIRTUAL_QEMU_DRIVER_TYPE, "config": dict(config)})
        overrides.update({driver["name"]: {"ref": f"{host}.{QEMU_COMPANION_CHILDREN[driver['type']]}"}
                          for driver in named if driver.get("type") in QEMU_COMPANION_CHILDREN})
    return overrides
