"""What an ExporterSet may override of its class: no credential redirect.

A class's credentials (the Secret named by ``credentialsSecretRef``) go
where the class says: the Corellium API token to ``parameters.api.host``
and into the exporter container of a Corellium class, the lab SSH key to
the ``parameters.hosts`` of a qemu-baremetal class. A set overrides
``parameters`` and ``images``, so without a rule its author could send the
class's credentials to a host or an image of their choosing. The fields that
receive or direct a class credential are listed here, per provisioner, and
``resolve`` is the one place that merges a set over its class: it returns
the merged parameters and images with every such field as the class has it
(so no provisioner entry point ever reads a set's redirect), and one
violation message per field the set changed, naming it.

The class may allow other values for some fields in its annotation
``constants.ANNOTATION_SET_OVERRIDABLE`` (an annotation because the upstream
CRD prunes unknown spec fields)::

    virtualtarget.jumpstarter.dev/set-overridable: >-
      parameters.api.host=eu.corellium.example|us.corellium.example;
      images.exporter=quay.io/example/jumpstarter:0.9.1

Entries are separated by ``;`` or new lines, values by ``|``, and compared
exactly. Lab hosts are not allowlisted: the class's ``hosts`` list is the
allowlist, a set may only pick among them (a subset; ``slots`` and ``arch``
are its own), with each host's connection (``address``, ``port``, ``user``)
as the class has it.

What is not listed, and why: ``qemu.jumpstarter.dev`` has no class
credential (the exporter container receives the Exporter's own token, issued
for the set's own Exporter, so a set may choose its images); the Corellium
``device`` and ``console`` choose what is made, not where the token goes.

Pure: no I/O.
"""

