"""Schedule values: every parse form, every error, str() round trips, properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from django_htask.engine import (
    CronSchedule,
    IntervalSchedule,
    InvalidSchedule,
    OnceSchedule,
    describe,
    parse_schedule,
)
from django_htask.engine.schedules import format_duration, parse_duration

T0 = datetime(2026, 5, 4, 10, 17, 23, tzinfo=UTC)  # a Monday


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# -- parse forms ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "after", "expected"),
    [
        ("30 4 * * *", T0, utc(2026, 5, 5, 4, 30)),
        ("*/15 * * * *", T0, utc(2026, 5, 4, 10, 30)),
        ("*/10 * * * * *", T0, utc(2026, 5, 4, 10, 17, 30)),
        ("5 0 12 * * *", T0, utc(2026, 5, 4, 12, 0, 5)),
        ("0 9 * JAN-MAR,MAY MON-FRI", T0, utc(2026, 5, 5, 9)),
        ("0 9 * jan-mar,may mon-fri", T0, utc(2026, 5, 5, 9)),
        ("0 0 ? * SUN", T0, utc(2026, 5, 10)),
        ("0 0 1 * ?", T0, utc(2026, 6, 1)),
        ("0 12 * * 7", T0, utc(2026, 5, 10, 12)),  # 7 is Sunday too
        ("0 0 13 * FRI", T0, utc(2026, 5, 8)),  # day-of-month OR day-of-week
        ("@yearly", T0, utc(2027, 1, 1)),
        ("@annually", T0, utc(2027, 1, 1)),
        ("@monthly", T0, utc(2026, 6, 1)),
        ("@weekly", T0, utc(2026, 5, 10)),
        ("@daily", T0, utc(2026, 5, 5)),
        ("@midnight", T0, utc(2026, 5, 5)),
        ("@hourly", T0, utc(2026, 5, 4, 11)),
        ("@HOURLY", T0, utc(2026, 5, 4, 11)),
        ("@every 90s", T0, T0 + timedelta(seconds=90)),
        ("@every 5m", T0, T0 + timedelta(minutes=5)),
        ("@every 1h30m", T0, T0 + timedelta(minutes=90)),
        ("@every 500ms", T0, T0 + timedelta(milliseconds=500)),
        ("@every 1.5h", T0, T0 + timedelta(minutes=90)),
        ("@every 2d", T0, T0 + timedelta(days=2)),
        ("CRON_TZ=Asia/Tokyo 30 4 * * *", T0, utc(2026, 5, 4, 19, 30)),
        ("TZ=Asia/Tokyo 30 4 * * *", T0, utc(2026, 5, 4, 19, 30)),
        ("cron_tz=Asia/Tokyo @daily", T0, utc(2026, 5, 4, 15)),
        ("@once 2027-01-01T09:00+09:00", T0, utc(2027, 1, 1)),
        ("@once 2027-01-01T09:00:00Z", T0, utc(2027, 1, 1, 9)),
        ("@once 2020-01-01T09:00+09:00", T0, None),
        ("  30   4 *  * *  ", T0, utc(2026, 5, 5, 4, 30)),
        ("0 0 L * *", T0, utc(2026, 5, 31)),  # croniter's special forms
        ("0 0 * * 5#2", T0, utc(2026, 5, 8)),
    ],
)
def test_parse_forms(text: str, after: datetime, expected: datetime | None) -> None:
    schedule = parse_schedule(text)
    assert schedule.next_after(after) == expected
    assert parse_schedule(str(schedule)) == schedule


def test_tz_argument_and_prefix() -> None:
    tokyo = parse_schedule("30 4 * * *", tz="Asia/Tokyo")
    assert isinstance(tokyo, CronSchedule)
    assert tokyo.tz == ZoneInfo("Asia/Tokyo")
    assert str(tokyo) == "CRON_TZ=Asia/Tokyo 30 4 * * *"
    assert parse_schedule("30 4 * * *", tz=ZoneInfo("Asia/Tokyo")) == tokyo
    # the prefix wins over the argument
    assert parse_schedule("CRON_TZ=Asia/Tokyo 30 4 * * *", tz="Europe/Berlin") == tokyo
    # a naive @once time is read in the zone
    once = parse_schedule("@once 2027-01-01T09:00", tz="Asia/Tokyo")
    assert once.next_after(T0) == utc(2027, 1, 1)
    assert parse_schedule("30 4 * * *", tz="") == parse_schedule("30 4 * * *", tz="UTC")


def test_bounds_prefixes() -> None:
    schedule = parse_schedule(
        "FROM=2026-06-01T00:00:00+00:00 UNTIL=2026-06-01T03:00:00+00:00 @hourly"
    )
    got = []
    when = schedule.next_after(T0)
    while when is not None:
        got.append(when.hour)
        when = schedule.next_after(when)
    assert got == [0, 1, 2, 3]
    interval = parse_schedule("FROM=2026-06-01T00:00:00+00:00 @every 1h")
    assert interval.next_after(T0) == utc(2026, 6, 1)
    assert interval.next_after(utc(2026, 6, 1, 0, 30)) == utc(2026, 6, 1, 1)


def test_interval_options() -> None:
    anchored = parse_schedule("@every 1h anchor=2026-01-01T00:20:00+00:00")
    assert anchored.next_after(T0) == utc(2026, 5, 4, 10, 20)
    assert str(anchored) == "@every 1h anchor=2026-01-01T00:20:00+00:00"
    jittered = parse_schedule("@every 1h anchor=2026-01-01T00:00:00+00:00 jitter=10m")
    assert isinstance(jittered, IntervalSchedule)
    when = jittered.next_after(T0)
    assert when is not None and utc(2026, 5, 4, 11) <= when < utc(2026, 5, 4, 11, 10)
    assert jittered.next_after(T0) == when  # a pure function
    immediate = parse_schedule("@every 5m immediately")
    assert isinstance(immediate, IntervalSchedule) and immediate.immediately
    assert str(immediate) == "@every 5m immediately"


def test_values_equal_and_hash() -> None:
    assert parse_schedule("0 4 * * *") == CronSchedule("0 4 * * *")
    assert hash(parse_schedule("@every 5m")) == hash(IntervalSchedule(300))
    assert IntervalSchedule(timedelta(minutes=5)) == IntervalSchedule(300)
    assert CronSchedule("0 4 * * *") != CronSchedule("0 4 * * *", "Asia/Tokyo")
    assert OnceSchedule(T0) != CronSchedule("0 4 * * *")
    with pytest.raises(AttributeError):
        CronSchedule("0 4 * * *").tz = ZoneInfo("UTC")  # type: ignore[misc]


def test_compiled_expressions_are_shared() -> None:
    a = CronSchedule("0 4 * * *", "Asia/Tokyo")
    b = CronSchedule("0  4 * * *", "Europe/Berlin")
    assert a.cron is b.cron
    assert parse_schedule("0 4 * * *", tz="Asia/Tokyo") is parse_schedule(
        "0 4 * * *", tz="Asia/Tokyo"
    )


# -- errors -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty schedule"),
        ("   ", "empty schedule"),
        ("1 2 3", "has 3 fields"),
        ("1 2 3 4 5 6 7", "has 7 fields"),
        ("61 * * * *", "minute field '61': 61 is out of range 0-59"),
        ("* 24 * * *", "hour field '24'"),
        ("* * 0 * *", "day-of-month field '0'"),
        ("* * * 13 *", "month field '13'"),
        ("* * * * 8", "day-of-week field '8'"),
        ("60 * * * * *", "second field '60'"),
        ("*/0 * * * *", "step 0"),
        ("1-2-3 * * * *", "'1-2-3' is not a value or a range"),
        ("* * * FOO *", "'FOO' is not a number or a name"),
        ("? * * * *", "'?' is only allowed"),
        ("1,,2 * * * *", "empty list item"),
        ("0 0 30 2 *", "can never fire"),
        ("0 0 31 4,6,9,11 *", "can never fire"),
        ("@fortnightly", "unknown descriptor '@fortnightly' (known: @every, @once, @solar, @"),
        ("@evry 10s", "unknown descriptor '@evry': did you mean '@every'? (known: @every, "),
        ("CRON_TZ=UTC @dayly", "unknown descriptor '@dayly': did you mean '@daily'?"),
        ("@daily 5", "takes no fields"),
        ("CRON_TZ=Mars/Olympus 0 4 * * *", "unknown time zone 'Mars/Olympus'"),
        ("CRON_TZ=../../etc/passwd 0 4 * * *", "unknown time zone"),
        ("CRON_TZ= 0 4 * * *", "malformed prefix"),
        ("CRON_TZ 0 4 * * *", "malformed prefix 'CRON_TZ'"),
        ("CRON-TZ=UTC 0 4 * * *", "malformed prefix 'CRON-TZ=UTC'"),
        ("CRON_TZ=UTC TZ=UTC 0 4 * * *", "given twice"),
        ("CRON_TZ=UTC", "no schedule after them"),
        ("FOO=1 @daily", "unknown prefix 'FOO=1'"),
        ("FROM=tomorrow @daily", "FROM 'tomorrow'"),
        ("FROM=2027-01-02T00:00Z UNTIL=2027-01-01T00:00Z @daily", "is before start"),
        ("@every", "@every needs a duration"),
        ("@every 0s", "more than zero"),
        ("@every 5x", "'5x'"),
        ("@every 5", "'5'"),
        ("@every 1m1m", "repeats the unit"),
        ("@every 5m sometimes", "unknown @every option 'sometimes'"),
        ("@every 5m jitter=5m", "jitter of 5m must be shorter"),
        ("@every 1.0001s", "whole number of milliseconds"),
        ("@every 200000d", "more than 100 years"),
        ("@once", "@once takes one ISO 8601"),
        ("@once yesterday", "'yesterday' is not an ISO 8601"),
        ("FROM=2027-01-01T00:00Z @once 2027-01-01T00:00Z", "do not apply to @once"),
        ("x" * 3000, "too long"),
    ],
)
def test_errors_name_the_bad_part(text: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as info:
        parse_schedule(text)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_a_cron_schedule_knows_only_the_cron_descriptors() -> None:
    with pytest.raises(InvalidSchedule) as info:
        CronSchedule("@evry 10s")
    assert str(info.value) == (
        "unknown descriptor '@evry' (known: @yearly, @annually, @monthly, @weekly, @daily, "
        "@midnight, @hourly)"
    )


def test_bad_values() -> None:
    with pytest.raises(InvalidSchedule, match="must be text"):
        parse_schedule(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidSchedule, match="more than zero"):
        IntervalSchedule(0)
    with pytest.raises(InvalidSchedule, match="more than zero"):
        IntervalSchedule(-1)
    with pytest.raises(InvalidSchedule, match="number of seconds"):
        IntervalSchedule("5m")  # type: ignore[arg-type]
    with pytest.raises(InvalidSchedule, match="more than zero"):
        IntervalSchedule(float("nan"))
    with pytest.raises(InvalidSchedule, match="needs a datetime"):
        OnceSchedule("2027-01-01")  # type: ignore[arg-type]
    with pytest.raises(InvalidSchedule, match="unknown time zone"):
        CronSchedule("@daily", "Nowhere/Special")
    with pytest.raises(ValueError, match="aware datetime"):
        CronSchedule("@daily").next_after(datetime(2027, 1, 1))
    with pytest.raises(ValueError, match="aware datetime"):
        IntervalSchedule(5).next_after(datetime(2027, 1, 1))
    with pytest.raises(ValueError, match="anchor must be an aware"):
        IntervalSchedule(5, anchor=datetime(2027, 1, 1))


def test_never_hangs_near_the_end_of_time() -> None:
    assert CronSchedule("0 0 29 2 *").next_after(utc(9999, 3, 1)) is None
    assert IntervalSchedule(86400 * 365).next_after(utc(9999, 6, 1)) is None
    assert CronSchedule("0 0 1 1 *", "Asia/Tokyo").next_after(utc(9999, 12, 31)) is None
    rare = CronSchedule("0 0 29 2 1")  # 29 February or a Monday in February
    assert rare.next_after(T0) == utc(2027, 2, 1)


# -- durations and descriptions ---------------------------------------------------------
def test_durations() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("1d2h3m4s5ms") == 93784.005
    assert format_duration(5400) == "1h30m"
    assert format_duration(0.5) == "500ms"
    assert format_duration(90) == "1m30s"


@pytest.mark.parametrize(
    ("text", "description"),
    [
        ("CRON_TZ=Asia/Tokyo 30 4 * * *", "every day at 04:30 (Asia/Tokyo)"),
        ("15 30 8 * * MON", "every Monday at 08:30:15 (UTC)"),
        ("*/5 * * * *", "every 5 minutes (UTC)"),
        ("0 9 * * MON-FRI", "at 09:00, Monday through Friday (UTC)"),
        ("@every 1h30m", "every 90 minutes"),
        ("@every 2h", "every 2 hours"),
        ("@every 1d", "every day"),
        ("@every 14d", "every 2 weeks"),
        ("@every 90s", "every 90 seconds"),
        ("@every 500ms", "every 500ms"),
        ("@once 2027-01-01T09:00+09:00", "once at 2027-01-01T09:00:00+09:00"),
        (
            "UNTIL=2027-01-01T00:00:00+00:00 @hourly",
            "every hour (UTC), until 2027-01-01T00:00:00+00:00",
        ),
    ],
)
def test_describe(text: str, description: str) -> None:
    assert describe(parse_schedule(text)) == description
    assert describe(text) == description


def test_describe_rejects_non_schedules() -> None:
    with pytest.raises(TypeError, match="expected a schedule"):
        describe(42)


# -- properties -------------------------------------------------------------------------
ZONES = [
    "UTC",
    "Asia/Tokyo",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Kolkata",
    "Etc/GMT+5",
]


def _field(lo: int, hi: int) -> st.SearchStrategy[str]:
    # Leaves out the forms croniter reads differently on purpose (tests/conformance):
    # an equal range N-N and */1, which does not restrict a day field.
    value = st.integers(lo, hi).map(str)
    step = st.tuples(st.integers(lo, hi - 1), st.integers(1, hi - lo + 1)).map(
        lambda p: f"{p[0]}-{hi}/{p[1]}"
    )
    rng = st.lists(st.integers(lo, hi), min_size=2, max_size=2, unique=True).map(
        lambda p: f"{min(p)}-{max(p)}"
    )
    star_step = st.integers(2, hi - lo + 1).map(lambda s: f"*/{s}")
    item = st.one_of(value, step, rng, star_step)
    listed = st.lists(item, min_size=1, max_size=3).map(",".join)
    return st.one_of(st.just("*"), listed)


cron_texts = st.one_of(
    st.tuples(_field(0, 59), _field(0, 23), _field(1, 28), _field(1, 12), _field(0, 6)).map(
        " ".join
    ),
    st.tuples(_field(0, 59), _field(0, 59), _field(0, 23), st.just("*"), st.just("*")).map(
        lambda f: " ".join((*f, "*"))
    ),
    st.sampled_from(["@hourly", "@daily", "@weekly", "@monthly", "@yearly"]),
)
instants = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.just(UTC)
)


@settings(max_examples=300, deadline=None)
@given(text=cron_texts, zone=st.sampled_from(ZONES), start=instants)
def test_cron_next_after_is_strictly_increasing_and_matches(
    text: str, zone: str, start: datetime
) -> None:
    schedule = CronSchedule(text, zone)
    when = start
    for _ in range(5):
        nxt = schedule.next_after(when)
        assert nxt is not None
        assert nxt > when
        assert nxt.tzinfo is UTC
        when = nxt
    assert parse_schedule(str(schedule)) == schedule


@settings(max_examples=200, deadline=None)
@given(text=cron_texts, start=instants)
def test_cron_in_utc_agrees_with_croniter(text: str, start: datetime) -> None:
    schedule = CronSchedule(text)
    fields = schedule.cron.fields
    # croniter folds a day-of-week that lists all seven days into *, when the
    # day-of-month holds a *; cron (and we) keep it a restriction (docs/schedules.md).
    assume(fields[-1] == "*" or len(schedule.cron.values("day-of-week")) < 7)
    it = croniter(" ".join(fields), start, second_at_beginning=len(fields) == 6)
    assert schedule.next_after(start) == it.get_next(datetime)


@settings(max_examples=200, deadline=None)
@given(
    seconds=st.integers(1, 10**7).map(lambda ms: ms / 1000),
    anchored=st.booleans(),
    jitter_share=st.floats(0, 0.99),
    start=instants,
)
def test_interval_is_strictly_increasing_and_round_trips(
    seconds: float, anchored: bool, jitter_share: float, start: datetime
) -> None:
    jitter = int(seconds * jitter_share * 1000) / 1000
    anchor = utc(2000, 1, 1) if anchored else None
    schedule = IntervalSchedule(seconds, anchor=anchor, jitter=jitter)
    when = start
    for _ in range(5):
        nxt = schedule.next_after(when)
        assert nxt is not None and nxt > when
        assert nxt - when <= timedelta(seconds=seconds + jitter) * (2 if anchored else 1)
        when = nxt
    assert parse_schedule(str(schedule)) == schedule


@settings(max_examples=100, deadline=None)
@given(at=instants, zone=st.sampled_from(ZONES))
# 01:30 of the repeated half hour on Lord Howe (compares unequal across zones, PEP 495)
@example(at=datetime(2036, 4, 5, 14, 30, tzinfo=UTC), zone="Australia/Lord_Howe")
def test_once_round_trips(at: datetime, zone: str) -> None:
    schedule = OnceSchedule(at.astimezone(ZoneInfo(zone)))
    assert parse_schedule(str(schedule)) == schedule
    assert schedule.next_after(at - timedelta(microseconds=1)) == at
    assert schedule.next_after(at) is None
