"""Kubernetes resource quantities ("4Gi", "500m", "1.5G", "1e3")."""

import re
from decimal import Decimal, InvalidOperation

_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
_SUFFIX_FACTOR = {
    None: Decimal(1),
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


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
    if not isinstance(value, str):
        raise ValueError(f"not a quantity: {value!r}")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    suffix = match.group("suffix")
    try:
        number = Decimal(match.group("number"))
    except InvalidOperation as error:
        raise ValueError(f"not a quantity: {value!r}") from error
    if suffix and suffix[0] in "eE":
        return number.scaleb(int(suffix[1:]))
    return number * _SUFFIX_FACTOR[suffix]


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
