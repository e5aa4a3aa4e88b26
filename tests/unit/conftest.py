"""The unit tests' own setup, for runs that read no conftest above tests/unit."""

import hypothesis_profile  # noqa: F401
