"""What an ExporterSet may change of its class: the class's policy.

A class is written by an admin, a set by a tenant of the namespace
(docs/security.md). ``resolve`` is the one place that merges a set over its
class: it returns the merged parameters and images with every field the set
may not change as the class has it (so no provisioner entry point ever reads
what the set was refused), and one violation message per refusal, naming the
field. While there is any, nothing is provisioned for the set: the plan
makes no Exporter, no backend is made, and the set is ``Degraded`` with a
Warning Event (``CredentialRedirect`` when a credential would be redirected,
``NotAllowedByClass`` otherwise).

What is refused:

* **Credential redirects.** A class's credentials (the Secret named by
  ``credentialsSecretRef``) go where the class says: the Corellium API token
  to ``parameters.api.host`` and into the exporter container of a Corellium
  class, the lab SSH key to the ``parameters.hosts`` of a qemu-baremetal
  class. Lab hosts are not allowlisted: the class's ``hosts`` list is the
  allowlist, a set may only pick among them (a subset; ``arch`` is its own),
  with each host's connection (``address``, ``port``, ``user``) as the class
  has it.
* **Paths, binaries and work directories** (``Provisioner.path_parameters``): files,
  programs and directories on the machine that runs QEMU. Any file the
  runtime's user may read would become guest-readable, any program would run
  as that user, on a lab host shared by every tenant.
* **Driver types** outside the class's allowlist: the exporter imports and
  runs each driver of the template where the instance runs; a
  ``UnixNetwork`` pointed at the instance's QMP socket would be a shell on
  the lab host. The default allowlist is the provisioner's own
  (``Provisioner.default_driver_types``), and the provisioner may refuse an
  allowed entry the rest of the template does not support
  (``Provisioner.allowed_driver_violations``: a QEMU serial console without a
  QEMU driver) or the template as a whole (``template_violations``).
* **Reach**: a template driver whose ``config`` names a ``host`` (a
  ``TcpNetwork`` to an address of the lab's network) unless the class's
  ``reach`` entry lists that ``host:port``: the exporter connects to it from
  the Pod or the shared lab host. A driver without a ``host`` is pointed at
  the guest by the provisioner.
* **Image hosts**: a set's ``*.url`` (http, https, OCI) whose host is not
  that of one of the class's own urls nor in its ``image-hosts`` entry; the
  file the url belongs to is the class's again.
* **More resources than the class gives**: a set's resources (the
  provisioner's ``resource_ceilings``: for QEMU ``resources.cpu``,
  ``resources.memory``, ``resources.storage``) and each host's ``slots`` may
  not be above the class's value, or above a higher ceiling the class names.
  That holds on shared lab hosts (qemu-baremetal, whose
  ``ceiling_by_default`` makes the class's value one). A ``qemu.jumpstarter.dev``
  instance runs in a Pod of the set's own namespace, bounded by the class's
  ``scheduling.resources`` and the namespace's quota, so there a set's
  resources have no ceiling unless the class names one (JEP-0014's own
  example set asks for more memory than its class).

The class says more in its annotation ``constants.ANNOTATION_SET_OVERRIDABLE``
(an annotation because the upstream CRD prunes unknown spec fields)::

    virtualtarget.jumpstarter.dev/set-overridable: >-
      parameters.api.host=eu.corellium.example|us.corellium.example;
      images.exporter=quay.io/example/jumpstarter:0.9.1;
      parameters.disk.path=/srv/images/a.qcow2|/srv/images/b.qcow2;
      drivers=jumpstarter_driver_qemu.driver.Qemu|jumpstarter_driver_network.driver.TcpNetwork;
      max.resources.memory=8Gi; max.resources.cpu=4; max.slots=4;
      reach=ci.lab.example:22|10.0.0.5:8080; image-hosts=images.lab.example;
      shared-labels=board=rpi4

Entries are separated by ``;`` or new lines, values by ``|``. A
``parameters.*`` or ``images.*`` entry lists values a set may give besides
the class's own (compared exactly); ``drivers`` replaces the default list
of driver types; a ``max.*`` entry names a ceiling above the class's value.

What is not listed, and why: ``qemu.jumpstarter.dev`` has no class
credential (the exporter container receives the Exporter's own token, issued
for the set's own Exporter, so a set may choose its exporter image, and its
runtime image among those the class allows, ``Provisioner.class_images``;
image urls are checked where images are fetched); the Corellium ``device`` and ``console``
choose what is made, not where the token goes.

Pure: no I/O.
"""

