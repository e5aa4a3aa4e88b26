"""A fake Corellium REST API over HTTPS on loopback, for tests and local runs."""

from .server import DEFAULT_TOKEN, Delays, FakeCorellium, Project, RecordedRequest

__all__ = ["DEFAULT_TOKEN", "Delays", "FakeCorellium", "Project", "RecordedRequest"]
