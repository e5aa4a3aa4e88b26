"""Kubernetes objects the pool owns, built and read as plain dicts.

Pure functions (no I/O): the operator, the modules and the roles' filters
use them to build an instance's Exporter and to read the state of the
backend that serves it.
"""

import re

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants

# The ownership rule lives in pool/ownership.py; these names stay for the
# code that builds objects.
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.ownership import (  # noqa: F401
    controlled_by,
    controller_of,
    controller_ref,
    controller_reference,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
    images as image_fetch,
)

# Container waiting reasons after which a Pod will not get better by itself.
FATAL_WAITING_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


def exporter_manifest(exporter_set, entry, provisioner, extra_labels=None):
    """The Exporter for one ``create`` entry of a scale plan."""
    meta = exporter_set["metadata"]
    labels = dict(entry.get("labels") or {})
    labels.update(extra_labels or {})
    annotations = dict(entry.get("annotations") or {})
    annotations.setdefault(constants.ANNOTATION_PROVISIONER, provisioner)
    return {
        "apiVersion": constants.EXPORTER.api_version,
        "kind": constants.EXPORTER.kind,
        "metadata": {
            "name": entry["name"],
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [controller_reference(exporter_set)],
        },
        "spec": {"enabled": True},
    }


def _waiting_reason(pod):
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    statuses = statuses + ((pod.get("status") or {}).get("containerStatuses") or [])
    for status in statuses:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING_REASONS:
            return _last_words(status) or (waiting["reason"], waiting.get("message", ""))
    return None


def _last_words(status):
    """(reason, message) a failed image fetch left as its termination message, if any.

    ``image_fetch`` ends with ``<reason>: <message>``, which names the url and digests.
    """
    terminated = (status.get("lastState") or {}).get("terminated") or {}
    text = (terminated.get("message") or "").strip()
    last_line = text.splitlines()[-1] if text else ""
    reason, _, message = last_line.partition(": ")
    if message and reason in image_fetch.REASONS:
        return reason, message
    return None


def pod_instance_state(pod):
    """The backend state of one instance Pod, in the scale plan's terms."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or constants.INSTANCE_PENDING
    since = meta.get("creationTimestamp")
    if meta.get("deletionTimestamp"):
        return {"phase": constants.INSTANCE_UNKNOWN, "reason": "Terminating", "message": "", "since": since}
    fatal = _waiting_reason(pod)
    if phase == "Failed" or fatal:
        reason, message = fatal or (status.get("reason") or "PodFailed", status.get("message") or "")
        return {"phase": constants.INSTANCE_FAILED, "reason": reason, "message": message, "since": since}
    if phase == "Succeeded":
        return {
            "phase": constants.INSTANCE_FAILED,
            "reason": "PodExited",
            "message": "the instance Pod exited",
            "since": since,
        }
    if phase == "Pending":
        for condition in status.get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return {
                    "phase": constants.INSTANCE_PENDING,
                    "reason": condition.get("reason") or "Unschedulable",
                    "message": condition.get("message", ""),
                    "since": since,
                }
        return {"phase": constants.INSTANCE_PENDING, "reason": "", "message": "", "since": since}
    if phase == "Running":
        return {"phase": constants.INSTANCE_RUNNING, "reason": "", "message": "", "since": since}
    return {"phase": constants.INSTANCE_UNKNOWN, "reason": phase, "message": "", "since": since}


def instances_from_pods(pods):
    """Map Exporter name → instance state for Pods labelled with their Exporter.

    When several Pods serve one Exporter (a replacement racing a deletion),
    the newest one speaks for the instance.
    """
    newest = {}
    for pod in pods:
        exporter = (pod.get("metadata", {}).get("labels") or {}).get(constants.LABEL_EXPORTER)
        if not exporter:
            continue
        created = pod["metadata"].get("creationTimestamp") or ""
        if exporter not in newest or created >= newest[exporter]["metadata"].get("creationTimestamp", ""):
            newest[exporter] = pod
    return {name: pod_instance_state(pod) for name, pod in newest.items()}


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake_case(name):
    """``minAvailableReplicas`` → ``min_available_replicas`` (as the SDK does)."""
    return _CAMEL_BOUNDARY.sub("_", name).lower()


def snake_case_spec(spec):
    """Top-level spec keys in snake case; values (labels, parameters) as written."""
    return {snake_case(key): value for key, value in (spec or {}).items()}
