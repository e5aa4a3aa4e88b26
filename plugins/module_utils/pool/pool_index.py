"""Reading each Exporter once: a pool's survey kept while its objects are unchanged.

A pool of thousands of Exporters is planned again and again while few of
them change. The API server gives every version of an object a new
``metadata.resourceVersion``, and the operator's caches replace an object's
dict when they see a new version, so ``(uid, resourceVersion)`` names one
content exactly: what was read from it once holds until the version
changes. Objects without both (built by hand, or by tests that change them
in place) are read afresh every time.

A ``SurveyCache`` keeps, for each owner (a set), the last survey of its pool
with what it was made from, and the digests of the Exporters it read: a plan
over the same versions reuses the survey, and a survey made after some
Exporters changed reads only those again. At most ``SURVEY_LIMIT`` owners
are kept. The cache belongs to the caller that plans again and again (the
operator's reconciler); the planner itself keeps nothing between plans.

The operator's caches say more: each namespace's objects come as a
``Snapshot`` with the cache's revision of them, which changes with every
event there. A plan over snapshots at the revisions of the last survey
reuses it without a pass over the pool (at 10,000 Exporters, that pass is
most of a steady plan); per-object versions are read only to make a survey.
"""

import threading
from operator import itemgetter

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    read_exporter,
)

# Sets whose last pool survey is kept.
SURVEY_LIMIT = 256

_metadata = itemgetter("metadata")
_uid_and_version = itemgetter("uid", "resourceVersion")


class ExporterDigest:
    """What the planner reads from one version of an Exporter."""

    __slots__ = ("name", "ready", "online", "enabled", "lease", "terminating", "annotations",
                 "dormant", "first_ready", "leased_by", "retiring", "scale_down")

    def __init__(self, exporter):
        (self.name, self.ready, self.online, self.enabled, self.lease,
         self.terminating) = read_exporter(exporter)
        annotations = self.annotations = exporter["metadata"].get("annotations") or {}
        self.dormant = c.ANNOTATION_DORMANT in annotations
        self.first_ready = c.ANNOTATION_FIRST_READY in annotations
        self.leased_by = annotations.get(c.ANNOTATION_LEASED_BY)
        self.retiring = annotations.get(c.ANNOTATION_RETIRING)
        self.scale_down = c.ANNOTATION_SCALE_DOWN in annotations


class Snapshot(list):
    """Objects as a cache held them at one moment, with the cache's
    ``revision`` of them: a token, never reused, that the cache changes
    whenever any of these objects is added, changed or removed. Two
    snapshots with the same revision hold the same objects, so a plan need
    not read every object's version to know its pool is unchanged. Each
    reader gets a list of its own; the objects are the cache's, never
    changed in place."""

    __slots__ = ("revision",)

    def __init__(self, objects=(), revision=None):
        super().__init__(objects)
        self.revision = revision

    def derived(self, keep, *facts):
        """The objects ``keep`` selects, as a snapshot whose revision is this
        one's with ``facts`` (what else the selection depended on)."""
        revision = None if self.revision is None else (self.revision, *facts)
        return Snapshot(filter(keep, self), revision)


def revision(objects):
    """The cache's revision of ``objects`` (a Snapshot), or None."""
    return getattr(objects, "revision", None)


def versions(objects):
    """The versions of ``objects`` in order, or None when one of them has none."""
    try:
        keys = tuple(map(_uid_and_version, map(_metadata, objects or ())))
    except KeyError:
        return None
    return keys if all(map(all, keys)) else None


class Digests:
    """The digests of one pool's Exporters, reusing those of the owner's last survey."""

    def __init__(self, previous=None):
        self.previous = previous or {}
        self.kept = {}

    def read(self, exporters, keys):
        """The digests of ``exporters``; ``keys`` are their versions, or None."""
        if keys is None:
            return [ExporterDigest(e) for e in exporters]
        previous, kept = self.previous, self.kept
        out = []
        for exporter, key in zip(exporters, keys, strict=True):
            found = previous.get(key)
            if found is None:
                found = ExporterDigest(exporter)
            kept[key] = found
            out.append(found)
        return out


class SurveyCache:
    """The last survey of each owner's pool (see the module docstring)."""

    def __init__(self, limit=SURVEY_LIMIT):
        self.limit = limit
        self._lock = threading.Lock()
        self._surveys = {}

    def survey(self, owner, inputs, compute, snapshot=None):
        """The survey ``compute(digests)`` of the pool of ``owner`` (a hashable
        key), kept while ``inputs`` (versions and other facts it depends on)
        compare equal; made again otherwise, or every time when ``inputs`` is
        None. ``digests`` is a ``Digests`` holding the owner's last ones.

        ``snapshot(inputs)`` is what is kept to compare with: a copy of any part
        of ``inputs`` the caller may change in place afterwards.
        """
        if inputs is None:
            return compute(Digests())
        kept = self._surveys.get(owner)
        if kept is not None and kept[0] == inputs:
            return kept[1]
        digests = Digests(kept[2] if kept is not None else None)
        result = compute(digests)
        with self._lock:
            self._surveys.pop(owner, None)
            while len(self._surveys) >= self.limit:
                del self._surveys[next(iter(self._surveys))]
            self._surveys[owner] = (snapshot(inputs) if snapshot else inputs, result, digests.kept)
        return result

    def clear(self):
        """Forget every survey."""
        with self._lock:
            self._surveys.clear()
