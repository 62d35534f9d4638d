"""What the admin and ``htask list`` show: the runs the scheduler will fire."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from django_htask.engine import FakeClock
from django_htask.models import Schedule
from django_htask.operations import Upcoming, edited_runs, preview_runs, upcoming_runs
from tests.conftest import START

pytestmark = pytest.mark.django_db

ADD = "tests.integration.testapp.tasks:add"


def make(text: str = "@every 45s", **kwargs: Any) -> Schedule:
    row = Schedule(name="s", function=ADD, schedule=text, **kwargs)
    row.set_call((1,))
    row.save()
    return row


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


def times(runs: list[Upcoming]) -> list[datetime]:
    return [run.at for run in runs]


def test_a_saved_schedule_counts_from_its_stored_next_run_not_from_now(
    fake_clock: FakeClock,
) -> None:
    row = make()  # saved at 00:00:00: next_run_at 00:00:45
    fake_clock.advance(20)  # the page is opened 20 s later
    runs = upcoming_runs(row, 3, fake_clock.now())
    assert runs == [Upcoming(at(45)), Upcoming(at(90)), Upcoming(at(135))]
    assert row.next_run_at == runs[0].at
    # What a new schedule with the same text would do counts from now.
    assert times(preview_runs("@every 45s", "UTC", 2, fake_clock.now())) == [at(65), at(110)]


@pytest.mark.parametrize(
    ("options", "first"),
    [
        ({}, Upcoming(at(45), overdue=True, runs=1)),  # latest: the due ones run once
        ({"catch_up": "all"}, Upcoming(at(45), overdue=True, runs=2)),  # 00:00:45, 00:01:30
        ({"grace": 5.0}, Upcoming(at(45), overdue=True, runs=0)),  # 10 s late: missed
    ],
)
def test_an_overdue_schedule_is_due_now_then_follows_the_misfire_policy(
    fake_clock: FakeClock, options: dict[str, Any], first: Upcoming
) -> None:
    row = make(**options)
    fake_clock.advance(100)  # no node ran: 00:00:45 and 00:01:30 are due
    runs = upcoming_runs(row, 4, fake_clock.now())
    # The node fires the due ones at once, then goes on from 00:02:15, the first
    # occurrence after now on the schedule's own grid.
    assert runs == [first, Upcoming(at(135)), Upcoming(at(180)), Upcoming(at(225))]


def test_the_text_of_a_run_in_a_zone(fake_clock: FakeClock) -> None:
    paris = ZoneInfo("Europe/Paris")
    assert Upcoming(at(45)).text(paris) == "2030-01-01 01:00:45 CET"
    assert Upcoming(at(45)).text(UTC) == "2030-01-01 00:00:45 UTC"
    due = Upcoming(at(45), overdue=True)
    assert due.text(paris) == "due now (overdue since 2030-01-01 01:00:45 CET)"
    assert Upcoming(at(45), overdue=True, runs=3).text(UTC) == (
        "due now, 3 runs (overdue since 2030-01-01 00:00:45 UTC)"
    )
    assert Upcoming(at(45), overdue=True, runs=0).text(UTC) == (
        "missed (overdue since 2030-01-01 00:00:45 UTC)"
    )


def test_disabled_finished_and_emptied_schedules_fire_nothing(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    assert upcoming_runs(make(enabled=False), 5, now) == []
    Schedule.objects.all().delete()
    row = make("@once 2030-01-01T00:01:00Z")
    assert upcoming_runs(row, 5, now) == [Upcoming(at(60))]
    fake_clock.advance(120)
    Schedule.objects.filter(pk=row.pk).update(next_run_at=None)  # fired: none left
    row.refresh_from_db()
    assert upcoming_runs(row, 5, fake_clock.now()) == []


def test_an_edit_previews_what_the_save_will_store(fake_clock: FakeClock) -> None:
    row = make()
    fake_clock.advance(20)
    now = fake_clock.now()
    # Unchanged: the save keeps next_run_at.
    assert times(edited_runs(row, "@every 45s", "UTC", True, 2, now)) == [at(45), at(90)]
    # A new text, zone or enabled flag: the save recomputes next_run_at from now.
    preview = edited_runs(row, "@every 30s", "UTC", True, 2, now)
    assert times(preview) == [at(50), at(80)]
    assert times(edited_runs(row, "@every 45s", "Asia/Tokyo", True, 1, now)) == [at(65)]
    assert edited_runs(row, "@every 45s", "UTC", False, 5, now) == []
    assert times(edited_runs(None, "@every 45s", "UTC", True, 1, now)) == [at(65)]
    row.schedule = "@every 30s"
    row.save()
    assert row.next_run_at == preview[0].at
