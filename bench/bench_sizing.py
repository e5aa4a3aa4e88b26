"""Lease traces replayed through the planner on a virtual clock: a pool sized
to a lease-wait target (pool/sizing.py) against every fixed warm buffer.

Each run is one ExporterSet planned by ``make_plan``, as the operator plans
it, after every event of a discrete-event world: leases arrive and are
assigned first come, first served, to an available Exporter (as the
Jumpstarter controller does), end after their duration, and the set's
Exporters become ready one cold start after their creation, drawn from
the cold-start distribution. The adaptive run gives the set an
ExporterSetPolicy ``leaseWait`` (the planner sizes the buffer from the
Leases and Exporters it reads, pool/sizing.py); the fixed runs keep
``minAvailableReplicas`` at 0, 1, ... up to the trace's peak of concurrent
leases.

Per run, over the measured part of the trace (after the history it learns
from): the p95 lease wait, the share served warm, and the idle
instance-hours (instances that exist with no lease, provisioning included).

Run: source scripts/common.sh && link_collection && $VENV_DIR/bin/python bench/bench_sizing.py
(--json bench/results/sizing.json writes the figures; --traces steady,...)
"""

import argparse
import heapq
import itertools
import json
import math
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "unit"))

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c  # noqa: E402
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import (  # noqa: E402
    policy,
    sizing,
    timings,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.demand import (  # noqa: E402
    attribute_lease_demand,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (  # noqa: E402
    is_available,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan  # noqa: E402
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (  # noqa: E402
    format_time,
    parse_time,
)
from pool_builders import SET_NAME, apply_annotation_patches, exporter, exporter_set, lease, target_class  # noqa: E402

# A Monday, so that days of the week fall where the traces put them.
EPOCH = datetime(2026, 11, 2, tzinfo=UTC)
MINUTE = 60.0
TARGET = {"percentile": 95, "target": "5s"}
TARGET_WAIT = 5.0
# The operator's resync of a set with nothing to do, in seconds.
RESYNC = 60.0
# Seconds a guest reset in place takes to be back.
RESET = 8.0


def stamp(seconds):
    return format_time(EPOCH + timedelta(seconds=seconds))


# -- traces -----------------------------------------------------------------------


def poisson_arrivals(rng, start, end, rate_at):
    """Arrivals of a Poisson process of rate ``rate_at(t)`` per second (thinning)."""
    peak = max(rate_at(t) for t in range(int(start), int(end), 300)) or 0.0
    t, out = start, []
    while peak > 0:
        t += rng.expovariate(peak)
        if t >= end:
            break
        if rng.random() * peak < rate_at(t):
            out.append(t)
    return out


def durations(rng, count, median=600.0, sigma=0.6):
    return [rng.lognormvariate(math.log(median), sigma) for _ in range(count)]


def trace_steady(rng):
    """Twelve hours of two leases a minute on average; the last eight are measured."""
    arrivals = poisson_arrivals(rng, 0, 12 * sizing.HOUR, lambda t: 2 / MINUTE)
    return arrivals, durations(rng, len(arrivals)), 4 * sizing.HOUR


def office_rate(t):
    day, hour = divmod(t % sizing.WEEK, sizing.DAY)[0], (t % sizing.DAY) / sizing.HOUR
    if day >= 5:
        return 0.2 / sizing.HOUR
    if 8 <= hour < 18:
        return (0.1 if 12 <= hour < 13 else 0.3) / MINUTE
    return 0.5 / sizing.HOUR


def trace_office(rng):
    """Two weeks of office hours (busy 8:00-18:00 on weekdays, a quiet lunch,
    near nothing at night and at weekends); the second week is measured."""
    arrivals = poisson_arrivals(rng, 0, 2 * sizing.WEEK, office_rate)
    return arrivals, durations(rng, len(arrivals)), sizing.WEEK


def trace_bursts(rng):
    """Three days: CI bursts of 10 leases in the first minute of every hour
    from 7:00 to 20:00, over a trickle of one lease per 10 minutes; the last
    two days are measured."""
    arrivals = poisson_arrivals(rng, 0, 3 * sizing.DAY, lambda t: 0.1 / MINUTE)
    for day in range(3):
        for hour in range(7, 21):
            top = day * sizing.DAY + hour * sizing.HOUR
            arrivals.extend(top + rng.uniform(0, MINUTE) for _ in range(10))
    arrivals.sort()
    return arrivals, durations(rng, len(arrivals), median=300.0, sigma=0.4), sizing.DAY


RECORDED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces", "bed-day.json")


def trace_bed_day(rng):
    """A day of lease history recorded on the bed (``record_leases.py``),
    its times multiplied back by the recording's compression: each Lease's
    creation as the recorder's watch first saw it, and its length from
    begin to end. A Lease that never began (none matched) is left out.
    Its last day is measured, after the days before it; a recording of one
    day after its first three hours, the history the model reads while no
    day is known."""
    with open(RECORDED) as source:
        recorded = json.load(source)
    scale = recorded["compression"]
    leases = sorted((e["seen"] * scale, (e["ended"] - e["begun"]) * scale)
                    for e in recorded["leases"] if "begun" in e and "ended" in e)
    days = recorded.get("days", 1)
    return [a for a, _ in leases], [d for _, d in leases], (days - 1) * sizing.DAY if days > 1 else sizing.RECENT


TRACES = {"steady": trace_steady, "office": trace_office, "bursts": trace_bursts, "bed-day": trace_bed_day}


def _hours(days, start, end):
    return frozenset(day * 24 + hour for day in days for hour in range(start, end))


WEEKDAYS, WEEKEND = range(5), range(5, 7)
# Parts of the week for --by-period, hours of the week from Monday 0:00.
PERIODS = {
    "weekday 0-8": _hours(WEEKDAYS, 0, 8),
    "weekday 8-9": _hours(WEEKDAYS, 8, 9),
    "weekday 9-12": _hours(WEEKDAYS, 9, 12),
    "weekday 12-13": _hours(WEEKDAYS, 12, 13),
    "weekday 13-18": _hours(WEEKDAYS, 13, 18),
    "weekday 18-21": _hours(WEEKDAYS, 18, 21),
    "weekday 21-24": _hours(WEEKDAYS, 21, 24),
    "weekend": _hours(WEEKEND, 0, 24),
}


def cold_start(rng, median=25.0, sigma=0.25):
    return rng.lognormvariate(math.log(median), sigma)


def peak_concurrency(arrivals, lengths):
    edges = sorted([(a, 1) for a in arrivals] + [(a + d, -1) for a, d in zip(arrivals, lengths, strict=True)])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


# -- the world --------------------------------------------------------------------


class World:
    """One set, its Exporters and Leases, and the controller's assignment."""

    def __init__(self, arrivals, lengths, measure_from, buffer, seed):
        self.rng = random.Random(seed)
        self.arrivals, self.lengths = arrivals, lengths
        self.measure_from = measure_from
        self.adaptive = buffer is None
        self.options = {"policy": policy.normalize({"leaseWait": TARGET} if self.adaptive else None)}
        # Reset in place: the Jumpstarter controller garbage-collects the Leases
        # of a deleted Exporter, and with them the history a target reads.
        # A schedule: (weekday nights, weekday office hours 8-18, weekends).
        self.schedule_of = buffer if isinstance(buffer, tuple) else None
        buffer = self.schedule_of[0] if self.schedule_of else buffer
        self.set = exporter_set(min_available=0 if buffer is None else buffer, max_replicas=0,
                                recycle=c.RECYCLE_IN_PLACE_REUSE)
        self.set["metadata"]["creationTimestamp"] = stamp(0)
        self.klass = target_class()
        self.exporters, self.instances, self.leases = {}, {}, []
        self.queue, self.order = [], itertools.count()
        self.now = 0.0
        self.waits, self.warm = [], 0
        self.idle_seconds, self.last_idle_at = 0.0, 0.0
        # By hour of day: idle instance-seconds, leases measured, leases late.
        self.by_hour = [[0.0, 0, 0] for _ in range(24)]
        # By hour of the week: seconds measured, buffer-seconds (the buffer in
        # force), idle instance-seconds within the buffer and beyond it.
        self.by_week_hour = [[0.0, 0.0, 0.0, 0.0] for _ in range(168)]
        self.fixed = buffer
        self.late_of = {}
        self.decisions = {}
        self.plans = 0
        self.requeue_at = None

    def schedule(self, at, kind, value=None):
        heapq.heappush(self.queue, (at, next(self.order), kind, value))

    def run(self):
        for index, at in enumerate(self.arrivals):
            self.schedule(at, "arrive", index)
        end = self.arrivals[-1] + max(self.lengths) + 600
        self.schedule(0.0, "resync")
        while self.queue:
            at = self.queue[0][0]
            if at > end:
                break
            # What happens within one second is one reconcile's worth: the
            # planner reads time by the second, as the API writes it.
            while self.queue and self.queue[0][0] < at + 1.0:
                last, _, kind, value = heapq.heappop(self.queue)
                self.advance(last)
                getattr(self, "on_" + kind)(value)
            self.assign()
            self.reconcile()
        return self

    def advance(self, at):
        """Counts the idle instance-seconds up to ``at``."""
        start = max(self.now, self.measure_from)
        if at > start:
            idle = sum(1 for e in self.exporters.values()
                       if not e["status"].get("leaseRef") and not e["metadata"]["annotations"].get(
                           c.ANNOTATION_DORMANT))
            self.idle_seconds += idle * (at - start)
            self.by_hour[int(start % sizing.DAY // sizing.HOUR)][0] += idle * (at - start)
            buffer = self.fixed if not self.adaptive else \
                ((self.set.get("status") or {}).get("sizing") or {}).get("buffer", 0)
            week = self.by_week_hour[int(start % sizing.WEEK // sizing.HOUR)]
            week[0] += at - start
            week[1] += buffer * (at - start)
            week[2] += min(idle, buffer) * (at - start)
            week[3] += max(idle - buffer, 0) * (at - start)
        self.now = at

    # -- events
    def on_arrive(self, index):
        obj = lease(f"l{index}", created=0)
        obj["metadata"]["creationTimestamp"] = stamp(self.arrivals[index])
        obj["bench"] = index
        self.leases.append(obj)

    def on_ready(self, name):
        if name in self.exporters:
            self.set_online(name, True)
            self.instances[name] = {"phase": "Running"}

    def set_online(self, name, online):
        for condition in self.exporters[name]["status"]["conditions"]:
            condition["status"], condition["lastTransitionTime"] = str(online), stamp(self.now)

    def on_end(self, obj):
        obj["status"]["ended"] = True
        obj["status"]["endTime"] = stamp(self.now)
        holder = self.exporters.get(obj["status"]["exporterRef"]["name"])
        if holder is not None:
            holder["status"].pop("leaseRef", None)

    def on_resync(self, _):
        self.schedule(self.now + RESYNC, "resync")

    def on_requeue(self, _):
        pass

    # -- the controller
    def assign(self):
        free = sorted(name for name, e in self.exporters.items() if is_available(e)
                      and not e["metadata"]["annotations"].get(c.ANNOTATION_DORMANT))
        for obj in self.leases:
            if not free:
                break
            status = obj["status"]
            if status.get("exporterRef") or status.get("ended"):
                continue
            name = free.pop(0)
            status["exporterRef"] = {"name": name}
            status["beginTime"] = stamp(self.now)
            self.exporters[name]["status"]["leaseRef"] = {"name": obj["metadata"]["name"]}
            index = obj["bench"]
            arrived = self.arrivals[index]
            if arrived >= self.measure_from:
                wait = self.now - arrived
                self.waits.append(wait)
                self.warm += wait < 1.0
                hour = self.by_hour[int(arrived % sizing.DAY // sizing.HOUR)]
                hour[1] += 1
                hour[2] += wait > TARGET_WAIT
                self.late_of[index] = wait > TARGET_WAIT
            self.schedule(self.now + self.lengths[index], "end", obj)

    # -- the operator
    def scheduled(self):
        night, day, weekend = self.schedule_of
        week_day, hour = divmod(int(self.now % sizing.WEEK // sizing.HOUR), 24)
        return weekend if week_day >= 5 else day if 8 <= hour < 18 else night

    def reconcile(self):
        if self.schedule_of:
            self.fixed = self.set["spec"]["minAvailableReplicas"] = self.scheduled()
        for _ in range(3):
            pending = self.pending()
            plan = scale_plan(self.set, self.klass, [self.exporters[n] for n in sorted(self.exporters)],
                              pending, stamp(self.now), instances=self.instances, leases=self.leases,
                              options=self.options)
            self.plans += 1
            reason = (plan["status"].get("sizing") or {}).get("reason")
            if reason:
                self.decisions[reason] = self.decisions.get(reason, 0) + 1
            acted = self.apply(plan)
            if plan.get("requeue_after"):
                at = self.now + max(float(plan["requeue_after"]), 1.0)
                if not self.requeue_at or not self.now < self.requeue_at <= at:
                    self.requeue_at = at
                    self.schedule(at, "requeue")
            if not acted:
                break
            self.assign()

    def pending(self):
        wanted = set(attribute_lease_demand([self.set], self.leases, list(self.exporters.values()),
                                            parse_time(stamp(self.now)))[SET_NAME])
        return [x for x in self.leases if x["metadata"]["name"] in wanted]

    def apply(self, plan):
        acted = False
        for entry in plan["create_dormant"]:
            self.add(entry, dormant=True)
            acted = True
        for name in plan["enable"]:
            self.exporters[name]["spec"]["enabled"] = True
            acted = True
        for entry in plan["recycle"]:
            # The reset guest is back one reboot later.
            self.exporters[entry["name"]]["spec"]["enabled"] = True
            self.set_online(entry["name"], False)
            self.schedule(self.now + RESET, "ready", entry["name"])
            acted = True
        for entry in plan["delete"] + plan["delete_dormant"]:
            self.exporters.pop(entry["name"], None)
            self.instances.pop(entry["name"], None)
            # The controller's garbage collection of the Exporter's Leases.
            self.leases = [x for x in self.leases if (x["status"].get("exporterRef") or {}).get("name")
                           != entry["name"]]
            acted = True
        for name in plan["disable"]:
            self.exporters[name]["spec"]["enabled"] = False
            acted = True
        for entry in plan["create"]:
            self.add(entry)
            self.schedule(self.now + cold_start(self.rng), "ready", entry["name"])
            acted = True
        apply_annotation_patches(self.exporters, plan["exporter_annotations"])
        self.set["status"] = plan["status"]
        return acted

    def add(self, entry, dormant=False):
        new = exporter(entry["name"], ready=False, labels=entry["labels"],
                       owner=entry["labels"][c.LABEL_EXPORTER_SET], annotations=entry["annotations"])
        new["metadata"]["creationTimestamp"] = stamp(self.now)
        self.exporters[entry["name"]] = new
        if not dormant:
            self.instances[entry["name"]] = {"phase": "Pending"}

    # -- figures
    def figures(self):
        waits = sorted(self.waits)
        return {
            "p95_wait_s": round(sizing.quantile(waits, 95) or 0.0, 1),
            "served_warm": round(self.warm / len(waits), 3) if waits else None,
            "idle_instance_hours": round(self.idle_seconds / sizing.HOUR, 1),
            "leases": len(waits),
            "plans": self.plans,
            "by_hour": [{"idle_h": round(idle / sizing.HOUR, 2), "leases": leases, "late": late}
                        for idle, leases, late in self.by_hour],
            "by_period": self.by_period(),
        }

    def by_period(self):
        """The hours of the week in PERIODS: the mean buffer in force, the
        idle instance-hours within it and beyond it (instances a lease gave
        back, held through the cooldown), the leases and the late ones."""
        out = {}
        for name, hours in PERIODS.items():
            seconds, buffer, within, beyond = (sum(self.by_week_hour[h][k] for h in hours) for k in range(4))
            leases = late = 0
            for index, arrived in enumerate(self.arrivals):
                if arrived >= self.measure_from and int(arrived % sizing.WEEK // sizing.HOUR) in hours:
                    leases += 1
                    late += self.late_of.get(index, False)
            out[name] = {"mean_buffer": round(buffer / seconds, 2) if seconds else None,
                         "idle_within_h": round(within / sizing.HOUR, 1),
                         "idle_beyond_h": round(beyond / sizing.HOUR, 1), "leases": leases, "late": late}
        return out


def allowed_late(leases, percentile):
    """The most late leases of ``leases`` whose p-th percentile wait (nearest
    rank) is still within the target."""
    return leases - timings.nearest_rank(leases, percentile)


def schedule_bound(fixed, percentile):
    """The cheapest buffer schedule by part of the week (``PERIODS``) that
    the fixed runs' own figures allow: in each part a mix of two adjacent
    fixed buffers (a share of its hours at each), the parts' mixes chosen
    together so that no more leases wait than the target allows. Arrivals
    within a part come as Poisson at one rate, so a share of its hours at a
    buffer sees that share of its leases; idle hours and late leases are
    then linear in the shares and the cheapest mix is the greedy walk down
    each part's lower hull, steepest saving per late first. Returns None
    where even the largest buffers let too many wait."""
    fixed = sorted(fixed, key=lambda r: r["buffer"])
    leases = sum(p["leases"] for p in fixed[0]["by_period"].values())
    allowed = allowed_late(leases, percentile)
    parts, hulls = {}, {}
    for part in PERIODS:
        points = sorted((r["by_period"][part]["late"], r["by_period"][part]["idle_within_h"]
                         + r["by_period"][part]["idle_beyond_h"], r["buffer"]) for r in fixed)
        # The lower hull from the fewest late (the dearest) to the most.
        hull = []
        for point in points:
            if hull and point[0] == hull[-1][0]:
                if point[1] >= hull[-1][1]:
                    continue
                hull.pop()
            while len(hull) >= 2 and ((hull[-1][1] - hull[-2][1]) * (point[0] - hull[-2][0])
                                      >= (point[1] - hull[-2][1]) * (hull[-1][0] - hull[-2][0])):
                hull.pop()
            if not hull or point[1] < hull[-1][1]:
                hull.append(point)
        hulls[part] = hull
        parts[part] = [hull[0][0], hull[0][1], f"{hull[0][2]}"]
    late = sum(p[0] for p in parts.values())
    if late > allowed:
        return None
    # Each step gives up idle hours for late leases; cheapest saving per late first.
    steps = sorted(((b[1] - a[1]) / (b[0] - a[0]), part, a, b) for part, hull in hulls.items()
                   for a, b in zip(hull, hull[1:], strict=False))
    for _rate, part, a, b in steps:
        room = allowed - late
        if room <= 0:
            break
        share = min(1.0, room / (b[0] - a[0]))
        parts[part] = [a[0] + share * (b[0] - a[0]), a[1] + share * (b[1] - a[1]),
                       f"{b[2]}" if share == 1.0 else f"{a[2]}/{b[2]} {1 - share:.2f}/{share:.2f}"]
        late += share * (b[0] - a[0])
    return {"idle_instance_hours": round(sum(p[1] for p in parts.values()), 1), "late": round(late, 1),
            "leases": leases, "allowed_late": allowed,
            "parts": {part: {"buffers": p[2], "late": round(p[0], 1), "idle_h": round(p[1], 1)}
                      for part, p in parts.items()}}


def replay(name, seed, quick, adaptive_only=False, buffers=None, by_hour=False, by_period=False, schedules=(),
           adaptive=True, bound=False):
    arrivals, lengths, measure_from = TRACES[name](random.Random(seed))
    peak = peak_concurrency(arrivals, lengths)
    target_wait = sizing.parse_target(TARGET)[0].wait
    rows = []
    runs = [None] if adaptive_only else [None, *(range(peak + 1) if buffers is None else buffers)]
    runs = (runs if adaptive else runs[1:]) + list(schedules)
    for buffer in runs:
        started = time.process_time()
        world = World(arrivals, lengths, measure_from, buffer, seed + 1)
        figures = world.run().figures()
        figures["buffer"] = "adaptive" if buffer is None else ":".join(map(str, buffer)) \
            if isinstance(buffer, tuple) else buffer
        figures["cpu_s"] = round(time.process_time() - started, 1)
        if buffer is None:
            figures["decisions"] = world.decisions
        rows.append(figures)
        print(f"  {name:7s} buffer {figures['buffer']!s:>8}: p95 wait {figures['p95_wait_s']:6.1f} s, "
              f"warm {figures['served_warm']}, idle {figures['idle_instance_hours']:7.1f} instance-h "
              f"({figures['plans']} plans, {figures['cpu_s']} s)", flush=True)
        if by_hour:
            print("    idle instance-h / leases / late, by hour of day: " + ", ".join(
                f"{hour}: {h['idle_h']:.1f}/{h['leases']}/{h['late']}"
                for hour, h in enumerate(figures["by_hour"])), flush=True)
        if by_period:
            print("    mean buffer, idle instance-h within it + beyond it, leases / late: " + "; ".join(
                f"{part}: {p['mean_buffer']}, {p['idle_within_h']} + {p['idle_beyond_h']} h, "
                f"{p['leases']}/{p['late']}" for part, p in figures["by_period"].items()), flush=True)
        if quick and isinstance(buffer, int) and sum(r["p95_wait_s"] <= target_wait for r in rows
                                                     if isinstance(r["buffer"], int)) > 1:
            break
    adaptive = rows[0] if adaptive else None
    fixed = [r for r in rows if isinstance(r["buffer"], int)]
    scheduled = [r for r in rows if ":" in str(r["buffer"])]
    meeting = [r for r in fixed if r["p95_wait_s"] <= target_wait]
    cheapest = min(meeting, key=lambda r: r["idle_instance_hours"]) if meeting else None
    summary = {
        "trace": name, "leases": len(arrivals), "peak_concurrent": peak,
        "adaptive": adaptive, "fixed": fixed, "schedules": scheduled,
        "cheapest_fixed_meeting_target": cheapest["buffer"] if cheapest else None,
        "adaptive_meets_target": adaptive["p95_wait_s"] <= target_wait if adaptive else None,
    }
    if cheapest and adaptive:
        summary["idle_saving_vs_cheapest"] = round(
            1 - adaptive["idle_instance_hours"] / cheapest["idle_instance_hours"], 3) \
            if cheapest["idle_instance_hours"] else None
    if bound and fixed:
        summary["schedule_bound"] = found = schedule_bound(fixed, TARGET["percentile"])
        if found is None:
            print(f"  {name}: no schedule of the buffers run meets the target", flush=True)
        else:
            saving = round(1 - found["idle_instance_hours"] / cheapest["idle_instance_hours"], 3) \
                if cheapest and cheapest["idle_instance_hours"] else None
            summary["schedule_bound"]["saving_vs_cheapest"] = saving
            print(f"  {name}: the cheapest schedule by part of the week: {found['idle_instance_hours']} "
                  f"instance-h, {found['late']} late of {found['leases']} ({found['allowed_late']} allowed), "
                  f"saving {saving}: " + "; ".join(f"{part}: {p['buffers']}" for part, p in found["parts"].items()),
                  flush=True)
    print(f"  {name}: adaptive meets the target: {summary['adaptive_meets_target']}; cheapest fixed "
          f"buffer meeting it: {summary['cheapest_fixed_meeting_target']}; idle saving: "
          f"{summary.get('idle_saving_vs_cheapest')}", flush=True)
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=",".join(TRACES), help="of " + ", ".join(TRACES))
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--quick", action="store_true",
                        help="stop the fixed buffers at the second that meets the target")
    parser.add_argument("--adaptive-only", action="store_true",
                        help="the adaptive run alone (the fixed buffers do not read the model)")
    parser.add_argument("--buffers", help="the fixed buffers to run, e.g. 0,1 (default: 0 to the peak)")
    parser.add_argument("--by-hour", action="store_true",
                        help="print idle instance-hours, leases and late leases by hour of day")
    parser.add_argument("--by-period", action="store_true",
                        help="print, by part of the week (nights, mornings, ...), the mean buffer in force, "
                             "the idle instance-hours within it and beyond it, leases and late leases")
    parser.add_argument("--schedules", help="fixed buffers by part of the week, night:day:weekend, comma "
                        "separated (e.g. 1:1:0): weekday nights, weekdays 8:00-18:00, weekends")
    parser.add_argument("--no-adaptive", action="store_true", help="the fixed buffers and schedules alone")
    parser.add_argument("--bound", action="store_true",
                        help="from the fixed buffers run, the cheapest schedule by part of the week that meets "
                             "the target (mixes of two adjacent buffers in each part)")
    parser.add_argument("--json")
    args = parser.parse_args()
    print(f"target: p{TARGET['percentile']} lease wait <= {TARGET['target']}", flush=True)
    results = {"target": TARGET, "seed": args.seed,
               "traces": [replay(name, args.seed, args.quick, args.adaptive_only,
                                 [int(b) for b in args.buffers.split(",")] if args.buffers else None,
                                 args.by_hour, args.by_period,
                                 [tuple(int(b) for b in x.split(":")) for x in args.schedules.split(",")]
                                 if args.schedules else (), not args.no_adaptive, args.bound)
                          for name in args.traces.split(",")]}
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
            out.write("\n")


if __name__ == "__main__":
    main()
