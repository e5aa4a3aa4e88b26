"""What the pool logic learns from the lab hosts of a qemu-baremetal set.

The lab hosts are not in the Kubernetes API, so every run of the provisioner
role (and the periodic probe) records what it found on them in the
ExporterSet's operator state (``status.operatorState.hostReport``, which a
set author cannot write), the *host report*. Every reconcile reads it back
through ``LabView``, from which ``k8s_observe`` takes:

* ``instances`` for the plan: the phase each host reported for each instance.
  A host that stopped answering turns its instances Unknown (offline) and,
  once ``parameters.reconnectTimeout`` has passed, Failed, so the plan
  replaces them on other hosts; the role removes the old ones when the host
  answers again (it passes ``keep``);
* ``capacity``: free slots on the hosts that answer and are not drained, from
  the Exporters labelled with a host (``placement``), so a pool that does not
  fit says ``ScalingLimited`` naming the hosts;
* placement of new Exporters: each ``create`` of the plan carries its host
  label, so slots are accounted from the moment the Exporter exists, by the
  operator and by a by-hand run alike, and survive an operator restart;
* which Exporters still need their instance (``unprovisioned``), and when the
  report is old enough that the hosts must be probed again.

A drained host (``playbooks/drain_host.yml``) is listed in the class's
``drained-hosts`` annotation: it gets no new instance, and an instance there
whose lease ends is replaced rather than reset in place.

Pure: no I/O.
"""

