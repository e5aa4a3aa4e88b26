"""``watches.yaml`` in the Ansible Operator SDK's format."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    parse_duration,
)


@dataclass
class Watch:
    group: str
    version: str
    kind: str
    playbook: str | None = None
    role: str | None = None
    vars: dict = field(default_factory=dict)
    reconcile_period: float = 300.0
    manage_status: bool = True
    watch_dependent_resources: bool = True
    finalizer: dict | None = None
    selector: dict | None = None
    max_concurrent_reconciles: int | None = None


@dataclass
class Watches:
    entries: list[Watch]

    def entry(self, group: str, version: str, kind: str) -> Watch:
        for watch in self.entries:
            if (watch.group, watch.version, watch.kind) == (group, version, kind):
                return watch
        raise KeyError(f"watches.yaml has no entry for {group}/{version} {kind}")


_FIELDS = {
    "group": "group", "version": "version", "kind": "kind", "playbook": "playbook",
    "role": "role", "vars": "vars", "reconcilePeriod": "reconcile_period",
    "manageStatus": "manage_status", "watchDependentResources": "watch_dependent_resources",
    "finalizer": "finalizer", "selector": "selector",
    "maxConcurrentReconciles": "max_concurrent_reconciles",
}


def load_watches(path: str | Path) -> Watches:
    documents = yaml.safe_load(Path(path).read_text()) or []
    entries = []
    for index, raw in enumerate(documents):
        unknown = set(raw) - set(_FIELDS)
        if unknown:
            raise ValueError(f"{path}: entry {index}: unknown field(s) {sorted(unknown)}")
        for required in ("group", "version", "kind"):
            if not raw.get(required):
                raise ValueError(f"{path}: entry {index}: {required} is required")
        if bool(raw.get("playbook")) == bool(raw.get("role")):
            raise ValueError(f"{path}: entry {index}: exactly one of playbook or role is required")
        values = {_FIELDS[k]: v for k, v in raw.items()}
        if "reconcile_period" in values:
            values["reconcile_period"] = parse_duration(values["reconcile_period"])
        entries.append(Watch(**values))
    return Watches(entries)
