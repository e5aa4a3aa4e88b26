"""Writes of an ExporterSet's status, its operator state and Events.

Shared by the ``exporterset_status`` module (slow path, from a playbook) and
the operator (fast path, in process), so both write the same thing the same
way. Needs the ``kubernetes`` client; takes an ``ApiClient`` so the caller
decides how it is configured.
"""

import hashlib
from datetime import UTC, datetime

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import guarded_write, writer
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import (
    operator_state,
    sizing,
    status_compare,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import merge_conditions
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import format_time

COMPONENT = "exporterset-operator"

# Condition types of the Ansible Operator SDK outcome of the last run.
OUTCOME_CONDITIONS = ("Running", "Successful", "Failure")


def _now():
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def outcome_condition(kind, reason, message, generation):
    """One of the SDK's Running/Successful/Failure conditions, True."""
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message[:32768],
        "observedGeneration": generation,
    }


def status_with_outcome(status, current_status, outcome):
    """``status`` plus the SDK outcome conditions, the outcome kind set True.

    The other outcome kinds are kept False so ``kubectl wait`` on any of
    them works as it does for SDK operators.
    """
    updates = list(status.get("conditions") or [])
    if outcome is not None:
        for kind in OUTCOME_CONDITIONS:
            if kind == outcome["type"]:
                updates.append(outcome)
            else:
                updates.append(
                    {
                        "type": kind,
                        "status": "False",
                        "reason": outcome["reason"],
                        "message": "",
                        "observedGeneration": outcome.get("observedGeneration", 0),
                    }
                )
    else:
        updates.extend(
            c for c in (current_status or {}).get("conditions", []) if c["type"] in OUTCOME_CONDITIONS
        )
    merged = dict(status)
    merged["conditions"] = merge_conditions((current_status or {}).get("conditions"), updates, _now())
    return merged


def status_differs(current, desired):
    """True when writing ``desired`` would change ``current`` (the one
    comparison, ``pool/status_compare.py``: conditions without their
    ``lastTransitionTime``, in any order)."""
    return status_compare.status_differs(current, desired)


def desired_status(status, current_status, outcome=None, state=None):
    """What a status write leaves on the set: ``status`` with the outcome
    (``status_with_outcome``) and the current operator state with ``state``
    (a patch) over it; the operator state ``status`` was planned with is
    not written, so a writer never undoes another's keys; nor is an older
    lease record than the current one (``sizing.rebased``)."""
    status = operator_state.rebased(status_with_outcome(status, current_status, outcome), current_status, state)
    if "sizing" in status:
        status["sizing"] = sizing.rebased(status["sizing"], (current_status or {}).get("sizing"))
    return status


def write_status(api_client, namespace, name, status, outcome=None, attempts=guarded_write.ATTEMPTS, state=None):
    """Write ``status`` through the status subresource, with ``state`` (a
    patch of the operator state, ``pool/operator_state.py``) applied.

    Guarded by the object's resourceVersion, a 409 Conflict retried on a
    fresh read (``guarded_write``), so a concurrent writer is never
    overwritten blindly. Returns (changed, written status); a set that is
    gone is (False, None).
    """
    wanted = {}

    def plan(current):
        current_status = current.get("status") or {}
        wanted["status"] = desired = desired_status(status, current_status, outcome, state)
        if guarded_write.status_patch(current, desired) is None:
            return None
        return guarded_write.Patch({"status": operator_state.patch_body(current_status, desired)})

    written = guarded_write.read_modify_write(
        api_client, constants.EXPORTER_SET, namespace, name, plan, attempts=attempts)
    if not written.exists:
        return False, None
    if written.changed:
        return True, wanted["status"]
    return False, written.current.get("status")


def write_state(api_client, namespace, name, state, given=None, check_mode=False):
    """Write ``state`` (a patch of the set's operator state) alone, through
    the status subresource, on a fresh read (or ``given``, the caller's copy,
    first), guarded by its resourceVersion. Returns whether it changed."""
    def plan(current):
        body = operator_state.state_patch_body(operator_state.of(current), state)
        return None if body is None else guarded_write.Patch({"status": body})

    return guarded_write.read_modify_write(
        api_client, constants.EXPORTER_SET, namespace, name, plan, given=given, check_mode=check_mode).changed


def patch_annotations(api_client, gvr, namespace, name, annotations):
    """Merge-patch annotations of a ``gvr`` object (a None value removes the key)."""
    if not annotations:
        return False
    outcome = writer.Writer(api_client).patch(gvr, namespace, name, {"metadata": {"annotations": annotations}})
    if not outcome.written:
        raise outcome.error
    return True


def event_name(involved_name, reason, message, exporter=None):
    """One Event object per (object, reason, message, exporter): a repeat
    bumps its count, anything else is an Event of its own."""
    digest = hashlib.sha256(f"{reason}\x00{message}\x00{exporter or ''}".encode()).hexdigest()[:12]
    return f"{involved_name}.{digest}"


def event_message(event):
    """The message as written: an event about one Exporter names it first."""
    exporter = event.get("exporter")
    if exporter and not event["message"].startswith(f"{exporter}: "):
        return f"{exporter}: {event['message']}"
    return event["message"]


def _bump(write, namespace, name, now):
    """One more occurrence of the existing Event ``name``: its lastTimestamp
    patched (the answer carries its count), then its count, guarded by the
    version that answer gave (a writer in between: its bump stands). An
    Event expired meanwhile (404), or bumped by another writer (409), is left."""
    first = write.patch("Event", namespace, name, {"lastTimestamp": now})
    if first.written:
        write.patch("Event", namespace, name, {"count": (first.obj.get("count") or 1) + 1},
                    resource_version=first.obj["metadata"]["resourceVersion"])


def emit_events(api_client, involved, events, component=COMPONENT):
    """Create core/v1 Events about ``involved`` (a full object).

    An Event seen before (same object, reason and message) has its count and
    lastTimestamp bumped instead of adding a new object, like kubelet does:
    created first, and patched when it exists (the create and patch that
    upstream's exporter-set slot grants; no read of an Event).
    Each event may name an ``exporter``; the event is then still recorded on
    the set, with the exporter first in the message and as the Event's
    ``related`` object, and each Exporter gets an Event of its own (two
    Exporters recycled for the same reason are two Events, not one with
    count 2).
    """
    write = writer.Writer(api_client)
    meta = involved["metadata"]
    namespace = meta["namespace"]
    now = format_time(datetime.now(UTC))
    written = 0
    for event in events:
        message = event_message(event)
        exporter = event.get("exporter")
        name = event_name(meta["name"], event["reason"], message, exporter)
        involved_ref = {
            "apiVersion": involved.get("apiVersion", constants.EXPORTER_SET.api_version),
            "kind": involved.get("kind", constants.EXPORTER_SET.kind),
            "name": meta["name"], "namespace": namespace,
        }
        for key in ("uid", "resourceVersion"):
            if meta.get(key):
                involved_ref[key] = meta[key]
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved_ref,
            "reason": event["reason"],
            "message": message,
            "type": event.get("type", "Normal"),
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": component},
            "reportingComponent": component,
        }
        if exporter:
            body["related"] = {"apiVersion": constants.EXPORTER.api_version, "kind": constants.EXPORTER.kind,
                               "name": exporter, "namespace": namespace}
        outcome = write.create("Event", namespace, body)
        if outcome.status == writer.EXISTS:
            _bump(write, namespace, name, now)
        elif not outcome.written:
            raise outcome.error
        written += 1
    return written
