"""Kubernetes resource quantities ("4Gi", "500m", "1.5G", "1e3")."""

import re
from decimal import Decimal

try:
    from kubernetes.utils import parse_quantity as _kubernetes_parse_quantity
except ImportError:  # pragma: no cover - reported by the caller's module
    _kubernetes_parse_quantity = None

# The API server's grammar. The client library's parser does the arithmetic
# but also takes what the server refuses ("NaN", "1_000", " 1 "), so a value
# must match this first.
_QUANTITY = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")


def parse_quantity(value):
    """Exact value of a quantity as a Decimal; ints and floats pass through.

    Raises ValueError for anything the API server would reject.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(str(value))
    if not isinstance(value, str) or not _QUANTITY.match(value.strip()):
        raise ValueError(f"not a quantity: {value!r}")
    if _kubernetes_parse_quantity is None:
        raise ValueError("the kubernetes Python client is required to read quantities")
    return _kubernetes_parse_quantity(value.strip())


def is_quantity(value):
    try:
        parse_quantity(value)
    except ValueError:
        return False
    return True


def quantity_to_bytes(value):
    """Whole bytes (rounded up) of a memory or storage quantity."""
    amount = parse_quantity(value)
    return int(amount.to_integral_value(rounding="ROUND_CEILING"))
