"""Kubernetes resource quantities ("100Ti", "500m", "1.5e3") as the kube-scheduler counts them (pure).

Semantics of k8s.io/apimachinery pkg/api/resource/quantity.go (ParseQuantity, Quantity.Value, Quantity.MilliValue)
at the pinned v0.36: a signed decimal number, then a binary-SI suffix (Ki..Ei), a decimal-SI one (n, u, m, "", k,
M, G, T, P, E) or a decimal exponent (e3, E-2). The scheduler keeps cpu in millicores (MilliValue) and every other
resource as a whole number (Value); both round up, never down (quantity.go ScaledValue rounds up).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)$")

CPU = "cpu"
# How large a quantity this module reads: 10^1000, far past any node's allocatable, yet small enough that every
# number it gives stays within Python's int-to-text limit (4,300 digits) and each parse stays cheap. The CRD admits
# no quantity past 64 characters or with an exponent (api/v1alpha1.py QUANTITY_MAX_LENGTH); a larger one (a node
# object written by hand, a backend stored before that rule) is not read (None), as a value beyond any node.
MAX_DIGITS = 1000


def parse(value: object) -> Fraction | None:
    """The exact value of a quantity; None when it is not one (the API server refuses those)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        return None
    number_text, suffix = match.group(1), match.group(2)
    exponent = 0
    if suffix[:1] in ("e", "E") and suffix not in _BINARY and len(suffix) > 1:
        if len(suffix) > 8:  # an exponent of 7 digits or more: past MAX_DIGITS either way
            return None
        exponent = int(suffix[1:])
    whole_digits = len(number_text.lstrip("+-").split(".")[0].lstrip("0"))
    if len(number_text) > MAX_DIGITS or abs(exponent) > MAX_DIGITS or whole_digits + exponent > MAX_DIGITS:
        return None
    number = Fraction(number_text)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix not in _DECIMAL:  # an exponent
        return number * Fraction(10) ** exponent
    return number * _DECIMAL[suffix]


def scheduler_units(resource: str, value: object) -> int | None:
    """The whole number the scheduler compares: millicores for cpu, the value rounded up for the rest."""
    parsed = parse(value)
    if parsed is None:
        return None
    return math.ceil(parsed * 1000) if resource == CPU else math.ceil(parsed)


def text(resource: str, units: int) -> str:
    """``units`` (scheduler units) as a person reads them: 224, 500m, 1000.25, 2Ti, 1.5Gi."""
    if units.bit_length() > 4 * MAX_DIGITS:  # beyond what parse reads: no int-to-text limit to run into
        return f"more than 10^{MAX_DIGITS}"
    if resource == CPU:
        whole, milli = divmod(units, 1000)
        if not milli:
            return str(whole)
        return f"{units}m" if not whole else f"{whole}.{milli:03d}".rstrip("0")
    if resource == "memory" or resource == "ephemeral-storage" or resource.startswith("hugepages-"):
        for suffix, size in reversed(_BINARY.items()):
            if units >= size:  # a float past 10^308 overflows: Decimal there
                return f"{units / size if units.bit_length() < 1000 else Decimal(units) / size:.4g}{suffix}"
    return str(units)


__all__ = ["CPU", "MAX_DIGITS", "parse", "scheduler_units", "text"]
