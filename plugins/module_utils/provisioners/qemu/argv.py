"""The QEMU command line of one virtual target, built from its merged parameters.

Both QEMU provisioners use it: the Pod renderer puts the argv into the
runtime container, the bare-metal role into the service unit on the lab
server. Everything the exporter talks to lives in the instance's run
directory (the Pod's shared emptyDir, or the instance directory on the lab
server):

- ``qmp.sock``: QMP control socket (server, no wait);
- ``serial.sock``: the first serial port as a UNIX stream socket (server, no
  wait). A socket rather than a pty because a pty cannot cross the container
  boundary of the Pod; the exporter exposes it with
  ``jumpstarter_driver_network.driver.UnixNetwork``. Its output is also
  written to ``serial.log`` so a failed boot can be diagnosed afterwards;
- ``disk.qcow2``: the writable disk, created by ``disk_create_argv``, block
  node ``disk0`` of a virtio disk that shares writes, so the exporter's
  flasher can write an image onto it through QMP while the VM is off;
- ``firmware``, ``kernel``, ``initrd``, ``disk.base``: where images given
  by ``url`` are expected once fetched (``runtime_files`` lists them);
  images given by ``path`` are used where they are;
- ``efivars.fd``: the UEFI variable store of a guest that boots the default
  UEFI (``uefi_firmware``), a copy of the firmware's template made by
  ``uefi_vars_argv`` before QEMU starts and on each reset.

The guest's network, when the caller asks for port forwards (the Pod
provisioner does): one virtio NIC on QEMU's user-mode network (slirp: no
privilege, no device on the host), isolated (``restrict=on``: the guest
reaches nothing outside; the forwards still work), and each forward a TCP
listener on 127.0.0.1 of the Pod's network namespace that carries a
connection to a port of the guest. The exporter sidecar shares that
namespace; nothing outside the Pod reaches 127.0.0.1.

Pure: no I/O, standard library and the collection's quantity parser only.
"""

import json

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.quantity import (
    parse_quantity,
    quantity_to_bytes,
)

QMP_SOCKET = "qmp.sock"
SERIAL_SOCKET = "serial.sock"
SERIAL_LOG = "serial.log"
DISK_IMAGE = "disk.qcow2"
# QEMU block node name of the writable disk (QMP commands name it).
DISK_NODE = "disk0"
# Block node of the read-only base image under the disk, when it has one.
BASE_NODE = "disk0-base"

ACCEL_KVM = "kvm"
ACCEL_TCG = "tcg"

# Where an image given by url lands in the run directory once fetched.
FETCHED_IMAGE_NAMES = {
    "firmware": "firmware",
    "kernel": "kernel",
    "initrd": "initrd",
    "disk": "disk.base",
}

# The machine types of each guest architecture (the parameters' schema offers
# these). A virt machine with no arch is aarch64 (the first that has it).
MACHINE_TYPES_BY_ARCH = {"x86_64": ("q35", "pc"), "aarch64": ("virt",), "arm": ("virt",)}
DEFAULT_ARCH = "x86_64"
DEFAULT_MEMORY = "1Gi"

# Per guest architecture: QEMU binary, default machine type, the serial
# console device name the guest kernel knows the first UART by, and the CPU
# model emulated under TCG: "max" enables every feature TCG can emulate, but
# an aarch64 "max" has pointer authentication, whose emulation made the
# test guest's boot more than four times slower (cortex-a57: 15 s on a
# loaded 2-core machine; max: not done after 60 s). cortex-a57 (ARMv8.0) is
# what Jumpstarter's QEMU driver emulates. 32-bit arm: cortex-a15 (ARMv7
# with LPAE, so more than 3 GiB of guest memory), what Debian's armmp
# kernels run on.
_ARCH = {
    "x86_64": {"binary": "qemu-system-x86_64", "machine": "q35", "console": "ttyS0", "tcg_cpu": "max"},
    "aarch64": {"binary": "qemu-system-aarch64", "machine": "virt", "console": "ttyAMA0",
                "tcg_cpu": "cortex-a57"},
    "arm": {"binary": "qemu-system-arm", "machine": "virt", "console": "ttyAMA0", "tcg_cpu": "cortex-a15"},
}
# Under KVM the host CPU is passed through.
_KVM_CPU_MODEL = "host"
# The guest's address on QEMU's user-mode network (its built-in DHCP hands
# out this one first; a guest without DHCP sets it itself).
GUEST_ADDRESS = "10.0.2.15"
NETDEV_ID = "net0"

