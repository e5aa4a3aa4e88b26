"""Fixtures for tests that talk to the fake Corellium API.

Load with ``pytest_plugins = ["corellium_fake.pytest_plugin"]`` in a test module.
"""

import pytest

from .server import Delays, FakeCorellium


@pytest.fixture
def corellium_fake():
    """A running fake with short (50 ms) state transitions, fresh for each test."""
    with FakeCorellium(delays=Delays()) as fake:
        yield fake


@pytest.fixture
def default_project(corellium_fake) -> str:
    return corellium_fake.projects[0].id
