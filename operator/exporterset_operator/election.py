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
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from types import SimpleNamespace

from kubernetes.client.rest import ApiException
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)


def _unreachable(action: str, exc: Exception) -> SimpleNamespace:
    log.warning("leader election lock unreachable", extra={"action": action, "error": str(exc)[:300]})
    # What the election reads of a failed get: no body (so not a 404), a reason.
    return SimpleNamespace(body=None, reason=f"{type(exc).__name__}: {exc}"[:300])


class ResilientLeaseLock(LeaseLock):
    def __init__(self, name, namespace, identity, on_taken=None):
        super().__init__(name, namespace, identity)
        self._released = False
        # Whether our last write of the Lease named us its holder.
        self._held = False
        # Called once, when this holder reads the Lease held by another.
        self.on_taken = on_taken
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
        if self._held and holder and holder != self.identity:
            self._held = False
            log.error("the leader election Lease is held by another", extra={
                "lease": f"{self.namespace}/{self.name}", "holder": holder})
            if self.on_taken is not None:
                self.on_taken()
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
