"""Hypothesis without its clocks: a deadline or a too-slow health check is a
timing assertion, and on a loaded machine (CI's beds beside the unit tests)
it fails tests whose property holds. Imported by tests/conftest.py and by
tests/unit/conftest.py, which the other ansible-core releases' runs
(``--confcutdir tests/unit``) load; it sits beside tests/conftest.py,
whose folder every run has on its path (a run of it alone too:
tests/harness/test_process_ownership.py)."""

from hypothesis import HealthCheck, settings

settings.register_profile("project", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("project")
