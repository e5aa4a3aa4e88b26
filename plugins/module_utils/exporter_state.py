"""Reading the state of an Exporter object as the Kubernetes API returns it."""


def exporter_name(exporter):
    return exporter["metadata"]["name"]


def condition_status(obj, condition_type):
    """The status string ("True", "False", "Unknown") of a condition, or None."""
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == condition_type:
            return condition.get("status")
    return None


def find_condition(obj, condition_type):
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == condition_type:
            return condition
    return None


def is_online(exporter):
    return condition_status(exporter, "Online") == "True"


def is_ready(exporter):
    """Registered and Online, the two conditions the Jumpstarter controller sets."""
    registered = online = False
    for condition in (exporter.get("status") or {}).get("conditions") or ():
        kind = condition.get("type")
        if kind == "Registered":
            registered = condition.get("status") == "True"
        elif kind == "Online":
            online = condition.get("status") == "True"
    return registered and online


def is_enabled(exporter):
    """spec.enabled defaults to true (JEP-0014 phase 1)."""
    return (exporter.get("spec") or {}).get("enabled", True) is not False


def lease_name(exporter):
    """Name of the lease assigned to the Exporter, or None."""
    ref = (exporter.get("status") or {}).get("leaseRef") or {}
    return ref.get("name") or None


def is_terminating(obj):
    return bool(obj["metadata"].get("deletionTimestamp"))


def is_available(exporter):
    """Ready, enabled, unleased and not being deleted: a lease can take it now."""
    return (
        is_ready(exporter)
        and is_enabled(exporter)
        and lease_name(exporter) is None
        and not is_terminating(exporter)
    )
