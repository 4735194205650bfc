"""metav1.Condition bookkeeping for one reconcile pass: lastTransitionTime only moves when status flips.

A pass sets each of the four types (api/conditions.py) for the current generation; to_list() writes
exactly those, so a type the operator no longer writes is dropped rather than carried at an old generation.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..api.conditions import AVAILABLE, DEGRADED, PLANNED, PROGRESSING, TYPES

__all__ = ["AVAILABLE", "DEGRADED", "PLANNED", "PROGRESSING", "TYPES", "Conditions", "now_rfc3339"]

NOT_EVALUATED = "NotEvaluated"  # a type this pass did not set (a bug: every path sets all four)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Conditions:
    def __init__(self, existing: list[dict[str, Any]] | None, generation: int | None):
        self._old = {c["type"]: c for c in (existing or []) if "type" in c}
        self._new: dict[str, dict[str, Any]] = {}
        self.generation = generation

    def set(self, type_: str, status: bool | str, reason: str, message: str = "") -> None:
        value = status if isinstance(status, str) else ("True" if status else "False")
        old = self._old.get(type_)
        transition = old["lastTransitionTime"] if old and old.get("status") == value and old.get("lastTransitionTime") else now_rfc3339()
        self._new[type_] = {
            "type": type_,
            "status": value,
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": transition,
            "observedGeneration": self.generation,
        }

    def is_set(self, type_: str) -> bool:
        """Set in this pass."""
        return type_ in self._new

    def get(self, type_: str) -> dict[str, Any] | None:
        return self._new.get(type_) or self._old.get(type_)

    def is_true(self, type_: str) -> bool:
        condition = self.get(type_)
        return bool(condition and condition.get("status") == "True")

    def changed(self) -> list[dict[str, Any]]:
        """Conditions whose status or reason differ from before (for events)."""
        out = []
        for type_, new in self._new.items():
            old = self._old.get(type_)
            if old is None or old.get("status") != new["status"] or old.get("reason") != new["reason"]:
                out.append(new)
        return out

    def to_list(self) -> list[dict[str, Any]]:
        """The four types, all for this generation, then any other type this pass set (ModelReady for URI sources);
        conditions of the old status that this pass did not write are dropped."""
        for type_ in TYPES:
            if type_ not in self._new:
                self.set(type_, "Unknown", NOT_EVALUATED, "not evaluated in this pass; the operator retries")
        return [self._new[t] for t in TYPES] + [c for t, c in self._new.items() if t not in TYPES]
