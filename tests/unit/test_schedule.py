"""Schedule floors (spec.autoscaling.schedule[]): the cron matcher (api/cron.py) and which entry holds the floor
(decision.schedule_hold), against what KEDA's cron scaler documents: 5-field cron start and end in an IANA time zone,
desiredReplicas between them."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from llmbackend.api import cron
from llmbackend.api.v1alpha1 import AutoscalingSpec
from llmbackend.autoscaling import decision as D


def at(text: str, tz: str = "UTC") -> float:
    """Epoch seconds of a wall time "YYYY-MM-DD HH:MM" in ``tz``."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=cron.zone(tz)).timestamp()


def utc(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M")


def spec(*entries, max_replicas: int = 10) -> AutoscalingSpec:
    return AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=max_replicas, schedule=list(entries))


def test_cron_fields_ranges_steps_lists_and_names():
    c = cron.parse("*/15 8-10,20 * JAN-MAR MON-FRI")
    assert c.minutes == (0, 15, 30, 45) and c.hours == (8, 9, 10, 20)
    assert c.months == frozenset({1, 2, 3}) and c.weekdays == frozenset({1, 2, 3, 4, 5})
    assert cron.parse("5/20 * * * 7").minutes == (5, 25, 45) and cron.parse("0 0 * * 7").weekdays == frozenset({0})


@pytest.mark.parametrize("bad", ["0 8 * *", "60 8 * * *", "0 24 * * *", "0 8 0 * *", "0 8 * 13 *", "0 8 * * 8",
                                 "*/0 * * * *", "5-1 * * * *", "0 8 * * FOO", "0 8 L * *", "@daily",
                                 "0 0 31 2 *"])
def test_cron_rejects_what_it_does_not_understand(bad):
    with pytest.raises(ValueError):
        cron.parse(bad)


def test_day_of_month_and_weekday_both_restricted_match_either():
    c = cron.parse("0 0 13 * FRI")  # the 13th, or any Friday (cron's rule, robfig's too)
    assert c.day_matches(dt.date(2026, 1, 13)) and c.day_matches(dt.date(2026, 1, 16))  # a Tuesday, a Friday
    assert not c.day_matches(dt.date(2026, 1, 14))
    weekdays_only = cron.parse("0 0 * * FRI")  # day of month "*": the weekday alone
    assert not weekdays_only.day_matches(dt.date(2026, 1, 13))


def test_a_floor_holds_from_its_start_minute_until_its_end_minute():
    s = spec({"start": "0 8 * * 1-5", "end": "0 18 * * 1-5", "timeZone": "Europe/Berlin", "desiredReplicas": 4})
    monday = "2026-01-05"
    assert D.schedule_floor(s, at(f"{monday} 07:59", "Europe/Berlin")) == 0
    hold = D.schedule_hold(s, at(f"{monday} 08:00", "Europe/Berlin"))
    assert hold is not None and hold.floor == 4 and hold.index == 0
    assert utc(hold.since) == "2026-01-05 07:00"  # 08:00 CET
    assert D.schedule_floor(s, at(f"{monday} 17:59", "Europe/Berlin")) == 4
    assert D.schedule_floor(s, at(f"{monday} 18:00", "Europe/Berlin")) == 0
    assert D.schedule_floor(s, at("2026-01-10 12:00", "Europe/Berlin")) == 0  # a Saturday: no start since Friday's end
    assert "schedule[0] (0 8 * * 1-5 to 0 18 * * 1-5, Europe/Berlin) holds minReplicas at 4" in hold.status(s)


def test_the_time_zone_and_daylight_saving_time_move_the_floor_in_utc():
    s = spec({"start": "0 8 * * *", "end": "0 9 * * *", "timeZone": "Europe/Berlin", "desiredReplicas": 3})
    # the day before Berlin springs forward (2026-03-29): 08:00 CET is 07:00 UTC; that day, 08:00 CEST is 06:00 UTC
    assert D.schedule_floor(s, at("2026-03-28 07:00")) == 3 and D.schedule_floor(s, at("2026-03-28 06:30")) == 0
    assert D.schedule_floor(s, at("2026-03-29 06:00")) == 3 and D.schedule_floor(s, at("2026-03-29 07:00")) == 0
    # the same entry in UTC does not move
    u = spec({"start": "0 8 * * *", "end": "0 9 * * *", "desiredReplicas": 3})
    assert D.schedule_floor(u, at("2026-03-29 08:30")) == 3 and D.schedule_floor(u, at("2026-03-29 06:30")) == 0


