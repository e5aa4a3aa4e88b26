"""The Jumpstarter ExporterConfig of one instance, rendered from its ExporterSet.

The ``export`` map comes from ``spec.template.spec.drivers``: each entry
``{name, type, config}`` becomes ``export[name] = {type, config}`` and each
``{name, ref}`` becomes ``export[name] = {ref}`` (a proxy to a nested child
driver, as jumpstarter 0.9.0's ExporterConfig model spells it). The
provisioner then lays its own ``driver_overrides`` over that map.

The result holds the exporter's token: callers store it only in a Secret or
a file readable by its owner alone, and never log it.

Pure: no I/O.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.merge import (
    deep_merge,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.qemu_argv import (
    DISK_IMAGE,
    arch_of,
    has_disk,
    image_path,
    memory_mib,
    run_path,
    storage_bytes,
    vcpu_count,
)

API_VERSION = "jumpstarter.dev/v1alpha1"
KIND = "ExporterConfig"


def exits_on_lease_end(exporter_set):
    """Whether the exporter process ends with its lease: unless the set reuses instances in place."""
    strategy = (exporter_set.get("spec") or {}).get("recycleStrategy") or constants.RECYCLE_EXIT_AND_REPLACE
    return strategy != constants.RECYCLE_IN_PLACE_REUSE


def render_exporter_config(
    name, namespace, drivers, *, endpoint, token, driver_overrides=None, tls_ca=None,
    exit_on_lease_end=None,
):
    """ExporterConfig as a dict, ready to be dumped as YAML.

    ``drivers`` is the template's driver list. ``driver_overrides`` maps an
    export name to an entry laid over the template's: a ``ref`` entry, or an
    entry for a name the template lacks, replaces or adds it whole; a
    ``type``/``config`` entry is deep-merged over the template's entry (the
    provisioner wins; a null value drops a key). ``tls_ca`` is the base64 CA
    bundle of the controller endpoint. ``exit_on_lease_end`` (when given) is
    written as ``exitOnLeaseEnd``; exporters that do not know the field
    ignore it.
    """
    export = {}
    for index, driver in enumerate(drivers or []):
        where = f"drivers[{index}]"
        if not isinstance(driver, dict):
            raise ValueError(f"{where}: must be a mapping")
        export_name = driver.get("name")
        if not export_name or not isinstance(export_name, str):
            raise ValueError(f"{where}.name: required")
        if export_name in export:
            raise ValueError(f"{where}.name: duplicate driver name {export_name!r}")
        entry = {key: value for key, value in driver.items() if key != "name"}
        export[export_name] = _checked_entry(entry, where)

    for export_name, override in (driver_overrides or {}).items():
        where = f"driver_overrides[{export_name!r}]"
        current = export.get(export_name)
        if current is None or "ref" in current or "ref" in (override or {}):
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
    return config


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


def qemu_driver_config(parameters, run_dir):
    """Config of ``jumpstarter_driver_qemu.driver.Qemu`` (0.9.0) for these parameters.

    Field names are the driver's: ``arch``, ``cpu``, ``smp``, ``mem``,
    ``disk_size`` and ``default_partitions`` (``root`` is the instance disk,
    ``bios`` the firmware). Sizes use the driver's notation, where ``G``,
    ``M`` and ``K`` are binary units.
    """
    config = {
        "arch": arch_of(parameters),
        "smp": vcpu_count(parameters),
        "mem": _driver_size(memory_mib(parameters) * 2**20),
    }
    if parameters.get("cpuModel"):
        config["cpu"] = parameters["cpuModel"]
    size = storage_bytes(parameters)
    if size is not None:
        config["disk_size"] = _driver_size(size)
    partitions = {}
    if has_disk(parameters):
        partitions["root"] = run_path(run_dir, DISK_IMAGE)
    firmware = image_path(parameters, "firmware", run_dir)
    if firmware:
        partitions["bios"] = firmware
    if partitions:
        config["default_partitions"] = partitions
    return config


def _driver_size(size_bytes):
    for suffix, factor in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if size_bytes % factor == 0:
            return f"{size_bytes // factor}{suffix}"
    return str(size_bytes)
