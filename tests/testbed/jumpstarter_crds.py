"""The Jumpstarter core CRDs (Exporter, Lease, Client, ExporterAccessPolicy)
as a Jumpstarter cluster serves them, written here so that a plain clone
brings up its bed with nothing beside it.

Pruning and validation decide what the API server keeps of an object, so
the schemas must be field-for-field those of the Jumpstarter release the
project targets (b1f2bb41, where its controller contract was
observed); tests/controller/test_crds.py compares them with the
release's own files whenever ../shared/anchors holds them.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

GROUP = "jumpstarter.dev"
VERSION = "v1alpha1"


def _string(**extra) -> dict:
    return {"type": "string", **extra}


def _time() -> dict:
    return _string(format="date-time")


def _string_map(**extra) -> dict:
    return {"type": "object", "additionalProperties": _string(), **extra}


def _object(properties: dict, **extra) -> dict:
    return {"type": "object", "properties": properties, **extra}


def _name_ref() -> dict:
    """A LocalObjectReference: a name only, replaced as a whole."""
    return _object({"name": _string(default="")}, **{"x-kubernetes-map-type": "atomic"})


def _label_selector(**extra) -> dict:
    requirement = _object(
        {
            "key": _string(),
            "operator": _string(),
            "values": {"type": "array", "items": _string(), "x-kubernetes-list-type": "atomic"},
        },
        required=["key", "operator"],
    )
    return _object(
        {
            "matchExpressions": {"type": "array", "items": requirement, "x-kubernetes-list-type": "atomic"},
            "matchLabels": _string_map(),
        },
        **extra,
        **{"x-kubernetes-map-type": "atomic"},
    )


def _conditions() -> dict:
    """metav1.Condition with the API server's own limits on each field."""
    condition = _object(
        {
            "lastTransitionTime": _time(),
            "message": _string(maxLength=32768),
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "reason": _string(maxLength=1024, minLength=1, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"),
            "status": _string(enum=["True", "False", "Unknown"]),
            "type": _string(
                maxLength=316,
                pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
            ),
        },
        required=["lastTransitionTime", "message", "reason", "status", "type"],
    )
    return {"type": "array", "items": condition}


def _crd(kind: str, plural: str, spec: dict, status: dict, columns: list[dict] | None = None) -> dict:
    version = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "schema": {
            "openAPIV3Schema": _object(
                {
                    "apiVersion": _string(),
                    "kind": _string(),
                    "metadata": {"type": "object"},
                    "spec": spec,
                    "status": status,
                }
            )
        },
    }
    if columns:
        version["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def _column(name: str, path: str, kind: str = "string", **extra) -> dict:
    return {"name": name, "jsonPath": path, "type": kind, **extra}


EXPORTER_STATES = [
    "Unspecified",
    "Offline",
    "Available",
    "BeforeLeaseHook",
    "LeaseReady",
    "AfterLeaseHook",
    "BeforeLeaseHookFailed",
    "AfterLeaseHookFailed",
]


def exporter() -> dict:
    device = _object({"labels": _string_map(), "parent_uuid": _string(), "uuid": _string()})
    return _crd(
        "Exporter",
        "exporters",
        _object({"enabled": {"type": "boolean", "default": True}, "username": _string()}),
        _object(
            {
                "conditions": _conditions(),
                "credential": _name_ref(),
                "devices": {"type": "array", "items": device},
                "endpoint": _string(),
                "exporterStatus": _string(enum=EXPORTER_STATES),
                "lastSeen": _time(),
                "leaseRef": _name_ref(),
                "statusMessage": _string(),
            }
        ),
        [
            _column("Enabled", ".spec.enabled", "boolean"),
            _column("Status", ".status.exporterStatus"),
            _column("Message", ".status.statusMessage", priority=1),
        ],
    )


def _has_entries(field: str) -> str:
    return f"(has(self.selector.{field}) && size(self.selector.{field}) > 0)"


def _unchanged(field: str) -> str:
    return f"!has(oldSelf.{field}) || self.{field} == oldSelf.{field}"


LEASE_RULES = [
    {
        "rule": f"({_has_entries('matchLabels')} || {_has_entries('matchExpressions')})"
        " || (has(self.exporterRef) && has(self.exporterRef.name) && size(self.exporterRef.name) > 0)",
        "message": "one of selector or exporterRef.name is required",
    },
    {"rule": _unchanged("tags"), "message": "tags are immutable after creation"},
    {"rule": _unchanged("context"), "message": "context is immutable after creation"},
    {
        "rule": "!has(self.context) || self.context.all(k, size(k) <= 32 && size(self.context[k]) <= 64)",
        "message": "context keys max 32 chars, values max 64 chars",
    },
]


def lease() -> dict:
    spec = _object(
        {
            "allowDisabled": {"type": "boolean"},
            "beginTime": _time(),
            "clientRef": _name_ref(),
            "context": _string_map(maxProperties=8),
            "duration": _string(),
            "endTime": _time(),
            "exporterRef": _name_ref(),
            "release": {"type": "boolean"},
            "selector": _label_selector(default={}),
            "tags": _string_map(maxProperties=10),
        },
        required=["clientRef", "selector"],
        **{"x-kubernetes-validations": LEASE_RULES},
    )
    status = _object(
        {
            "beginTime": _time(),
            "conditions": _conditions(),
            "endTime": _time(),
            "ended": {"type": "boolean"},
            "exporterRef": _name_ref(),
            "priority": {"type": "integer"},
            "spotAccess": {"type": "boolean"},
        },
        required=["ended"],
    )
    return _crd(
        "Lease",
        "leases",
        spec,
        status,
        [
            _column("Ended", ".status.ended", "boolean"),
            _column("Client", ".spec.clientRef.name"),
            _column("Exporter", ".status.exporterRef.name"),
        ],
    )


def client() -> dict:
    return _crd(
        "Client",
        "clients",
        _object({"username": _string()}),
        _object(
            {
                "conditions": _conditions(),
                "credential": _name_ref(),
                "endpoint": _string(),
                "tokenExpiresAt": _time(),
            }
        ),
        [_column("Token Expires", ".status.tokenExpiresAt")],
    )


def exporter_access_policy() -> dict:
    policy = _object(
        {
            "from": {"type": "array", "items": _object({"clientSelector": _label_selector()})},
            "maximumDuration": _string(),
            "priority": {"type": "integer"},
            "spotAccess": {"type": "boolean"},
        }
    )
    return _crd(
        "ExporterAccessPolicy",
        "exporteraccesspolicies",
        _object({"exporterSelector": _label_selector(), "policies": {"type": "array", "items": policy}}),
        {"type": "object"},
    )


def core_crds() -> list[dict]:
    return [exporter(), lease(), client(), exporter_access_policy()]


def write_core_crds(directory: Path) -> list[Path]:
    """Writes each CRD as `<group>_<plural>.yaml` (the release's file
    names) into `directory` and returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for crd in core_crds():
        path = directory / f"{GROUP}_{crd['spec']['names']['plural']}.yaml"
        text = yaml.safe_dump(crd, sort_keys=False)
        if not path.is_file() or path.read_text() != text:
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(text)
            tmp.replace(path)
        paths.append(path)
    return paths
