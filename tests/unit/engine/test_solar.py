"""``@solar`` schedules: django-celery-beat's events, timed by the astral library.

The expected times are published ones: astral's own test data (its
``src/test/test_sun_utc.py``, which took them from timeanddate.com for London, and
``src/test/test_norway.py`` for the midnight sun), and an almanac's times for Paris.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

import pytest

from django_htask.engine import InvalidSchedule, SolarSchedule, describe, parse_schedule, solar

pytest.importorskip("astral", reason="astral (the solar extra) is not installed")

EVENTS = [
    "dawn_astronomical",
    "dawn_nautical",
    "dawn_civil",
    "sunrise",
    "solar_noon",
    "sunset",
    "dusk_civil",
    "dusk_nautical",
    "dusk_astronomical",
]
LONDON = "51.50853 -0.12574"  # astral's conftest.py: LocationInfo("London", …)
MINUTE = timedelta(seconds=60)  # astral's datetime_almost_equal: within 60 seconds


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def first_on(text: str, day: date) -> datetime:
    """The schedule's first occurrence on ``day`` (UTC), from its midnight."""
    found = parse_schedule(text).next_after(
        utc(day.year, day.month, day.day) - timedelta(microseconds=1)
    )
    assert found is not None
    return found


# -- astral's published data ------------------------------------------------------------
# astral 3.x src/test/test_sun_utc.py: test_Dawn_Astronomical, test_Dawn_Nautical,
# test_Dawn_Civil, test_Sunrise, test_SolarNoon, test_Sunset, test_Dusk_Civil,
# test_Dusk_Nautical (London, times in UTC, "data taken from timeanddate.com").
ASTRAL_LONDON = [
    ("dawn_astronomical", date(2015, 12, 1), utc(2015, 12, 1, 5, 41)),
    ("dawn_astronomical", date(2015, 12, 25), utc(2015, 12, 25, 6, 1)),
    ("dawn_nautical", date(2015, 12, 1), utc(2015, 12, 1, 6, 22)),
    ("dawn_nautical", date(2015, 12, 12), utc(2015, 12, 12, 6, 33)),
    ("dawn_civil", date(2015, 12, 1), utc(2015, 12, 1, 7, 4)),
    ("dawn_civil", date(2015, 12, 25), utc(2015, 12, 25, 7, 25)),
    ("sunrise", date(2015, 1, 1), utc(2015, 1, 1, 8, 6)),
    ("sunrise", date(2015, 12, 12), utc(2015, 12, 12, 7, 56)),
    ("solar_noon", date(2015, 12, 1), utc(2015, 12, 1, 11, 49)),
    ("solar_noon", date(2015, 12, 25), utc(2015, 12, 25, 12, 0)),
    ("sunset", date(2015, 1, 1), utc(2015, 1, 1, 16, 1)),
    ("sunset", date(2015, 12, 12), utc(2015, 12, 12, 15, 51)),
    ("dusk_civil", date(2015, 12, 1), utc(2015, 12, 1, 16, 34)),
    ("dusk_civil", date(2015, 12, 25), utc(2015, 12, 25, 16, 36)),
    ("dusk_nautical", date(2015, 12, 1), utc(2015, 12, 1, 17, 16)),
    ("dusk_nautical", date(2015, 12, 25), utc(2015, 12, 25, 17, 19)),
]


@pytest.mark.parametrize(("event", "day", "expected"), ASTRAL_LONDON)
def test_astral_published_times_for_london(event: str, day: date, expected: datetime) -> None:
    assert abs(first_on(f"@solar {event} {LONDON}", day) - expected) <= MINUTE


def test_next_after_is_strictly_after_and_then_the_next_day() -> None:
    schedule = parse_schedule(f"@solar sunrise {LONDON}")
    first = schedule.next_after(utc(2015, 12, 1))
    assert first is not None
    assert abs(first - utc(2015, 12, 1, 7, 43)) <= MINUTE  # astral: test_Sunrise
    assert first.tzinfo is UTC
    assert first.microsecond == 0
    second = schedule.next_after(first)
    assert second is not None
    assert abs(second - utc(2015, 12, 2, 7, 45)) <= MINUTE
    assert schedule.next_after(first - timedelta(seconds=1)) == first
    assert schedule.next_after(utc(2015, 12, 1, 12)) == second  # past today's: tomorrow's


def test_an_aware_time_in_any_zone_and_a_naive_one_refused() -> None:
    from zoneinfo import ZoneInfo

    schedule = parse_schedule(f"@solar sunset {LONDON}")
    local = datetime(2015, 12, 1, 12, tzinfo=ZoneInfo("Asia/Tokyo"))  # 03:00 UTC
    assert schedule.next_after(local) == schedule.next_after(utc(2015, 12, 1, 3))
    with pytest.raises(ValueError, match="aware"):
        schedule.next_after(datetime(2015, 12, 1))


# -- a city's almanac times -----------------------------------------------------------
# Paris on 2023-06-24: "the sun rose at 5:48 AM and will set at 9:58 PM" (CEST, UTC+2),
# https://pariswerewolves.blogspot.com/2023/06/16-hours-of-daylight.html, as the
# almanacs (timeanddate.com: 05:48 and 21:58) give them.
PARIS = "48.8567 2.3508"


@pytest.mark.parametrize(
    ("event", "expected"),
    [("sunrise", utc(2023, 6, 24, 3, 48)), ("sunset", utc(2023, 6, 24, 19, 58))],
)
def test_almanac_times_for_paris(event: str, expected: datetime) -> None:
    assert abs(first_on(f"@solar {event} {PARIS}", date(2023, 6, 24)) - expected) <= MINUTE


