"""The warm buffer a lease-wait target asks for.

A set (or its ExporterSetPolicy) may say ``leaseWait: {percentile: 95,
target: 5s}``: at that percentile, a Lease should wait no longer than the
target for an Exporter. ``decide`` turns that into a warm buffer from what
the API holds and nothing else, so a restarted operator decides the same:

* the lease arrivals, the creation times of the namespace's Leases of the
  set (ended ones too: the controller keeps them), and
* the cold starts, created -> first ready, of the set's Exporters.

The model is the base-stock rule of a pool that replaces each Exporter a
lease takes: the replacement is ready one cold start later, and a lease
that finds the buffer empty is served by the first replacement ready. It
waits longer than the target ``T`` exactly when ``b`` or more replacements
it did not cause are still under way ``T`` after it arrived; with Poisson
arrivals their number is Poisson of mean ``rate * W``, ``W`` the mean of
``max(cold start - T, 0)`` (each replacement as an M/G/infinity server;
for one cold start ``L``, ``W = L - T``, the leases arrived in the ``W``
before). The buffer is therefore one more than the percentile of that
count: Poisson of the mean, over arrivals, of the leases an arrival found
in the ``W`` before it (at least the season's rate times ``W``, the rate
read over spans wide enough to hold a few arrivals); where those counts
vary well over their mean
(bursts are not Poisson), at least the percentile of the counts in the
window of the slow cold start (the one at the percentile, less ``T``).
``W = 0``: a cold start meets the target, no buffer.

A set reset in place also gets an instance back when a lease ends, held
beyond the buffer through the scale-down cooldown. There the buffer is
the least, from 1 to that figure, whose replay over the same history, its
lease ends included, lets no more leases wait than the misses the target
allows less those the quiet hours likely spend (``replayed``); not for
bursts, nor over too few arrivals to tell.

Which arrivals: those of the earlier cycles around the time to come, from
now to the cold start at the target's percentile and one window ahead
(what is created now is ready only then): up to four weeks back once a
week of history is known, else up to seven days, scaled by how the last
hour compares with the same hour of those cycles; and those of the last
15 minutes (three hours while no day is known), whichever asks for more:
the season tells when a busy day ends, the last minutes what it does not
know. Where almost no lease is expected,
no buffer, unless most earlier cycles (weeks once one is known) had one
around the time to come (the day's first lease after a quiet night): one. The cost ceiling
(``maxBuffer``) and the room the replica ceiling leaves beside the leased
and pending (``spec.maxReplicas``, what ``/scale`` writes) cap the
result, the floor (minAvailableReplicas) bounds it below whatever they
say; minReplicas and the scale-down cooldown stay the planner's.
"""

import bisect
import functools
import heapq
import math
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import selectors, timings
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.timings import (
    quantile,
    seconds_of,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    format_time,
    parse_duration,
)

HOUR = 3600.0
DAY = 24 * HOUR
WEEK = 7 * DAY
WEEKLY_CYCLES = 4
DAILY_CYCLES = 7
# Without a day of history, the rate of this many seconds before now.
RECENT = 3 * HOUR
# With one, this many: long enough to see a trickle the season does not
# know, short enough not to hold the day's pool into a quiet evening.
RECENT_IN_SEASON = 15 * 60.0
# How far the last hour may move the seasonal forecast, either way.
CORRECTION_RANGE = (0.5, 4.0)
# The cold start assumed until an Exporter of the set has become ready.
DEFAULT_COLD_START = 60.0
# Counts whose variance is over this many times their mean come in bursts.
BURSTY = 1.5
# Expected arrivals within one cold start below which no buffer is kept:
# nights and weekends cost nothing when nobody comes.
QUIET = 0.05
# The share of earlier cycles with a lease around the time to come from
# which one instance is kept warm however quiet the rate.
EXPECTING = 0.5
# Earlier cycles are read this much wider on each side, for arrivals that
# come a little earlier or later than they did.
SLACK = 600.0
# The arrivals a seasonal rate is read over, in spans widened up to half
# an hour each side.
STEADY_COUNT = 20
WIDEST = 1800.0
# Seconds between two decisions of a sized set with nothing else to do.
RESIZE = 60.0
# Arrivals a set's status records, and the longest text that may hold them.
MAX_RECORDED = 4096
MAX_RECORD_CHARS = 8 * MAX_RECORDED
# Cold starts it records: the newest, by the Exporter's creation.
MAX_COLD_STARTS = 64
# The fewest misses the target must allow a replay's arrivals for it to
# lower the buffer: a burst or two seen once would be learnt by heart.
MIN_MISSES = 2.0
# The replay's order of the measured cold starts: steps of the golden ratio.
GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
# Bounds of the Poisson quantile search (the ceiling of any sane buffer).
MAX_BUFFER = 1000

