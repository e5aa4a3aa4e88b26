"""The Lease lock of the leader election, made to survive an unreachable API
server.

The kubernetes client's ``LeaseLock`` turns only ``ApiException`` into a
failed attempt; a refused or reset connection raises out of
``LeaderElection.run()``. Before leading, that ends the election thread, so
the replica never competes again; while leading, it ends the renew loop
without ``onstopped_leading``, so the process goes on reconciling after its
Lease has expired and another replica leads. Here any error of a lock call
is a failed attempt, which the election retries every ``retry_period`` and,
while leading, gives up on after ``renew_deadline`` as it should.

A leader that reads its Lease held by another identity has lost it
(``on_taken``, at once): the election would go on trying to renew until
``renew_deadline`` had passed, reconciling and starting backend runs
meanwhile beside the new leader.

On shutdown the leader releases its Lease (``release``): the holder is
cleared, so a standby takes over at its next attempt instead of waiting for
the Lease to expire. Once released the lock neither renews nor re-acquires.

One Lease per provisioner, ``exporter-set-controller-<provisioner>`` in the
namespace (``lease_name``): the one upstream's exporter-set controller holds,
so ours and upstream's (or two of ours) never both serve a provisioner
there. A standby that reads it held by another (``on_standby``) says so
(``StandbyNotices``) and waits; it does not exit. It waits as long as the
holder's Lease says (``Config``), as client-go's election does: upstream's
controller, holding 15 s Leases, is never taken over sooner.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from types import SimpleNamespace

from kubernetes.client.rest import ApiException
from kubernetes.leaderelection import electionconfig
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)


def _unreachable(action: str, exc: Exception) -> SimpleNamespace:
    log.warning("leader election lock unreachable", extra={"action": action, "error": str(exc)[:300]})
    # What the election reads of a failed get: no body (so not a 404), a reason.
    return SimpleNamespace(body=None, reason=f"{type(exc).__name__}: {exc}"[:300])


LEASE_PREFIX = "exporter-set-controller-"
STANDBY_REASON = "ControllerStandby"


def lease_name(provisioner: str) -> str:
    """The leader election Lease of ``provisioner``: upstream's controller's name for it."""
    return LEASE_PREFIX + provisioner


def standby_message(provisioner: str, lease: str, holder: str) -> str:
    return (f"not acting on this set: {holder} holds the Lease {lease} and serves {provisioner} "
            "in this namespace; this controller stands by until it is free")


class StandbyNotices:
    """What a standby of one Lease says: a log line each time the holder it
    reads changes, and one Event per set of the provisioner and holder.

    ``sets`` returns the sets of the provisioner (the informer cache, which
    may still be filling: sets seen later are told at a later read);
    ``emit(set, message)`` writes the Event. Neither may stop the election:
    an error is logged (once per set and holder) and the set is told again
    at the next read.
    """

    def __init__(self, provisioner, lease, sets, emit):
        self.provisioner = provisioner
        self.lease = lease
        self.sets = sets
        self.emit = emit
        self.holder = None
        self.told = set()
        # Failed at least once: logged once, tried again at each read.
        self.failed = set()

    def __call__(self, holder: str) -> None:
        if holder != self.holder:
            self.holder = holder
            log.warning("standing by: another holder serves the provisioner", extra={
                "lease": self.lease, "holder": holder, "provisioner": self.provisioner})
        message = standby_message(self.provisioner, self.lease, holder)
        for exporter_set in self.sets():
            key = (exporter_set["metadata"].get("uid"), holder)
            if key in self.told:
                continue
            try:
                self.emit(exporter_set, message)
            except Exception as exc:  # noqa: BLE001  told again at the next read
                if key not in self.failed:
                    self.failed.add(key)
                    log.warning("cannot record the standby Event", extra={
                        "set": exporter_set["metadata"].get("name"), "error": str(exc)[:300]})
                continue
            self.told.add(key)


class Config(electionconfig.Config):
    """The election's configuration; while another holds the Lease, its
    lease duration is the longer of ours and the one the holder wrote."""

    @property
    def lease_duration(self):
        return max(self._lease_duration, getattr(self.lock, "holder_duration", None) or 0)

    @lease_duration.setter
    def lease_duration(self, value):
        self._lease_duration = value


class ResilientLeaseLock(LeaseLock):
    def __init__(self, name, namespace, identity, on_taken=None, on_standby=None):
        super().__init__(name, namespace, identity)
        self._released = False
        # Whether our last write of the Lease named us its holder.
        self._held = False
        # Called once, when this holder reads the Lease held by another.
        self.on_taken = on_taken
        # Called with the holder at each read of the Lease held by another
        # while this lock has not held it.
        self.on_standby = on_standby
        self.holder_duration = None
        # The election thread's create/update and release() never interleave.
        self._mutex = threading.Lock()

    def get(self, name, namespace):
        try:
            found, record = super().get(name, namespace)
        except ApiException:
            raise
        except Exception as exc:
            return False, _unreachable("get", exc)
        holder = getattr(record, "holder_identity", None) if found else None
        # The lease duration another holder wrote (Config), whole seconds.
        self.holder_duration = None
        if holder and holder != self.identity:
            try:
                self.holder_duration = int(record.lease_duration)
            except (TypeError, ValueError):
                pass
        if self._held and holder and holder != self.identity:
            self._held = False
            log.error("the leader election Lease is held by another", extra={
                "lease": f"{self.namespace}/{self.name}", "holder": holder})
            if self.on_taken is not None:
                self.on_taken()
        elif not self._held and holder and holder != self.identity and self.on_standby is not None:
            self.on_standby(holder)
        return found, record

    def create(self, name, namespace, election_record):
        return self._write("create", super().create, name, namespace, election_record)

    def update(self, name, namespace, updated_record):
        return self._write("update", super().update, name, namespace, updated_record)

    def _write(self, action, write, name, namespace, record):
        """A create or update of the Lease: none once released, and any error
        but an ApiException is a failed attempt."""
        with self._mutex:
            if self._released:
                return False
            try:
                written = write(name, namespace, record)
                if written:
                    self._held = record.holder_identity == self.identity
                return written
            except ApiException:
                raise
            except Exception as exc:
                _unreachable(action, exc)
                return False

    def release(self) -> bool:
        """Give the Lease up if this process holds it: clear the holder (with
        the resourceVersion just read, so a Lease another replica took since
        is left alone) and stop renewing. True when it was released."""
        with self._mutex:
            self._released = True
            try:
                lease = self.api_instance.read_namespaced_lease(self.name, self.namespace)
                if lease.spec is None or lease.spec.holder_identity != self.identity:
                    return False
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                lease.spec.renew_time = datetime.now(UTC)
                self.api_instance.replace_namespaced_lease(self.name, self.namespace, lease)
            except Exception as exc:  # the Lease then expires as it would have
                log.warning("could not release the leader election Lease",
                            extra={"lease": f"{self.namespace}/{self.name}", "error": str(exc)[:300]})
                return False
            log.info("released the leader election Lease", extra={"lease": f"{self.namespace}/{self.name}"})
            return True
