"""The Jumpstarter ExporterConfig of one instance, rendered from its ExporterSet.

The ``export`` map comes from ``spec.template.spec.drivers`` (an entry
without a name gets one derived from its type: ``named_drivers``): each entry
``{name, type, config}`` becomes ``export[name] = {type, config}`` and each
``{name, ref}`` becomes ``export[name] = {ref}`` (a proxy to a nested child
driver, as jumpstarter 0.9.0's ExporterConfig model spells it). The
provisioner then lays its own ``driver_overrides`` over that map.

The result holds the exporter's token: callers store it only in a Secret or
a file readable by its owner alone, and never log it.

Pure: no I/O.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.merge import (
    deep_merge,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_common import (
    QEMU_DRIVER_TYPES,
    QEMU_SERIAL_DRIVER_TYPE,
    TCP_NETWORK_DRIVER_TYPE,
    VIRTUAL_QEMU_DRIVER_TYPE,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.qemu.argv import (
    DISK_NODE,
    QMP_SOCKET,
    SERIAL_LOG,
    SERIAL_SOCKET,
)

API_VERSION = "jumpstarter.dev/v1alpha1"
KIND = "ExporterConfig"
# The driver types (VirtualQemu, the template's QEMU types, QemuSerial,
# TcpNetwork) are the QEMU provisioners' (provisioners/qemu_common.py).
# JEP-0014's template reaches the guest's SSH with a TcpNetwork entry that
# names a port and no host. In a qemu.jumpstarter.dev Pod QEMU forwards a
# local port of the Pod to each such guest port (``guest_port_forwards``),
# and the entry is pointed at it (``network_driver_overrides``).
GUEST_SSH_PORT = 22
# The first local port a guest port is forwarded to; the next ones follow.
FORWARD_BASE_PORT = 22000
FORWARD_HOST = "127.0.0.1"


# Written in the instance's run directory by the exporter once its lease has
# ended (``lease_end_hooks``); an exporter started again beside it (the
# container restarted) sees it and never registers again (``k8s/pod.py``).
LEASE_ENDED_MARKER = "lease-ended"


def lease_end_hooks(run_dir):
    """The ExporterConfig ``hooks`` that end the exporter with its first lease.

    ``jmp run`` 0.9.0 serves again after a lease (its child process is
    forked anew and reports Available), so the controller could hand the
    used VM to the next lessee before the operator disables its Exporter.
    The afterLease hook runs before the exporter would report Available: it
    notes the end in the run directory and fails with ``onFailure: exit``,
    so the exporter reports AfterLeaseHookFailed, then Offline, unregisters
    and exits with 1, which ``jmp run`` does not restart.
    """
    marker = f"{run_dir.rstrip('/')}/{LEASE_ENDED_MARKER}"
    return {"afterLease": {"script": f"touch {marker}; exit 1", "onFailure": "exit", "timeout": 30}}


def exits_on_lease_end(exporter_set):
    """Whether the exporter process ends with its lease: unless the set reuses instances in place."""
    strategy = (exporter_set.get("spec") or {}).get("recycleStrategy") or constants.RECYCLE_EXIT_AND_REPLACE
    return strategy != constants.RECYCLE_IN_PLACE_REUSE


def render_exporter_config(
    name, namespace, drivers, *, endpoint, token, driver_overrides=None, tls_ca=None,
    exit_on_lease_end=None, hooks=None,
):
    """ExporterConfig as a dict, ready to be dumped as YAML.

    ``drivers`` is the template's driver list. ``driver_overrides`` maps an
    export name to an entry laid over the template's: a ``ref`` entry, an
    entry of another ``type`` than the template's, or an entry for a name the
    template lacks, replaces or adds it whole; an entry of the same type (or
    a ``config`` alone) is deep-merged over the template's entry (the
    provisioner wins; a null value drops a key). ``tls_ca`` is the base64 CA
    bundle of the controller endpoint. ``exit_on_lease_end`` (when given) is
    written as ``exitOnLeaseEnd``; exporters that do not know the field
    ignore it. ``hooks`` (when given) is the config's ``hooks`` map, e.g.
    ``lease_end_hooks``.
    """
    export = {}
    for index, driver in enumerate(named_drivers(drivers)):
        where = f"drivers[{index}]"
        if not isinstance(driver, dict):
            raise ValueError(f"{where}: must be a mapping")
        export_name = driver.get("name")
        if not export_name or not isinstance(export_name, str):
            raise ValueError(f"{where}.name: required (a non-empty string; left out, one is "
                             f"derived from the type)")
        if export_name in export:
            raise ValueError(f"{where}.name: duplicate driver name {export_name!r}")
        entry = {key: value for key, value in driver.items() if key != "name"}
        export[export_name] = _checked_entry(entry, where)

    for export_name, override in (driver_overrides or {}).items():
        where = f"driver_overrides[{export_name!r}]"
        current = export.get(export_name)
        override_type = (override or {}).get("type")
        if (current is None or "ref" in current or "ref" in (override or {})
                or (override_type and override_type != current.get("type"))):
            export[export_name] = _checked_entry(deep_merge({}, override), where)
        else:
            export[export_name] = _checked_entry(deep_merge(current, override), where)

    config = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"namespace": namespace, "name": name},
        "endpoint": endpoint,
        "token": token,
        "export": export,
    }
    if tls_ca:
        config["tls"] = {"ca": tls_ca}
    if exit_on_lease_end is not None:
        config["exitOnLeaseEnd"] = bool(exit_on_lease_end)
    if hooks:
        config["hooks"] = hooks
    return config


def named_drivers(drivers):
    """The template's drivers, each with a ``name``: the one place names are derived.

    JEP-0014's examples list drivers by ``type`` alone. An entry without a
    name (or with a null one) gets the last dot-separated segment of its
    ``type`` (or ``ref``), lowercased: ``...driver.QemuPower`` is exported as
    ``qemupower``. Names the template gives are kept and reserved first; a
    derived name taken already gets ``_2``, ``_3``... in the list's order.
    So the same list always yields the same names. Entries that are not
    mappings are returned as they are (``render_exporter_config`` refuses
    them by index). The input is not changed.
    """
    drivers = list(drivers or [])
    taken = {driver["name"] for driver in drivers
             if isinstance(driver, dict) and isinstance(driver.get("name"), str)}
    named = []
    for driver in drivers:
        if not isinstance(driver, dict) or driver.get("name") is not None:
            named.append(driver)
            continue
        source = driver.get("type") or driver.get("ref")
        base = (source.rsplit(".", 1)[-1].lower() if isinstance(source, str) else "") or "driver"
        name, suffix = base, 1
        while name in taken:
            suffix += 1
            name = f"{base}_{suffix}"
        taken.add(name)
        named.append({**driver, "name": name})
    return named


def _checked_entry(entry, where):
    """One export entry in canonical form: ``{"type", "config"}`` or ``{"ref"}``."""
    has_type = bool(entry.get("type"))
    has_ref = bool(entry.get("ref"))
    if has_type == has_ref:
        raise ValueError(f"{where}: give exactly one of type or ref")
    if has_ref:
        if entry.get("config"):
            raise ValueError(f"{where}: a ref entry has no config")
        return {"ref": entry["ref"]}
    config = entry.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError(f"{where}.config: must be a mapping")
    return {"type": entry["type"], "config": config}


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
        # The serial console of the first QEMU driver (set_overrides refuses
        # a serial entry in a template that has none).
        console = next(iter(overrides)) + ".console"
        overrides.update({driver["name"]: {"ref": console}
                          for driver in named if driver.get("type") == QEMU_SERIAL_DRIVER_TYPE})
    return overrides


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
