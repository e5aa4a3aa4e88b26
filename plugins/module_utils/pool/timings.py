"""The times a set's status reads off its Exporters: when each became ready,
its cold start (creation to first ready), and the percentile of such
figures; shared by sizing.py (the model's input) and service_level.py (what
lessees feel).

``as_planned`` is the view both read: the Exporters as the plan leaves
them, with the first-ready stamps the same pass writes, so that the status
a pass writes is the one the next pass computes. Untrusted objects: a time
that does not parse, or a ready before the creation, counts for nothing.
"""

import functools
import math
from dataclasses import dataclass

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import parse_time


def seconds_of(text):
    """Seconds since the epoch of an RFC 3339 time, None for anything else."""
    return _parsed(text) if isinstance(text, str) else None


@functools.lru_cache(maxsize=16384)
def _parsed(text):
    # Every pass reads the same objects' times again: each string is parsed once.
    try:
        return parse_time(text).timestamp() if text else None
    except (ValueError, TypeError, OverflowError):
        return None


def nearest_rank(count, percentile):
    """The 1-based rank of the ``percentile`` among ``count`` ordered samples."""
    return max(math.ceil(percentile / 100.0 * count), 1)


def quantile(samples, percentile):
    """The ``percentile`` of ``samples`` (nearest rank), None when empty."""
    ordered = sorted(samples)
    if not ordered:
        return None
    return ordered[nearest_rank(len(ordered), percentile) - 1]


def object_key(metadata):
    """An object's uid, else its name."""
    return str(metadata.get("uid") or metadata.get("name") or "")


def ready_at(exporter):
    """When an Exporter first became ready (its first-ready annotation), or None."""
    metadata = exporter.get("metadata") or {}
    return seconds_of((metadata.get("annotations") or {}).get(c.ANNOTATION_FIRST_READY))


@dataclass(frozen=True)
class ColdStart:
    key: str
    created: float
    seconds: float


def cold_starts(exporters):
    """The ``ColdStart`` of every Exporter that has become ready, oldest first."""
    found = []
    for exporter in exporters:
        metadata = exporter.get("metadata") or {}
        created, ready = seconds_of(metadata.get("creationTimestamp")), ready_at(exporter)
        if created is not None and ready is not None and ready >= created:
            found.append(ColdStart(object_key(metadata), created, ready - created))
    return sorted(found, key=lambda s: (s.created, s.key))


def as_planned(exporters, first_ready):
    """``exporters`` with the first-ready stamps ``{name: stamp}`` a pass
    writes on those not yet marked; the list itself when there are none."""
    if not first_ready:
        return exporters
    out = []
    for exporter in exporters:
        metadata = exporter.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        stamp = first_ready.get(metadata.get("name"))
        if stamp is not None and c.ANNOTATION_FIRST_READY not in annotations:
            exporter = {**exporter, "metadata": {**metadata, "annotations": {
                **annotations, c.ANNOTATION_FIRST_READY: stamp}}}
        out.append(exporter)
    return out
