"""Kubernetes resource quantities ("100Ti", "500m", "1.5e3") as the kube-scheduler counts them (pure).

Semantics of k8s.io/apimachinery pkg/api/resource/quantity.go (ParseQuantity, Quantity.Value, Quantity.MilliValue)
at the pinned v0.36: a signed decimal number, then a binary-SI suffix (Ki..Ei), a decimal-SI one (n, u, m, "", k,
M, G, T, P, E) or a decimal exponent (e3, E-2). The scheduler keeps cpu in millicores (MilliValue) and every other
resource as a whole number (Value); both round up, never down (quantity.go ScaledValue rounds up).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)$")

CPU = "cpu"


def parse(value: object) -> Fraction | None:
    """The exact value of a quantity; None when it is not one (the API server refuses those)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        return None
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number * Fraction(10) ** int(suffix[1:])
    return number * _DECIMAL[suffix]


def scheduler_units(resource: str, value: object) -> int | None:
    """The whole number the scheduler compares: millicores for cpu, the value rounded up for the rest."""
    parsed = parse(value)
    if parsed is None:
        return None
    return math.ceil(parsed * 1000) if resource == CPU else math.ceil(parsed)


def text(resource: str, units: int) -> str:
    """``units`` (scheduler units) as a person reads them: 224, 500m, 1000.25, 2Ti, 1.5Gi."""
    if resource == CPU:
        whole, milli = divmod(units, 1000)
        if not milli:
            return str(whole)
        return f"{units}m" if not whole else f"{whole}.{milli:03d}".rstrip("0")
    if resource == "memory" or resource == "ephemeral-storage" or resource.startswith("hugepages-"):
        for suffix, size in reversed(_BINARY.items()):
            if units >= size:
                return f"{units / size:.4g}{suffix}"
    return str(units)


__all__ = ["CPU", "parse", "scheduler_units", "text"]