REASON_COLD_START_MEETS_TARGET = "ColdStartMeetsTarget"
REASON_QUIET = "NoArrivalsExpected"
REASON_FIRST_ARRIVAL = "FirstArrivalExpected"
REASON_FORECAST = "ForecastArrivals"
REASON_FLOOR = "Floor"
REASON_CEILING = "CostCeiling"
REASON_REPLICA_CEILING = "ReplicaCeiling"


@dataclass(frozen=True)
class Target:
    percentile: float
    wait: float
    max_buffer: int | None = None


@dataclass(frozen=True)
class Decision:
    """The buffer chosen, the model's inputs, and why."""

    buffer: int
    reason: str
    cold_start: float
    window: float
    pressure: float
    model_buffer: int
    source: str

    def message(self):
        return (f"warm buffer {self.buffer} ({self.reason}): cold start {self.cold_start:.0f}s, "
                f"{self.pressure:.2f} leases in the {self.window:.0f}s before an arrival "
                f"({self.source}), model {self.model_buffer}")

    def to_dict(self, arrivals=(), since=None, cold_starts=(), ends=()):
        return {
            "buffer": self.buffer,
            "reason": self.reason,
            "coldStartSeconds": round(self.cold_start, 1),
            "windowSeconds": round(self.window, 1),
            "pressure": round(self.pressure, 3),
            "modelBuffer": self.model_buffer,
            "forecast": self.source,
            "arrivals": encode_arrivals(arrivals),
            "ends": encode_arrivals(ends),
            "coldStarts": encode_cold_starts(cold_starts),
            "since": format_time(datetime.fromtimestamp(since, UTC)) if since is not None else None,
        }


def parse_target(spec, field="spec.leaseWait"):
    """``(Target, None)`` of a ``leaseWait`` mapping, ``(None, None)`` when
    absent, or ``(None, error)`` naming the field at fault."""
    if spec is None:
        return None, None
    if not isinstance(spec, dict):
        return None, f"{field}: must be a mapping with percentile and target"
    unknown = sorted(set(spec) - {"percentile", "target", "maxBuffer"})
    if unknown:
        return None, f"{field}.{unknown[0]}: not a field of leaseWait"
    percentile = spec.get("percentile", 95)
    if isinstance(percentile, bool) or not isinstance(percentile, int | float) \
            or not 50 <= percentile < 100:
        return None, f"{field}.percentile: {percentile!r} is not a number from 50 to below 100"
    try:
        wait = parse_duration(spec.get("target"))
    except ValueError:
        return None, f"{field}.target: {spec.get('target')!r} is not a duration"
    max_buffer = spec.get("maxBuffer")
    if max_buffer is not None and (isinstance(max_buffer, bool) or not isinstance(max_buffer, int)
                                   or not 0 <= max_buffer <= MAX_BUFFER):
        return None, f"{field}.maxBuffer: {max_buffer!r} is not an integer from 0 to {MAX_BUFFER}"
    return Target(float(percentile), wait, max_buffer), None


