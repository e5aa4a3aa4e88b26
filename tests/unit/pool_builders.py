"""Kubernetes objects shaped like the API server returns them, for pool tests."""

from datetime import timedelta

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    format_time,
    parse_time,
)

NOW = "2026-11-21T08:00:00Z"
SET_NAME = "rpi4"
TEMPLATE_LABELS = {"board": "rpi4", "virtual": "true"}


def at(seconds_from_now):
    return format_time(parse_time(NOW) + timedelta(seconds=seconds_from_now))


def exporter_set(name=SET_NAME, min_replicas=0, max_replicas=0, min_available=0,
                 cooldown="5m", recycle="ExitAndReplace", annotations=None, status=None,
                 parameters=None, labels=None, generation=3, state=None):
    obj = {
        "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1",
        "kind": "ExporterSet",
        "metadata": {"name": name, "namespace": "lab", "generation": generation,
                     "uid": f"uid-{name}", "annotations": dict(annotations or {})},
        "spec": {
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "minAvailableReplicas": min_available,
            "scaleDownCooldown": cooldown,
            "recycleStrategy": recycle,
            "virtualTargetClassName": "qemu-small",
            "selector": {"matchLabels": {"board": "rpi4"}},
            "template": {"metadata": {"labels": dict(labels or TEMPLATE_LABELS)},
                         "spec": {"drivers": []}},
        },
    }
    if parameters is not None:
        obj["spec"]["parameters"] = parameters
    if status is not None:
        obj["status"] = status
    if state:
        # The operator state (pool/operator_state.py), as the status carries it.
        obj.setdefault("status", {})["operatorState"] = dict(state)
    return obj


def target_class(binding="Immediate", parameters=None, provisioner=c.PROVISIONER_QEMU):
    return {
        "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1",
        "kind": "VirtualTargetClass",
        "metadata": {"name": "qemu-small", "namespace": "lab"},
        "spec": {
            "provisioner": provisioner,
            "bindingMode": binding,
            "parameters": parameters if parameters is not None else {
                "arch": "x86_64", "resources": {"cpu": 1, "memory": "512Mi"}},
        },
    }


def exporter(name, ready=True, enabled=True, lease=None, created=-3600, owner=SET_NAME,
             annotations=None, labels=None, terminating=False, online_since=-3000,
             first_ready=True):
    """An owned Exporter. ``first_ready`` adds the annotation a ready one gets."""
    notes = dict(annotations or {})
    if ready and first_ready:
        notes.setdefault(c.ANNOTATION_FIRST_READY, at(created + 60))
    if lease:
        notes.setdefault(c.ANNOTATION_LEASED_BY, lease)
    all_labels = dict(TEMPLATE_LABELS if labels is None else labels)
    if owner:
        all_labels[c.LABEL_EXPORTER_SET] = owner
    status = "True" if ready else "False"
    obj = {
        "apiVersion": "jumpstarter.dev/v1alpha1",
        "kind": "Exporter",
        "metadata": {"name": name, "namespace": "lab", "creationTimestamp": at(created),
                     "labels": all_labels, "annotations": notes},
        "spec": {"enabled": enabled},
        "status": {
            "conditions": [
                {"type": "Registered", "status": status, "reason": "Registered",
                 "message": "", "lastTransitionTime": at(online_since)},
                {"type": "Online", "status": status, "reason": "Seen",
                 "message": "", "lastTransitionTime": at(online_since)},
            ],
        },
    }
    if lease:
        obj["status"]["leaseRef"] = {"name": lease}
    if owner:
        obj["metadata"]["ownerReferences"] = [
            {"apiVersion": c.EXPORTER_SET.api_version, "kind": c.EXPORTER_SET.kind, "name": owner,
             "uid": f"uid-{owner}", "controller": True, "blockOwnerDeletion": True}]
    if terminating:
        obj["metadata"]["deletionTimestamp"] = at(-1)
    return obj


def lease(name, selector=None, assigned=None, ended=False, begin=None, created=-60,
          pinned=None):
    obj = {
        "apiVersion": "jumpstarter.dev/v1alpha1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "lab", "creationTimestamp": at(created)},
        "spec": {"clientRef": {"name": "ci"},
                 "selector": selector if selector is not None else
                 {"matchLabels": {"board": "rpi4"}}},
        "status": {},
    }
    if begin is not None:
        obj["spec"]["beginTime"] = at(begin)
    if pinned:
        obj["spec"]["exporterRef"] = {"name": pinned}
    if assigned:
        obj["status"]["exporterRef"] = {"name": assigned}
    if ended:
        obj["status"]["ended"] = True
    return obj


def apply_annotation_patches(exporters, patches):
    """A plan's ``exporter_annotations`` on ``exporters`` (by name), as the
    merge patches write them: None removes a key. A patch of an Exporter
    that is not there is a KeyError: a plan never patches one it deletes."""
    for name, patch in patches.items():
        notes = exporters[name]["metadata"]["annotations"]
        for key, value in patch.items():
            if value is None:
                notes.pop(key, None)
            else:
                notes[key] = value
