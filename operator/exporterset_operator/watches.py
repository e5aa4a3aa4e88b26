"""``watches.yaml`` in the Ansible Operator SDK's format.

Every field the SDK documents is read; the ones this operator can honour are
honoured, the rest are accepted only at the value that matches what this
operator does, and anything else (a field the SDK does not know, a wrong
type, a role or playbook that does not exist) is refused with an error that
names the entry and the field. See docs/reference/watches.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    parse_duration,
)

# The one kind this operator reconciles.
SERVED = (constants.EXPORTER_SET.group, constants.EXPORTER_SET.version, constants.EXPORTER_SET.kind)
DEFAULT_FINALIZER = constants.GROUP + "/teardown"


@dataclass(frozen=True)
class Role:
    """A role to run the way the SDK runs one: from a generated playbook."""

    name: str

    def playbook(self) -> str:
        """The play that runs it (what ansible-runner is given)."""
        play = [{
            "name": f"Run role {self.name}",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "tasks": [{"name": "Run the role", "ansible.builtin.import_role": {"name": self.name}}],
        }]
        return yaml.safe_dump(play, sort_keys=False)


# What a run executes: a playbook path or a Role.
Runnable = str | Role


@dataclass
class Finalizer:
    name: str
    playbook: str | None = None
    role: str | None = None
    vars: dict = field(default_factory=dict)


@dataclass
class Watch:
    group: str
    version: str
    kind: str
    playbook: str | None = None
    role: str | None = None
    vars: dict = field(default_factory=dict)
    reconcile_period: float = 0.0
    manage_status: bool = True
    watch_dependent_resources: bool = True
    finalizer: Finalizer | None = None
    selector: dict | None = None
    max_runner_artifacts: int = 20
    snake_case_parameters: bool = True
    max_concurrent_reconciles: int | None = None

    def runnable(self) -> Runnable:
        return Role(self.role) if self.role else self.playbook

    def finalizer_runnable(self) -> Runnable:
        """What runs when a set is deleted: the finalizer's own playbook or
        role, else the entry's, with the finalizer's vars."""
        if self.finalizer is not None and self.finalizer.role:
            return Role(self.finalizer.role)
        if self.finalizer is not None and self.finalizer.playbook:
            return self.finalizer.playbook
        return self.runnable()

    def finalizer_vars(self) -> dict:
        return {**self.vars, **(self.finalizer.vars if self.finalizer else {})}


@dataclass
class Watches:
    entries: list[Watch]

    def entry(self, group: str, version: str, kind: str) -> Watch:
        for watch in self.entries:
            if (watch.group, watch.version, watch.kind) == (group, version, kind):
                return watch
        raise KeyError(f"watches.yaml has no entry for {group}/{version} {kind}")


class WatchesError(ValueError):
    """watches.yaml cannot be served; the message names the entry and field."""


# watches.yaml key -> (Watch attribute, type check)
_FIELDS = {
    "group": "group", "version": "version", "kind": "kind", "playbook": "playbook",
    "role": "role", "vars": "vars", "reconcilePeriod": "reconcile_period",
    "manageStatus": "manage_status", "watchDependentResources": "watch_dependent_resources",
    "finalizer": "finalizer", "selector": "selector",
    "maxRunnerArtifacts": "max_runner_artifacts", "snakeCaseParameters": "snake_case_parameters",
    # This operator's own: reconciles in flight at once (the SDK reads it
    # from MAX_CONCURRENT_RECONCILES_<KIND>_<GROUP>).
    "maxConcurrentReconciles": "max_concurrent_reconciles",
}
# SDK fields this operator accepts only at the value that describes it.
_FIXED = {
    "watchClusterScopedResources": (False, "this operator makes no cluster-scoped objects"),
    "markUnsafe": (False, "the set's spec reaches the playbook as plain data, never as a template"),
    "blacklist": ([], "every dependent kind this operator watches is needed for the pool"),
    "watchAnnotationsChanges": (
        True, "every change to an ExporterSet, its annotations included, is reconciled"),
}
_FINALIZER_FIELDS = ("name", "playbook", "role", "vars")
_BOOLS = ("manageStatus", "watchDependentResources", "snakeCaseParameters")


def _expand(text: str) -> str:
    """``${VAR}`` and ``$VAR`` from the environment, as the SDK does; an
    unset variable stays as written."""
    return os.path.expandvars(text)


def _resolve_playbook(value, root: Path, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise WatchesError(f"{where}: must be a path to a playbook, got {value!r}")
    path = Path(value) if os.path.isabs(value) else root / value
    if not path.is_file():
        raise WatchesError(f"{where}: playbook {value!r} not found (looked at {path})")
    return str(path)


def role_candidates(name: str, root: Path) -> list[Path]:
    """Where a role named ``name`` may live, in the order the SDK looks:
    an absolute path; a collection role (namespace.collection.role) under
    ANSIBLE_COLLECTIONS_PATH (this collection included); ANSIBLE_ROLES_PATH;
    ``roles/`` of the collection root."""
    if os.path.isabs(name):
        return [Path(name)]
    candidates = []
    parts = name.split(".")
    if len(parts) == 3:
        namespace, collection, role = parts
        if (namespace, collection) == ("jumpstarter", "virtual_exporters"):
            candidates.append(root / "roles" / role)
        paths = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.environ.get("ANSIBLE_COLLECTIONS_PATHS") or (
            f"/usr/share/ansible/collections:{Path.home() / '.ansible/collections'}")
        candidates += [Path(p) / "ansible_collections" / namespace / collection / "roles" / role
                       for p in paths.split(os.pathsep) if p]
    for parent in (os.environ.get("ANSIBLE_ROLES_PATH") or "").split(os.pathsep):
        if parent:
            candidates += [Path(parent) / name, Path(parent) / "roles" / name]
    candidates += [root / "roles" / name, root / name]
    return candidates


def _resolve_role(value, root: Path, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise WatchesError(f"{where}: must name a role, got {value!r}")
    candidates = role_candidates(value, root)
    for path in candidates:
        if (path / "tasks").is_dir():
            return str(path.resolve())
    raise WatchesError(f"{where}: role {value!r} not found (looked in {', '.join(map(str, candidates))})")


def _finalizer(raw, root: Path, where: str) -> Finalizer:
    if not isinstance(raw, dict):
        raise WatchesError(f"{where}: must be a mapping with name and playbook, role or vars")
    unknown = sorted(set(raw) - set(_FINALIZER_FIELDS))
    if unknown:
        raise WatchesError(f"{where}: unknown field(s) {unknown}; a finalizer has {list(_FINALIZER_FIELDS)}")
    if not isinstance(raw.get("name"), str) or not raw["name"]:
        raise WatchesError(f"{where}.name: is required")
    if raw.get("playbook") and raw.get("role"):
        raise WatchesError(f"{where}: playbook and role are mutually exclusive")
    if not (raw.get("playbook") or raw.get("role") or raw.get("vars")):
        raise WatchesError(f"{where}: needs a playbook, a role or vars")
    if not isinstance(raw.get("vars") or {}, dict):
        raise WatchesError(f"{where}.vars: must be a mapping")
    return Finalizer(
        name=raw["name"],
        playbook=_resolve_playbook(raw["playbook"], root, f"{where}.playbook") if raw.get("playbook") else None,
        role=_resolve_role(raw["role"], root, f"{where}.role") if raw.get("role") else None,
        vars=dict(raw.get("vars") or {}),
    )


def _entry(raw, index: int, path, root: Path) -> Watch:
    where = f"{path}: entry {index}"
    if not isinstance(raw, dict):
        raise WatchesError(f"{where}: must be a mapping")
    unknown = sorted(set(raw) - set(_FIELDS) - set(_FIXED))
    if unknown:
        raise WatchesError(f"{where}: unknown field(s) {unknown}")
    for required in ("version", "kind"):
        if not raw.get(required):
            raise WatchesError(f"{where}: {required} is required")
    gvk = (raw.get("group") or "", raw["version"], raw["kind"])
    if gvk != SERVED:
        raise WatchesError(
            f"{where}: group/version/kind {gvk[0]}/{gvk[1]} {gvk[2]} is not served by this operator "
            f"(it reconciles {SERVED[0]}/{SERVED[1]} {SERVED[2]})")
    for key, (allowed, why) in _FIXED.items():
        if key in raw and raw[key] != allowed:
            raise WatchesError(f"{where}: {key}: only {allowed!r} is supported: {why}")
    if bool(raw.get("playbook")) == bool(raw.get("role")):
        raise WatchesError(f"{where}: exactly one of playbook or role is required")
    for key in _BOOLS:
        if key in raw and not isinstance(raw[key], bool):
            raise WatchesError(f"{where}: {key}: must be true or false, got {raw[key]!r}")
    values = {_FIELDS[k]: v for k, v in raw.items() if k in _FIELDS}
    if values.get("playbook"):
        values["playbook"] = _resolve_playbook(values["playbook"], root, f"{where}: playbook")
    if values.get("role"):
        values["role"] = _resolve_role(values["role"], root, f"{where}: role")
    if "vars" in values:
        if not isinstance(values["vars"] or {}, dict):
            raise WatchesError(f"{where}: vars: must be a mapping")
        values["vars"] = dict(values["vars"] or {})
    if "reconcile_period" in values:
        try:
            values["reconcile_period"] = parse_duration(values["reconcile_period"])
        except ValueError as exc:
            raise WatchesError(f"{where}: reconcilePeriod: {exc}") from None
    if "finalizer" in values:
        values["finalizer"] = (_finalizer(values["finalizer"], root, f"{where}: finalizer")
                               if values["finalizer"] is not None else None)
    if "selector" in values:
        selector = values["selector"] or None
        if selector is not None and (not isinstance(selector, dict)
                                     or set(selector) - {"matchLabels", "matchExpressions"}):
            raise WatchesError(f"{where}: selector: must be a label selector (matchLabels, matchExpressions)")
        values["selector"] = selector
    for key, attr in (("maxRunnerArtifacts", "max_runner_artifacts"),
                      ("maxConcurrentReconciles", "max_concurrent_reconciles")):
        if key in raw:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise WatchesError(f"{where}: {key}: must be a whole number >= 0, got {value!r}")
            # 0 means the default, as in the SDK.
            values[attr] = value or Watch.__dataclass_fields__[attr].default
    values["group"] = gvk[0]
    return Watch(**values)


def load_watches(path: str | Path, root: str | Path | None = None) -> Watches:
    """Read and check ``path``. Relative playbook and role paths are taken
    from ``root`` (the collection root; default: the file's parent's parent,
    as watches.yaml lives in operator/)."""
    path = Path(path)
    root = Path(root) if root is not None else path.resolve().parent.parent
    try:
        documents = yaml.safe_load(_expand(path.read_text())) or []
    except yaml.YAMLError as exc:
        raise WatchesError(f"{path}: not YAML: {exc}") from None
    if not isinstance(documents, list):
        raise WatchesError(f"{path}: must be a list of entries")
    entries = [_entry(raw, index, path, root) for index, raw in enumerate(documents)]
    seen = set()
    for index, watch in enumerate(entries):
        gvk = (watch.group, watch.version, watch.kind)
        if gvk in seen:
            raise WatchesError(f"{path}: entry {index}: duplicate group/version/kind {'/'.join(gvk)}")
        seen.add(gvk)
    return Watches(entries)
