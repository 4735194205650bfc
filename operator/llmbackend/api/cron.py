"""Five-field cron expressions (minute hour day-of-month month day-of-week) in an IANA time zone, for the schedule
floors of spec.autoscaling.schedule[] (the fields KEDA's cron scaler takes: "Linux format cron").

Our own small matcher, not a dependency: the subset is what KEDA's parser accepts without descriptors (robfig/cron v3
with Minute | Hour | Dom | Month | Dow, pkg/scalers/cron_scaler.go): ``*``, numbers, ranges ``a-b``, steps ``*/n`` and
``a-b/n``, lists ``a,b``, month and weekday names (JAN, MON), weekday 7 as Sunday, and the usual day rule (when both
day-of-month and day-of-week are restricted, a day matches either). Not supported: ``?``, ``L``, ``W``, ``#``,
``@daily`` and the other descriptors.

Times are wall-clock times in the zone (``zoneinfo``; the ``tzdata`` package supplies the database where the system
has none). A wall time the clock skips (spring forward) fires when the clock jumps over it; one it passes twice (fall
back) fires the first time only.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_MONTHS = {n: i + 1 for i, n in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())}
_DAYS = {n: i for i, n in enumerate("SUN MON TUE WED THU FRI SAT".split())}
# (name, lowest, highest, names)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}), ("month", 1, 12, _MONTHS),
           ("day of week", 0, 7, _DAYS))
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # the most days of each month (29 February)
# A schedule that matches at least once every 4 years (29 February) is found looking this far back.
LOOKBACK_DAYS = 4 * 366 + 1


@dataclass(frozen=True)
class Cron:
    """A parsed expression: the values each field allows (day of week 0-6, Sunday 0)."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool       # day of month is "*"
    any_weekday: bool   # day of week is "*"

    def day_matches(self, day: dt.date) -> bool:
        if day.month not in self.months:
            return False
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow
        return dom or dow  # both restricted: either (cron's rule)


def _value(text: str, lo: int, hi: int, names: dict[str, int], field: str) -> int:
    v = names.get(text.upper()) if names else None
    if v is None:
        if not text.isdigit():
            raise ValueError(f"{field}: {text!r} is not a number" + (" or a name" if names else ""))
        v = int(text)
    if not lo <= v <= hi:
        raise ValueError(f"{field}: {v} is outside {lo}-{hi}")
    return v


def _field(text: str, lo: int, hi: int, names: dict[str, int], field: str) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"{field}: step {step_text!r} must be a number above 0")
            step = int(step_text)
        if body == "*":
            a, b = lo, hi
        elif "-" in body:
            first, _, last = body.partition("-")
            a, b = _value(first, lo, hi, names, field), _value(last, lo, hi, names, field)
            if a > b:
                raise ValueError(f"{field}: range {body!r} runs backwards")
        else:
            a = _value(body, lo, hi, names, field)
            b = hi if step_text else a  # "5/15": from 5 on, every 15
        values.update(range(a, b + 1, step))
    return values


@lru_cache(maxsize=256)
def parse(expression: str) -> Cron:
    """The expression's allowed values; ValueError (saying which field and why) when it is not five valid fields."""
    parts = expression.split()
    if len(parts) != 5:
        raise ValueError(f"cron expression {expression!r}: need 5 fields (minute hour day-of-month month "
                         f"day-of-week), got {len(parts)}")
    sets = []
    for text, (field, lo, hi, names) in zip(parts, _FIELDS):
        try:
            sets.append(_field(text, lo, hi, names, field))
        except ValueError as exc:
            raise ValueError(f"cron expression {expression!r}: {exc}") from None
    minutes, hours, days, months, weekdays = sets
    if parts[4] == "*" and not any(d <= _MONTH_DAYS[m - 1] for m in months for d in days):
        raise ValueError(f"cron expression {expression!r} matches no day (no month listed has such a day)")
    return Cron(tuple(sorted(minutes)), tuple(sorted(hours)), frozenset(days), frozenset(months),
                frozenset(d % 7 for d in weekdays), parts[2] == "*", parts[4] == "*")


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; ValueError when the database has none of that name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"time zone {name!r} is not an IANA time zone name (e.g. Europe/Berlin, UTC)") from exc


def _instant(day: dt.date, hour: int, minute: int, tz: ZoneInfo) -> float:
    """Epoch seconds at which the wall clock in ``tz`` first shows ``day`` ``hour``:``minute`` (or, when the clock
    skips that time, jumps past it)."""
    wall = dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz)  # fold 0: the first of two
    t = wall.timestamp()
    back = dt.datetime.fromtimestamp(t, tz)
    if (back.hour, back.minute) == (hour, minute) and back.date() == day:
        return t
    # skipped (spring forward): the jump lies between the two readings of the wall time; find its minute
    earlier = wall.replace(fold=1).timestamp()
    lo, hi = min(t, earlier), max(t, earlier)
    while hi - lo > 60:
        mid = (lo + hi) / 2
        shown = dt.datetime.fromtimestamp(mid, tz).replace(tzinfo=None)
        if shown >= wall.replace(tzinfo=None):
            hi = mid
        else:
            lo = mid
    return float(int(hi // 60) * 60)


def last_fire(cron: Cron, tz: ZoneInfo, now: float) -> float | None:
    """Epoch seconds of the latest time at or before ``now`` the expression matches in ``tz``; None within
    LOOKBACK_DAYS."""
    today = dt.datetime.fromtimestamp(now, tz).date()
    for back in range(LOOKBACK_DAYS):
        day = today - dt.timedelta(days=back)
        if not cron.day_matches(day):
            continue
        for hour in reversed(cron.hours):
            for minute in reversed(cron.minutes):
                t = _instant(day, hour, minute, tz)
                if t <= now:
                    return t
    return None


def active_since(start: Cron, end: Cron, tz: ZoneInfo, now: float) -> float | None:
    """When the range from ``start`` to ``end`` holds at ``now``: since the last start that no end has followed
    (epoch seconds), else None. The range includes its start minute and excludes its end minute."""
    began = last_fire(start, tz, now)
    if began is None:
        return None
    ended = last_fire(end, tz, now)
    return began if ended is None or ended < began else None