import copy
import ipaddress
import re

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import bounded_json, constants, provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.merge import (
    deep_merge,
    merge_images,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    DEFAULT_IMAGES,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.quantity import (
    parse_quantity,
)

# The condition reason (and Warning Event reason) of a refusal that is not
# a credential redirect.
REASON_NOT_ALLOWED_BY_CLASS = "NotAllowedByClass"

# What each provisioner says a set may not change (its credential
# parameters, images and hosts, its path parameters, its default driver
# types, its resource ceilings, the entries its template may not have) and
# what to write instead of a driver type no package provides are the
# provisioner's: ``provisioners.get(name).credential_parameters`` and so on
# (provisioners/base.py). This module applies them, and names none.
HOST_CONNECTION_FIELDS = ("address", "port", "user")
DRIVERS_FIELD = "drivers"
# The ``host:port`` values a template driver's config may name, and the
# hosts a set's image urls may name besides those of the class's own urls:
# read_allowlist takes both for every provisioner.
REACH_FIELD = "reach"
IMAGE_HOSTS_FIELD = "image-hosts"
# The labels (``key=value``) a set's template may share with Exporters no set
# controls, a lab's boards (pool/selectors.py foreign_label_overlaps): the
# class's consent that leases asking for them may land on its sets'.
SHARED_LABELS_FIELD = "shared-labels"
_REACH_WHY = ("the exporter connects to it from where the instance runs, the Pod's or the lab "
              "host's network")
_IMAGE_HOSTS_WHY = "the image is fetched from where the instance runs, by the operator's fetch"
# The schemes the image fetch takes (provisioners/qemu/images.py URL_SCHEMES, which this
# module may not import); a url of any other form is refused by validation
# (the image-url format), not here.
FETCHED_SCHEMES = ("http", "https", "oci")
# An authority that names one host and nothing else: no user part, no
# backslash, no percent sign that a later parser could read otherwise.
_AUTHORITY = re.compile(r"^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
                        r"(?::(?P<port>[0-9]{1,5}))?$")
_DRIVERS_WHY = "the exporter imports and runs it where the instance runs"
SLOTS_CEILING = "max.slots"

_MISSING = object()


def allowable_fields(provisioner):
    """The keys the class's allowlist annotation accepts for ``provisioner``."""
    own = provisioners.get(provisioner)
    fields = ["parameters." + ".".join(path) for path in own.credential_parameters]
    fields += ["parameters." + ".".join(path) for path in own.path_parameters]
    fields += ["images." + role for role in [*own.credential_images, *own.class_images]]
    if own.default_driver_types:
        fields.append(DRIVERS_FIELD)
    fields += [key for _, key in own.resource_ceilings.values()]
    if own.credential_hosts is not None:
        fields.append(SLOTS_CEILING)
    return fields


def read_allowlist(virtual_target_class):
    """``({field: set of values}, warnings)`` from the class's annotation.

    A ``max.*`` entry keeps one value, a quantity (the last one given); an
    entry the class cannot mean is left out with a warning naming it.
    """
    class_meta = (virtual_target_class or {}).get("metadata") or {}
    provisioner = ((virtual_target_class or {}).get("spec") or {}).get("provisioner")
    text = (class_meta.get("annotations") or {}).get(constants.ANNOTATION_SET_OVERRIDABLE) or ""
    known = allowable_fields(provisioner) + [REACH_FIELD, IMAGE_HOSTS_FIELD, SHARED_LABELS_FIELD]
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
        values = {v.strip() for v in values.split("|") if v.strip()}
        if field.startswith("max."):
            if len(values) != 1 or _amount(next(iter(values))) is None:
                warnings.append(f"{where}: {entry!r} ignored ({field} takes one quantity)")
                continue
            allowed[field] = values
            continue
        allowed.setdefault(field, set()).update(values)
    return allowed, warnings


def shared_labels(virtual_target_class):
    """The ``(key, value)`` labels the class's ``shared-labels`` entry lets
    its sets' templates share with Exporters no set controls."""
    allowed, _ = read_allowlist(virtual_target_class)
    pairs = (entry.partition("=") for entry in allowed.get(SHARED_LABELS_FIELD, ()))
    return frozenset((key.strip(), value.strip()) for key, sep, value in pairs if sep)


def driver_types(virtual_target_class, allowed=None):
    """The driver types a set of the class may use (the class's list, else the default)."""
    if allowed is None:
        allowed, _ = read_allowlist(virtual_target_class)
    if DRIVERS_FIELD in allowed:
        return set(allowed[DRIVERS_FIELD])
    provisioner = ((virtual_target_class or {}).get("spec") or {}).get("provisioner")
    return set(provisioners.get(provisioner).default_driver_types)


def resolve(virtual_target_class, exporter_set):
    """The set merged over its class, within the class's policy.

    Returns ``{parameters, images, violations, warnings, errors, reason}``:
    ``parameters`` and ``images`` are ``deep_merge`` and ``merge_images`` of
    class and set (the set's parameters over what its template's drivers
    say of them, ``Provisioner.template_parameters``), except that every
    field the set may not change is the class's; ``violations`` has one
    message per refusal, each starting with the field
    (``spec.parameters.api.host: set by the class only (...)``); ``errors``
    are the template's values that cannot be read; ``reason`` is the
    condition reason of the refusals (None without any).
    """
    class_spec = (virtual_target_class or {}).get("spec") or {}
    set_spec = (exporter_set or {}).get("spec") or {}
    own = provisioners.get(class_spec.get("provisioner"))
    class_parameters = class_spec.get("parameters") or {}
    # What the template's drivers say of the machine (a Qemu driver's
    # config), under the set's own parameters: the set's, to the policy.
    from_template, template_warnings, errors = own.template_parameters(_template_drivers(exporter_set))
    given = set_spec.get("parameters")
    oversize = _values_over(given, MAX_CONFIG_VALUES)
    if oversize:  # not merged, not carried into the status: the class's alone
        given = None
    set_parameters = deep_merge(from_template, given) if from_template else given
    parameters = deep_merge(class_parameters, set_parameters)
    images = merge_images(class_spec.get("images"), set_spec.get("images"))
    allowed, warnings = read_allowlist(virtual_target_class)
    warnings += template_warnings
    redirects, refusals = [], []
    if oversize:
        refusals.append(f"spec.parameters: holds more than {MAX_CONFIG_VALUES} values, more than a set's "
                        "parameters may (they are merged and checked in every pass); the class's stand")

    _class_only(own.credential_parameters, class_parameters, parameters, allowed, redirects)

    image_rules = [(role, why, redirects) for role, why in own.credential_images.items()]
    image_rules += [(role, why, refusals) for role, why in own.class_images.items()]
    for role, why, violations in image_rules:
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

    why = own.credential_hosts
    if why is not None:
        host_violations = _host_violations(class_parameters.get("hosts"), parameters.get("hosts"),
                                           why)
        if host_violations:
            redirects.extend(host_violations)
            _put(parameters, ("hosts",), _get(class_parameters, ("hosts",)))

    _class_only(own.path_parameters, class_parameters, parameters, allowed, refusals)
    _resource_ceilings(own.resource_ceilings, own.ceiling_by_default, class_parameters, parameters,
                       allowed, refusals)
    if own.credential_hosts is not None:
        _slot_ceilings(class_parameters.get("hosts"), parameters, allowed, refusals)
    refusals.extend(_driver_violations(virtual_target_class, exporter_set, allowed))
    refusals.extend(reach_violations(exporter_set, allowed))
    refusals.extend(f"spec{path}: nested deeper than {bounded_json.MAX_DEPTH} levels, which the "
                    "operator does not read (what is deeper was dropped when the set was read)"
                    for path in bounded_json.clipped_paths(set_spec))
    refusals.extend(_image_host_violations(image_hosts(virtual_target_class, allowed), class_parameters,
                                           set_parameters, parameters))

    reason = (constants.REASON_CREDENTIAL_REDIRECT if redirects
              else REASON_NOT_ALLOWED_BY_CLASS if refusals else None)
    return {"parameters": parameters, "images": images, "violations": redirects + refusals,
            "warnings": warnings, "errors": errors, "reason": reason}


def _template_drivers(exporter_set):
    drivers = ((((exporter_set or {}).get("spec") or {}).get("template") or {}).get("spec")
               or {}).get("drivers")
    return drivers if isinstance(drivers, list) else []


def _class_only(fields, class_parameters, parameters, allowed, violations):
    """Each of ``fields`` ({path: why}) as the class has it, or a value the class allows."""
    for path, why in fields.items():
        field = "parameters." + ".".join(path)
        wanted, given = _get(class_parameters, path), _get(parameters, path)
        if given == wanted or (isinstance(given, str) and given in allowed.get(field, ())):
            continue
        violations.append(_message(field, why, allowed.get(field)))
        _put(parameters, path, wanted)


def _resource_ceilings(ceilings_of, by_default, class_parameters, parameters, allowed, violations):
    """Each of ``ceilings_of`` (``Provisioner.resource_ceilings``) no higher
    than the class's value or the ceiling it names.

    A missing value is the provisioner's default for it, so a set cannot
    raise one by dropping the class's value either. ``by_default``: the
    class's own value is a ceiling too (``Provisioner.ceiling_by_default``).
    """
    for path, (default, key) in ceilings_of.items():
        class_value = _get(class_parameters, path)
        class_given = default if class_value in (_MISSING, None) else class_value
        given = _get(parameters, path)
        given = default if given in (_MISSING, None) else given
        amount = None if given is None else _amount(given)
        if amount is None or given == class_given:
            continue  # nothing asked for, the class's own, or not a quantity (validation names it)
        ceilings = []  # (amount, as written)
        if key in allowed:
            written = next(iter(allowed[key]))
            ceilings.append((_amount(written), written))
        if by_default and class_given is not None and _amount(class_given) is not None:
            ceilings.append((_amount(class_given), class_given))
        if not ceilings and not by_default:
            continue
        if ceilings:
            ceiling, written = max(ceilings, key=lambda pair: pair[0])
            if amount <= ceiling:
                continue
            limit = f"the ceiling is {_show(written)}"
        else:
            limit = "the class gives none"
        violations.append(
            f"spec.parameters.{'.'.join(path)}: {_show(given)} is above what the class allows "
            f"({limit}; {key} in the class's annotation raises it)")
        _put(parameters, path, class_value)


def _slot_ceilings(class_hosts, parameters, allowed, violations):
    """Each picked host's slots no higher than the class's for it, or the named ceiling."""
    hosts = parameters.get("hosts")
    if not isinstance(hosts, list):
        return
    class_slots = {host.get("name"): host.get("slots")
                   for host in (class_hosts if isinstance(class_hosts, list) else ())
                   if isinstance(host, dict)}
    named = _amount(next(iter(allowed[SLOTS_CEILING]))) if SLOTS_CEILING in allowed else None
    for index, host in enumerate(hosts):
        if not isinstance(host, dict):
            continue
        slots, own = host.get("slots"), class_slots.get(host.get("name"))
        if not isinstance(slots, int) or isinstance(slots, bool) or slots == own:
            continue
        own_amount = own if isinstance(own, int) and not isinstance(own, bool) else None
        ceiling = max(c for c in (named, own_amount, 0) if c is not None)
        if slots <= ceiling:
            continue
        violations.append(
            f"spec.parameters.hosts[{index}].slots: {slots} is above what the class allows on "
            f"host {host.get('name')!r} (the ceiling is {ceiling:g}; {SLOTS_CEILING} in the "
            f"class's annotation raises it)")
        if own is None:
            host.pop("slots", None)
        else:
            host["slots"] = own


def _driver_violations(virtual_target_class, exporter_set, allowed):
    """One message per template driver whose type the class does not allow."""
    drivers = ((((exporter_set or {}).get("spec") or {}).get("template") or {}).get("spec")
               or {}).get("drivers")
    if not isinstance(drivers, list):
        return []
    types = driver_types(virtual_target_class, allowed)
    shown = ", ".join(sorted(types)) if types else "none"
    provisioner = ((virtual_target_class or {}).get("spec") or {}).get("provisioner") or "its provisioner"
    own = provisioners.get(provisioner)
    source = ("named by the class's annotation" if DRIVERS_FIELD in allowed
              else f"{provisioner}'s defaults; {DRIVERS_FIELD} in the class's annotation names others")
    violations = []
    refusals = own.allowed_driver_violations(drivers)
    for index, driver in enumerate(drivers):
        kind = driver.get("type") if isinstance(driver, dict) else None
        if kind is None:
            continue
        if kind in types:
            # Allowed by type; the provisioner may still refuse it for what
            # the rest of the template lacks (one message for the entry).
            refusal = refusals.get(index)
            if refusal:
                violations.append(refusal)
            continue
        hint = own.driver_type_hints.get(kind)
        violations.append(
            f"spec.template.spec.drivers[{index}].type: {_show(kind)} is not a driver type the "
            f"class allows ({_DRIVERS_WHY}); supported types: {shown} ({source})"
            + (f"; {hint}" if hint else ""))
    violations += own.template_violations(drivers)
    return violations


# Keys whose value names a host wherever they are in a driver's config
# (compared without case, "_", "-" or "."): ``host``, ``remote_host``,
# ``hostname``, ``address``, ``server``, ``endpoint``, ``ip``... A MAC
# address is not one.
_HOST_KEY = re.compile(r"(host|hostname|hostaddr|addr|address|server|endpoint|ip|remote|peer|proxy)$")
_PORT_KEY = "port"
# A string that names a connection wherever it is: a url with an authority,
# ``host:port`` (a path may follow), an IP address.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://(?P<authority>[^/?#]*)")
_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
                        r":(?P<port>[0-9]{1,5})(?:/.*)?$", re.DOTALL)


