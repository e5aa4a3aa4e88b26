"""One controller per provisioner and namespace (operator/exporterset_operator/election.py):
our operators take part in the Lease upstream's exporter-set controller
holds, ``exporter-set-controller-<provisioner>`` in the namespace. While
another holds it, upstream's (a Lease renewed the way controller-runtime
renews it) or ours, a standby acts on nothing, names the holder in its log
and in an Event on the set, waits as long as the holder's Lease says, and
does not exit."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime

from jumpstarter_standin import wait_for
from kubernetes import client
from operator_process import OperatorProcess
from pool_helpers import SET_LABEL, make_class, make_set

LEASE = "exporter-set-controller-qemu.jumpstarter.dev"
# Ours is told 4 s; the Lease of the other holder says 6 s, which ours waits.
ELECTION = ("--leader-elect", "--leader-election-lease-duration", "4s", "--leader-election-renew-deadline", "3s",
            "--leader-election-retry-period", "1s")
HOLDER_SECONDS = 6


class UpstreamHolder:
    """The Lease as controller-runtime's leader election holds it: created
    with holderIdentity ``<hostname>_<uuid>``, acquireTime, renewTime,
    leaseDurationSeconds and leaseTransitions, its renewTime updated every
    retry period until ``stop``."""

    def __init__(self, coordination, namespace):
        self.coordination, self.namespace = coordination, namespace
        self.identity = f"jumpstarter-exporterset-qemu-7c9d4b5f6-x2x8q_{uuid.uuid4()}"
        now = datetime.now(UTC)
        coordination.create_namespaced_lease(namespace, client.V1Lease(
            metadata=client.V1ObjectMeta(name=LEASE),
            spec=client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=HOLDER_SECONDS,
                                    acquire_time=now, renew_time=now, lease_transitions=0)))
        self.renewed = time.monotonic()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._renew, daemon=True)
        self.thread.start()

    def _renew(self):
        while not self.stopped.wait(1):
            lease = self.coordination.read_namespaced_lease(LEASE, self.namespace)
            lease.spec.renew_time = datetime.now(UTC)
            self.coordination.replace_namespaced_lease(LEASE, self.namespace, lease)
            self.renewed = time.monotonic()

    def stop(self):
        self.stopped.set()
        self.thread.join()


def standing_by(proc, holder):
    """Whether ``proc`` logged that ``holder`` serves the provisioner."""
    for line in proc.log_path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg", "").startswith("standing by") and entry.get("holder") == holder:
            return entry
    return None


def standby_event(core, namespace, holder):
    return next((event for event in core.list_namespaced_event(namespace).items
                 if event.reason == "ControllerStandby" and event.involved_object.name == "pool"
                 and holder in event.message), None)


def test_a_standby_of_the_provisioners_lease_names_its_holder_acts_on_nothing_and_takes_over_once_free(
        testbed, api, namespace, standin, tmp_path):
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    coordination = client.CoordinationV1Api(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    upstream = UpstreamHolder(coordination, namespace)
    operators = [OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, *ELECTION).start() for _ in range(2)]
    try:
        # Ours against upstream's: both stand by, say who serves, make nothing.
        for proc in operators:
            entry = wait_for(lambda proc=proc: standing_by(proc, upstream.identity), timeout=60,
                             message="the standby names upstream's controller")
            assert entry["lease"] == LEASE and entry["provisioner"] == "qemu.jumpstarter.dev"
        event = wait_for(lambda: standby_event(core, namespace, upstream.identity), message="the standby Event")
        assert event.type == "Normal" and "qemu.jumpstarter.dev" in event.message and LEASE in event.message
        assert not any(proc.leads() for proc in operators)
        assert all(proc.metric("jumpstarter_exporterset_reconciles_total") == 0 for proc in operators)
        assert standin.exporters() == []

        # Upstream's stops renewing: one of ours takes over, no sooner than
        # the holder's Lease said, and makes the set's warm buffer.
        upstream.stop()
        leader = wait_for(lambda: next((p for p in operators if p.leads()), None), timeout=60, message="a leader")
        waited = time.monotonic() - upstream.renewed
        print(f"took over {waited:.1f}s after the last renewal (holder's Lease {HOLDER_SECONDS}s, ours 4s)")
        assert waited >= HOLDER_SECONDS
        wait_for(lambda: [e for e in standin.exporters() if e["metadata"].get("labels", {}).get(SET_LABEL) == "pool"],
                 timeout=60, message="the leader makes the set's Exporter")

        # Ours against ours: the other names our leader and keeps standing by.
        standby = next(p for p in operators if p is not leader)
        holder = coordination.read_namespaced_lease(LEASE, namespace).spec.holder_identity
        assert holder.endswith(f"_{leader.proc.pid}")
        wait_for(lambda: standing_by(standby, holder), message="the standby names our leader")
        wait_for(lambda: standby_event(core, namespace, holder), message="the standby Event naming our leader")
        assert standby.proc.poll() is None and not standby.leads()
        assert standby.metric("jumpstarter_exporterset_reconciles_total") == 0
    finally:
        upstream.stop()
        for proc in operators:
            proc.stop()