# An aarch64 virt guest given neither firmware nor a kernel has nothing to
# run: it boots UEFI, Debian's EDK2 build (qemu-efi-aarch64, AAVMF) where the
# runtime image and lab_bootstrap install it, as the two flash devices of
# the machine: the code read-only, the variables a copy of the instance's own.
UEFI_FIRMWARE = {
    "aarch64": {"code": "/usr/share/AAVMF/AAVMF_CODE.fd", "vars": "/usr/share/AAVMF/AAVMF_VARS.fd"},
}
UEFI_MACHINES = ("virt",)
UEFI_VARS = "efivars.fd"

# Backing images are qcow2 unless ``disk.format`` says otherwise.
DEFAULT_BACKING_FORMAT = "qcow2"
_MIB = 2**20


def run_path(run_dir, file_name):
    return f"{run_dir.rstrip('/')}/{file_name}"


def guest_arch(parameters):
    """The guest architecture of merged QEMU parameters.

    ``arch`` when given; else the one the machine type belongs to (virt:
    aarch64, q35 or pc: x86_64); else the arch every lab host that gives one
    agrees on (qemu-baremetal); else x86_64. An unknown value is returned as
    it is, for the caller to report.
    """
    arch = parameters.get("arch")
    if arch:
        return arch
    machine = parameters.get("machineType")
    for candidate, machines in MACHINE_TYPES_BY_ARCH.items():
        if machine in machines:
            return candidate
    hosts = parameters.get("hosts")
    host_arches = {
        host.get("arch") for host in (hosts if isinstance(hosts, list) else ())
        if isinstance(host, dict) and host.get("arch") in MACHINE_TYPES_BY_ARCH
    }
    if len(host_arches) == 1:
        return host_arches.pop()
    return DEFAULT_ARCH


def guest_memory(parameters):
    """``resources.memory`` of merged QEMU parameters, or the default (1Gi)."""
    resources = parameters.get("resources")
    memory = resources.get("memory") if isinstance(resources, dict) else None
    return DEFAULT_MEMORY if memory is None else memory


def _option_value(value):
    """A value inside a QEMU ``key=value,...`` option: a comma is written twice."""
    return value.replace(",", ",,")


# The grammar of what reaches QEMU's command line (``value_problems``).
# QEMU reads -machine, -cpu and -name as option lists (``q35,initrd=<file>``
# loads a file into the guest's RAM, ``max,+feature`` sets features), so a
# machine type, a CPU model and the instance's name are one token of these
# characters, never an option separator; "help" lists and exits.
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_TOKEN_MAX = {"machine type": 64, "CPU model": 64, "instance name": 253}
# -bios, -kernel and -initrd take a file as a whole argument, and -initrd
# splits its value at commas (one module each, for a multiboot kernel, which
# a set may give by url); a path inside an option (the sockets, the serial
# log, the disk) is escaped (``_option_value``) or JSON.
_WHOLE_FILE_IMAGES = ("firmware", "kernel", "initrd")


def token_problem(value, what):
    """Why ``value`` is not a ``what`` QEMU reads as one option token, or None."""
    if not isinstance(value, str):
        return f"{value!r} is not a string"
    limit = _TOKEN_MAX[what]
    if (not value or len(value) > limit or not _TOKEN_CHARS.issuperset(value)
            or value[0] in "._-" or value == "help"):
        return (f"{value!r} is not a QEMU {what}: one name of letters, digits, '.', '_' and '-' "
                f"(no ',' or '=', not starting with '.', '_' or '-'), at most {limit} characters")
    return None


def path_problem(value, whole=False):
    """Why ``value`` is not a file QEMU may be given, or None: an absolute path
    of printable characters; ``whole`` (a whole argument of -bios, -kernel or
    -initrd): without a comma too."""
    if not isinstance(value, str):
        return f"{value!r} is not a string"
    if not value.startswith("/"):
        return f"{value!r} is not an absolute path"
    if any(ord(char) < 0x20 or ord(char) == 0x7f for char in value):
        return f"{value!r} has a control character"
    if whole and "," in value:
        return f"{value!r} has a ',' (QEMU splits this argument at commas)"
    return None


