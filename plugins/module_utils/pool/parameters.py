"""The schema engine: merged ``parameters`` checked against a provisioner's schema.

Each provisioner declares its schema as a tree of ``Field`` (provisioners/);
documentation is generated from it (``describe_parameters``) and so is a JSON
Schema (``json_schema``), which the ``jsonschema`` library checks. Kubernetes
quantities, CPU counts and Go durations are keywords of our own
(``x-quantity``, ``x-cpu``, ``x-duration``); hostnames, UUIDs, paths and
image urls are ``format`` checks. Every message names the field at fault.
Rules that tie several fields together are the provisioner's
(``Provisioner.cross_field_rules``).

Validation needs ``jsonschema`` (requirements.txt) where it runs: the
controller's filters, the reconcile playbook's modules on localhost and the
operator. It is imported only when parameters are validated.
"""

import ipaddress
import re

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    Field,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.quantity import (
    parse_quantity,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    parse_duration,
)

ROOT = "parameters"

_DNS_NAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
_UUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
# The bounds of every string, list and object of a set's parameters (the
# CRD cannot bound a free-form field): far above what any field needs (a
# kernel command line is at most 4096 bytes), so one set cannot make each
# pass over it, or each warning it earns, cost what it likes.
MAX_STRING = 4096
MAX_ITEMS = 256
MAX_KEYS = 256
_BOUNDS = {"string": ("maxLength", MAX_STRING), "array": ("maxItems", MAX_ITEMS),
           "object": ("maxProperties", MAX_KEYS)}


def validate_parameters(provisioner, parameters):
    """Check merged parameters; every message starts with the field's path."""
    errors, warnings = [], []
    if not provisioners.known(provisioner):
        errors.append(unknown_provisioner_message(provisioner))
        return {"errors": errors, "warnings": warnings}
    schema = provisioners.get(provisioner).schema
    if parameters is None:
        parameters = {}
    errors.extend(_schema_errors(provisioner, _without_nulls(schema, parameters)))
    _unknown_keys(schema, parameters, ROOT, warnings)
    if isinstance(parameters, dict):
        for rule in provisioners.get(provisioner).cross_field_rules:
            rule(parameters, errors)
    return {"errors": errors, "warnings": warnings}


def json_schema(node):
    """The JSON Schema of a ``Field`` tree (a provisioner's ``schema``).

    An object's unknown keys are allowed (they are warned about, not refused).
    """
    schema = {"description": node.description}
    kind = node.type
    if kind in _JSON_TYPES:
        schema["type"] = _JSON_TYPES[kind]
        schema.update([_BOUNDS[schema["type"]]] if schema["type"] in _BOUNDS else [])
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
    known = ", ".join(provisioners.names())
    return f'spec.provisioner: unknown provisioner "{provisioner}"; known: {known}'


def describe_parameters(provisioner):
    """Flat rows {path, type, required, default, description, enum} for docs."""
    if not provisioners.known(provisioner):
        raise KeyError(f"unknown provisioner {provisioner!r}")
    rows = []
    _describe(provisioners.get(provisioner).schema, "", rows)
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
        for name, check in _formats(provisioner).items():
            formats.checks(name)(lambda value, check=check: not isinstance(value, str) or check(value) is None)
        cls = jsonschema.validators.extend(
            base, type_checker=types,
            validators={"x-quantity": keyword(_quantity), "x-cpu": keyword(_cpu),
                        "x-duration": keyword(_duration)})
        _VALIDATORS[provisioner] = cls(json_schema(provisioners.get(provisioner).schema), format_checker=formats)
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
        elif error.validator in ("maxLength", "maxItems", "maxProperties"):
            unit = {"maxLength": "characters", "maxItems": "items", "maxProperties": "keys"}[error.validator]
            found.append((path, False, f"{path}: more than {error.validator_value} {unit}"))
        elif error.validator == "format":
            found.append((path, False, f"{path}: {_formats(provisioner)[error.validator_value](value)}"))
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
    """Warn about the keys no schema object knows (they are ignored); an
    object or list over its bound is an error already, its keys not read."""
    if isinstance(value, (dict, list)) and len(value) > (MAX_KEYS if isinstance(value, dict) else MAX_ITEMS):
        return
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
}


def _formats(provisioner):
    """Format -> check: the core's, and those the provisioner's schema adds."""
    return {**_FORMATS, **provisioners.get(provisioner).value_formats}

