"""The fluent API builds the same values as the text forms."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_htask.engine import (
    CronSchedule,
    IntervalSchedule,
    InvalidSchedule,
    OnceSchedule,
    every,
    once,
    parse_schedule,
)

T0 = datetime(2026, 5, 4, 10, 17, 23, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(
    ("built", "text"),
    [
        (every(2).seconds, "@every 2s immediately"),
        (every().second, "@every 1s immediately"),
        (every(5).minutes, "@every 5m immediately"),
        (every(5).minutes.not_immediately(), "@every 5m"),
        (every().hour, "@every 1h immediately"),
        (every(3).hours, "@every 3h immediately"),
        (every().day, "@every 1d immediately"),
        (every(2).weeks, "@every 14d immediately"),
        (every().day.at("10:30"), "30 10 * * *"),
        (every().day.at("7:05"), "5 7 * * *"),
        (every().day.at("10:30").in_tz("Asia/Tokyo"), "CRON_TZ=Asia/Tokyo 30 10 * * *"),
        (every().monday.at("08:30:15"), "15 30 8 * * MON"),
        (every().sunday, "0 0 * * SUN"),
        (every().hour.at(":30"), "30 * * * *"),
        (every(6).hours.at(":05:10"), "10 5 */6 * * *"),
        (every(15).minutes.at(":20"), "20 */15 * * * *"),
    ],
)
def test_builders_match_text(built: object, text: str) -> None:
    assert str(built) == text
    assert parse_schedule(text) == built.schedule  # type: ignore[attr-defined]
    assert parse_schedule(str(built)) == built.schedule  # type: ignore[attr-defined]


def test_builders_are_schedules() -> None:
    assert every().day.at("10:30").next_after(T0) == datetime(2026, 5, 4, 10, 30, tzinfo=UTC)
    assert every().monday.at("08:30:15").next_after(T0) == datetime(
        2026, 5, 11, 8, 30, 15, tzinfo=UTC
    )
    assert every(2).seconds.next_after(T0) == T0 + timedelta(seconds=2)
    tokyo = every().day.at("10:30").in_tz("Asia/Tokyo").schedule
    assert isinstance(tokyo, CronSchedule)
    assert tokyo.next_after(T0) == datetime(2026, 5, 5, 1, 30, tzinfo=UTC)
    assert isinstance(every(2).weeks.schedule, IntervalSchedule)
    assert every(2).weeks.schedule.seconds == 14 * 86400  # type: ignore[union-attr]


def test_from_until_and_not_immediately() -> None:
    start = datetime(2026, 6, 1, tzinfo=UTC)
    built = every(2).seconds.from_(start).until(start + timedelta(seconds=5))
    runs = []
    when = built.next_after(T0)
    while when is not None:
        runs.append((when - start).total_seconds())
        when = built.next_after(when)
    assert runs == [0, 2, 4]
    later = every(2).seconds.from_(start).not_immediately()
    assert later.next_after(T0) == start + timedelta(seconds=2)
    assert parse_schedule(str(built)) == built.schedule
    daily = every().day.at("10:30").from_(start)
    assert daily.next_after(T0) == datetime(2026, 6, 1, 10, 30, tzinfo=UTC)
    assert parse_schedule(str(daily)) == daily.schedule


def test_builders_are_immutable() -> None:
    base = every(5)
    minutes = base.minutes
    assert base.unit is None
    assert minutes.not_immediately() != minutes


def test_once() -> None:
    at = datetime(2027, 1, 1, 9, tzinfo=UTC)
    assert once(at) == OnceSchedule(at)
    assert once(at).next_after(T0) == at
    assert once(datetime(2027, 1, 1, 9), tz="Asia/Tokyo").next_after(T0) == datetime(
        2027, 1, 1, 0, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: every(0), "at least 1"),
        (lambda: every(-3), "at least 1"),
        (lambda: every(1.5), "whole number"),  # type: ignore[arg-type]
        (lambda: every(True), "whole number"),
        (lambda: every(2).second, "write every(2).seconds"),
        (lambda: every(2).monday, "every(2).monday is not supported"),
        (lambda: every().day.at("25:00"), "25:00:00 is not a time of day"),
        (lambda: every().day.at("10:60"), "is not a time of day"),
        (lambda: every().day.at("10h30"), "expected 'HH:MM'"),
        (lambda: every().day.at(1030), "takes a string"),  # type: ignore[arg-type]
        (lambda: every(2).days.at("10:30"), "not supported"),
        (lambda: every().seconds.at(":10"), "applies to a day"),
        (lambda: every(5).at("10:30"), "without a unit"),
        (lambda: every().hour.at("30"), "expected ':MM'"),
        (lambda: every(5).hours.at(":30"), "5 does not divide 24"),
        (lambda: every(7).minutes.at(":30"), "7 does not divide 60"),
        (lambda: every().minutes.at(":75"), "is not a time of day"),
        (lambda: every().day.at("10:30").at("11:00"), "given twice"),
        (lambda: every().day.hours, "unit is given twice"),
        (lambda: every().day.in_tz("Nowhere/City"), "unknown time zone 'Nowhere/City'"),
        (lambda: every(3).schedule, "needs a unit"),
        (lambda: str(every(3)), "needs a unit"),
    ],
)
def test_mistakes_raise_at_once(make: object, message: str) -> None:
    with pytest.raises(InvalidSchedule) as info:
        make()  # type: ignore[operator]
    assert message in str(info.value)


def test_from_needs_an_aware_datetime() -> None:
    with pytest.raises(ValueError, match="aware"):
        every(2).seconds.from_(datetime(2027, 1, 1))
