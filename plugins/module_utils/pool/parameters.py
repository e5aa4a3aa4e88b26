"""Schemas of the merged ``parameters`` per provisioner, and their validation.

The schemas are data (a tree of ``Field``) so that documentation can be
generated from them (``describe_parameters``) and so that one walker checks
all provisioners. Rules that tie several fields together live in small
per-provisioner functions next to the schemas.
"""

import ipaddress
import re
from dataclasses import dataclass, field

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.constants import (
    PROVISIONER_CORELLIUM,
    PROVISIONER_QEMU,
    PROVISIONER_QEMU_BAREMETAL,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.quantity import (
    parse_quantity,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    parse_duration,
)

ROOT = "parameters"
MACHINE_TYPES_BY_ARCH = {"x86_64": ("q35", "pc"), "aarch64": ("virt",)}
DEFAULT_ARCH = "x86_64"
MIN_MEMORY_BYTES = 64 * 2**20
DEFAULT_MEMORY = "1Gi"
DEFAULT_CPU = 1
RECONNECT_TIMEOUT_BOUNDS = (1.0, 3600.0)

_DNS_NAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
_UUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")


@dataclass(frozen=True)
class Field:
    """One node of a parameters schema.

    ``type`` is one of: string, integer, boolean, object (known
    ``properties``; unknown keys are warned about), map (free-form object),
    list (of ``items``), quantity (Kubernetes quantity), cpu (integer >= 1 or
    a quantity string), duration (Go duration string).
    """

    type: str
    description: str
    required: bool = False
    default: object = None
    enum: tuple = ()
    properties: dict = field(default_factory=dict)
    items: "Field | None" = None
    minimum: float | None = None
    maximum: float | None = None
    format: str | None = None  # absolute-path, hostname, hostname-port, uuid


_IMAGE_URL = Field(
    "string",
    "Where the image is fetched from before boot: http(s)://... or an OCI artifact "
    "(oci://registry/repository:tag, or registry/repository:tag); cached per host or node "
    "by digest.",
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


def _image_ref(description):
    return Field(
        "object",
        description + " Give `url` (OCI or HTTP reference) or `path` (file on the runtime).",
        properties={
            "url": _IMAGE_URL,
            "path": Field("string", "Local file path of the image.", format="absolute-path"),
            "digest": _IMAGE_DIGEST,
            "plainHTTP": _IMAGE_PLAIN_HTTP,
        },
    )


_QEMU_PROPERTIES = {
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
    "cpuModel": Field("string", "QEMU -cpu model, e.g. max or host."),
    "firmware": Field(
        "object",
        "Firmware blob loaded at boot.",
        properties={
            "url": _IMAGE_URL,
            "digest": _IMAGE_DIGEST,
            "plainHTTP": _IMAGE_PLAIN_HTTP,
        },
    ),
    "kernel": _image_ref("Kernel for direct boot."),
    "initrd": _image_ref("Initial ramdisk for direct boot."),
    "disk": _image_ref("Baseline disk image (lessees may flash their own)."),
    "kernelArgs": Field("string", "Kernel command line for direct boot."),
    "resources": Field(
        "object",
        "Resources of one virtual target.",
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

_HOST = Field(
    "object",
    "A lab server that runs instances.",
    properties={
        "name": Field("string", "DNS name or IP of the host; unique.", required=True,
                      format="hostname"),
        "address": Field("string", "What SSH connects to.", default="the host name",
                         format="hostname"),
        "port": Field("integer", "SSH port.", default=22, minimum=1, maximum=65535),
        "user": Field("string", "SSH user.", default="jumpstarter"),
        "arch": Field("string", "Host architecture.", enum=tuple(MACHINE_TYPES_BY_ARCH)),
        "slots": Field("integer", "Concurrent instances on this host.", required=True, minimum=1),
    },
)

_BAREMETAL_PROPERTIES = dict(
    _QEMU_PROPERTIES,
    hosts=Field("list", "Lab servers; at least one.", required=True, items=_HOST),
    runtime=Field(
        "object",
        "QEMU on the hosts.",
        properties={
            "binary": Field("string", "Absolute path of qemu-system-*.", format="absolute-path"),
            "kvm": Field("boolean", "Use KVM on the hosts."),
        },
    ),
    board=Field("map", "Free-form board profile passed to the runtime."),
    reconnectTimeout=Field(
        "duration",
        "How long an instance may stay offline before it is replaced (1s..1h).",
        default="5m",
        minimum=RECONNECT_TIMEOUT_BOUNDS[0],
        maximum=RECONNECT_TIMEOUT_BOUNDS[1],
    ),
    workDir=Field(
        "string",
        "Directory on the hosts for instance state.",
        default="/var/lib/jumpstarter-virtual",
        format="absolute-path",
    ),
)

_CORELLIUM_PROPERTIES = {
    "api": Field(
        "object",
        "Corellium API endpoint.",
        required=True,
        properties={
            "host": Field("string", "API host, hostname[:port].", required=True,
                          format="hostname-port"),
            "projectId": Field("string", "Project UUID.", required=True, format="uuid"),
        },
    ),
    "device": Field(
        "object",
        "Virtual device to create.",
        required=True,
        properties={
            "flavor": Field("string", "Device flavor, e.g. kronos.", required=True),
            "os": Field("string", "OS version, e.g. 1.1.1.", required=True),
            "build": Field("string", "Firmware build name."),
        },
    ),
    "console": Field("string", "Name of the console to attach."),
}

PROVISIONER_SCHEMAS = {
    PROVISIONER_QEMU: Field("object", "qemu.jumpstarter.dev parameters.",
                            properties=_QEMU_PROPERTIES),
    PROVISIONER_QEMU_BAREMETAL: Field("object", "qemu-baremetal.jumpstarter.dev parameters.",
                                      properties=_BAREMETAL_PROPERTIES),
    PROVISIONER_CORELLIUM: Field("object", "corellium.jumpstarter.dev parameters.",
                                 properties=_CORELLIUM_PROPERTIES),
}


def validate_parameters(provisioner, parameters):
    """Check merged parameters; every message starts with the field's path."""
    errors, warnings = [], []
    schema = PROVISIONER_SCHEMAS.get(provisioner)
    if schema is None:
        errors.append(unknown_provisioner_message(provisioner))
        return {"errors": errors, "warnings": warnings}
    if parameters is None:
        parameters = {}
    _check(schema, parameters, ROOT, errors, warnings)
    if isinstance(parameters, dict):
        for rule in _CROSS_FIELD_RULES.get(provisioner, ()):
            rule(parameters, errors)
    return {"errors": errors, "warnings": warnings}


def unknown_provisioner_message(provisioner):
    """The error of a class whose spec.provisioner the collection does not know."""
    known = ", ".join(sorted(PROVISIONER_SCHEMAS))
    return f'spec.provisioner: unknown provisioner "{provisioner}"; known: {known}'


def describe_parameters(provisioner):
    """Flat rows {path, type, required, default, description, enum} for docs."""
    schema = PROVISIONER_SCHEMAS.get(provisioner)
    if schema is None:
        raise KeyError(f"unknown provisioner {provisioner!r}")
    rows = []
    _describe(schema, "", rows)
    return rows


def _describe(node, prefix, rows):
    for name, child in node.properties.items():
        path = f"{prefix}{name}"
        rows.append(
            {
                "path": path,
                "type": child.type,
                "required": child.required,
                "default": child.default,
                "description": child.description,
                "enum": list(child.enum),
            }
        )
        if child.type == "object":
            _describe(child, path + ".", rows)
        elif child.type == "list" and child.items is not None:
            _describe(child.items, path + "[].", rows)


def _check(node, value, path, errors, warnings):
    checker = _TYPE_CHECKS[node.type]
    problem = checker(node, value)
    if problem:
        errors.append(f"{path}: {problem}")
        return
    if node.enum and value not in node.enum:
        allowed = ", ".join(str(option) for option in node.enum)
        errors.append(f"{path}: {value!r} is not one of {allowed}")
    if node.type == "object":
        for name, child in node.properties.items():
            if name in value and value[name] is not None:
                _check(child, value[name], f"{path}.{name}", errors, warnings)
            elif child.required:
                errors.append(f"{path}.{name}: required")
        for name in sorted(set(value) - set(node.properties), key=str):
            warnings.append(f"{path}.{name}: unknown key, ignored")
    elif node.type == "list" and node.items is not None:
        for index, item in enumerate(value):
            _check(node.items, item, f"{path}[{index}]", errors, warnings)


def _string(node, value):
    if not isinstance(value, str):
        return f"{value!r} is not a string"
    return _FORMATS[node.format](value) if node.format else None


def _integer(node, value):
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{value!r} is not an integer"
    return _bounds(node, value, str(value))


def _boolean(node, value):
    return None if isinstance(value, bool) else f"{value!r} is not a boolean"


def _object(node, value):
    return None if isinstance(value, dict) else f"{value!r} is not an object"


def _list(node, value):
    if not isinstance(value, list):
        return f"{value!r} is not a list"
    if node.required and not value:
        return "must not be empty"
    return None


def _quantity(node, value):
    try:
        parse_quantity(value)
    except ValueError:
        return f"{_show(value)} is not a quantity"
    return None


def _cpu(node, value):
    if isinstance(value, bool):
        return f"{value!r} is not a CPU count"
    if isinstance(value, str):
        try:
            amount = parse_quantity(value)
        except ValueError:
            return f"{_show(value)} is not a CPU count"
    elif isinstance(value, int):
        amount = value
    else:
        return f"{value!r} is not a CPU count"
    if amount < 1 or amount != int(amount):
        return f"{_show(value)} must be a whole number of CPUs >= 1"
    return None


def _duration(node, value):
    try:
        seconds = parse_duration(value)
    except ValueError:
        return f"{_show(value)} is not a duration (e.g. 30s, 5m, 1h)"
    if seconds <= 0:
        return f"{_show(value)} must be positive"
    return _bounds(node, seconds, _show(value), unit="s")


def _bounds(node, number, shown, unit=""):
    if node.minimum is not None and number < node.minimum:
        return f"{shown} is below the minimum {node.minimum:g}{unit}"
    if node.maximum is not None and number > node.maximum:
        return f"{shown} is above the maximum {node.maximum:g}{unit}"
    return None


def _show(value):
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _absolute_path(value):
    return None if value.startswith("/") else f"{_show(value)} is not an absolute path"


def _hostname(value):
    if _DNS_NAME.match(value):
        return None
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return f"{_show(value)} is not a DNS name or IP address"
    return None


def _hostname_port(value):
    host, _, port = value.rpartition(":") if ":" in value else (value, "", "")
    if port and not (port.isdigit() and 1 <= int(port) <= 65535):
        return f"{_show(value)} has an invalid port"
    return None if not _hostname(host) else f"{_show(value)} is not hostname[:port]"


def _uuid(value):
    return None if _UUID.match(value) else f"{_show(value)} is not a UUID"


_FORMATS = {
    "absolute-path": _absolute_path,
    "hostname": _hostname,
    "hostname-port": _hostname_port,
    "uuid": _uuid,
}

_TYPE_CHECKS = {
    "string": _string,
    "integer": _integer,
    "boolean": _boolean,
    "object": _object,
    "map": _object,
    "list": _list,
    "quantity": _quantity,
    "cpu": _cpu,
    "duration": _duration,
}


# Cross-field rules run even when single fields failed, so that one pass
# lists every problem; each rule skips values whose type is already reported.


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


def _machine_type_fits_arch(parameters, errors):
    arch = guest_arch(parameters)
    machine = parameters.get("machineType")
    if arch not in MACHINE_TYPES_BY_ARCH or machine not in _QEMU_PROPERTIES["machineType"].enum:
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
        errors.append(f"{ROOT}.resources.memory: {_show(memory)} is below the minimum 64Mi")


def _image_refs_name_a_source(parameters, errors):
    for name in ("kernel", "initrd", "disk"):
        ref = parameters.get(name)
        if isinstance(ref, dict) and not ref.get("url") and not ref.get("path"):
            errors.append(f"{ROOT}.{name}: needs url or path")


def _host_names_unique(parameters, errors):
    hosts = parameters.get("hosts")
    seen = set()
    for index, host in enumerate(hosts if isinstance(hosts, list) else ()):
        name = host.get("name") if isinstance(host, dict) else None
        if not isinstance(name, str):
            continue
        if name in seen:
            errors.append(f"{ROOT}.hosts[{index}].name: duplicate host {name!r}")
        seen.add(name)


_QEMU_RULES = (_machine_type_fits_arch, _memory_at_least_minimum, _image_refs_name_a_source)
_CROSS_FIELD_RULES = {
    PROVISIONER_QEMU: _QEMU_RULES,
    PROVISIONER_QEMU_BAREMETAL: _QEMU_RULES + (_host_names_unique,),
}
