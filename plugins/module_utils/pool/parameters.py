"""Schemas of the merged ``parameters`` per provisioner, and their validation.

The schemas are data (a tree of ``Field``): documentation is generated from
them (``describe_parameters``) and so is a JSON Schema per provisioner
(``json_schema``), which the ``jsonschema`` library checks. Kubernetes
quantities, CPU counts and Go durations are keywords of our own
(``x-quantity``, ``x-cpu``, ``x-duration``); hostnames, UUIDs and paths are
``format`` checks. Every message names the field at fault. Rules that tie
several fields together live in small per-provisioner functions next to the
schemas.

Validation needs ``jsonschema`` (requirements.txt) where it runs: the
controller's filters, the reconcile playbook's modules on localhost and the
operator. It is imported only when parameters are validated, so the modules
that run on lab hosts (which import this file for ``guest_arch``) do not need it.
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
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.qemu import images as image_fetch
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


_CLASS_ONLY = " Set by the class only: an ExporterSet may not change it (docs/security.md)."


def _image_ref(description, **more):
    return Field(
        "object",
        description + " Give `url` (OCI or HTTP reference) or `path` (file on the runtime).",
        properties={
            "url": _IMAGE_URL,
            "path": Field("string", "Local file path of the image." + _CLASS_ONLY,
                          format="absolute-path"),
            "digest": _IMAGE_DIGEST,
            "plainHTTP": _IMAGE_PLAIN_HTTP,
            **more,
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
            "path": Field("string", "Local file path of the firmware." + _CLASS_ONLY,
                          format="absolute-path"),
            "digest": _IMAGE_DIGEST,
            "plainHTTP": _IMAGE_PLAIN_HTTP,
        },
    ),
    "kernel": _image_ref("Kernel for direct boot."),
    "initrd": _image_ref("Initial ramdisk for direct boot."),
    "disk": _image_ref(
        "Baseline disk image (lessees may flash their own).",
        format=Field("string", "Format of the baseline image, under the instance's qcow2 "
                     "overlay." + _CLASS_ONLY, default="qcow2", enum=("qcow2", "raw")),
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
        "slots": Field("integer", "Concurrent instances on this host. An ExporterSet may not "
                       "give more than the class (or the class's max.slots ceiling).",
                       required=True, minimum=1),
    },
)

_BAREMETAL_PROPERTIES = dict(
    _QEMU_PROPERTIES,
    hosts=Field("list", "Lab servers; at least one.", required=True, items=_HOST),
    runtime=Field(
        "object",
        "QEMU on the hosts.",
        properties={
            "binary": Field("string", "Absolute path of qemu-system-*." + _CLASS_ONLY,
                            format="absolute-path"),
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
        "Directory on the hosts for instance state." + _CLASS_ONLY,
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
    errors.extend(_schema_errors(provisioner, _without_nulls(schema, parameters)))
    _unknown_keys(schema, parameters, ROOT, warnings)
    if isinstance(parameters, dict):
        for rule in _CROSS_FIELD_RULES.get(provisioner, ()):
            rule(parameters, errors)
    return {"errors": errors, "warnings": warnings}


def json_schema(node):
    """The JSON Schema of a ``Field`` tree (a provisioner's: ``PROVISIONER_SCHEMAS[...]``).

    An object's unknown keys are allowed (they are warned about, not refused).
    """
    schema = {"description": node.description}
    kind = node.type
    if kind in _JSON_TYPES:
        schema["type"] = _JSON_TYPES[kind]
    if kind == "object":
        schema["properties"] = {name: json_schema(child) for name, child in node.properties.items()}
        required = [name for name, child in node.properties.items() if child.required]
        if required:
            schema["required"] = required
    elif kind == "list":
        if node.items is not None:
            schema["items"] = json_schema(node.items)
        if node.required:
            schema["minItems"] = 1
    elif kind == "integer":
        schema.update({key: value for key, value in (("minimum", node.minimum), ("maximum", node.maximum))
                       if value is not None})
    elif kind == "quantity":
        schema["x-quantity"] = True
    elif kind == "cpu":
        schema["x-cpu"] = True
    elif kind == "duration":
        schema["x-duration"] = {key: value for key, value in (("minimum", node.minimum),
                                                              ("maximum", node.maximum)) if value is not None}
    if node.format:
        schema["format"] = node.format
    if node.enum:
        schema["enum"] = list(node.enum)
    return schema


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


_JSON_TYPES = {"string": "string", "integer": "integer", "boolean": "boolean", "object": "object",
               "map": "object", "list": "array"}
# How a type error reads: "<value> is not <this>".
_TYPE_NAMES = {"string": "a string", "integer": "an integer", "boolean": "a boolean",
               "object": "an object", "array": "a list"}
_VALIDATORS = {}


def _validator(provisioner):
    """The jsonschema validator of a provisioner's schema (made once)."""
    if provisioner not in _VALIDATORS:
        import jsonschema

        def keyword(check):
            """A keyword of our own: ``check`` says what is wrong, within the keyword's bounds."""
            def validate(_validator, bounds, instance, _schema):
                bounds = bounds if isinstance(bounds, dict) else {}
                problem = check(Field("", "", minimum=bounds.get("minimum"), maximum=bounds.get("maximum")),
                                instance)
                if problem:
                    yield jsonschema.ValidationError(problem)
            return validate

        base = jsonschema.Draft202012Validator
        # An integer is an int, not a float that happens to be whole, nor a bool.
        types = base.TYPE_CHECKER.redefine(
            "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool))
        formats = jsonschema.FormatChecker(formats=())
        for name, check in _FORMATS.items():
            formats.checks(name)(lambda value, check=check: not isinstance(value, str) or check(value) is None)
        cls = jsonschema.validators.extend(
            base, type_checker=types,
            validators={"x-quantity": keyword(_quantity), "x-cpu": keyword(_cpu),
                        "x-duration": keyword(_duration)})
        _VALIDATORS[provisioner] = cls(json_schema(PROVISIONER_SCHEMAS[provisioner]), format_checker=formats)
    return _VALIDATORS[provisioner]


def _schema_errors(provisioner, parameters):
    """The schema's errors as messages naming the field; a value of the wrong
    type gets that one error only."""
    found = []
    for error in _validator(provisioner).iter_errors(parameters):
        path = ROOT + "".join(f"[{part}]" if isinstance(part, int) else f".{part}"
                              for part in error.absolute_path)
        value = error.instance
        if error.validator == "type":
            found.append((path, True, f"{path}: {value!r} is not {_TYPE_NAMES[error.validator_value]}"))
        elif error.validator == "required":
            for name in error.validator_value:
                if name not in value:
                    found.append((f"{path}.{name}", False, f"{path}.{name}: required"))
        elif error.validator == "enum":
            allowed = ", ".join(str(option) for option in error.validator_value)
            found.append((path, False, f"{path}: {value!r} is not one of {allowed}"))
        elif error.validator in ("minimum", "maximum"):
            side = "below the minimum" if error.validator == "minimum" else "above the maximum"
            found.append((path, False, f"{path}: {value} is {side} {error.validator_value:g}"))
        elif error.validator == "minItems":
            found.append((path, False, f"{path}: must not be empty"))
        elif error.validator == "format":
            found.append((path, False, f"{path}: {_FORMATS[error.validator_value](value)}"))
        else:
            found.append((path, False, f"{path}: {error.message}"))
    mistyped = {path for path, is_type, _ in found if is_type}
    messages = []
    for path, is_type, message in found:
        if (is_type or path not in mistyped) and message not in messages:
            messages.append(message)
    return messages


def _without_nulls(node, value):
    """``value`` without the known keys whose value is null: a null field is an absent one."""
    if node.type == "object" and isinstance(value, dict):
        return {
            key: _without_nulls(node.properties[key], item) if key in node.properties else item
            for key, item in value.items()
            if not (key in node.properties and item is None)
        }
    if node.type == "list" and node.items is not None and isinstance(value, list):
        return [_without_nulls(node.items, item) for item in value]
    return value


def _unknown_keys(node, value, path, warnings):
    """Warn about the keys no schema object knows (they are ignored)."""
    if node.type == "object" and isinstance(value, dict):
        for name, child in node.properties.items():
            if value.get(name) is not None:
                _unknown_keys(child, value[name], f"{path}.{name}", warnings)
        for name in sorted(set(value) - set(node.properties), key=str):
            warnings.append(f"{path}.{name}: unknown key, ignored")
    elif node.type == "list" and node.items is not None and isinstance(value, list):
        for index, item in enumerate(value):
            _unknown_keys(node.items, item, f"{path}[{index}]", warnings)


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
    # The rule lives with the fetch code, which applies it again before any request.
    "image-url": image_fetch.url_problem,
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
