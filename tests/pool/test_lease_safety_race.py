"""Lease safety under a race, on the bed: the operator scales two sets down
and up and recycles them (one ExitAndReplace, one InPlaceReuse) while the
Jumpstarter controller stand-in assigns leases on its own, from Leases a
lessee thread creates and releases without pause.

Every write to an Exporter or its instance is caught by a watch on
Exporters, Leases and Pods. The API server stamps all three kinds from one
etcd revision counter, so ordering the events by resourceVersion replays the
namespace as it was at the moment of each write: a disable, a delete (the
deletionTimestamp appears) or an instance Pod removed or reset while a lease
held that Exporter from either side (its ``status.leaseRef``, or a Lease not
ended naming it in ``status.exporterRef``) is a violation. There must be
none, also for leases made with ``allowDisabled`` for an Exporter the pool
has just disabled (the controller gives it to them). Afterwards, every
Exporter that served a Lease that has since ended, seen leased by the
operator or not, is replaced (ExitAndReplace) or reset (InPlaceReuse).

One window no client can close is told apart, not forgiven silently: the
controller writes a Lease's ``status.exporterRef`` before the Exporter's
``status.leaseRef``, so a Lease assigned after the operator's fresh read of
the Leases and before its disable lands is not a write the operator could
have refused. Each disable records the revision of the Lease list it read
(``leases-checked-at``); a Lease assigned at or before that revision, or a
``leaseRef`` the disable's resourceVersion precondition would have met, is
a violation. A Lease assigned after it is counted as the window, and the
Exporter it holds must still never be deleted or reset while held, which
the replay checks as for any other.

A lease made with ``allowDisabled`` opens the same window before a delete:
the controller may give it the disabled Exporter between the operator's
last fresh read of the Leases and its delete, and no precondition on the
Exporter refuses it (the Lease is written first). Such a lease, assigned
after the Exporter's last write before the delete, is counted apart
(``allow_disabled_window``) and printed; any other lease on a deleted,
removed or reset Exporter is a violation. docs/security.md names this
window among what is not enforced.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import lease_safety
from jumpstarter_standin import LEASE_ENDED_LABEL, wait_for
from kubernetes import client, watch
from pool_helpers import GROUP, SET_LABEL, make_class, make_set, settle_pool

JS = ("jumpstarter.dev", "v1alpha1")
CHURN_SECONDS = 30.0
# The race must have run: the churn goes on past CHURN_SECONDS (up to
# CHURN_MAX_SECONDS) until the sets were rescaled MIN_ITERATIONS times and
# the controller assigned MIN_ASSIGNED leases, however slow the machine.
# The floors, not the clock, bound the churn: twelve rescales two to five
# seconds apart take about 42 s.
CHURN_MAX_SECONDS = 180.0
MIN_ITERATIONS = 12
MIN_ASSIGNED = 15
SETS = {"replace": ("board-replace", "ExitAndReplace"), "reuse": ("board-reuse", "InPlaceReuse")}


@dataclass
class Seen:
    revision: int
    kind: str
    type: str
    obj: dict


class Recorder:
    """Every event of Exporters, Leases and Pods in ``namespace``, from now on."""

    def __init__(self, api, namespace):
        self.api = api
        self.namespace = namespace
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.events: list[Seen] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.threads = []

    def _lister(self, kind):
        if kind == "Pod":
            return self.core.list_namespaced_pod, (self.namespace,)
        plural = {"Exporter": "exporters", "Lease": "leases"}[kind]
        return self.custom.list_namespaced_custom_object, (*JS, self.namespace, plural)

    def start(self):
        for kind in ("Exporter", "Lease", "Pod"):
            func, args = self._lister(kind)
            listed = func(*args)
            version = listed["metadata"]["resourceVersion"] if isinstance(listed, dict) \
                else listed.metadata.resource_version
            thread = threading.Thread(target=self._watch, args=(kind, func, args, version), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def _watch(self, kind, func, args, version):
        while not self.stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(func, *args, resource_version=version, timeout_seconds=5):
                    obj = event["object"]
                    if not isinstance(obj, dict):
                        obj = self.api.sanitize_for_serialization(obj)
                    version = obj["metadata"]["resourceVersion"]
                    with self.lock:
                        self.events.append(Seen(int(version), kind, event["type"], obj))
                    if self.stop.is_set():
                        break
            except client.ApiException as exc:  # a 410 would lose events: the test says so
                self.errors.append(f"{kind} watch: {exc.status} {exc.reason}")
                return
            finally:
                stream.stop()

    def close(self):
        """Stops the watches once each has read what it was sent: a thread
        ends at its next event or at its watch's 5 s server timeout (the
        watch resumes from the last resourceVersion seen, so the short
        timeout loses nothing)."""
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)


def _lease_state(lease):
    status = lease.get("status") or {}
    ended = bool(status.get("ended")) or LEASE_ENDED_LABEL in (lease["metadata"].get("labels") or {})
    return ((status.get("exporterRef") or {}).get("name"), ended)


def analyse(events):
    """Replay the namespace in revision order; count writes and the ones that hit a lease."""
    leases: dict[str, tuple] = {}
    exporters: dict[str, dict] = {}
    pods: dict[str, dict] = {}
    counts = Counter()
    assigned = set()
    assigned_at: dict[str, int] = {}  # lease -> revision its exporterRef was first written
    violations = []
    allow_disabled: set[str] = set()  # leases made with allowDisabled
    exporter_rev: dict[str, int] = {}  # exporter -> revision of its last write seen
    deleted_since: dict[str, int] = {}  # exporter -> its last write before its delete

    def check(what, name, revision, checked_at=None, since=None):
        held = {lease for lease, (exporter, ended) in leases.items() if exporter == name and not ended}
        if since is not None:
            # allowDisabled, given the disabled Exporter after its last write
            # before the delete: the controller's window before a delete.
            late = {lease for lease in held if lease in allow_disabled and assigned_at.get(lease, 0) > since}
            counts["allow_disabled_window"] += bool(late)
            held -= late
        if checked_at is not None:
            # Assigned after the Lease list the disable was made on: the window.
            window = {lease for lease in held if assigned_at.get(lease, 0) > checked_at}
            counts["window"] += bool(window)
            held -= window
        # A leaseRef is the Exporter's own: the disable's resourceVersion
        # precondition would have refused it, so it is never the window.
        ref = (((exporters.get(name) or {}).get("status") or {}).get("leaseRef") or {}).get("name")
        if ref:
            held.add(ref)
        if held:
            violations.append(f"{what} {name} at revision {revision} while leased by {sorted(held)}")

    for seen in sorted(events, key=lambda s: s.revision):
        meta = seen.obj["metadata"]
        name = meta["name"]
        if seen.kind == "Lease":
            if seen.type == "DELETED":
                leases.pop(name, None)
                continue
            leases[name] = _lease_state(seen.obj)
            if (seen.obj.get("spec") or {}).get("allowDisabled"):
                allow_disabled.add(name)
            if leases[name][0]:
                assigned.add(name)
                assigned_at.setdefault(name, seen.revision)
        elif seen.kind == "Exporter":
            before = exporters.get(name)
            if before is not None and seen.type != "DELETED":
                was = (before.get("spec") or {}).get("enabled", True) is not False
                now = (seen.obj.get("spec") or {}).get("enabled", True) is not False
                if was and not now:
                    counts["disables"] += 1
                    notes = meta.get("annotations") or {}
                    checked_at = notes.get(constants.ANNOTATION_LEASES_CHECKED_AT)
                    check("disabled", name, seen.revision, int(checked_at) if checked_at else None)
            going = seen.type == "DELETED" or meta.get("deletionTimestamp")
            if going and not (before or {}).get("metadata", {}).get("deletionTimestamp"):
                counts["deletes"] += 1
                deleted_since[name] = exporter_rev.get(name, 0)
                check("deleted", name, seen.revision, since=deleted_since[name])
            exporter_rev[name] = seen.revision
            if seen.type == "DELETED":
                exporters.pop(name, None)
            else:
                exporters[name] = seen.obj
        else:
            before = pods.get(name)
            going = seen.type == "DELETED" or meta.get("deletionTimestamp")
            if going and before is not None and not before["metadata"].get("deletionTimestamp"):
                exporter = (meta.get("labels") or {}).get("virtualtarget.jumpstarter.dev/exporter", name)
                notes = ((exporters.get(exporter) or {}).get("metadata") or {}).get("annotations") or {}
                # A reset in place (InPlaceReuse), or the removal of the instance of
                # an Exporter that goes (before or after its delete).
                resetting = notes.get("virtualtarget.jumpstarter.dev/retiring") == "InPlaceReuse"
                counts["resets" if resetting else "instance_removals"] += 1
                check("reset" if resetting else "instance removed of", exporter, seen.revision,
                      since=deleted_since.get(exporter))
            if seen.type == "DELETED":
                pods.pop(name, None)
            else:
                pods[name] = seen.obj
    counts["leases_assigned"] = len(assigned)
    return counts, violations


class Lessee:
    """Users asking for targets without pause: short leases, some released
    early, and some made with ``allowDisabled`` (jmp create lease
    --allow-disabled) for an Exporter the pool has just disabled to remove or
    reset it: the controller gives a disabled Exporter to such a lease."""

    def __init__(self, standin, rng):
        self.standin = standin
        self.rng = rng
        self.stop = threading.Event()
        self.created = 0
        self.allow_disabled: list[str] = []
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _disabled_exporter(self):
        """(board, name) of an Exporter of the sets that is disabled now, or None."""
        found = [e for e in self.standin.exporters(SET_LABEL)
                 if (e.get("spec") or {}).get("enabled") is False
                 and not e["metadata"].get("deletionTimestamp")
                 and constants.ANNOTATION_DORMANT not in (e["metadata"].get("annotations") or {})]
        if not found:
            return None
        exporter = self.rng.choice(found)
        return exporter["metadata"]["labels"]["board"], exporter["metadata"]["name"]

    def _run(self):
        open_leases = []
        while not self.stop.is_set():
            try:
                board = self.rng.choice([b for b, _ in SETS.values()])
                name = f"race-{self.created}"
                pinned = self._disabled_exporter() if self.rng.random() < 0.4 else None
                if pinned is not None:
                    board, exporter = pinned
                    self.standin.create_lease(name, {"board": board}, exporter=exporter, allow_disabled=True,
                                              duration=self.rng.choice(["2s", "4s", "8s"]))
                    self.allow_disabled.append(name)
                else:
                    self.standin.create_lease(name, {"board": board},
                                              duration=self.rng.choice(["2s", "4s", "8s"]))
                self.created += 1
                open_leases.append(name)
                if len(open_leases) > 3 or self.rng.random() < 0.3:
                    self.standin.release(open_leases.pop(self.rng.randrange(len(open_leases))))
            except client.ApiException as exc:
                if exc.status != 404:
                    self.errors.append(f"{exc.status} {exc.reason}")
            self.stop.wait(self.rng.uniform(0.2, 1.0))


def not_recycled(standin):
    """Exporters, not leased now, that served a Lease that has ended and were
    neither replaced nor reset after it."""
    leases = standin.leases()
    view = lease_safety.LeaseView(leases)
    left = []
    for exporter in standin.exporters(SET_LABEL):
        notes = exporter["metadata"].get("annotations") or {}
        if constants.ANNOTATION_DORMANT in notes or view.holders(exporter):
            continue
        served = [x for x in leases if lease_safety.lease_ended(x) and lease_safety.served_by(x, exporter)]
        if not served:
            continue
        handled = lease_safety.parse_ended_key(notes.get(constants.ANNOTATION_REUSED_AFTER))
        if handled is None or max(map(lease_safety.ended_key, served)) > handled:
            left.append(exporter["metadata"]["name"])
    return left


def held_events(core, namespace):
    events = [e for e in core.list_namespaced_event(namespace).items if e.reason == "ExporterHeld"]
    total = sum(e.count or 1 for e in events)
    conflicts = sum(e.count or 1 for e in events if "409" in (e.message or ""))
    return total, conflicts


def test_no_leased_exporter_is_disabled_deleted_or_reset_under_a_race(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    recorder = Recorder(api, namespace).start()
    make_class(custom, namespace)
    for name, (board, strategy) in SETS.items():
        make_set(custom, namespace, name=name, board=board, maxReplicas=4, minAvailableReplicas=2,
                 scaleDownCooldown="1s", recycleStrategy=strategy)
    operator()
    for name in SETS:
        settle_pool(standin, 2, custom, namespace, name=name, timeout=120)

    rng = random.Random(20261125)
    lessee = Lessee(standin, rng)
    lessee.thread.start()
    iterations = 0
    began = time.monotonic()

    def churning():
        elapsed = time.monotonic() - began
        if elapsed < CHURN_SECONDS:
            return True
        if elapsed >= CHURN_MAX_SECONDS:
            return False
        return iterations < MIN_ITERATIONS or analyse(list(recorder.events))[0]["leases_assigned"] < MIN_ASSIGNED

    try:
        while churning():
            # Scale each set down or up; the lessee and the controller go on meanwhile.
            for name in SETS:
                custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", name,
                                                      {"spec": {"minAvailableReplicas": rng.randint(0, 3)}})
            iterations += 1
            lessee.stop.wait(rng.uniform(2.0, 5.0))
    finally:
        churned = time.monotonic() - began
        lessee.stop.set()
        lessee.thread.join(timeout=30)
    # Every lease ends; the sets settle back to two warm exporters each,
    # recycling whatever was used.
    for lease in standin.leases():
        if not _lease_state(lease)[1]:
            standin.release(lease["metadata"]["name"])
    for name in SETS:
        custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", name,
                                              {"spec": {"minAvailableReplicas": 2}})
    for name in SETS:
        settle_pool(standin, 2, custom, namespace, name=name, timeout=180, leasedReplicas=0)
    # Lease end comes from the Lease objects: every used Exporter is recycled.
    try:
        wait_for(lambda: not not_recycled(standin), timeout=180, message="every used exporter recycled")
        recycled = None
    except AssertionError as exc:
        recycled = f"{exc}: {not_recycled(standin)}"
    recorder.close()

    counts, violations = analyse(recorder.events)
    # allowDisabled leases that the controller gave a disabled Exporter.
    given_disabled = sum(
        1 for seen in recorder.events
        if seen.kind == "Lease" and seen.obj["metadata"]["name"] in set(lessee.allow_disabled)
        and ((seen.obj.get("status") or {}).get("exporterRef") or {}).get("name"))
    held, conflicts = held_events(core, namespace)
    exporters_left = len(standin.exporters(SET_LABEL))
    print(f"\nlease safety race: {iterations} iterations in {churned:.0f} s, "
          f"{lessee.created} leases created ({len(lessee.allow_disabled)} allowDisabled for a "
          f"disabled Exporter, given in {given_disabled} Lease events), {counts['leases_assigned']} assigned, "
          f"{counts['disables']} disables, {counts['deletes']} Exporter deletes, "
          f"{counts['resets']} instance resets, {counts['instance_removals']} instance removals, "
          f"{held} holds ({conflicts} precondition conflicts), {exporters_left} Exporters left; "
          f"leased Exporters disabled, deleted or reset: {len(violations)}; "
          f"disables in the controller's window (assigned after the Lease read): {counts['window']}; "
          f"deletes in the allowDisabled window: {counts['allow_disabled_window']}; "
          f"used Exporters not recycled: {recycled or 'none'}")
    for line in violations[:20]:
        print("  ", line)
    assert not recorder.errors and not lessee.errors, recorder.errors + lessee.errors
    # The race was run: leases were assigned while the sets were scaled and recycled.
    assert iterations >= MIN_ITERATIONS and counts["leases_assigned"] >= MIN_ASSIGNED
    assert counts["deletes"] > 0 and counts["disables"] > 0 and counts["resets"] > 0
    # allowDisabled leases were tried against Exporters the pool had disabled.
    assert lessee.allow_disabled
    assert violations == []
    assert recycled is None, recycled
