"""Reading each Exporter once: digests kept while the object is unchanged.

A pool of thousands of Exporters is planned again and again while few of
them change. The API server gives every version of an object a new
``metadata.resourceVersion``, and the operator's caches replace an object's
dict when they see a new version, so ``(uid, resourceVersion)`` names one
content exactly: what was read from it once holds until the version
changes. Objects without both (built by hand, or by tests that change them
in place) are read afresh every time, never from a digest.

Both stores are bounded; a version that was dropped is read again.
"""

import threading

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    read_exporter,
)

# Digests of Exporter versions kept (about 10,000 Exporters per 1.5 MiB).
DIGEST_LIMIT = 1 << 15
# Sets whose last pool survey is kept.
SURVEY_LIMIT = 256

_lock = threading.Lock()
_digests = {}
_surveys = {}


class ExporterDigest:
    """What the planner reads from one version of an Exporter."""

    __slots__ = ("name", "ready", "online", "enabled", "lease", "terminating", "dormant",
                 "annotations")

    def __init__(self, exporter):
        (self.name, self.ready, self.online, self.enabled, self.lease,
         self.terminating) = read_exporter(exporter)
        self.annotations = exporter["metadata"].get("annotations") or {}
        self.dormant = c.ANNOTATION_DORMANT in self.annotations


def version_of(obj):
    """``(uid, resourceVersion)``, or None when the object lacks either."""
    metadata = obj["metadata"]
    uid = metadata.get("uid")
    version = metadata.get("resourceVersion")
    if uid and version:
        return uid, version
    return None


def versions(objects):
    """The versions of ``objects`` in order, or None when one of them has none."""
    keys = []
    for obj in objects or ():
        metadata = obj["metadata"]
        uid = metadata.get("uid")
        version = metadata.get("resourceVersion")
        if not (uid and version):
            return None
        keys.append((uid, version))
    return tuple(keys)


def digest(exporter, key=None):
    """The digest of ``exporter``: kept for its version (``key``, when it has
    one), read afresh otherwise."""
    if key is None:
        return ExporterDigest(exporter)
    found = _digests.get(key)
    if found is None:
        found = ExporterDigest(exporter)
        with _lock:
            if len(_digests) >= DIGEST_LIMIT:
                _drop_oldest(_digests, DIGEST_LIMIT // 2)
            _digests[key] = found
    return found


def digests(exporters, keys):
    """The digests of ``exporters``; ``keys`` are their versions (or None)."""
    if keys is None:
        return [ExporterDigest(e) for e in exporters]
    return [digest(e, k) for e, k in zip(exporters, keys)]


def survey(owner, inputs, compute, snapshot=None):
    """The survey ``compute()`` of the pool of ``owner`` (a hashable key),
    kept while ``inputs`` (versions and other facts it depends on) compare
    equal; recomputed otherwise, or every time when ``inputs`` is None.

    ``snapshot(inputs)`` is what is kept to compare with: a copy of any part
    of ``inputs`` the caller may change in place afterwards.
    """
    if inputs is None:
        return compute()
    kept = _surveys.get(owner)
    if kept is not None and kept[0] == inputs:
        return kept[1]
    result = compute()
    with _lock:
        _surveys.pop(owner, None)
        if len(_surveys) >= SURVEY_LIMIT:
            _drop_oldest(_surveys, 1)
        _surveys[owner] = (snapshot(inputs) if snapshot else inputs, result)
    return result


def clear():
    """Forget every digest and survey."""
    with _lock:
        _digests.clear()
        _surveys.clear()


def _drop_oldest(store, count):
    for key in list(store)[:count]:
        del store[key]