def _key(key):
    return re.sub(r"[-_.]", "", str(key)).lower()


def _is_ip(text):
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


def _bracketed(host):
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _named_connection(text, host_key):
    """``(host, port or None, complete)`` that the string ``text`` names, or
    None. ``complete``: its port is its own (a url's, ``host:port``); a bare
    host takes the ports its config names. Under a host key any value is a
    host; elsewhere only a url, ``host:port`` or an IP address is."""
    text = text.strip()
    if _is_ip(text):
        return _bracketed(text.strip("[]")), None, False
    url = _URL.match(text)
    if url:
        authority = url.group("authority")
        if not authority:
            return None
        match = _AUTHORITY.match(authority)
        if not match:
            return authority, None, True
        return match.group("host"), match.group("port"), True
    match = _HOST_PORT.match(text)
    if match:
        return match.group("host"), match.group("port"), True
    return (_bracketed(text), None, False) if host_key and text else None


def driver_reach_targets(config):
    """``[(path, host:port)]``: every connection a template driver's ``config``
    names, at any depth, through mappings and lists (``path`` from the config,
    e.g. ``.host``, ``.backends[1].url``): a value under a host key (a
    number too), and any url, ``host:port`` or IP address (a mapping key
    too). A bare host takes its own mapping's ``port``, else every ``port``
    the config names, else none (``[v6]``, ``[v6]:port``; lowercase). A
    ``port`` without a host anywhere is pointed at the guest by the
    provisioner and names nothing."""
    hosts, ports = [], []

    def walk(value, path, host_key, sibling_port):
        if isinstance(value, dict):
            own = next((v for k, v in value.items() if _key(k) == _PORT_KEY and v not in (None, "")
                        and not isinstance(v, (dict, list))), None)
            for key, item in value.items():
                if _key(key) == _PORT_KEY and not isinstance(item, (dict, list)):
                    if item not in (None, ""):
                        ports.append(str(item))
                    continue
                named = _named_connection(str(key), False)
                if named:
                    hosts.append((f"{path}.{key}", named, own))
                walk(item, f"{path}.{key}", bool(_HOST_KEY.search(_key(key))) and not _key(key).startswith("mac"),
                     own)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]", host_key, sibling_port)
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            named = _named_connection(str(value), host_key)
            if named:
                hosts.append((path, named, sibling_port))

    walk(config, "", False, None)
    targets = []
    for path, (host, port, complete), sibling in hosts:
        host = host.lower()
        if complete or port is not None:
            choices = [port]
        elif sibling not in (None, ""):
            choices = [str(sibling)]
        else:
            choices = sorted(set(ports)) or [None]
        targets += [(path, host if choice is None else f"{host}:{choice}") for choice in choices]
    return targets


