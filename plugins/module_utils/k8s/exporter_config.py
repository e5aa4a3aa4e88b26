"""The Jumpstarter ExporterConfig of one instance, rendered from its ExporterSet.

The ``export`` map comes from ``spec.template.spec.drivers`` (an entry
without a name gets one derived from its type: ``provisioners.base.named_drivers``): each entry
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
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    LEASE_ENDED_MARKER,
    named_drivers,
)

API_VERSION = "jumpstarter.dev/v1alpha1"
KIND = "ExporterConfig"
# ``LEASE_ENDED_MARKER`` (provisioners/base.py) is written in the instance's
# run directory by the exporter once its lease has ended (``lease_end_hooks``).


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
    provisioner wins; a null value drops a key); a null entry leaves the
    template's entry out. ``tls_ca`` is the base64 CA
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
        if override is None:
            export.pop(export_name, None)
            continue
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
