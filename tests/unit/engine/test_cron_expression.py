"""The compiled cron expression: wall-time evaluation, validation, caching."""

from __future__ import annotations

from datetime import datetime

import pytest
from croniter import croniter

from django_htask.engine import InvalidSchedule
from django_htask.engine.cron_expression import DESCRIPTORS, CronExpression, compile_cron


def test_canonical_text_and_fields() -> None:
    expr = compile_cron("  0  9 * jan-mar  mon-fri ")
    assert expr.text == "0 9 * JAN-MAR MON-FRI"
    assert expr.fields == ("0", "9", "*", "JAN-MAR", "MON-FRI")
    assert not expr.has_seconds
    assert not expr.hour_is_star
    assert compile_cron("@DAILY").text == "@daily"
    assert compile_cron("@daily").fields == tuple(DESCRIPTORS["@daily"].split())
    assert compile_cron("5 * * * * *").has_seconds
    assert compile_cron("5 * * * * *").hour_is_star


def test_compiled_once_per_canonical_text() -> None:
    assert compile_cron("0 4 * * *") is compile_cron("0  4 * * *")
    assert compile_cron("0 4 * * mon") is compile_cron("0 4 * * MON")


@pytest.mark.parametrize(
    "text",
    [
        "*/7 3-5 * * *",
        "0 0 29 2 *",
        "15,45 */4 1,15 * MON",
        "30 2 * 3,10 SUN",
        # croniter's day forms, whose days croniter still selects:
        "0 0 L * *",
        "0 0 L 2 *",
        "0 0 * * 5#2",
        "0 0 * * L5",
        "0 9 15W * *",
        "30 23 1-7 JAN MON-FRI#1",
        "0 0 * * 1#4,L1",
    ],
)
def test_wall_time_search_agrees_with_croniter(text: str) -> None:
    expr = CronExpression(text)
    it = croniter(text, datetime(2024, 1, 1))
    wall = datetime(2024, 1, 1)
    for _ in range(50):
        wall_next = expr.next_after(wall)
        assert wall_next == it.get_next(datetime)
        assert wall_next is not None
        assert expr.matches(wall_next)
        wall = wall_next


def test_next_at_or_after_includes_the_instant() -> None:
    expr = compile_cron("30 2 * * *")
    at = datetime(2026, 1, 1, 2, 30)
    assert expr.next_at_or_after(at) == at
    assert expr.next_after(at) == datetime(2026, 1, 2, 2, 30)
    assert not expr.matches(datetime(2026, 1, 1, 2, 30, 0, 1))


def test_never_and_far_future() -> None:
    assert compile_cron("0 0 29 2 *").next_after(datetime(9996, 3, 1)) is None
    with pytest.raises(InvalidSchedule, match="can never fire"):
        compile_cron("0 0 31 2,4 *")
    with pytest.raises(InvalidSchedule, match="must be a string"):
        compile_cron(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidSchedule, match="day-of-week field"):
        compile_cron("0 0 * * 9#2")


# -- field semantics (robfig/cron and Vixie cron) ----------------------------------------
@pytest.mark.parametrize(
    ("text", "after", "expected"),
    [
        # A range whose two ends are equal is that one value, with or without a step.
        ("5-5 * * * *", datetime(2026, 1, 1, 10, 17), datetime(2026, 1, 1, 11, 5)),
        ("0-0/1 * * * *", datetime(2026, 1, 1, 10, 17), datetime(2026, 1, 1, 11, 0)),
        ("1-1/1 * * * *", datetime(2026, 1, 1, 10, 17), datetime(2026, 1, 1, 11, 1)),
        ("59-59/15 * * * *", datetime(2026, 1, 1, 10, 17), datetime(2026, 1, 1, 10, 59)),
        ("0 0 * * Sun-Sun", datetime(2026, 1, 1), datetime(2026, 1, 4)),  # 1 Jan is a Thursday
        ("0 0 * * 7-7", datetime(2026, 1, 1), datetime(2026, 1, 4)),
        ("0 0 1 JAN-JAN *", datetime(2026, 1, 1), datetime(2027, 1, 1)),
        ("0 0 1 1-1/3 *", datetime(2026, 1, 1), datetime(2027, 1, 1)),
        ("0 5-5 * * * *", datetime(2026, 1, 1, 10, 17), datetime(2026, 1, 1, 11, 5)),
        # A list holding * selects every value of the field.
        ("*,5 * * * *", datetime(2026, 1, 1, 10, 17), datetime(2026, 1, 1, 10, 18)),
        ("* * * * *,0", datetime(2019, 1, 14, 11, 0, 59), datetime(2019, 1, 14, 11, 1)),
        ("0 0 * 3,* *", datetime(2026, 1, 1), datetime(2026, 1, 2)),
        # ... and leaves the other day field to decide alone (1 Jan 2026 is a Thursday).
        ("0 0 *,9 * MON", datetime(2026, 1, 6), datetime(2026, 1, 12)),
        ("0 0 9 * *,MON", datetime(2026, 1, 10), datetime(2026, 2, 9)),
    ],
)
def test_equal_ranges_and_star_in_a_list(text: str, after: datetime, expected: datetime) -> None:
    expr = compile_cron(text)
    assert expr.next_after(after) == expected
    assert expr.matches(expected)