def reach_violations(exporter_set, allowed):
    """One message per connection a template driver's config names (any
    depth, ``driver_reach_targets``) that the class's ``reach`` entry does
    not list as ``host:port``.

    A driver without a host (a TcpNetwork that names a port alone) is
    pointed at the guest by the provisioner and needs no entry.
    """
    drivers = ((((exporter_set or {}).get("spec") or {}).get("template") or {}).get("spec")
               or {}).get("drivers")
    reach = {entry.lower() for entry in allowed.get(REACH_FIELD) or ()}
    listed = ", ".join(sorted(reach)) if reach else "none"
    violations = []
    for index, driver in enumerate(drivers if isinstance(drivers, list) else ()):
        config = driver.get("config") if isinstance(driver, dict) else None
        config = config if isinstance(config, (dict, list)) else None
        if _values_over(config, MAX_CONFIG_VALUES):
            violations.append(
                f"spec.template.spec.drivers[{index}].config: holds more than {MAX_CONFIG_VALUES} values, "
                "more than a driver's config may (each is read for the hosts it names, in every pass)")
            continue
        refused = [(path, target) for path, target in driver_reach_targets(config) if target not in reach]
        for path, target in refused[:MAX_REACH_MESSAGES]:
            violations.append(
                f"spec.template.spec.drivers[{index}].config{path}: {_show(target)} is not a host:port the "
                f"class lets a set reach ({_REACH_WHY}); the class allows: {listed} ({REACH_FIELD} in "
                "the class's annotation lists them)")
        if len(refused) > MAX_REACH_MESSAGES:
            violations.append(f"spec.template.spec.drivers[{index}].config: and {len(refused) - MAX_REACH_MESSAGES} "
                              "more hosts the class does not list")
    return violations


