"""The DST rule of CronSchedule at real transitions (Vixie/ISC cron's rule).

Hour field ``*``: by the clock (gap wall times do not exist, both passes of a repeated
hour run). Any other hour field: a gap occurrence runs once at the first valid instant
after the gap; a repeated hour runs only in its first pass.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from django_htask.engine import CronSchedule, IntervalSchedule, parse_schedule


def runs(text: str, zone: str, start: datetime, end: datetime) -> list[str]:
    """The runs in ``[start, end)`` (UTC), as local ISO strings with their offsets."""
    schedule = CronSchedule(text, zone)
    out = []
    when = schedule.next_after(start - timedelta(microseconds=1))
    while when is not None and when < end:
        assert when.tzinfo is UTC
        out.append(when.astimezone(ZoneInfo(zone)).isoformat(timespec="minutes"))
        when = schedule.next_after(when)
    return out


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# -- Europe/Berlin: 2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00 ------------------
class TestBerlin:
    zone = "Europe/Berlin"

    def test_fixed_hour_in_the_gap_runs_once_at_the_end_of_the_gap(self) -> None:
        assert runs("30 2 * * *", self.zone, utc(2026, 3, 28), utc(2026, 3, 31)) == [
            "2026-03-28T02:30+01:00",
            "2026-03-29T03:00+02:00",
            "2026-03-30T02:30+02:00",
        ]

    def test_several_gap_occurrences_coalesce_into_one_run(self) -> None:
        assert runs("0,20,40 2 * * *", self.zone, utc(2026, 3, 29), utc(2026, 3, 29, 12)) == [
            "2026-03-29T03:00+02:00",
        ]

    def test_gap_run_and_an_occurrence_at_the_gap_end_are_one_run(self) -> None:
        assert runs("0,30 2,3 * * *", self.zone, utc(2026, 3, 29), utc(2026, 3, 29, 12)) == [
            "2026-03-29T03:00+02:00",
            "2026-03-29T03:30+02:00",
        ]

    def test_hour_star_skips_the_gap(self) -> None:
        assert runs("30 * * * *", self.zone, utc(2026, 3, 28, 23), utc(2026, 3, 29, 3)) == [
            "2026-03-29T00:30+01:00",
            "2026-03-29T01:30+01:00",
            "2026-03-29T03:30+02:00",
            "2026-03-29T04:30+02:00",
        ]

    def test_fixed_hour_runs_only_in_the_first_pass_of_the_repeated_hour(self) -> None:
        assert runs("*/20 2 * * *", self.zone, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12)) == [
            "2026-10-25T02:00+02:00",
            "2026-10-25T02:20+02:00",
            "2026-10-25T02:40+02:00",
        ]

    def test_hour_star_runs_in_both_passes(self) -> None:
        assert runs("30 * * * *", self.zone, utc(2026, 10, 24, 23), utc(2026, 10, 25, 3)) == [
            "2026-10-25T01:30+02:00",
            "2026-10-25T02:30+02:00",
            "2026-10-25T02:30+01:00",
            "2026-10-25T03:30+01:00",
        ]

    def test_hourly_descriptor_runs_by_the_clock(self) -> None:
        assert runs("@hourly", self.zone, utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 2, 1)) == [
            "2026-10-25T02:00+02:00",
            "2026-10-25T02:00+01:00",
            "2026-10-25T03:00+01:00",
        ]

    def test_from_inside_the_second_pass_fixed_hour_waits_for_tomorrow(self) -> None:
        schedule = CronSchedule("30 2 * * *", self.zone)
        second_pass = utc(2026, 10, 25, 1, 10)  # 02:10 CET, the second 02:10
        assert schedule.next_after(second_pass) == utc(2026, 10, 26, 1, 30)

    def test_from_inside_the_first_pass_hour_star_goes_on_to_the_second_pass(self) -> None:
        schedule = CronSchedule("10 * * * *", self.zone)
        first_pass = utc(2026, 10, 25, 0, 20)  # 02:20 CEST
        assert schedule.next_after(first_pass) == utc(2026, 10, 25, 1, 10)  # 02:10 CET
        assert schedule.next_after(utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 25, 2, 10)

    def test_from_inside_the_first_pass_when_the_rest_of_it_still_matches(self) -> None:
        schedule = CronSchedule("50 * * * *", self.zone)
        assert schedule.next_after(utc(2026, 10, 25, 0, 20)) == utc(2026, 10, 25, 0, 50)
        assert schedule.next_after(utc(2026, 10, 25, 0, 50)) == utc(2026, 10, 25, 1, 50)

    def test_seconds_field_in_the_repeated_hour(self) -> None:
        schedule = CronSchedule("30 59 * * * *", self.zone)
        got = schedule.next_after(utc(2026, 10, 25, 0, 59, 30))  # 02:59:30 CEST
        assert got == utc(2026, 10, 25, 1, 59, 30)  # 02:59:30 CET


# -- America/New_York: 2026-03-08 02:00 -> 03:00, 2026-11-01 02:00 -> 01:00 --------------
class TestNewYork:
    zone = "America/New_York"

    def test_spring_gap(self) -> None:
        assert runs("30 2 * * *", self.zone, utc(2026, 3, 8), utc(2026, 3, 9, 12)) == [
            "2026-03-08T03:00-04:00",
            "2026-03-09T02:30-04:00",
        ]

    def test_fall_repeated_hour_fixed(self) -> None:
        assert runs("30 1 * * *", self.zone, utc(2026, 11, 1), utc(2026, 11, 2)) == [
            "2026-11-01T01:30-04:00",
        ]

    def test_fall_repeated_hour_star(self) -> None:
        assert runs("30 * * * *", self.zone, utc(2026, 11, 1, 4), utc(2026, 11, 1, 8)) == [
            "2026-11-01T00:30-04:00",
            "2026-11-01T01:30-04:00",
            "2026-11-01T01:30-05:00",
            "2026-11-01T02:30-05:00",
        ]

    @pytest.mark.parametrize("hours", ["*/1", "*,1", "1,*"])
    def test_star_by_another_spelling_runs_by_the_clock(self, hours: str) -> None:
        # ``*/1`` and a list holding ``*`` select every hour, as ``*`` does.
        assert runs(f"30 {hours} * * *", self.zone, utc(2026, 11, 1, 4), utc(2026, 11, 1, 8)) == [
            "2026-11-01T00:30-04:00",
            "2026-11-01T01:30-04:00",
            "2026-11-01T01:30-05:00",
            "2026-11-01T02:30-05:00",
        ]

    def test_hour_range_is_not_star(self) -> None:
        # 0-23 names every hour, but it is not ``*``: the special rule applies.
        assert runs("30 0-23 * * *", self.zone, utc(2026, 11, 1, 4), utc(2026, 11, 1, 8)) == [
            "2026-11-01T00:30-04:00",
            "2026-11-01T01:30-04:00",
            "2026-11-01T02:30-05:00",
        ]


# -- Australia/Lord_Howe: a 30-minute shift ---------------------------------------------
class TestLordHowe:
    zone = "Australia/Lord_Howe"

    def test_half_hour_gap_fixed_hour(self) -> None:
        # 2026-10-04 02:00 +10:30 -> 02:30 +11:00
        assert runs("15 2 * * *", self.zone, utc(2026, 10, 3), utc(2026, 10, 4, 12)) == [
            "2026-10-04T02:30+11:00",
        ]

    def test_half_hour_gap_hour_star(self) -> None:
        assert runs("15 * * * *", self.zone, utc(2026, 10, 3, 13, 30), utc(2026, 10, 3, 17)) == [
            "2026-10-04T00:15+10:30",
            "2026-10-04T01:15+10:30",
            "2026-10-04T03:15+11:00",
        ]

    def test_half_hour_repeat_fixed_hour(self) -> None:
        # 2026-04-05 02:00 +11:00 -> 01:30 +10:30: 01:30-02:00 happens twice
        assert runs("45 1 * * *", self.zone, utc(2026, 4, 4), utc(2026, 4, 5)) == [
            "2026-04-05T01:45+11:00",
        ]

    def test_half_hour_repeat_hour_star(self) -> None:
        assert runs("45 * * * *", self.zone, utc(2026, 4, 4, 13), utc(2026, 4, 4, 17)) == [
            "2026-04-05T00:45+11:00",
            "2026-04-05T01:45+11:00",
            "2026-04-05T01:45+10:30",
            "2026-04-05T02:45+10:30",
        ]

    def test_outside_the_repeated_half_hour_nothing_doubles(self) -> None:
        assert runs("15 * * * *", self.zone, utc(2026, 4, 4, 13), utc(2026, 4, 4, 17)) == [
            "2026-04-05T00:15+11:00",
            "2026-04-05T01:15+11:00",
            "2026-04-05T02:15+10:30",
            "2026-04-05T03:15+10:30",
        ]


# -- America/Santiago: shifts at midnight -----------------------------------------------
class TestSantiago:
    zone = "America/Santiago"

    def test_midnight_in_the_gap_runs_at_one(self) -> None:
        # 2026-09-06 00:00 -04 -> 01:00 -03: midnight does not exist that day
        assert runs("@daily", self.zone, utc(2026, 9, 5, 12), utc(2026, 9, 7, 12)) == [
            "2026-09-06T01:00-03:00",
            "2026-09-07T00:00-03:00",
        ]

    def test_repeated_hour_before_midnight(self) -> None:
        # 2026-04-05 00:00 -03 -> 2026-04-04 23:00 -04: 23:00-24:00 happens twice
        assert runs("30 23 * * *", self.zone, utc(2026, 4, 4, 12), utc(2026, 4, 6, 12)) == [
            "2026-04-04T23:30-03:00",
            "2026-04-05T23:30-04:00",
        ]

    def test_midnight_after_the_repeat_runs_once(self) -> None:
        assert runs("0 0 * * *", self.zone, utc(2026, 4, 4, 12), utc(2026, 4, 6)) == [
            "2026-04-05T00:00-04:00",
        ]

    def test_every_minute_by_the_clock_across_the_gap(self) -> None:
        got = runs("* * * * *", self.zone, utc(2026, 9, 6, 3, 58), utc(2026, 9, 6, 4, 2))
        assert got == [
            "2026-09-05T23:58-04:00",
            "2026-09-05T23:59-04:00",
            "2026-09-06T01:00-03:00",
            "2026-09-06T01:01-03:00",
        ]


# -- no DST -----------------------------------------------------------------------------
def test_zone_without_dst_is_regular() -> None:
    got = runs("30 2 * * *", "Asia/Tokyo", utc(2026, 3, 26, 12), utc(2026, 3, 31, 12))
    assert got == [f"2026-03-{d:02d}T02:30+09:00" for d in range(27, 32)]


def test_intervals_are_elapsed_time_across_dst() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    anchor = datetime(2026, 10, 24, 12, 0, tzinfo=berlin)
    schedule = IntervalSchedule(3600, anchor=anchor)
    when = utc(2026, 10, 24, 22)
    gaps = []
    for _ in range(6):
        nxt = schedule.next_after(when)
        assert nxt is not None
        gaps.append(nxt - when)
        when = nxt
    assert gaps[1:] == [timedelta(hours=1)] * 5
    unanchored = parse_schedule("@every 1h")
    assert unanchored.next_after(utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 25, 1, 30)


# -- an oracle: every instant of a window around each transition, minute by minute ------
TRANSITIONS = [
    ("Europe/Berlin", utc(2026, 3, 29, 1)),
    ("Europe/Berlin", utc(2026, 10, 25, 1)),
    ("America/New_York", utc(2026, 3, 8, 7)),
    ("America/New_York", utc(2026, 11, 1, 6)),
    ("Australia/Lord_Howe", utc(2026, 4, 4, 15)),
    ("Australia/Lord_Howe", utc(2026, 10, 3, 15, 30)),
    ("America/Santiago", utc(2026, 4, 5, 3)),
    ("America/Santiago", utc(2026, 9, 6, 4)),
    ("Asia/Tokyo", utc(2026, 3, 29, 1)),
]
EXPRESSIONS = [
    "*/7 * * * *",
    "0,30 * * * *",
    "15 */2 * * *",
    "45 0-3 * * *",
    "0 0,1,2,3,23 * * *",
    "*/10 1,2 * * *",
    "5 22-23,0-2 * * *",
]


def expected_runs(text: str, zone_name: str, start: datetime, end: datetime) -> list[datetime]:
    """The rule, spelled out the slow way with croniter's matcher as the judge."""
    zone = ZoneInfo(zone_name)
    hour_star = text.split()[1] == "*"
    found: list[datetime] = []
    if hour_star:  # by the clock: each real minute whose wall time matches
        t = start
        while t < end:
            if croniter.match(text, t.astimezone(zone).replace(tzinfo=None)):
                found.append(t)
            t += timedelta(minutes=1)
        return found
    # the special rule: walk wall minutes; gap -> first valid instant after; repeat -> first
    wall = start.astimezone(zone).replace(tzinfo=None) - timedelta(hours=3)
    last = end.astimezone(zone).replace(tzinfo=None) + timedelta(hours=3)
    while wall < last:
        if croniter.match(text, wall):
            first = wall.replace(tzinfo=zone, fold=0)
            back = first.astimezone(UTC).astimezone(zone).replace(tzinfo=None)
            if back != wall:  # in a gap: the first instant whose wall time is past it
                t = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
                while t.astimezone(zone).replace(tzinfo=None) < wall:
                    t += timedelta(minutes=1)
                when = t
            else:
                when = first.astimezone(UTC)
            if start <= when < end and when not in found:
                found.append(when)
        wall += timedelta(minutes=1)
    return sorted(found)


@pytest.mark.parametrize(("zone", "transition"), TRANSITIONS)
@pytest.mark.parametrize("text", EXPRESSIONS)
def test_matches_the_rule_minute_by_minute(zone: str, transition: datetime, text: str) -> None:
    start, end = transition - timedelta(hours=3), transition + timedelta(hours=3)
    schedule = CronSchedule(text, zone)
    got = []
    when = schedule.next_after(start - timedelta(microseconds=1))
    while when is not None and when < end:
        got.append(when)
        when = schedule.next_after(when)
    assert got == expected_runs(text, zone, start, end)
    # and from any instant in the window, next_after agrees with the list
    everything = [*got, when]
    t = start
    while t < end - timedelta(hours=1):
        want = next(w for w in everything if w is None or w > t)
        assert schedule.next_after(t) == want, t
        t += timedelta(minutes=13)