def poisson_quantile(mean, percentile):
    """The least ``k`` with ``P(N <= k) >= percentile/100``, ``N ~ Poisson(mean)``."""
    if mean <= 0:
        return 0
    goal = percentile / 100.0
    # Terms in log space: a mean of hundreds underflows exp(-mean).
    log_term = -mean
    total = math.exp(log_term)
    k = 0
    while total < goal and k < MAX_BUFFER:
        k += 1
        log_term += math.log(mean) - math.log(k)
        total += math.exp(log_term)
    return k


def _count(arrivals, start, end):
    return bisect.bisect_left(arrivals, end) - bisect.bisect_left(arrivals, start)


@dataclass(frozen=True)
class Demand:
    """What the history says of the leases to come near ``now``: the counts
    of leases each arrival found in the window before it (the mean window,
    and the window of the cold start at the percentile), and the rate."""

    counts: tuple
    rate: float      # arrivals per second
    source: str
    factor: float = 1.0
    burst_counts: tuple = ()
    spans: tuple = ()  # (start, end): where the counted arrivals came
    steady: float = 0.0  # the mean count the season's rate alone gives

    def pressure(self, percentile):
        """The percentile of the count an arrival finds before it, and the
        mean count: the larger of Poisson of the mean and the counts' own
        percentile (bursts are not Poisson); where they come in bursts (the
        counts' variance well over their mean), at least the percentile of
        the counts over the slow cold start's window: a burst's late leases
        are those whose replacements are slow."""
        if not self.counts:
            return 0, 0.0
        mean = max(sum(self.counts) / len(self.counts), self.steady)
        level = max(poisson_quantile(mean * self.factor, percentile), self._own(self.counts, percentile))
        if self.bursty() and self.burst_counts:
            level = max(level, self._own(self.burst_counts, percentile))
        return level, mean * self.factor

    def bursty(self):
        if not self.counts:
            return False
        mean = sum(self.counts) / len(self.counts)
        return sum((n - mean) ** 2 for n in self.counts) / len(self.counts) > BURSTY * mean

    def _own(self, counts, percentile):
        return math.ceil(quantile(counts, percentile) * self.factor - 1e-9)


def _counts(arrivals, points, window):
    """For each arrival ``arrivals[i]``, ``i`` in ``points``, the arrivals in
    the ``window`` before it, those of the same second listed before it
    too: leases created together (a pipeline's fan-out) find each other."""
    return tuple(i - bisect.bisect_left(arrivals, arrivals[i] - window) for i in points)


def demand(arrivals, since, now, horizon, window, burst_window=None):
    """The lease pressures expected within ``horizon`` seconds of ``now``:
    the seasonal one where history allows, and the recent one.

    ``arrivals``: sorted lease creation times (seconds), none after ``now``;
    ``since``: where the history starts; ``burst_window``: the window of a
    slow cold start (``window`` when None)."""
    burst_window = window if burst_window is None else burst_window
    seasonal = _seasonal_demand(arrivals, since, now, horizon, window, burst_window)
    recent = _recent_demand(arrivals, since, now, window, burst_window,
                            RECENT if seasonal is None else RECENT_IN_SEASON)
    return [d for d in (seasonal, recent) if d is not None]


def _seasonal_demand(arrivals, since, now, horizon, window, burst_window):
    low, high = CORRECTION_RANGE
    for period, cycles, name in ((WEEK, WEEKLY_CYCLES, "weekly"), (DAY, DAILY_CYCLES, "daily")):
        shifts = [k * period for k in range(1, cycles + 1) if now - k * period - SLACK >= since]
        if not shifts:
            continue
        spans = [(now - shift - SLACK, now - shift + horizon + SLACK) for shift in shifts]
        points = [i for start, end in spans
                  for i in range(bisect.bisect_left(arrivals, start), bisect.bisect_left(arrivals, end))]
        same_hours = sum(_count(arrivals, now - shift - HOUR, now - shift) for shift in shifts) / len(shifts)
        factor = min(max((_count(arrivals, now - HOUR, now) + 1.0) / (same_hours + 1.0), low), high)
        rate = len(points) / (len(spans) * (horizon + 2 * SLACK))
        steady = _rate_around(arrivals, shifts, now, horizon, len(points))
        return Demand(_counts(arrivals, points, window), max(rate, steady) * factor, f"{name} x{len(shifts)}",
                      factor, _counts(arrivals, points, burst_window), tuple(spans), steady * window)
    return None


