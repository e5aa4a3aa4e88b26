"""Kubernetes resource quantities ("4Gi", "500m", "1.5G", "1e3")."""

import re
from decimal import Decimal

# The API server's grammar: a value must match this before it is read (a
# bare ``Decimal`` would also take "NaN", "1_000" and " 1 ").
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
    return _amount(value.strip())


# A suffix's power of 1000, or of 1024 when it ends in "i".
_EXPONENTS = {"n": -3, "u": -2, "m": -1, "k": 1, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


def _amount(text):
    """The exact value of a quantity that matches ``_QUANTITY``."""
    if text.endswith("i"):
        number, base, suffix = text[:-2], 1024, text[-2]
    elif text[-1] in _EXPONENTS:
        number, base, suffix = text[:-1], 1000, text[-1]
    else:
        return Decimal(text)  # no suffix, or a decimal exponent (1e3)
    return Decimal(number) * (base ** Decimal(_EXPONENTS[suffix]))


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
