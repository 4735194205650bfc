"""Schedule floors (spec.autoscaling.schedule): which entry raises minReplicas at a given time."""

from __future__ import annotations

from dataclasses import dataclass

from ..api import cron
from ..api.v1alpha1 import AutoscalingSpec, schedule_cron
from .coldstart import rfc3339


@dataclass(frozen=True)
class ScheduleHold:
    """The schedule entry that sets the floor now (``schedule_hold``)."""

    floor: int      # its desiredReplicas, at most maxReplicas
    index: int      # its place in spec.autoscaling.schedule
    since: float    # epoch seconds of the start it holds since

    def status(self, spec: AutoscalingSpec) -> str:
        """status.autoscaling.scheduleFloor: which entry, since when, the floor."""
        entry = (spec.schedule or [])[self.index]
        clipped = f" (desiredReplicas {entry.floor}, at most maxReplicas)" if entry.floor > self.floor else ""
        return (f"schedule[{self.index}] ({entry.start} to {entry.end}, {entry.time_zone}) holds minReplicas at "
                f"{self.floor}{clipped} since {rfc3339(self.since)}")


def schedule_hold(spec: AutoscalingSpec, now: float) -> ScheduleHold | None:
    """The schedule entry whose floor holds at ``now``: of the entries between a start and the end that follows it
    (api/cron.py, KEDA's cron scaler's start/end/timezone/desiredReplicas), the largest floor (the first such entry
    on a tie), clipped to maxReplicas; None when no entry holds or the largest floor is 0."""
    best: ScheduleHold | None = None
    for i, entry in enumerate(spec.schedule or []):
        tz = cron.zone(entry.time_zone)
        since = cron.active_since(cron.parse(schedule_cron(entry.start)), cron.parse(schedule_cron(entry.end)), tz, now)
        floor = min(entry.floor, spec.max_replicas)
        if since is not None and floor > 0 and (best is None or floor > best.floor):
            best = ScheduleHold(floor, i, since)
    return best


def schedule_floor(spec: AutoscalingSpec, now: float) -> int:
    """The floor the schedule sets at ``now`` (``schedule_hold``), 0 without any."""
    hold = schedule_hold(spec, now)
    return 0 if hold is None else hold.floor