import json

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import operator_state, set_overrides
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.exporter_state import (
    read_exporter,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    RECONNECT_TIMEOUT_BOUNDS,
    placement,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu_baremetal import (
    hosts as baremetal,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.timeutil import (
    format_time,
    parse_duration,
    parse_time,
)

# JSON {"probedAt", "hosts": {host: {"seenAt", "unreachableSince",
# "instances": {exporter: {"phase", "reason", "message"}}}}}.
REPORT_KEY = operator_state.HOST_REPORT
# VirtualTargetClass annotation: comma-separated names of drained hosts.
DRAINED_HOSTS_ANNOTATION = constants.GROUP + "/drained-hosts"

DEFAULT_RECONNECT_TIMEOUT = 300.0
# The hosts are probed a few times within the reconnect timeout, so a lost
# host is replaced soon after the timeout; never more often than every
# PROBE_INTERVAL_MIN seconds (a probe is one SSH round per host).
PROBES_PER_RECONNECT_TIMEOUT = 3
PROBE_INTERVAL_MIN = 5.0
PROBE_INTERVAL_MAX = 60.0

REASON_HOST_UNREACHABLE = "HostUnreachable"
REASON_HOST_REMOVED = "HostRemoved"
# "uid": the Exporter UID the instance was made for (empty for instances made
# before it was recorded).
REPORTED_FIELDS = ("phase", "reason", "message", "uid")


def read_report(exporter_set):
    """The host report on the set, or an empty one (also for an unreadable one)."""
    text = operator_state.get(exporter_set, REPORT_KEY)
    try:
        report = json.loads(text) if text else {}
        parse_time(report["probedAt"])
        if not isinstance(report.get("hosts"), dict):
            raise ValueError("no hosts")
    except (ValueError, TypeError, KeyError):
        return {"probedAt": None, "hosts": {}}
    return report


def next_report(previous, results, now):
    """The report after one role run; ``results`` is the role's per-host result.

    A host that answered replaces its entry. A host that did not keeps what it
    reported last and the time it was first missed.
    """
    now_text = format_time(parse_time(now))
    hosts = {}
    for host, result in sorted((results or {}).items()):
        before = (previous.get("hosts") or {}).get(host) or {}
        if result.get("unreachable"):
            hosts[host] = {
                "seenAt": before.get("seenAt"),
                "unreachableSince": before.get("unreachableSince") or now_text,
                "instances": before.get("instances") or {},
            }
        else:
            hosts[host] = {
                "seenAt": now_text,
                "unreachableSince": None,
                "instances": {
                    name: {key: state.get(key) or "" for key in REPORTED_FIELDS}
                    for name, state in sorted((result.get("instances") or {}).items())
                },
            }
    return {"probedAt": now_text, "hosts": hosts}


def report_changed(previous, report):
    """Whether a host's reachability or instances changed; the times a host
    was last seen move on every probe and are not a change."""

    def essence(entry):
        return {key: value for key, value in (entry or {}).items() if key != "seenAt"}

    before = previous.get("hosts") or {}
    after = report.get("hosts") or {}
    return {h: essence(e) for h, e in before.items()} != {h: essence(e) for h, e in after.items()}


def encode_report(report):
    return json.dumps(report, sort_keys=True, separators=(",", ":"))


def drained_hosts(virtual_target_class):
    text = (((virtual_target_class or {}).get("metadata") or {}).get("annotations") or {}).get(
        DRAINED_HOSTS_ANNOTATION) or ""
    return sorted({name.strip() for name in text.split(",") if name.strip()})


def with_drained_host(virtual_target_class, host):
    """The class's drained-hosts annotation value with ``host`` added."""
    return ",".join(sorted({*drained_hosts(virtual_target_class), host}))


def reconnect_timeout(parameters):
    try:
        seconds = parse_duration((parameters or {}).get("reconnectTimeout", DEFAULT_RECONNECT_TIMEOUT))
    except ValueError:
        return DEFAULT_RECONNECT_TIMEOUT
    return min(max(seconds, RECONNECT_TIMEOUT_BOUNDS[0]), RECONNECT_TIMEOUT_BOUNDS[1])


def probe_interval(parameters):
    seconds = reconnect_timeout(parameters) / PROBES_PER_RECONNECT_TIMEOUT
    return min(max(seconds, PROBE_INTERVAL_MIN), PROBE_INTERVAL_MAX)


def _made_for(reported, exporter):
    """Whether a reported instance serves this Exporter, not an earlier one of its name."""
    uid = reported.get("uid")
    return not uid or uid == exporter["metadata"].get("uid")


class LabView:
    """One set's lab hosts as the last report and the Exporters show them."""

    def __init__(self, exporter_set, virtual_target_class, owned, placed_exporters, now,
                 parameters=None):
        # The set over its class, the hosts as the class allows them
        # (set_overrides): a set never adds or redirects a host.
        if parameters is None:
            parameters = set_overrides.resolve(virtual_target_class, exporter_set)["parameters"]
        self.parameters = parameters
        self.hosts = [h for h in self.parameters.get("hosts") or () if isinstance(h, dict)]
        self.host_names = {h.get("name") for h in self.hosts}
        self.report = read_report(exporter_set)
        self.drained = drained_hosts(virtual_target_class)
        self.owned = owned
        self.placed_exporters = placed_exporters
        self.now = parse_time(now)
        self.timeout = reconnect_timeout(self.parameters)
        self._instances = self._read_instances()

    # -- hosts -----------------------------------------------------------------
    def _host_entry(self, host):
        return (self.report.get("hosts") or {}).get(host)

    def unreachable(self):
        """Hosts whose last probe did not reach them, in parameters order."""
        return [h["name"] for h in self.hosts
                if (self._host_entry(h["name"]) or {}).get("unreachableSince")]

    def _unreachable_for(self, entry):
        since = entry.get("unreachableSince")
        if not since:
            return None
        try:
            return (self.now - parse_time(since)).total_seconds()
        except ValueError:
            return 0.0

    # -- inputs of the plan ------------------------------------------------------
    def _read_instances(self):
        instances = {}
        for exporter in self.owned:
            name = exporter["metadata"]["name"]
            host = baremetal.host_of(exporter)
            if host is None:
                continue
            if host not in self.host_names:
                instances[name] = {"phase": constants.INSTANCE_FAILED, "reason": REASON_HOST_REMOVED,
                                   "message": f"host {host} is no longer in parameters.hosts"}
                continue
            entry = self._host_entry(host)
            if entry is None:
                continue
            missing_for = self._unreachable_for(entry)
            if missing_for is not None:
                lost = missing_for >= self.timeout
                instances[name] = {
                    "phase": constants.INSTANCE_FAILED if lost else constants.INSTANCE_UNKNOWN,
                    "reason": REASON_HOST_UNREACHABLE,
                    "message": f"host {host} unreachable since {entry['unreachableSince']}"
                               + (f" (reconnectTimeout {self.timeout:g}s)" if lost else ""),
                }
                continue
            reported = (entry.get("instances") or {}).get(name)
            if reported and _made_for(reported, exporter):
                instances[name] = dict(reported)
        return instances

    def instances(self):
        return dict(self._instances)

    def _occupying(self):
        """Exporters that hold a slot: placed, and not about to be replaced."""
        failed = {name for name, state in self._instances.items()
                  if state.get("phase") == constants.INSTANCE_FAILED}
        return [e for e in self.placed_exporters if e["metadata"]["name"] not in failed]

    def _closed_hosts(self):
        return sorted({*self.unreachable(), *self.drained})

    def _undrained_hosts(self):
        return [h for h in self.hosts if h["name"] not in self.drained]

    def capacity(self):
        """The plan's ``capacity`` option: free slots on open hosts, naming them."""
        result = placement.capacity_for(self._undrained_hosts(), self._occupying(), self.unreachable())
        drained = sorted(set(self.drained) & self.host_names)
        if result["limit"] == 0 and drained:
            result["message"] += f"; drained hosts {', '.join(drained)}"
        return result

    def place(self, names):
        """{Exporter name: host} for new instances, on open hosts with the most free slots."""
        placed = placement.place_instances(self._undrained_hosts(), self._occupying(), len(names),
                                           self.unreachable(), names=list(names))
        return {p["exporter"]: p["host"] for p in placed["placements"]}

    # -- after the plan ------------------------------------------------------------
    def complete_plan(self, plan):
        """Hosts for the plan's new Exporters; replacement instead of reuse on drained hosts;
        a requeue for the next probe."""
        creates = plan.get("create") or []
        hosts = self.place([entry["name"] for entry in creates]) if creates else {}
        for entry in creates:
            if entry["name"] in hosts:
                entry.setdefault("labels", {})[constants.LABEL_HOST] = hosts[entry["name"]]
        drained = set(self.drained)
        host_by_name = {e["metadata"]["name"]: baremetal.host_of(e) for e in self.owned}
        leaving = [r for r in plan.get("recycle") or () if host_by_name.get(r["name"]) in drained]
        if leaving:
            plan["recycle"] = [r for r in plan["recycle"] if r not in leaving]
            plan["delete"] = sorted(
                [*(plan.get("delete") or []),
                 *({"name": r["name"], "reason": constants.DELETE_RECYCLE} for r in leaving)],
                key=lambda d: d["name"])
        waits = [w for w in (plan.get("requeue_after"), self.probe_wait()) if w is not None]
        plan["requeue_after"] = min(waits) if waits else None
        return plan

    # -- provisioning and probing ----------------------------------------------------
    def unprovisioned(self):
        """Exporters with a credential whose instance no host reported yet.

        The dormant Exporter has no instance. Exporters on hosts that do not answer or are drained wait; those
        without a host yet (made before placement at creation time) are placed
        by the provision entry point.
        """
        closed = set(self._closed_hosts())
        names = []
        for exporter in self.owned:
            name, _, _, enabled, _, terminating = read_exporter(exporter)
            dormant = constants.ANNOTATION_DORMANT in (exporter["metadata"].get("annotations") or {})
            if terminating or not enabled or dormant:
                continue
            if not ((exporter.get("status") or {}).get("credential") or {}).get("name"):
                continue
            host = baremetal.host_of(exporter)
            if host is not None and (host in closed or host not in self.host_names):
                continue
            entry = self._host_entry(host) if host else None
            reported = ((entry or {}).get("instances") or {}).get(name)
            if reported and _made_for(reported, exporter):
                continue
            names.append(name)
        return sorted(names)

    def probe_wait(self):
        """Seconds until the hosts are due for a probe; 0 when they are now; None without hosts."""
        if not self.hosts:
            return None
        probed = self.report.get("probedAt")
        if not probed:
            return 0.0
        age = (self.now - parse_time(probed)).total_seconds()
        return max(probe_interval(self.parameters) - age, 0.0)

    def probe_due(self):
        return self.probe_wait() == 0.0
