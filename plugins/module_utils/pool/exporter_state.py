"""Reading the state of an Exporter object as the Kubernetes API returns it."""


def exporter_name(exporter):
    return exporter["metadata"]["name"]


def find_condition(obj, condition_type):
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == condition_type:
            return condition
    return None


def is_ready(exporter):
    """Registered and Online, the two conditions the Jumpstarter controller sets."""
    return read_exporter(exporter)[1]


def is_terminating(obj):
    return bool(obj["metadata"].get("deletionTimestamp"))


def read_exporter(exporter):
    """(name, ready, online, enabled, lease name or None, terminating) in one pass.

    Pools hold thousands of Exporters; this is the one place that reads them.
    ready means the Registered and Online conditions are both True; enabled
    follows spec.enabled, which defaults to true (JEP-0014 phase 1); the lease
    is status.leaseRef.name.
    """
    metadata = exporter["metadata"]
    status = exporter.get("status") or {}
    registered = online = False
    for condition in status.get("conditions") or ():
        kind = condition.get("type")
        if kind == "Registered":
            registered = condition.get("status") == "True"
        elif kind == "Online":
            online = condition.get("status") == "True"
    return (
        metadata["name"],
        registered and online,
        online,
        (exporter.get("spec") or {}).get("enabled", True) is not False,
        (status.get("leaseRef") or {}).get("name") or None,
        bool(metadata.get("deletionTimestamp")),
    )


def is_available(exporter):
    """Ready, enabled, unleased and not being deleted: a lease can take it now."""
    _, ready, _, enabled, lease, terminating = read_exporter(exporter)
    return ready and enabled and lease is None and not terminating
