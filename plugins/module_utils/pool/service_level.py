"""What lessees feel of a set: how long a Lease waits for an Exporter, how
long an instance takes to become ready, and the instances kept idle.

Read from what the API holds, so a restarted operator computes the same:

* a lease wait is the Lease's ``status.beginTime`` (the controller writes it
  with ``Ready=True`` on assignment) less its start: its creation, or a
  later ``spec.beginTime`` it asked for. It was served ``warm`` when its
  Exporter had become ready before that start, ``cold`` when a cold start
  (an Exporter still to be made or still provisioning) served it;
* an instance's time to ready is its Exporter's creation to the operator's
  first-ready annotation;
* idle instance-seconds are the Exporters that exist without a lease
  (``replicas - leasedReplicas`` of the status), integrated between the
  status writes that change that number (``accrue``).

``summary`` is the rolling figure of ``status.serviceLevel``: the Leases
begun in the last ``WINDOW`` (the newest ``MAX_LEASES``), the newest
``MAX_COLD_STARTS`` cold starts, and the idle instance-seconds of the last
``WINDOW``. The operator's histograms and counters (metrics.py) observe the
same figures as each happens. Untrusted objects: a time that does not parse,
or comes before what it follows, counts for nothing.
"""

from dataclasses import dataclass
from datetime import UTC, datetime

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import pool_index
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.lease_safety import (
    assigned_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.timings import (
    cold_starts,
    object_key,
    quantile,
    ready_at,
    seconds_of,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import format_time

WARM = "warm"
COLD = "cold"
WINDOW = 24 * 3600.0
MAX_LEASES = 500
MAX_COLD_STARTS = 64


@dataclass(frozen=True)
class Wait:
    """One Lease's wait: its key (uid, else name), start and begin (seconds
    since the epoch), and whether a warm Exporter or a cold start served it."""

    key: str
    started: float
    begun: float
    served: str

    @property
    def seconds(self):
        return self.begun - self.started


def lease_waits(leases, exporters):
    """The ``Wait`` of every Lease that has begun on one of ``exporters``,
    oldest begin first."""
    by_name = {(e.get("metadata") or {}).get("name"): e for e in exporters}
    waits = []
    for lease in leases:
        holder = by_name.get(assigned_exporter(lease))
        metadata = lease.get("metadata") or {}
        created = seconds_of(metadata.get("creationTimestamp"))
        begun = seconds_of((lease.get("status") or {}).get("beginTime"))
        if holder is None or created is None or begun is None:
            continue
        asked = seconds_of((lease.get("spec") or {}).get("beginTime"))
        started = max(created, asked) if asked is not None else created
        if begun < started:
            continue
        warm_since = ready_at(holder)
        if warm_since is None:
            warm_since = seconds_of((holder.get("metadata") or {}).get("creationTimestamp"))
        served = WARM if warm_since is not None and warm_since <= started else COLD
        waits.append(Wait(object_key(metadata), started, begun, served))
    return sorted(waits, key=lambda w: (w.begun, w.key))


def idle_count(status):
    """Exporters without a lease, by a set's status counters."""
    status = status or {}
    replicas, leased = status.get("replicas"), status.get("leasedReplicas")
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (replicas, leased)):
        return 0
    return max(replicas - leased, 0)


def accrue(idle_seconds, since, at, count, now, window=WINDOW):
    """``(idle seconds, since)`` after ``count`` idle instances from ``at``
    to ``now``, rolled to the last ``window``: past it, the total is scaled
    to the window and ``since`` moves up (a sliding mean, no history kept)."""
    idle_seconds += max(now - at, 0.0) * count
    if now - since > window:
        idle_seconds *= window / (now - since)
        since = now - window
    return idle_seconds, since


def _rounded(value):
    return None if value is None else round(value, 1)


def _figures(waits, starts, now):
    recent = [w for w in waits if w.begun > now - WINDOW][-MAX_LEASES:]
    seconds = [w.seconds for w in recent]
    starts = [s.seconds for s in starts[-MAX_COLD_STARTS:]]
    figures = {
        "leases": len(recent),
        "leaseWaitP50Seconds": _rounded(quantile(seconds, 50)),
        "leaseWaitP95Seconds": _rounded(quantile(seconds, 95)),
        "servedWarmRatio": round(sum(w.served == WARM for w in recent) / len(recent), 3) if recent else None,
        "coldStartP50Seconds": _rounded(quantile(starts, 50)),
        "coldStartP95Seconds": _rounded(quantile(starts, 95)),
    }
    return {key: value for key, value in figures.items() if value is not None}


IDLE_KEYS = ("idleInstanceSeconds", "idleSince", "accruedAt")


def summary(exporter_set, counters, waits, starts, now):
    """``status.serviceLevel`` of a set planned at ``now`` (seconds): the
    figures of its waits and cold starts, and its idle instance-seconds.

    The idle part moves only when the status moves for another reason (the
    counters or the figures change), so a steady pool writes nothing: it is
    the figure as of ``accruedAt``, the idle count of the status since then."""
    previous_status = exporter_set.get("status") or {}
    previous = previous_status.get("serviceLevel")
    previous = previous if isinstance(previous, dict) else {}
    out = _figures(waits, starts, now)
    idle = previous.get("idleInstanceSeconds")
    since, at = seconds_of(previous.get("idleSince")), seconds_of(previous.get("accruedAt"))
    if not isinstance(idle, int) or isinstance(idle, bool) or idle < 0 or since is None or at is None \
            or not since <= at <= now:
        idle, since, at = 0, now, now
    moved = (idle_count(previous_status) != idle_count(counters)
             or {k: v for k, v in previous.items() if k not in IDLE_KEYS} != out)
    if moved:
        total, since = accrue(float(idle), since, at, idle_count(previous_status), now)
        idle, at = int(round(total)), now
    out.update(idleInstanceSeconds=idle, idleSince=_stamp(since), accruedAt=_stamp(at))
    return out


def _stamp(seconds):
    return format_time(datetime.fromtimestamp(seconds, UTC))


def for_plan(exporter_set, exporters, leases, counters, now, surveys=None):
    """``status.serviceLevel`` of the plan at ``now`` (a datetime), from the
    set's ``exporters`` as planned (``timings.as_planned``; its dormant one
    left out) and the namespace's ``leases``. With ``surveys`` (the
    caller's ``pool_index.SurveyCache``), the times of snapshots of one
    revision are read once: between events the operator plans the same
    cached objects again, and reading every Exporter's and Lease's times
    was most of a steady plan (60 of 70 ms at 10,000 Exporters)."""
    revisions = (pool_index.revision(exporters), pool_index.revision(leases))
    if surveys is None or None in revisions:
        waits, starts = _times(exporters, leases)
    else:
        metadata = exporter_set.get("metadata") or {}
        owner = ("serviceLevel", metadata.get("namespace"), metadata.get("name"), metadata.get("uid"))
        waits, starts = surveys.survey(owner, revisions, lambda _digests: _times(exporters, leases))
    return summary(exporter_set, counters, waits, starts, now.timestamp())


def _times(exporters, leases):
    owned = [e for e in exporters if c.ANNOTATION_DORMANT not in
             ((e.get("metadata") or {}).get("annotations") or {})]
    return lease_waits(leases, owned), cold_starts(owned)


@dataclass(frozen=True)
class Step:
    """What a look at a set adds: the waits and cold starts not seen
    before, and the idle instance-seconds since the last look."""

    waits: tuple
    cold_starts: tuple
    idle_seconds: float


class Observed:
    """What one process has observed of a set, for its counters and
    histograms: each Lease and Exporter once, and only what happened since
    ``started`` (what came before is in the set's ``serviceLevel``)."""

    def __init__(self, provisioner, started):
        self.provisioner = provisioner
        self.started = started
        self._waits, self._starts = set(), set()
        self._idle = None  # (when, idle count then)

    def step(self, exporters, leases, status, now):
        owned = [e for e in exporters if c.ANNOTATION_DORMANT not in
                 ((e.get("metadata") or {}).get("annotations") or {})]
        waits = lease_waits(leases, owned)
        starts = cold_starts(owned)
        new_waits = tuple(w for w in waits if w.key not in self._waits and w.begun >= self.started)
        new_starts = tuple(s for s in starts if s.key not in self._starts
                           and s.created + s.seconds >= self.started)
        # Only the keys still in the API are kept: memory follows the objects.
        self._waits = {w.key for w in waits}
        self._starts = {s.key for s in starts}
        idle = 0.0
        if self._idle is not None:
            idle = max(now - self._idle[0], 0.0) * self._idle[1]
        self._idle = (now, idle_count(status))
        return Step(new_waits, new_starts, idle)