def kernel_args_problem(value):
    """Why ``value`` is not a kernel command line (printable ASCII), or None."""
    if not isinstance(value, str):
        return f"{value!r} is not a string"
    if any(not " " <= char <= "~" for char in value):
        return f"{value!r} has a character that is not printable ASCII"
    return None


def value_problems(parameters, run_dir=None, name=None):
    """``(field, problem)`` for each value that would reach the command line
    of ``qemu_argv`` (and the disk path and run directory ``disk_create_argv``
    shares with it) outside its grammar: the fields of merged parameters
    (``parameters.cpuModel``...), and ``run_dir`` and ``name`` when given.
    Empty when every value is within it."""
    checks = [("machineType", lambda v: token_problem(v, "machine type")),
              ("cpuModel", lambda v: token_problem(v, "CPU model")),
              ("runtime.binary", path_problem),
              ("kernelArgs", kernel_args_problem),
              ("disk.path", path_problem),
              *((f"{key}.path", lambda v: path_problem(v, whole=True)) for key in _WHOLE_FILE_IMAGES)]
    problems = [(f"parameters.{field}", problem) for field, check in checks
                if (value := _given(parameters, field)) is not None and (problem := check(value))]
    if run_dir is not None:
        problem = path_problem(run_dir)
        if problem is None:
            # A file fetched by url is given to QEMU as it lands in the run directory.
            problem = next((path_problem(run_path(run_dir, FETCHED_IMAGE_NAMES[key]), whole=True)
                            for key in _WHOLE_FILE_IMAGES
                            if _given(parameters, f"{key}.url") and not _given(parameters, f"{key}.path")),
                           None)
        if problem:
            problems.append(("run_dir", problem))
    if name is not None and (problem := token_problem(name, "instance name")):
        problems.append(("name", problem))
    return problems


def _given(parameters, field):
    """The value of a dotted ``field`` of merged parameters; None when it or an
    object on its way is missing, empty or not an object."""
    value = parameters
    for key in field.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return None if value == "" else value


def check_values(parameters, run_dir=None, name=None):
    """Raise ``ValueError`` naming each value outside the grammar (``value_problems``)."""
    problems = value_problems(parameters, run_dir=run_dir, name=name)
    if problems:
        raise ValueError("; ".join(f"{field}: {problem}" for field, problem in problems))


def arch_of(parameters):
    """The guest arch (``guest_arch``: given, or inferred from the machine type)."""
    arch = guest_arch(parameters)
    if arch not in _ARCH:
        raise ValueError(f"parameters.arch: unsupported architecture {arch!r}")
    return arch


def console_of(parameters):
    """The device name the guest kernel knows the first UART by."""
    return _ARCH[arch_of(parameters)]["console"]


def vcpu_count(parameters):
    """Whole vCPUs from ``resources.cpu`` (an integer or a quantity), at least 1."""
    cpu = (parameters.get("resources") or {}).get("cpu", 1)
    count = parse_quantity(cpu).to_integral_value(rounding="ROUND_CEILING")
    return max(int(count), 1)


