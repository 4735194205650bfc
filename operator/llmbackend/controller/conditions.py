"""metav1.Condition bookkeeping for one reconcile pass: lastTransitionTime only moves when status flips.

A pass sets each of the four types (api/conditions.py) for the current generation; to_list() writes
exactly those, so a type the operator no longer writes is dropped rather than carried at an old generation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from ..api import conditions as cond
from ..api.conditions import AVAILABLE, DEGRADED, PLANNED, PROGRESSING, TYPES

__all__ = ["AVAILABLE", "DEGRADED", "PLANNED", "PROGRESSING", "TYPES", "Conditions", "Summary", "event_type",
           "now_rfc3339", "parse_time", "seconds_left", "summarize"]

NOT_EVALUATED = "NotEvaluated"  # a type this pass did not set (a bug: every path sets all four)


def now_rfc3339(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def one_line(message: str) -> str:
    """A condition message as `kubectl get`/`describe` and Argo CD show it best: one line, no doubled or empty
    punctuation where clauses were joined ("x.; y" -> "x; y")."""
    text = " ".join(message.split())
    text = re.sub(r"[.;,:]\s*;", ";", text)
    text = re.sub(r";\s*\.", ".", text)
    text = re.sub(r"\s+([;,.])(\s|$)", r"\1\2", text)
    return text.strip().rstrip(";,").strip()


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 timestamp of the API server (None when absent or unreadable)."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


# ---- progress or failure: the one rule (api/conditions.py's docstring; health.lua reads status the same way) ----


def seconds_left(since: str | None, now: datetime, deadline_s: int) -> float:
    """Seconds a wait that began at `since` may still last before it counts as stuck (<= 0: past the deadline;
    an unknown start counts from now)."""
    start = parse_time(since) or now
    return deadline_s - (now - start).total_seconds()


def deadline_at(since: str | None, deadline_s: int) -> str:
    """When a wait that began at `since` (unknown: now) passes its deadline, as an RFC 3339 timestamp."""
    start = parse_time(since) or datetime.now(UTC)
    return now_rfc3339(start + timedelta(seconds=deadline_s))


@dataclass(frozen=True)
class Summary:
    """status.phase and status.reason: one word for `kubectl get` and the cause behind it."""

    phase: Literal["Ready", "Progressing", "Degraded", "ScaledToZero"]
    reason: str
    message: str


def summarize(conditions: list[dict[str, Any]]) -> Summary:
    """The state the conditions of one pass add up to, in health.lua's order: a failure wins; Planned=False
    waiting on work in flight (Progressing=True, Degraded=False) is Progressing; then a rollout in flight;
    then Available."""
    by_type = {c["type"]: c for c in conditions}

    def status(type_: str) -> str | None:
        return (by_type.get(type_) or {}).get("status")

    def of(phase: Literal["Ready", "Progressing", "Degraded", "ScaledToZero"], type_: str) -> Summary:
        c = by_type.get(type_) or {}
        return Summary(phase, c.get("reason") or phase, c.get("message") or "")

    if status(DEGRADED) == "True":
        return of("Degraded", DEGRADED)
    if status(PLANNED) == "False":
        if status(PROGRESSING) == "True" and status(DEGRADED) == "False":
            return of("Progressing", PROGRESSING)
        return of("Degraded", PLANNED)
    if status(PROGRESSING) == "True":
        return of("Progressing", PROGRESSING)
    if status(AVAILABLE) == "True":
        reason = (by_type.get(AVAILABLE) or {}).get("reason")
        return of("ScaledToZero" if reason in (cond.SCALED_TO_ZERO, cond.ZERO_REPLICAS) else "Ready", AVAILABLE)
    if status(AVAILABLE) == "False":
        return of("Degraded", AVAILABLE)
    return of("Progressing", AVAILABLE)


def event_type(condition: dict[str, Any], degraded: bool) -> str:
    """Warning for a failure that needs a person (Degraded=True, or a condition turned False while the pass is
    Degraded); Normal for everything else, waiting on work in flight included."""
    if condition["type"] == DEGRADED:
        return "Warning" if condition["status"] == "True" else "Normal"
    return "Warning" if degraded and condition["status"] == "False" and condition["type"] != AVAILABLE else "Normal"


class Conditions:
    def __init__(self, existing: list[dict[str, Any]] | None, generation: int | None):
        self._old = {c["type"]: c for c in (existing or []) if "type" in c}
        self._new: dict[str, dict[str, Any]] = {}
        self.generation = generation

    def set(self, type_: str, status: bool | str, reason: str, message: str = "") -> None:
        value = status if isinstance(status, str) else ("True" if status else "False")
        message = one_line(message)
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
