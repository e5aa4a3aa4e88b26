"""Expectations: what a set's own writes did that the cache has not shown
yet. A reconcile that starts before the informer delivered them would plan
the same creations, deletions or patches again; it waits instead, until the
cache shows them or their TTL runs out."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

# How long an expectation from a playbook run may wait for the cache.
EXPECTATION_TTL = 30.0


@dataclass
class Expectation:
    present: set[str] = field(default_factory=set)
    absent: set[str] = field(default_factory=set)
    deadline: float = 0.0
    # name -> (the resourceVersion it had before we patched it, the one our
    # write left).
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)


def _caught_up(seen: str | None, before: str, written: str) -> bool:
    """Whether the cache's resourceVersion ``seen`` of an Exporter we patched
    shows our write. kube-apiserver's resourceVersions are etcd revisions,
    which only grow; another writer's change between our read and our patch
    makes a version that differs from ``before`` and still precedes ours,
    so differing alone is not enough. Versions that are not numbers (another
    storage) fall back to differing from ``before``."""
    if seen is None or seen == written:
        return True
    try:
        return int(seen) >= int(written)
    except ValueError:
        return seen != before


class Expectations:
    """What a run or an in-process apply did, per set key, until the cache
    shows it."""

    def __init__(self) -> None:
        self._by_key: dict[tuple, Expectation] = {}
        self._lock = threading.Lock()

    def expect(self, key, present, absent, changed: dict[str, tuple[str, str]] | None = None) -> None:
        with self._lock:
            self._by_key[key] = Expectation(set(present), set(absent), time.monotonic() + EXPECTATION_TTL,
                                            dict(changed or {}))

    def satisfied(self, key, names: set[str], taken: set[str] | frozenset = frozenset(),
                  versions: dict[str, str] | None = None) -> bool:
        """Whether the cache shows what was done: every name expected present
        is ``taken`` (by the set's Exporter, or by another object whose
        namesake we could not create: a 409), every name expected absent is
        gone from the set's ``names``, and every Exporter we patched is seen
        at the resourceVersion our write left or a later one (``versions``:
        name -> resourceVersion in the cache)."""
        with self._lock:
            exp = self._by_key.get(key)
            if exp is None:
                return True
            versions = versions or {}
            stale = not all(_caught_up(versions.get(name), before, written)
                            for name, (before, written) in exp.changed.items())
            if time.monotonic() > exp.deadline or (
                exp.present <= (names | set(taken)) and not (exp.absent & names) and not stale
            ):
                del self._by_key[key]
                return True
            return False

    def forget(self, key) -> None:
        with self._lock:
            self._by_key.pop(key, None)
