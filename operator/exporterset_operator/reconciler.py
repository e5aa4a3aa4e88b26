"""The operator's reconciler: one per process, dispatching each work-queue
key by its type (keys.py) to the reconciler of its kind.

- ``SetKey``: the ExporterSet reconciler (set_reconciler.py), the pool loop
  and, on the backend lane, the body of the set's backend runs;
- ``ClassKey``: the VirtualTargetClass reconciler (class_reconciler.py);
- ``PolicyKey``: the ExporterSetPolicy reconciler (policy_reconciler.py).

Each returns a ``Result`` or raises as results.py says; what a set's own
writes did is waited for through expectations.py.
"""

from __future__ import annotations

from .class_reconciler import ClassReconciler
from .expectations import EXPECTATION_TTL, Expectation, Expectations
from .keys import ClassKey, PolicyKey, SetKey, typed
from .policy_reconciler import PolicyReconciler
from .results import ReconcileError, RequeueAfter, Result, TerminalError
from .set_reconciler import BATCH_WINDOW, FINALIZER, OBSERVED_KINDS, SetReconciler, utcnow

__all__ = [
    "BATCH_WINDOW", "EXPECTATION_TTL", "FINALIZER", "OBSERVED_KINDS",
    "Expectation", "Expectations", "ReconcileError", "Reconciler", "RequeueAfter", "Result",
    "TerminalError", "utcnow",
]


class Reconciler(SetReconciler):
    """The set reconciler, with the class and policy reconcilers beside it
    on the same caches, client and provisioners."""

    def __init__(self, caches, api_client, *args, **kwargs):
        super().__init__(caches, api_client, *args, **kwargs)
        now = lambda: self.clock()  # noqa: E731 - follows a clock set later
        self.classes = ClassReconciler(caches, api_client, self.provisioners, now, self.permissions)
        self.policies = PolicyReconciler(caches, api_client, self.provisioners, now, self.permissions)

    def reconcile(self, key) -> Result:
        try:
            key = typed(key)
        except (TypeError, ValueError) as exc:
            raise TerminalError(f"work-queue key {key!r}: {exc}", path="unknown") from exc
        if isinstance(key, ClassKey):
            return self.classes.reconcile(key)
        if isinstance(key, PolicyKey):
            return self.policies.reconcile(key)
        assert isinstance(key, SetKey)
        return self.reconcile_set(key)

    def reconcile_class(self, key) -> Result:
        return self.classes.reconcile(typed(key))

    def reconcile_policy(self, key) -> Result:
        return self.policies.reconcile(typed(key))