def _rate_around(arrivals, shifts, now, horizon, found):
    """The arrival rate of the earlier cycles around the time to come, read
    over spans widened (up to ``WIDEST`` each side) until they hold
    ``STEADY_COUNT`` arrivals; none where the spans hold none (a quiet hour
    stays quiet up to its edges). A few arrivals tell a rate no better than
    their count, and two of them within one window, seldom there, are what
    the mean count needs to read more than none."""
    if not found:
        return 0.0
    slack = SLACK
    while found < STEADY_COUNT and slack < WIDEST:
        slack = min(2 * slack, WIDEST)
        found = sum(_count(arrivals, now - shift - slack, now - shift + horizon + slack) for shift in shifts)
    return found / (len(shifts) * (horizon + 2 * slack))


def expecting(arrivals, since, now, horizon):
    """``(share, source)``: the share of the earlier weeks (once one is
    known, else days) with a lease around the time to come. After a quiet
    night the day's first lease comes at a time that moves from day to day,
    too seldom for the rate to count, yet most days have one then. Not the
    days once a week is known: five weekdays of seven would keep an instance
    warm through every weekend morning."""
    for period, cycles, name in ((WEEK, WEEKLY_CYCLES, "weekly"), (DAY, DAILY_CYCLES, "daily")):
        shifts = [k * period for k in range(1, cycles + 1) if now - k * period - SLACK >= since]
        if shifts:
            share = sum(_count(arrivals, now - shift - SLACK, now - shift + horizon + SLACK) > 0
                        for shift in shifts) / len(shifts)
            return share, f"{name} x{len(shifts)}"
    return 0.0, "none"


def _recent_demand(arrivals, since, now, window, burst_window, span):
    known = min(span, now - since)
    if known <= 0:
        return None
    points = range(bisect.bisect_left(arrivals, now - known), len(arrivals))
    return Demand(_counts(arrivals, points, window), len(points) / known, "recent", 1.0,
                  _counts(arrivals, points, burst_window), ((now - known, now + 1.0),))


def _late(arrivals, ends, span, buffer, samples, wait, cooldown):
    """``(late, counted)`` of a pool reset in place replayed with a warm
    buffer of ``buffer`` over the arrivals in ``span`` (one cooldown before
    it to settle, the buffer full at that start): an arrival takes a ready
    instance, else the first replacement under way, and waits over ``wait``
    when that is not ready by then; each arrival's replacement is ready one
    cold start later (the measured ones in a fixed scattered order); a
    lease's end gives its instance back, held beyond the buffer until the
    surplus has lasted ``cooldown``."""
    start, end = span
    settle = start - cooldown
    events = heapq.merge(((t, 0) for t in ends[bisect.bisect_left(ends, settle):bisect.bisect_left(ends, end)]),
                         ((t, 1) for t in arrivals[bisect.bisect_left(arrivals, settle):
                                                   bisect.bisect_left(arrivals, end)]))
    ready, under_way, surplus_since, made, late, counted = buffer, [], None, 0, 0, 0
    for at, arrival in events:
        while under_way and under_way[0] <= at:
            heapq.heappop(under_way)
            ready += 1
        if surplus_since is not None and at >= surplus_since + cooldown:
            ready -= min(ready + len(under_way) - buffer, max(ready - buffer, 0))
            surplus_since = None
        if not arrival:
            ready += 1
        else:
            counted_here = at >= start
            counted += counted_here
            if ready:
                ready -= 1
            else:
                if under_way:
                    first = heapq.heappop(under_way)
                else:
                    first, made = at + _cold(samples, made), made + 1
                late += counted_here and first - at > wait
            for _ in range(buffer - ready - len(under_way)):
                heapq.heappush(under_way, at + _cold(samples, made))
                made += 1
        if ready + len(under_way) <= buffer:
            surplus_since = None
        elif surplus_since is None:
            surplus_since = at
    return late, counted


