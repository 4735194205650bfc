"""metav1.Condition bookkeeping: lastTransitionTime only moves when status flips."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

PLANNED = "Planned"
AVAILABLE = "Available"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
ORDER = (PLANNED, AVAILABLE, PROGRESSING, DEGRADED)


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        merged = {**self._old, **self._new}
        return [merged[t] for t in ORDER if t in merged] + [c for t, c in merged.items() if t not in ORDER]