# A driver's config and a set's parameters are free-form JSON (the CRD
# bounds a config's top level only, the schema only the fields it knows):
# what a pass reads of them, GIL held, is bounded here (200,000 strings
# in a config cost 1 s a pass, in parameters 0.3 s and a status of 1.8 MB),
# and so is what a refusal says (40,000 hosts made 11 MB of messages).
MAX_CONFIG_VALUES = 4096
MAX_REACH_MESSAGES = 16


def _values_over(config, limit):
    """Whether ``config`` holds more than ``limit`` values (mapping keys,
    list items and scalars), counted without recursion, stopping past it."""
    count, stack = 0, [config] if config is not None else []
    while stack:
        item = stack.pop()
        children = list(item.values()) if isinstance(item, dict) else item if isinstance(item, list) else ()
        count += len(children)
        if count > limit:
            return True
        stack.extend(child for child in children if isinstance(child, (dict, list)))
    return False


def url_host(url):
    """The lowercased host an image url names (http, https, oci:// or a
    scheme-less OCI reference), or None when it names none or its authority
    is more than a host and a port."""
    if not isinstance(url, str):
        return None
    _, sep, rest = url.strip().partition("://")
    authority, slash, _ = (rest if sep else url.strip()).partition("/")
    match = _AUTHORITY.match(authority) if sep or slash else None
    return match.group("host").lower() if match else None


