"""``htask import-celery-beat`` against the real django-celery-beat: its models, its
migrations (applied to the test database), one periodic task of every kind."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_htask.celery_beat import (
    CREATED,
    DIFFERS,
    SKIPPED,
    UNCHANGED,
    WOULD_CREATE,
    import_celery_beat,
    parse_map,
)
from django_htask.engine import FakeClock
from django_htask.models import Origin, Schedule

pytest.importorskip(
    "django_celery_beat",
    reason="django-celery-beat is not installed: it supports Django < 6.1, and tox "
    "installs it for Django 5.2 and 6.0 only",
)
pytest.importorskip("astral", reason="astral (the solar extra) is not installed")

from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

pytestmark = pytest.mark.django_db

ADD = "tests.integration.testapp.tasks:add"
RENAMED = "custom.name"  # registered under this name by @task(name=...)
START = datetime(2030, 2, 1, 8, 0, tzinfo=UTC)
EXPIRES = datetime(2031, 1, 1, tzinfo=UTC)
CLOCKED = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def htask(*args: str) -> str:
    out = StringIO()
    call_command("htask", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def every_kind() -> None:
    """One periodic task of each kind, and the cases that cannot be carried over."""
    paris_night = CrontabSchedule.objects.create(
        minute="30", hour="4", timezone=ZoneInfo("Europe/Paris")
    )
    PeriodicTask.objects.create(
        name="nightly",
        task="tests.integration.testapp.tasks.add",  # celery's dotted name, registered
        crontab=paris_night,
        args="[1]",
        kwargs='{"b": 2}',
        description="Adds up overnight.\nSecond line.",
        queue="reports",
        exchange="reports-x",
        routing_key="reports.nightly",
        headers='{"trace": "1"}',
        priority=5,
    )
    PeriodicTask.objects.create(
        name="pulse",
        task="celery.add",  # mapped with --map
        interval=IntervalSchedule.objects.create(every=15, period="minutes"),
        args="[3, 4]",
        start_time=START,
        expires=EXPIRES,
        enabled=False,
    )
    PeriodicTask.objects.create(
        name="launch",
        task=RENAMED,
        clocked=ClockedSchedule.objects.create(clocked_time=CLOCKED),
        one_off=True,
        expires=CLOCKED + timedelta(hours=2),
    )
    PeriodicTask.objects.create(
        name="lights",
        task="tests.integration.testapp.tasks.add",
        solar=SolarSchedule.objects.create(
            event="sunset", latitude=Decimal("48.856600"), longitude=Decimal("2.352200")
        ),
        kwargs='{"a": 7}',
        expire_seconds=600,
    )
    PeriodicTask.objects.create(
        name="once-soon",
        task="tests.integration.testapp.tasks.add",
        interval=IntervalSchedule.objects.create(every=10, period="minutes"),
        args="[9]",
        one_off=True,
    )
    # Cannot be carried over:
    PeriodicTask.objects.create(
        name="celery.backend_cleanup",
        task="celery.backend_cleanup",
        crontab=CrontabSchedule.objects.create(minute="0", hour="4"),
    )
    PeriodicTask.objects.create(
        name="bad-args",
        task="tests.integration.testapp.tasks.add",
        interval=IntervalSchedule.objects.create(every=1, period="hours"),
        args='["x", "y", "z"]',
    )
    PeriodicTask.objects.create(
        name="both-days",
        task="tests.integration.testapp.tasks.add",
        crontab=CrontabSchedule.objects.create(
            minute="0", hour="9", day_of_month="1", day_of_week="1"
        ),
        args="[1]",
    )
    PeriodicTask.objects.create(
        name="too-fine",
        task="tests.integration.testapp.tasks.add",
        interval=IntervalSchedule.objects.create(every=1500, period="microseconds"),
        args="[1]",
    )


MAP = ("--map", "celery.add=tests.integration.testapp.tasks:add")


def rows() -> dict[str, Schedule]:
    return {s.name: s for s in Schedule.objects.all()}


def test_every_kind_is_carried_over(fake_clock: FakeClock) -> None:
    every_kind()
    out = htask("import-celery-beat", *MAP)
    got = rows()
    assert sorted(got) == ["launch", "lights", "nightly", "once-soon", "pulse"]

    nightly = got["nightly"]  # crontab with its zone, args and kwargs
    assert (nightly.function, nightly.schedule, nightly.timezone) == (
        ADD,
        "30 4 * * *",
        "Europe/Paris",
    )
    assert nightly.call == ((1,), {"b": 2})
    assert nightly.description == "Adds up overnight.\nSecond line."
    assert nightly.enabled
    assert nightly.origin == Origin.ADMIN
    assert nightly.next_run_at == datetime(2030, 1, 1, 3, 30, tzinfo=UTC)  # 04:30 CET

    pulse = got["pulse"]  # interval, --map, start_time, expires, disabled
    assert pulse.function == ADD
    assert pulse.schedule == (
        "FROM=2030-02-01T08:00:00+00:00 UNTIL=2031-01-01T00:00:00+00:00 @every 15m"
    )
    assert pulse.call == ((3, 4), {})
    assert not pulse.enabled
    assert pulse.parsed().next_after(fake_clock.now()) == START

    launch = got["launch"]  # clocked one-off; expires becomes its grace
    assert launch.function == RENAMED
    assert launch.schedule == "@once 2030-06-01T12:00:00+00:00"
    assert launch.grace == 7200
    assert launch.next_run_at == CLOCKED

    lights = got["lights"]  # solar; expire_seconds becomes the grace
    assert lights.schedule == "@solar sunset 48.8566 2.3522"
    assert lights.call == ((), {"a": 7})
    assert lights.grace == 600
    assert lights.next_run_at is not None
    assert datetime(2030, 1, 1, 15, 50, tzinfo=UTC) < lights.next_run_at
    assert lights.next_run_at < datetime(2030, 1, 1, 16, 10, tzinfo=UTC)  # ~17:04 CET

    once = got["once-soon"]  # a one-off interval: once, at its first occurrence
    assert once.schedule == "@once 2030-01-01T00:10:00+00:00"
    assert once.call == ((9,), {})

    # What was not carried over is listed, with the reason.
    for text in (
        "nightly: created: 30 4 * * * (Europe/Paris), runs " + ADD,
        "not carried over: queue 'reports'",
        "not carried over: exchange 'reports-x'",
        "not carried over: routing_key 'reports.nightly'",
        'not carried over: headers {"trace": "1"}',
        "not carried over: priority 5",
        "note: expire_seconds=600 became grace",
        "note: one_off: runs once",
        "celery.backend_cleanup: skipped: task 'celery.backend_cleanup' is not a "
        "registered function; register it with @task or map it: "
        "--map celery.backend_cleanup=module:function",
        "bad-args: skipped: its arguments do not fit " + ADD,
        "both-days: skipped: crontab '0 9 1 * 1' restricts both day_of_month and day_of_week",
        "too-fine: skipped: every 1500 microseconds: intervals are whole milliseconds",
        "5 created, 4 skipped",
    ):
        assert text in out, text


def test_dry_run_writes_nothing(fake_clock: FakeClock) -> None:
    every_kind()
    out = htask("import-celery-beat", "--dry-run", *MAP)
    assert Schedule.objects.count() == 0
    assert "nightly: would create: 30 4 * * * (Europe/Paris)" in out
    assert "5 would create, 4 skipped (dry run: nothing written)" in out


def test_a_second_run_creates_nothing_new(fake_clock: FakeClock) -> None:
    every_kind()
    htask("import-celery-beat", *MAP)
    before = {name: (row.pk, row.version) for name, row in rows().items()}
    out = htask("import-celery-beat", *MAP)
    assert {name: (row.pk, row.version) for name, row in rows().items()} == before
    assert "nightly: exists, unchanged: 30 4 * * * (Europe/Paris)" in out
    assert "5 exists, unchanged, 4 skipped" in out
    # Without the mapping the mapped task is not created again, nor removed: listed.
    again = htask("import-celery-beat")
    assert "pulse: skipped: task 'celery.add' is not a registered function" in again
    assert "the schedule of that name is left as it is" in again
    assert Schedule.objects.count() == 5


def test_a_schedule_changed_since_is_listed_and_left_alone(fake_clock: FakeClock) -> None:
    every_kind()
    import_celery_beat(parse_map([MAP[1]]))
    Schedule.objects.filter(name="nightly").update(schedule="0 5 * * *")
    report = import_celery_beat(parse_map([MAP[1]]))
    outcomes = {item.name: item for item in report.items}
    assert outcomes["nightly"].outcome == DIFFERS
    assert outcomes["nightly"].reason == "schedule"
    assert Schedule.objects.get(name="nightly").schedule == "0 5 * * *"
    assert outcomes["pulse"].outcome == UNCHANGED
    assert {item.outcome for item in report.items} <= {DIFFERS, UNCHANGED, SKIPPED}


def test_the_report_lists_every_task(fake_clock: FakeClock) -> None:
    every_kind()
    report = import_celery_beat(parse_map([MAP[1]]), dry_run=True)
    assert [item.name for item in report.items] == sorted(
        PeriodicTask.objects.values_list("name", flat=True)
    )
    assert report.count(WOULD_CREATE) == 5
    assert report.count(CREATED) == 0


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("no-equals", "expected celery.task.name=module:function"),
        ("celery.add=nowhere:fn", "'nowhere:fn' is not a registered function"),
    ],
)
def test_a_bad_map_is_a_usage_error(entry: str, message: str) -> None:
    with pytest.raises(CommandError, match=message) as info:
        htask("import-celery-beat", "--map", entry)
    assert info.value.returncode == 2


def test_a_dotted_map_target_is_read_as_module_function() -> None:
    assert parse_map(["x=tests.integration.testapp.tasks.add"]) == {"x": ADD}


def test_without_django_celery_beat_the_command_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "django_celery_beat", None)
    with pytest.raises(CommandError, match=r"django-celery-beat is not installed") as info:
        htask("import-celery-beat")
    assert info.value.returncode == 2


def test_a_clocked_task_waits_for_its_start_time_and_may_be_past(fake_clock: FakeClock) -> None:
    PeriodicTask.objects.create(
        name="held",
        task=RENAMED,
        clocked=ClockedSchedule.objects.create(clocked_time=CLOCKED),
        one_off=True,
        start_time=CLOCKED + timedelta(days=1),
    )
    PeriodicTask.objects.create(
        name="expired",
        task=RENAMED,
        clocked=ClockedSchedule.objects.create(clocked_time=CLOCKED),
        one_off=True,
        expires=CLOCKED - timedelta(days=1),
    )
    PeriodicTask.objects.create(
        name="past",
        task=RENAMED,
        clocked=ClockedSchedule.objects.create(clocked_time=datetime(2029, 1, 1, tzinfo=UTC)),
        one_off=True,
    )
    out = htask("import-celery-beat")
    assert Schedule.objects.get(name="held").schedule == "@once 2030-06-02T12:00:00+00:00"
    assert "expired: skipped: it expires before its clocked time" in out
    assert "past: created: @once 2029-01-01T00:00:00+00:00" in out
    assert "note: its time 2029-01-01T00:00:00+00:00 has passed: it will not run" in out
    assert Schedule.objects.get(name="past").next_run_at is None