def _cold(samples, index):
    return samples[int(len(samples) * ((index * GOLDEN) % 1.0))]


def replayed(demand, arrivals, ends, upper, samples, target, cooldown, share):
    """The least buffer from 1 to ``upper`` whose replay (``_late``) over
    the spans the demand read lets no more than ``share`` of their arrivals
    wait over the target; ``upper`` where none does, or where they are too
    few to spend ``MIN_MISSES``. Not none: a lease the returns miss would
    wait a whole cold start."""
    best = upper
    for buffer in range(upper - 1, 0, -1):
        late = counted = 0
        for span in demand.spans:
            found = _late(arrivals, ends, span, buffer, samples, target.wait, cooldown)
            late, counted = late + found[0], counted + found[1]
        if share * counted < MIN_MISSES or late > share * counted:
            break
        best = buffer
    return best


def quiet_share(arrivals, now, horizon):
    """The share of the last week's arrivals (or of all, when less is
    known) that came in an hour with a quiet rate (``QUIET`` within
    ``horizon``): the model keeps no buffer then, so they are likely to
    wait, and spend the misses the target allows."""
    edges = [bisect.bisect_left(arrivals, now - k * HOUR) for k in range(int(WEEK // HOUR), -1, -1)]
    counts = [b - a for a, b in zip(edges, edges[1:], strict=False)]
    total = sum(counts)
    return sum(n for n in counts if n * horizon / HOUR < QUIET) / total if total else 0.0


def decide(target, arrivals, cold_starts, now, since, floor=0, room=None, ends=None, cooldown=0.0):
    """The warm buffer for ``target`` at ``now`` (seconds); see the module
    docstring. ``cold_starts``: seconds from creation to first ready;
    ``room``: what the replica ceiling leaves beside the leased and pending
    (None: no ceiling); ``ends``: the sorted lease end times of a set reset
    in place (None: an ended lease gives nothing back), whose instances are
    held ``cooldown`` seconds beyond the buffer."""
    bounded = functools.partial(_bounded, target, floor, room)
    arrivals = sorted(a for a in arrivals if a <= now)
    samples = sorted(cold_starts) or [DEFAULT_COLD_START]
    cold = quantile(samples, target.percentile)
    # The mean time a replacement takes beyond the target: the mean of the
    # replacements still under way, the target's wait later, per arrival.
    window = sum(max(sample - target.wait, 0.0) for sample in samples) / len(samples)
    if window <= 0:
        return bounded(Decision(0, REASON_COLD_START_MEETS_TARGET, cold, 0.0, 0.0, 0, "none"))
    # The busier of what the season and the last hours say: a quiet season
    # must not hide a trickle that goes on, nor a quiet morning a usual burst.
    forecast = demand(arrivals, since, now, cold + window, window, max(cold - target.wait, window))
    seen = [(d.pressure(target.percentile), d) for d in forecast if d.rate * (cold + window) >= QUIET]
    if not seen:
        share, source = expecting(arrivals, since, now, cold + window)
        if share >= EXPECTING:
            return bounded(Decision(1, REASON_FIRST_ARRIVAL, cold, window, 0.0, 1, source))
        return bounded(Decision(0, REASON_QUIET, cold, window, 0.0, 0, "none"))
    # A set reset in place: what the leases give back serves too, within the
    # misses the quiet hours leave; not where arrivals come in bursts, whose
    # every moment would spend them.
    share = 1 - target.percentile / 100.0 - quiet_share(arrivals, now, cold + window) if ends is not None else 0
    if share > 0:
        ends = sorted(e for e in ends if e <= now)
        seen = [((level if d.bursty() else
                  replayed(d, arrivals, ends, level + 1, samples, target, cooldown, share) - 1, mean), d)
                for (level, mean), d in seen]
    (level, mean), busiest = max(seen, key=lambda entry: entry[0])
    return bounded(Decision(level + 1, REASON_FORECAST, cold, window, mean, level + 1,
                            busiest.source))


def _bounded(target, floor, room, decision):
    buffer, reason = decision.buffer, decision.reason
    if target.max_buffer is not None and buffer > target.max_buffer:
        buffer, reason = target.max_buffer, REASON_CEILING
    # The replica ceiling (an autoscaler's, through /scale) caps the model's
    # buffer, so the idle beyond it is scaled down; never the floor.
    if room is not None and buffer > max(room, 0):
        buffer, reason = max(room, 0), REASON_REPLICA_CEILING
    if buffer < floor:
        buffer, reason = floor, REASON_FLOOR
    return replace(decision, buffer=buffer, reason=reason)


def history(exporter_set, leases, exporters):
    """``(arrivals, cold starts, since)`` of a set, in seconds since the
    epoch: the arrivals its status records (``status.sizing``, written
    through the status subresource only) and the creation times of the
    Leases since then whose selector the set's template labels satisfy; the
    seconds from creation to first ready of its Exporters; and where the
    history starts. Cold starts come as ``(creation second, seconds)``. The
    record is needed: the controller garbage-collects the Leases of a
    deleted Exporter, so scale-down erases them, and a pool scaled to none
    has no Exporter to tell its cold start."""
    recorded = _recorded(exporter_set)
    arrivals = _merged(decode_arrivals(recorded.get("arrivals")),
                       [seconds_of(lease["metadata"].get("creationTimestamp"))
                        for lease in _leases_of(exporter_set, leases)])
    # Cold starts by (creation second, seconds): the recorded ones and those of
    # the Exporters now, which the record may already hold.
    cold_starts = set(decode_cold_starts(recorded.get("coldStarts")))
    cold_starts.update((int(s.created), int(s.seconds)) for s in timings.cold_starts(exporters))
    since = seconds_of(recorded.get("since"))
    if since is None:
        since = min(arrivals) if arrivals else seconds_of(exporter_set["metadata"].get("creationTimestamp"))
    return arrivals, sorted(cold_starts)[-MAX_COLD_STARTS:], since or 0.0


def lease_ends(exporter_set, leases):
    """The set's lease ends (seconds), recorded and read as ``history``'s
    arrivals are: the record's (``status.sizing.ends``) and the
    ``status.endTime`` of the ended Leases since."""
    return _merged(decode_arrivals(_recorded(exporter_set).get("ends")),
                   [seconds_of((lease.get("status") or {}).get("endTime"))
                    for lease in _leases_of(exporter_set, leases) if (lease.get("status") or {}).get("ended")])


def _recorded(exporter_set):
    return (exporter_set.get("status") or {}).get("sizing") or {}


def _leases_of(exporter_set, leases):
    labels = selectors.exporter_labels(exporter_set, c.LABEL_EXPORTER_SET)
    for lease in leases:
        selector = (lease.get("spec") or {}).get("selector") or {}
        if not selectors.selector_is_empty(selector) and selectors.selector_matches(selector, labels):
            yield lease


def _merged(recorded, times):
    """The ``recorded`` times and those of ``times`` after the record's last
    second. Of that second (times are whole seconds) the record holds some:
    those beyond its count are new."""
    out = list(recorded)
    last = out[-1] if out else None
    at_last = 0
    for time in times:
        if time is None or (last is not None and time < last):
            continue
        if last is not None and time == last:
            at_last += 1
        else:
            out.append(time)
    if last is not None:
        out.extend([last] * max(at_last - recorded.count(last), 0))
    return sorted(out)


def rebased(wanted, current):
    """``wanted`` (a ``status.sizing`` planned on a cached copy of the set)
    to be written over ``current`` (a fresh read's): its record holds what
    the current record holds too. A cache that has not shown the last
    status write yet plans from an older record, while the Leases it held
    may be gone with their Exporters: written as planned, those arrivals
    would be lost. Times of one second count as often as the fuller record
    says; the decision's own fields stay the plan's."""
    if not isinstance(wanted, dict) or not isinstance(current, dict):
        return wanted
    out = dict(wanted)
    for key in ("arrivals", "ends"):
        times = _union(decode_arrivals(wanted.get(key)), decode_arrivals(current.get(key)))
        if times:
            out[key] = encode_arrivals(times)
    pairs = sorted(set(decode_cold_starts(wanted.get("coldStarts")))
                   | set(decode_cold_starts(current.get("coldStarts"))))
    if pairs:
        out["coldStarts"] = encode_cold_starts(pairs[-MAX_COLD_STARTS:])
    starts = [seconds_of(record.get("since")) for record in (wanted, current)]
    starts = [start for start in starts if start is not None]
    if starts:
        out["since"] = format_time(datetime.fromtimestamp(min(starts), UTC))
    return out


def _union(first, second):
    """The sorted times of either list, each second as often as in the one
    that holds it more often."""
    return sorted((Counter(first) | Counter(second)).elements())


def encode_cold_starts(pairs):
    """``(creation second, cold start seconds)`` pairs as text, base 36."""
    return ".".join(f"{_base36(created)}:{_base36(seconds)}" for created, seconds in pairs)


def decode_cold_starts(text):
    if not isinstance(text, str) or not text or len(text) > 24 * MAX_COLD_STARTS:
        return []
    try:
        pairs = [tuple(int(part, 36) for part in entry.split(":")) for entry in text.split(".")]
    except ValueError:
        return []
    return [pair for pair in pairs if len(pair) == 2 and min(pair) >= 0][-MAX_COLD_STARTS:]


def encode_arrivals(arrivals):
    """The newest ``MAX_RECORDED`` arrivals as text: whole seconds, the first
    in full and each next as its distance from the one before, base 36."""
    kept = [int(a) for a in sorted(arrivals)[-MAX_RECORDED:]]
    if not kept:
        return ""
    steps = [kept[0]] + [b - a for a, b in zip(kept, kept[1:], strict=False)]
    return ".".join(_base36(step) for step in steps)


def decode_arrivals(text):
    """``encode_arrivals``' list again; anything else reads as no record."""
    if not isinstance(text, str) or not text or len(text) > MAX_RECORD_CHARS:
        return []
    try:
        steps = [int(part, 36) for part in text.split(".")]
    except ValueError:
        return []
    if any(step < 0 for step in steps):
        return []
    out, at = [], 0
    for step in steps:
        at += step
        out.append(float(at))
    return out


def _base36(number):
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        number, rest = divmod(number, 36)
        text = digits[rest] + text
        if not number:
            return text


def for_plan(exporter_set, virtual_target_class, exporters, leases, floor, policy, now, draft, room=None,
             cooldown=0.0):
    """``(Decision, status.sizing)`` of a set whose ExporterSetPolicy gives
    a ``leaseWait``, or None (none either where the class binds on first consumer: no warm
    pool). Tells a change of buffer with an Event, and asks for the next
    look in ``RESIZE`` seconds: the forecast moves with the clock."""
    target, error = parse_target((policy or {}).get("leaseWait"))
    binding = (virtual_target_class.get("spec") or {}).get("bindingMode")
    if target is None or error or binding == c.BINDING_WAIT_FOR_FIRST_CONSUMER:
        return None
    arrivals, cold_starts, since = history(exporter_set, leases, exporters)
    # Only a set reset in place gets an instance back when its lease ends.
    in_place = (exporter_set.get("spec") or {}).get("recycleStrategy") == c.RECYCLE_IN_PLACE_REUSE
    ends = lease_ends(exporter_set, leases) if in_place else []
    decision = decide(target, arrivals, [seconds for _, seconds in cold_starts], now.timestamp(), since, floor,
                      room, ends if in_place else None, cooldown)
    if ((exporter_set.get("status") or {}).get("sizing") or {}).get("buffer") != decision.buffer:
        draft.event("Normal", "WarmBufferSized", decision.message())
    draft.requeue_at(RESIZE)
    return decision, decision.to_dict(arrivals, since, cold_starts, ends)
