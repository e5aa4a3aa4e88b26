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
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

from kubernetes.client.rest import ApiException
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)


def _unreachable(action: str, exc: Exception) -> SimpleNamespace:
    log.warning("leader election lock unreachable", extra={"action": action, "error": str(exc)[:300]})
    # What the election reads of a failed get: no body (so not a 404), a reason.
    return SimpleNamespace(body=None, reason=f"{type(exc).__name__}: {exc}"[:300])


class ResilientLeaseLock(LeaseLock):
    def get(self, name, namespace):
        try:
            return super().get(name, namespace)
        except ApiException:
            raise
        except Exception as exc:
            return False, _unreachable("get", exc)

    def create(self, name, namespace, election_record):
        try:
            return super().create(name, namespace, election_record)
        except ApiException:
            raise
        except Exception as exc:
            _unreachable("create", exc)
            return False

    def update(self, name, namespace, updated_record):
        try:
            return super().update(name, namespace, updated_record)
        except ApiException:
            raise
        except Exception as exc:
            _unreachable("update", exc)
            return False