def _fetched(url):
    """Whether ``url`` is of a form the fetch takes (else validation refuses it)."""
    if not isinstance(url, str):
        return False
    scheme, sep, _ = url.strip().partition("://")
    if sep:
        return scheme.lower() in FETCHED_SCHEMES
    first = url.strip().split("/", 1)[0]
    return ":" not in first or bool(re.match(r"^[^/:]+:\d+/", url.strip()))


def _urls(parameters, path=()):
    """``(path, url)`` of every ``url`` key in ``parameters`` (mappings only)."""
    if not isinstance(parameters, dict):
        return
    for key, value in parameters.items():
        if key == "url":
            yield path + (key,), value
        elif isinstance(value, dict):
            yield from _urls(value, path + (key,))


def image_hosts(virtual_target_class, allowed=None):
    """The hosts a set's image urls may name: those of the class's own urls
    and its ``image-hosts`` entry, lowercased, without port. The fetch
    (provisioners/qemu/images.py) follows a redirect only to one of them or the url's own host."""
    if allowed is None:
        allowed, _ = read_allowlist(virtual_target_class)
    class_parameters = ((virtual_target_class or {}).get("spec") or {}).get("parameters") or {}
    hosts = {url_host(url) for _, url in _urls(class_parameters)} - {None}
    hosts |= {(url_host("x://" + entry) or entry).lower() for entry in allowed.get(IMAGE_HOSTS_FIELD, ())}
    return hosts