def test_star_in_a_list_of_hours_is_an_hour_star() -> None:
    assert compile_cron("0 *,5 * * *").hour_is_star
    assert compile_cron("0 */1 * * *").hour_is_star
    assert not compile_cron("0 0-23 * * *").hour_is_star


@pytest.mark.parametrize(
    "text",
    [
        "\u0665 * * * *",  # ARABIC-INDIC DIGIT FIVE
        "\uff10 \uff10 * * *",  # FULLWIDTH DIGIT ZERO
        "*/\u0661\u0665 * * * *",
        "1-\u0661\u0660 * * * *",
        "0\u00a00 * * *",  # NO-BREAK SPACE between two fields
        "0\u30000 * * *",  # IDEOGRAPHIC SPACE
        "0 0 * * *\u00a0",
    ],
)
def test_only_ascii_digits_and_spaces(text: str) -> None:
    with pytest.raises(InvalidSchedule):
        compile_cron(text)


@pytest.mark.parametrize(
    ("text", "field", "values"),
    [
        ("*/20 * * * * *", "second", (0, 20, 40)),
        ("0 0 * * *", "second", (0,)),  # 5 fields: second 0
        ("50-10/7 * * * *", "minute", (4, 50, 57)),  # the step counts on across the wrap
        ("0 22-2 * * *", "hour", (0, 1, 2, 22, 23)),
        ("0 0 1 NOV-FEB/2 *", "month", (1, 11)),
        ("0 0 1 APR-MAR/2 *", "month", (2, 4, 6, 8, 10, 12)),
        ("0 0 * * THU-TUE/2", "day-of-week", (1, 4, 6)),
        ("0 0 * * 5-7", "day-of-week", (0, 5, 6)),  # 7 is Sunday
        ("0 0 * * 1-7/2", "day-of-week", (0, 1, 3, 5)),
        ("0 0 * * 7/2", "day-of-week", (0, 2, 4, 6)),
        ("0 0 * * SAT/2", "day-of-week", (6,)),  # N/S is N-max/S
        ("0 0 * * *", "day-of-week", (0, 1, 2, 3, 4, 5, 6)),
        ("0 0 L,5-5 * *", "day-of-month", (5,)),  # L is not a value
    ],
)
def test_values(text: str, field: str, values: tuple[int, ...]) -> None:
    assert compile_cron(text).values(field) == values


def test_values_of_an_unknown_field() -> None:
    with pytest.raises(ValueError, match="unknown cron field 'year'"):
        compile_cron("* * * * *").values("year")


def test_day_forms_with_our_reading_of_the_other_items() -> None:
    # croniter evaluates L, but the 5-5 beside it is read by us: the 5th and the last day.
    expr = compile_cron("0 0 L,5-5 * *")
    wall, found = datetime(2026, 1, 1), []
    for _ in range(4):
        wall = expr.next_after(wall)
        found.append(wall)
    assert found == [
        datetime(2026, 1, 5),
        datetime(2026, 1, 31),
        datetime(2026, 2, 5),
        datetime(2026, 2, 28),
    ]
    assert compile_cron("0 9 * JUL WED").special is False  # names holding L or W are names
