"""Timestamps and Go-style durations as the Kubernetes API writes them, and
the one backoff every retry of the collection and the operator waits by."""

import re
from datetime import UTC, datetime

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_time(value):
    """Return an aware datetime for an RFC3339 string or a datetime.

    Naive datetimes are taken as UTC, the only zone the API server writes.
    """
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        moment = datetime.fromisoformat(value.strip())
    else:
        raise ValueError(f"not a timestamp: {value!r}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def format_time(moment):
    """RFC3339 in UTC with second precision, the form metav1.Time uses."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_duration(value):
    """Seconds in a Go duration string ("5m", "1h30m", "250ms", "0").

    Plain numbers are taken as seconds. Raises ValueError otherwise.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"negative duration: {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"not a duration: {value!r}")
    text = value.strip()
    sign = 1.0
    if text[:1] in "+-" and text:
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    position = 0
    total = 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if not text or position != len(text):
        raise ValueError(f"not a duration: {value!r}")
    return sign * total


# Beyond this many doublings every cap in use is long reached; it keeps
# 2**n a small int however many failures a key has piled up.
_MAX_DOUBLINGS = 62


def backoff_delay(failures, base, cap=None, jitter=None, floor=0.0):
    """Seconds to wait after ``failures`` failures in a row (1 for the first).

    Capped exponential: ``base * 2**(failures - 1)``, at most ``cap``. With
    ``jitter``, a draw in [0, 1] (``random.random()``), the wait is spread
    over [``floor`` * ceiling, ceiling]: ``floor`` 0 is full jitter, 0.5
    waits at least half the ceiling.
    """
    ceiling = base * 2 ** min(max(failures - 1, 0), _MAX_DOUBLINGS)
    if cap is not None:
        ceiling = min(cap, ceiling)
    if jitter is None:
        return ceiling
    return ceiling * (floor + (1.0 - floor) * jitter)