def _image_host_violations(hosts, class_parameters, set_parameters, parameters):
    """One message per ``*.url`` the set gives whose host is not in ``hosts``
    (``image_hosts``); the file it belongs to becomes the class's again."""
    violations = []
    for path, url in sorted(_urls(set_parameters), key=lambda pair: pair[0]):
        if url == _get(class_parameters, path) or not _fetched(url):
            continue  # the class's own, or a url no fetch takes (validation names it)
        host = url_host(url)
        if host is not None and host in hosts:
            continue
        named = f"host {_show(host)}" if host else "no plain host (a host and a port, nothing more)"
        listed = ", ".join(sorted(hosts)) if hosts else "none"
        violations.append(
            f"spec.parameters.{'.'.join(path)}: {_show(url)} names {named}, not one the class fetches "
            f"images from ({_IMAGE_HOSTS_WHY}); the class allows: {listed} (the hosts of its own "
            f"urls, and {IMAGE_HOSTS_FIELD} in the class's annotation)")
        whole = path[:-1] or path
        _put(parameters, whole, _get(class_parameters, whole))
    return violations


def _amount(value):
    try:
        return parse_quantity(value)
    except ValueError:
        return None


def _show(value):
    return f"'{value}'" if isinstance(value, str) else repr(value)


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
