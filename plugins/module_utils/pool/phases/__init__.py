"""The phases of one scale plan (``pool/plan.py``'s ``make_plan`` runs them in order).

- ``model``: the typed ``Plan``, its steps, and the ``Draft`` the phases fill;
- ``survey``: what the pool alone says, kept while no object changes;
- ``failures``: which members failed, and the set's streak of failures;
- ``departures``: members that go or are reset (failures, ended leases, rollout);
- ``scale_down``: parked members re-enabled or deleted, idle ones disabled;
- ``creates``: how many new Exporters, under which ceilings, and their names;
- ``dormant``: the Exporter without a backend that keeps leases waiting;
- ``conditions``: the set's conditions and status, and the finished ``Plan``.

Every phase is pure: the clock is an argument, and the survey cache, when
there is one, belongs to the caller (``pool_index.SurveyCache``).
"""