def test_a_day_s_events_come_in_their_order() -> None:
    day = date(2023, 3, 20)  # the equinox: every event happens in Paris
    times = [first_on(f"@solar {event} {PARIS}", day) for event in EVENTS]
    assert times == sorted(times)
    assert times[0].date() == times[-1].date() == day


# -- days without the event -------------------------------------------------------------
TROMSO = "69.6 18.8"  # astral's test_norway.py: Observer(69.6, 18.8, 0.0)


def test_the_midnight_sun_skips_the_days_without_a_sunset() -> None:
    # astral's test_NorwaySunUp: on 2019-06-05 neither sunrise nor sunset happens, and
    # the next sunset comes before the next sunrise.
    june = utc(2019, 6, 5)
    sunset = parse_schedule(f"@solar sunset {TROMSO}").next_after(june)
    sunrise = parse_schedule(f"@solar sunrise {TROMSO}").next_after(june)
    assert sunset is not None
    assert sunrise is not None
    assert sunset < sunrise
    assert utc(2019, 7, 20) < sunset < utc(2019, 8, 1)  # the midnight sun ends late July


def test_the_polar_night_skips_the_days_without_a_sunrise() -> None:
    found = parse_schedule(f"@solar sunrise {TROMSO}").next_after(utc(2019, 12, 1))
    assert found is not None
    assert utc(2020, 1, 10) < found < utc(2020, 1, 20)  # the sun returns mid-January


def test_a_summer_without_astronomical_night_is_skipped_in_paris() -> None:
    found = parse_schedule(f"@solar dusk_astronomical {PARIS}").next_after(utc(2023, 6, 21))
    assert found is not None
    assert utc(2023, 6, 28) < found < utc(2023, 7, 20)


def test_every_day_once_near_the_date_line() -> None:
    # At ±180° solar noon is near midnight UTC: each day still has exactly one.
    for longitude in ("179.9", "-179.9"):
        schedule = parse_schedule(f"@solar solar_noon 0 {longitude}")
        at = utc(2024, 1, 1)
        gaps = []
        for _ in range(400):
            found = schedule.next_after(at)
            assert found is not None
            gaps.append(found - at)
            at = found
        assert all(
            timedelta(hours=23, minutes=59) < gap < timedelta(hours=24, minutes=1)
            for gap in gaps[1:]
        )


# -- text, values and errors --------------------------------------------------------------
def test_text_round_trips_and_values_compare() -> None:
    schedule = parse_schedule("@solar SUNSET 48.85 2.35")
    assert str(schedule) == "@solar sunset 48.85 2.35"
    assert parse_schedule(str(schedule)) == schedule
    assert schedule == SolarSchedule("sunset", 48.85, 2.35)
    assert hash(schedule) == hash(SolarSchedule("sunset", "48.85", "2.35"))
    assert repr(schedule) == "SolarSchedule('@solar sunset 48.85 2.35')"
    assert str(SolarSchedule("sunrise", 48, -0.0)) == "@solar sunrise 48 0"
    with pytest.raises(AttributeError, match="immutable"):
        schedule.event = "sunrise"  # type: ignore[misc]


def test_bounds() -> None:
    text = "FROM=2023-06-01T00:00:00+00:00 UNTIL=2023-06-03T00:00:00+00:00 @solar sunset 48.85 2.35"
    schedule = parse_schedule(text)
    assert str(schedule) == text
    first = schedule.next_after(utc(2023, 1, 1))
    assert first is not None
    assert first.date() == date(2023, 6, 1)
    second = schedule.next_after(first)
    assert second is not None
    last = schedule.next_after(second)
    assert last is None


def test_describe() -> None:
    assert describe("@solar dawn_civil 48.85 2.35") == (
        "every day at civil dawn (latitude 48.85, longitude 2.35)"
    )
    assert describe("UNTIL=2030-01-01T00:00:00+00:00 @solar sunset 1 2").endswith(
        ", until 2030-01-01T00:00:00+00:00"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("@solar sundown 48.85 2.35", r"unknown solar event 'sundown'; expected one of dawn_"),
        ("@solar sunset 95 2.35", r"latitude must be from -90 to 90 degrees, got '95'"),
        ("@solar sunset 48.85 -181", r"longitude must be from -180 to 180 degrees, got '-181'"),
        ("@solar sunset north 2.35", r"latitude 'north' is not a number"),
        ("@solar sunset nan 2.35", r"latitude must be from -90 to 90 degrees, got 'nan'"),
        ("@solar sunset 48.85", r"@solar takes an event, a latitude and a longitude"),
        ("@solar", r"@solar takes an event, a latitude and a longitude"),
    ],
)
def test_bad_text_names_the_bad_part(text: str, message: str) -> None:
    with pytest.raises(InvalidSchedule, match=message):
        parse_schedule(text)


@pytest.fixture
def no_astral(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "astral", None)
    solar._functions.cache_clear()
    yield
    solar._functions.cache_clear()


@pytest.mark.usefixtures("no_astral")
def test_without_astral_the_error_says_what_to_install() -> None:
    with pytest.raises(InvalidSchedule, match=r"pip install django-htask\[solar\]"):
        parse_schedule("@solar sunset 12.5 3.25")  # text not parsed before: not cached
    with pytest.raises(InvalidSchedule, match=r"pip install django-htask\[solar\]"):
        SolarSchedule("sunrise", 1, 2)
