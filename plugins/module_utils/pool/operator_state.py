"""What the operator keeps about a set between passes and decides from:
``status.operatorState`` of the ExporterSet, never its annotations.

A set author writes the set's metadata and spec, not its status
subresource (tenants get no ``exportersets/status``), so nothing they write
reaches these decisions: the scale-down cooldown's clock, the failure
streak and its backoff, a backend's refusal and when it is asked again,
the lab hosts' report (and when they are probed again), and the last
config re-sync. Annotations of the former names (``surplus-since``,
``consecutive-failures``, ``last-failure``, ``backend-refusal``,
``host-report``, ``config-synced-at``) are never read.

Each value is a scalar: text (JSON text for the structured ones) or, for
the failure count, an integer. A status write is a merge patch, which
replaces a scalar whole, where a nested map would keep the keys a writer
left out. Several writers own keys of it (the pool pass, the provisioner
roles' modules, the re-sync); each writes its patch (key -> value, None
removes) onto a fresh read (``k8s/status.py``), so none undoes another's.

Pure: no I/O.
"""

FIELD = "operatorState"

# RFC3339 time since which the pool has had more replicas than its target
# without interruption (the scale-down cooldown's clock).
SURPLUS_SINCE = "surplusSince"
# Instance failures since an instance last became ready (backoff, ReplicaFailure).
CONSECUTIVE_FAILURES = "consecutiveFailures"
# JSON {time, since, reason, message, exporters, start?, unrecoverable?} of
# the latest failure round (pool/phases/failures.py); "exporters" keeps a
# failure seen twice through a stale cache from being counted twice.
LAST_FAILURE = "lastFailure"
# JSON {reason, message, since, count, retryAt} of the backend's last
# refusal (pool/backend_refusal.py).
BACKEND_REFUSAL = "backendRefusal"
# JSON {probedAt, hosts} of what the lab hosts last reported (provisioners/qemu_baremetal/pool.py).
HOST_REPORT = "hostReport"
# RFC3339 time the set's running instances' config was last re-synced.
CONFIG_SYNCED_AT = "configSyncedAt"

KEYS = (SURPLUS_SINCE, CONSECUTIVE_FAILURES, LAST_FAILURE, BACKEND_REFUSAL, HOST_REPORT, CONFIG_SYNCED_AT)


def of(exporter_set):
    """The set's operator state (a copy; empty when it has none)."""
    state = ((exporter_set or {}).get("status") or {}).get(FIELD)
    return dict(state) if isinstance(state, dict) else {}


def get(exporter_set, key):
    return of(exporter_set).get(key)


def merged(state, patch):
    """``state`` with ``patch`` over it; a None value removes its key."""
    result = {**(state or {}), **(patch or {})}
    return {key: value for key, value in result.items() if value is not None}


def differs(state, patch):
    """Whether ``patch`` changes ``state``."""
    return merged(state, patch) != merged(state, None)


def rebased(status, current_status, patch=None):
    """``status`` to be written over ``current_status``: its operator state
    is the current one (a fresh read's, not the copy ``status`` was planned
    on) with ``patch`` over it, and left out when empty."""
    status = dict(status)
    state = merged(of({"status": current_status}), patch)
    status.pop(FIELD, None)
    if state:
        status[FIELD] = state
    return status


def patch_body(current_status, status):
    """The merge patch writing ``status`` over ``current_status``: the keys
    of the current operator state that ``status`` drops are written as
    null (removed), and the whole field when ``status`` has none."""
    if FIELD not in (current_status or {}):
        return status
    before, after = current_status[FIELD], status.get(FIELD)
    if not after:
        return {**status, FIELD: None}
    if not isinstance(before, dict):
        return status
    return {**status, FIELD: {**{key: None for key in before if key not in after}, **after}}


def state_patch_body(current_state, patch):
    """The merge patch of the status writing ``patch`` over the operator
    state ``current_state``; None when it changes nothing."""
    if not differs(current_state, patch):
        return None
    return {FIELD: dict(patch) if merged(current_state, patch) else None}
