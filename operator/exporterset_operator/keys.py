"""The work queue's keys, one type per kind of object reconciled.

Each is a named tuple, so it hashes and compares as the plain
``(namespace, name[, kind])`` it stands for (a key added by an older caller
coalesces with a typed one), and the reconcilers dispatch on its type, never
on its length. A class and a policy key carry their kind as a third field,
so no two kinds' keys are ever equal.
"""

from __future__ import annotations

from typing import NamedTuple

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants

CLASS_KIND = constants.VIRTUAL_TARGET_CLASS.kind
POLICY_KIND = constants.EXPORTER_SET_POLICY.kind


class SetKey(NamedTuple):
    """An ExporterSet: its pool, its backends, its teardown."""

    namespace: str
    name: str


class ClassKey(NamedTuple):
    """A VirtualTargetClass: its finalizer and status."""

    namespace: str
    name: str
    kind: str = CLASS_KIND


class PolicyKey(NamedTuple):
    """An ExporterSetPolicy: its status."""

    namespace: str
    name: str
    kind: str = POLICY_KIND


Key = SetKey | ClassKey | PolicyKey


def typed(key) -> Key:
    """``key`` as its typed form; a typed key is returned as it is."""
    if isinstance(key, SetKey | ClassKey | PolicyKey):
        return key
    if len(key) == 2:
        return SetKey(*key)
    namespace, name, kind = key
    if kind == CLASS_KIND:
        return ClassKey(namespace, name)
    if kind == POLICY_KIND:
        return PolicyKey(namespace, name)
    raise ValueError(f"no reconciler for a key of kind {kind!r}")