import copy

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s.pod import (
    DEFAULT_IMAGES,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.merge import (
    deep_merge,
    merge_images,
)

# Parameter paths (under spec.parameters) that receive or direct a class
# credential, per provisioner, and what the credential does there.
CREDENTIAL_PARAMETERS = {
    constants.PROVISIONER_CORELLIUM: {
        ("api", "host"): "the class's API token is sent there",
        ("api", "projectId"): "the class's API token creates, resets and deletes instances "
                              "by name in that project",
    },
}
# Image roles whose container receives a class credential, per provisioner.
CREDENTIAL_IMAGES = {
    constants.PROVISIONER_CORELLIUM: {
        "exporter": "the exporter container receives the class's API token",
    },
}
# Lab hosts: each receives the class's SSH key (and the exporters' tokens).
CREDENTIAL_HOSTS = {
    constants.PROVISIONER_QEMU_BAREMETAL: "it is reached with the class's SSH key and "
                                          "receives the exporters' tokens",
}
HOST_CONNECTION_FIELDS = ("address", "port", "user")

_MISSING = object()


def allowable_fields(provisioner):
    """The keys the class's allowlist annotation accepts for ``provisioner``."""
    fields = ["parameters." + ".".join(path) for path in CREDENTIAL_PARAMETERS.get(provisioner, {})]
    fields += ["images." + role for role in CREDENTIAL_IMAGES.get(provisioner, {})]
    return fields


def read_allowlist(virtual_target_class):
    """``({field: set of values}, warnings)`` from the class's annotation."""
    class_meta = (virtual_target_class or {}).get("metadata") or {}
    provisioner = ((virtual_target_class or {}).get("spec") or {}).get("provisioner")
    text = (class_meta.get("annotations") or {}).get(constants.ANNOTATION_SET_OVERRIDABLE) or ""
    known = allowable_fields(provisioner)
    where = f"VirtualTargetClass annotation {constants.ANNOTATION_SET_OVERRIDABLE}"
    allowed, warnings = {}, []
    for entry in text.replace("\n", ";").split(";"):
        entry = entry.strip()
        if not entry:
            continue
        field, sep, values = entry.partition("=")
        field = field.strip()
        if not sep or field not in known:
            choices = ", ".join(known) if known else f"none for {provisioner}"
            warnings.append(f"{where}: {entry!r} ignored (fields: {choices})")
            continue
        allowed.setdefault(field, set()).update(
            v.strip() for v in values.split("|") if v.strip())
    return allowed, warnings


def resolve(virtual_target_class, exporter_set):
    """The set merged over its class, without credential redirects.

    Returns ``{parameters, images, violations, warnings}``: ``parameters``
    and ``images`` are ``deep_merge`` and ``merge_images`` of class and set,
    except that every credential field the set may not change is the
    class's; ``violations`` has one message per such field the set changed
    (``spec.parameters.api.host: set by the class only (...)``).
    """
    class_spec = (virtual_target_class or {}).get("spec") or {}
    set_spec = (exporter_set or {}).get("spec") or {}
    provisioner = class_spec.get("provisioner")
    class_parameters = class_spec.get("parameters") or {}
    parameters = deep_merge(class_parameters, set_spec.get("parameters"))
    images = merge_images(class_spec.get("images"), set_spec.get("images"))
    allowed, warnings = read_allowlist(virtual_target_class)
    violations = []

    for path, why in CREDENTIAL_PARAMETERS.get(provisioner, {}).items():
        field = "parameters." + ".".join(path)
        wanted, given = _get(class_parameters, path), _get(parameters, path)
        if given == wanted or (isinstance(given, str) and given in allowed.get(field, ())):
            continue
        violations.append(_message(field, why, allowed.get(field)))
        _put(parameters, path, wanted)

    for role, why in CREDENTIAL_IMAGES.get(provisioner, {}).items():
        field = "images." + role
        # What the Pod would run: an ImageSpec is taken whole, the built-in
        # default stands in for a role nobody set (k8s_pod.instance_pod).
        class_image = (class_spec.get("images") or {}).get(role) or {}
        default = DEFAULT_IMAGES[role]["image"]
        wanted = class_image.get("image") if class_image else default
        given = images[role].get("image") if images.get(role) else default
        if given == wanted or (isinstance(given, str) and given in allowed.get(field, ())):
            continue
        violations.append(_message(field, why, allowed.get(field)))
        if class_image:
            images[role] = {k: v for k, v in class_image.items() if v is not None}
        else:
            images.pop(role, None)

    why = CREDENTIAL_HOSTS.get(provisioner)
    if why is not None:
        host_violations = _host_violations(class_parameters.get("hosts"), parameters.get("hosts"),
                                           why)
        if host_violations:
            violations.extend(host_violations)
            _put(parameters, ("hosts",), _get(class_parameters, ("hosts",)))

    return {"parameters": parameters, "images": images, "violations": violations,
            "warnings": warnings}


def _host_violations(class_hosts, hosts, why):
    """Each merged host must be one of the class's, connected to as the class says."""
    if hosts is None:
        return []
    if not isinstance(hosts, list):
        return [f"spec.parameters.hosts: set by the class only ({why})"]
    known = {}
    for host in class_hosts if isinstance(class_hosts, list) else ():
        if isinstance(host, dict):
            known.setdefault(host.get("name"), []).append(_connection(host))
    violations = []
    for index, host in enumerate(hosts):
        where = f"spec.parameters.hosts[{index}]"
        name = host.get("name") if isinstance(host, dict) else None
        if name not in known:
            violations.append(f"{where}.name: {name!r} is not one of the class's hosts; a set "
                              f"may only pick among them ({why})")
            continue
        connection = _connection(host)
        if connection in known[name]:
            continue
        reference = known[name][0]
        for key in HOST_CONNECTION_FIELDS:
            if connection[key] != reference[key]:
                violations.append(f"{where}.{key}: set by the class only for host {name!r} ({why})")
    return violations


def _connection(host):
    return {
        "address": host.get("address") or host.get("name"),
        "port": host.get("port") or 22,
        "user": host.get("user") or "jumpstarter",
    }


def _message(field, why, allowed):
    text = f"spec.{field}: set by the class only ({why})"
    if allowed:
        text += "; the class allows " + ", ".join(repr(v) for v in sorted(allowed))
    return text


def _get(mapping, path):
    for key in path:
        if not isinstance(mapping, dict) or key not in mapping:
            return _MISSING
        mapping = mapping[key]
    return mapping


def _put(mapping, path, value):
    """Set ``path`` in ``mapping`` (made by deep_merge, so free to change) to ``value``;
    ``_MISSING`` removes it."""
    for key in path[:-1]:
        if not isinstance(mapping.get(key), dict):
            if value is _MISSING:
                return
            mapping[key] = {}
        mapping = mapping[key]
    if value is _MISSING:
        mapping.pop(path[-1], None)
    else:
        mapping[path[-1]] = copy.deepcopy(value)