def memory_mib(parameters):
    """Guest memory in MiB (rounded up) from ``resources.memory`` (default 1Gi)."""
    return -(-quantity_to_bytes(guest_memory(parameters)) // _MIB)


def storage_bytes(parameters):
    """Size of the writable disk in bytes, or None when no size is asked for."""
    storage = (parameters.get("resources") or {}).get("storage")
    return None if storage is None else quantity_to_bytes(storage)


def image_path(parameters, key, run_dir):
    """Local path of the firmware/kernel/initrd/disk image, or None if not given."""
    image = parameters.get(key)
    if not image:
        return None
    if image.get("path"):
        return image["path"]
    return run_path(run_dir, FETCHED_IMAGE_NAMES[key])


def uefi_firmware(parameters):
    """``{"code", "vars"}`` of the default UEFI the guest boots, or None.

    An aarch64 guest on the virt machine boots UEFI unless the parameters
    give ``firmware`` (QEMU's -bios) or a ``kernel`` (booted directly).
    """
    arch = guest_arch(parameters)
    if arch not in UEFI_FIRMWARE or parameters.get("firmware") or parameters.get("kernel"):
        return None
    machine = parameters.get("machineType") or _ARCH[arch]["machine"]
    return dict(UEFI_FIRMWARE[arch]) if machine in UEFI_MACHINES else None


def uefi_vars_argv(parameters, run_dir):
    """``qemu-img convert`` copying the UEFI variable template to the
    instance's own store (sparse), or None when the guest boots no default
    UEFI. Run before QEMU starts and on each reset: a fresh VM forgets the
    boot entries a lessee made."""
    firmware = uefi_firmware(parameters)
    if firmware is None:
        return None
    return ["qemu-img", "convert", "-q", "-f", "raw", "-O", "raw", firmware["vars"], run_path(run_dir, UEFI_VARS)]


def runtime_files(parameters, run_dir):
    """Images given by ``url`` that must be fetched before QEMU starts.

    A list of ``{"name", "url", "digest", "dest", "plain_http", "format"}``;
    ``digest`` may be None (``image_fetch`` then refuses the image, naming the
    field). ``format`` is the disk's (what QEMU opens it as), None for the
    others, which QEMU reads as plain files.
    """
    files = []
    for key, file_name in FETCHED_IMAGE_NAMES.items():
        image = parameters.get(key) or {}
        if image.get("url") and not image.get("path"):
            files.append(
                {
                    "name": key,
                    "url": image["url"],
                    "digest": image.get("digest"),
                    "dest": run_path(run_dir, file_name),
                    "plain_http": bool(image.get("plainHTTP")),
                    "format": backing_format(parameters) if key == "disk" else None,
                }
            )
    return files


def backing_format(parameters):
    """The format QEMU opens the disk image as: ``disk.format``, else qcow2."""
    return (parameters.get("disk") or {}).get("format") or DEFAULT_BACKING_FORMAT


def has_disk(parameters):
    return storage_bytes(parameters) is not None or bool(parameters.get("disk"))


def wants_kvm(parameters):
    """What the parameters ask for; bare metal's ``runtime.kvm`` wins when set."""
    runtime_kvm = (parameters.get("runtime") or {}).get("kvm")
    if runtime_kvm is not None:
        return bool(runtime_kvm)
    return bool(parameters.get("kvm", False))


def effective_accel(parameters, accel):
    """KVM only when the parameters ask for it and the caller found it working."""
    return ACCEL_KVM if wants_kvm(parameters) and accel == ACCEL_KVM else ACCEL_TCG


def _checked_port(value, where):
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ValueError(f"{where}: a TCP port is an integer from 1 to 65535, not {value!r}")
    return value


def network_argv(port_forwards):
    """``-netdev``/``-device`` for a user-mode NIC with these forwards.

    ``port_forwards`` maps a local port (on 127.0.0.1 where QEMU runs) to a
    port of the guest. Empty or None: no NIC at all (nothing is added).
    """
    if not port_forwards:
        return []
    netdev = f"user,id={NETDEV_ID},restrict=on"
    for local_port, guest_port in sorted(port_forwards.items()):
        local_port = _checked_port(local_port, f"port_forwards[{local_port!r}]")
        guest_port = _checked_port(guest_port, f"port_forwards[{local_port!r}]")
        netdev += f",hostfwd=tcp:127.0.0.1:{local_port}-:{guest_port}"
    # romfile= (none): the NIC needs no boot ROM, which a runtime image
    # need not carry.
    return ["-netdev", netdev, "-device", f"virtio-net-pci,netdev={NETDEV_ID},romfile="]


def qemu_argv(parameters, *, run_dir, name, accel=None, port_forwards=None, socket_dir=None):
    """Complete QEMU command line (a list; element 0 is the binary).

    ``socket_dir``: where QEMU makes its UNIX sockets, when not in
    ``run_dir`` itself (a shorter path to it: a socket's path holds at most
    107 bytes); every file stays named in ``run_dir``.

    ``accel`` is what the caller knows about the host: ``"kvm"`` when KVM has
    been seen working there, anything else (or None) when not.
    ``port_forwards`` (local port -> guest port) gives the guest a user-mode
    NIC with those forwards (``network_argv``); without it the guest has no
    NIC. The bare-metal provisioner gives none: its lab hosts run several
    instances side by side, where a fixed local port would clash.
    """
    check_values(parameters, run_dir=run_dir, name=name)
    if socket_dir is not None and (problem := path_problem(socket_dir)):
        raise ValueError(f"socket_dir: {problem}")
    arch = arch_of(parameters)
    profile = _ARCH[arch]
    accel = effective_accel(parameters, accel)
    binary = (parameters.get("runtime") or {}).get("binary") or profile["binary"]
    machine = parameters.get("machineType") or profile["machine"]
    cpu_model = parameters.get("cpuModel") or (_KVM_CPU_MODEL if accel == ACCEL_KVM else profile["tcg_cpu"])

    qmp_socket = _option_value(run_path(socket_dir or run_dir, QMP_SOCKET))
    serial_socket = _option_value(run_path(socket_dir or run_dir, SERIAL_SOCKET))
    serial_log = _option_value(run_path(run_dir, SERIAL_LOG))
    argv = [
        binary,
        "-name", name,
        "-machine", f"{machine},accel={accel}",
        "-cpu", cpu_model,
        "-smp", str(vcpu_count(parameters)),
        "-m", str(memory_mib(parameters)),
        # No implicit devices (NIC, VGA, monitor, serial on stdio): the
        # command line says everything the guest gets.
        "-nodefaults",
        "-display", "none",
        "-qmp", f"unix:{qmp_socket},server=on,wait=off",
        "-chardev",
        f"socket,id=serial0,path={serial_socket},server=on,wait=off,logfile={serial_log}",
        "-serial", "chardev:serial0",
    ]
    firmware = image_path(parameters, "firmware", run_dir)
    if firmware:
        argv += ["-bios", firmware]
    uefi = uefi_firmware(parameters)
    if uefi:
        argv += [
            "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={_option_value(uefi['code'])}",
            "-drive", f"if=pflash,format=raw,unit=1,file={_option_value(run_path(run_dir, UEFI_VARS))}",
        ]
    if has_disk(parameters):
        disk = f"driver=qcow2,node-name={DISK_NODE},file.driver=file,file.filename=" + \
            _option_value(run_path(run_dir, DISK_IMAGE))
        base = image_path(parameters, "disk", run_dir)
        if base:
            # The base is named here, not taken from the overlay's header, and
            # opened without a backing file of its own: whatever its header
            # names is never opened.
            base_node = {"driver": backing_format(parameters), "node-name": BASE_NODE,
                         "read-only": True, "file": {"driver": "file", "filename": base}}
            if base_node["driver"] != "raw":
                base_node["backing"] = None
            argv += ["-blockdev", json.dumps(base_node, sort_keys=True)]
            disk += f",backing={BASE_NODE}"
        # A named block node, and a device that lets another writer in, so
        # that the exporter's flasher can copy an image onto the disk
        # through QMP while the VM is off (blockdev-backup into DISK_NODE).
        argv += [
            "-blockdev", disk,
            "-device", f"virtio-blk-pci,drive={DISK_NODE},share-rw=on",
        ]
    argv += network_argv(port_forwards)
    kernel = image_path(parameters, "kernel", run_dir)
    if kernel:
        argv += ["-kernel", kernel]
        initrd = image_path(parameters, "initrd", run_dir)
        if initrd:
            argv += ["-initrd", initrd]
        kernel_args = parameters.get("kernelArgs")
        argv += ["-append", kernel_args if kernel_args else f"console={profile['console']}"]
    return argv


def disk_create_argv(parameters, run_dir):
    """``qemu-img create`` for the instance's writable disk, or None if it has none.

    With a ``disk`` image the new disk is a qcow2 overlay on it, so the base
    image is never written and a fresh overlay is a fresh disk (InPlaceReuse).
    ``resources.storage`` sets the size; an overlay without it takes the size
    of its base.
    """
    if not has_disk(parameters):
        return None
    argv = ["qemu-img", "create", "-q", "-f", "qcow2"]
    base = image_path(parameters, "disk", run_dir)
    if base:
        argv += ["-b", base, "-F", backing_format(parameters)]
    argv.append(run_path(run_dir, DISK_IMAGE))
    size = storage_bytes(parameters)
    if size is not None:
        argv.append(str(size))
    return argv