def test_a_wall_time_the_clock_skips_fires_at_the_jump_and_one_it_passes_twice_fires_once():
    skipped = cron.parse("30 2 * * *")
    berlin = cron.zone("Europe/Berlin")
    # 2026-03-29 02:00 CET -> 03:00 CEST (01:00 UTC): 02:30 never shows; it fires at the jump
    assert utc(cron.last_fire(skipped, berlin, at("2026-03-29 02:00"))) == "2026-03-29 01:00"
    # 2026-10-25 03:00 CEST -> 02:00 CET (01:00 UTC): 02:30 shows at 00:30 and 01:30 UTC; it fires the first time
    assert utc(cron.last_fire(skipped, berlin, at("2026-10-25 01:45"))) == "2026-10-25 00:30"


def test_an_end_before_the_start_wraps_midnight_and_the_older_daily_form_still_works():
    night = spec({"start": "0 22 * * *", "end": "0 6 * * *", "timeZone": "America/New_York", "desiredReplicas": 2})
    assert D.schedule_floor(night, at("2026-07-01 23:00", "America/New_York")) == 2
    assert D.schedule_floor(night, at("2026-07-02 05:59", "America/New_York")) == 2
    assert D.schedule_floor(night, at("2026-07-02 06:00", "America/New_York")) == 0
    older = spec({"start": "22:00", "end": "06:00", "minReplicas": 2})  # HH:MM UTC, daily: as before
    assert D.schedule_floor(older, at("2026-07-01 23:00")) == 2 and D.schedule_floor(older, at("2026-07-01 12:00")) == 0


def test_overlapping_entries_take_the_largest_and_the_floor_is_clipped_to_max_replicas():
    s = spec({"start": "0 8 * * *", "end": "0 18 * * *", "desiredReplicas": 3},
             {"start": "0 11 * * *", "end": "0 13 * * *", "desiredReplicas": 7},
             {"start": "0 12 * * *", "end": "0 14 * * *", "desiredReplicas": 50}, max_replicas=10)
    assert D.schedule_floor(s, at("2026-01-05 09:00")) == 3
    assert D.schedule_floor(s, at("2026-01-05 11:30")) == 7
    hold = D.schedule_hold(s, at("2026-01-05 12:30"))
    assert hold is not None and (hold.floor, hold.index) == (10, 2)
    assert "(desiredReplicas 50, at most maxReplicas)" in hold.status(s)
    assert D.schedule_floor(s, at("2026-01-05 13:30")) == 10 and D.schedule_floor(s, at("2026-01-05 17:00")) == 3


def test_the_schedule_floor_raises_the_decision_and_a_zero_floor_holds_nothing():
    s = spec({"start": "0 8 * * *", "end": "0 18 * * *", "desiredReplicas": 0})
    assert D.schedule_hold(s, at("2026-01-05 09:00")) is None
    s = spec({"start": "0 8 * * *", "end": "0 18 * * *", "desiredReplicas": 5})
    from llmbackend.autoscaling.ratio import RatioReading
    d = D.decide(D.ScalerState(), RatioReading(None, "NoSamples"), s, 1, at("2026-01-05 09:00"))
    assert d.desired_replicas == 5 and d.reason == D.METRICS_UNAVAILABLE


@pytest.mark.parametrize("entry", [
    {"start": "0 8 * * *", "end": "0 8 * * *", "desiredReplicas": 1},             # start == end (KEDA refuses it)
    {"start": "0 8 * * *", "end": "0 9 * * *"},                                    # no floor
    {"start": "0 8 * * *", "end": "0 9 * * *", "desiredReplicas": 1, "minReplicas": 1},
    {"start": "0 8 * * *", "end": "0 9 * * *", "desiredReplicas": 1, "timeZone": "Mars/Olympus"},
    {"start": "0 8 * * *", "end": "0 9 * * *", "desiredReplicas": 1, "timeZone": "../../etc/passwd"},
    {"start": "0 8 * * *", "end": "0 9 * * *", "desiredReplicas": 1, "timeZone": "/etc/localtime"},
    {"start": "0 8 * * *; rm", "end": "0 9 * * *", "desiredReplicas": 1},
])
def test_bad_entries_are_refused_with_what_is_wrong(entry):
    with pytest.raises(ValidationError):
        spec(entry)
