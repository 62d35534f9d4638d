"""@task, @periodic, autodiscovery and the sync of code-defined schedules."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from django_htask import code_schedules, decorators, periodic, task
from django_htask.engine import ArgumentError, FakeClock, InvalidSchedule, registry
from django_htask.models import Origin, Run, Schedule
from django_htask.tasks import autodiscover, discovered_modules
from tests.conftest import refused

PREFIX = "tests.integration.test_decorators"


def test_the_test_apps_tasks_module_was_autodiscovered() -> None:
    assert "tests.integration.testapp.tasks" in discovered_modules()
    registry.get("tests.integration.testapp.tasks:add")
    registry.get("custom.name")
    assert "testapp-minutely" in decorators.declared_schedules()
    assert autodiscover() == []  # once only


def local_job(x: int) -> None: ...


def other_job() -> None: ...


def job_a(n: int = 0) -> None: ...


def other() -> None: ...


def needs_int(n: int) -> None: ...


def test_task_registers_under_the_dotted_path_or_a_name() -> None:
    task(local_job)
    task(name="tests.some-name")(other_job)
    assert decorators.function_name(local_job) == f"{PREFIX}:{local_job.__qualname__}"
    assert decorators.function_name(other_job) == "tests.some-name"
    assert registry.get("tests.some-name") is not None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "max_snoozes must be from 0 to 100000, got -1"),
        (100_001, "max_snoozes must be from 0 to 100000, got 100001"),
        (2.5, "max_snoozes must be an int >= 0, got 2.5"),
        (True, "max_snoozes must be an int >= 0, got True"),
    ],
)
def test_task_refuses_a_bad_max_snoozes_naming_it(value: Any, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        task(max_snoozes=value)(other_job)
    assert str(raised.value) == message


@pytest.mark.usefixtures("declared")
@pytest.mark.parametrize(
    ("declaration", "error", "message"),
    [
        (periodic("every blue moon"), InvalidSchedule, "every blue moon"),
        (periodic("@evry 10s"), InvalidSchedule, "did you mean '@every'?"),
        (periodic("@every 5m", overlap="sometimes"), ValueError, "'sometimes'"),
        (periodic("@every 5m", max_attempts=0), ValueError, "max_attempts"),
        (periodic("@every 5m", args=("x",)), ArgumentError, "'x'"),
    ],
)
def test_periodic_checks_everything_at_import_time_and_records_what_is_wrong(
    declaration: Callable[[Any], Any], error: type[Exception], message: str
) -> None:
    bad = refused(lambda: declaration(needs_int))
    assert isinstance(bad.error, error)
    assert message in str(bad.error)
    assert bad.function == f"{PREFIX}.needs_int"
    line = needs_int.__code__.co_firstlineno
    assert bad.place == f"{__file__}:{line}"
    assert str(bad).startswith(f"@periodic({bad.when}) at {__file__}:{line}: ")
    assert decorators.function_name(needs_int) == f"{PREFIX}:needs_int"  # still registered
    assert f"{PREFIX}:needs_int" not in decorators.declared_schedules()


@pytest.mark.usefixtures("declared")
@pytest.mark.django_db
def test_sync_refuses_while_a_declaration_cannot_be_read(fake_clock: FakeClock) -> None:
    periodic("@every 5m", name="kept")(job_a)
    decorators.sync_schedules()
    periodic("@evry 5m", name="kept")(other)
    with pytest.raises(InvalidSchedule) as info:
        decorators.sync_schedules()
    assert str(info.value).startswith(
        f"1 @periodic declaration(s) cannot be read, nothing synced: {PREFIX}.other: "
        "@periodic('@evry 5m') at "
    )
    assert Schedule.objects.get(name="kept").enabled  # not taken for gone


@pytest.mark.usefixtures("declared")
@pytest.mark.django_db
def test_sync_creates_updates_and_orphans(fake_clock: FakeClock) -> None:
    periodic("@every 5m", name="sync-a", tz="Asia/Tokyo", overlap="allow", max_attempts=3)(job_a)

    first = decorators.sync_schedules()
    assert "sync-a" in first.created
    row = Schedule.objects.get(name="sync-a")
    assert (row.origin, row.timezone, row.overlap, row.max_attempts) == (
        "code",
        "Asia/Tokyo",
        "allow",
        3,
    )
    assert row.function == f"{PREFIX}:{job_a.__qualname__}"
    assert row.next_run_at is not None

    again = decorators.sync_schedules()
    assert "sync-a" in again.unchanged
    assert Schedule.objects.get(name="sync-a").version == row.version  # no churn

    with code_schedules._lock:
        del code_schedules._declared["sync-a"]
    periodic("@every 10m", name="sync-a", kwargs={"n": 4})(job_a)

    twice = refused(lambda: periodic("@every 1m", name="sync-a")(other))
    assert "declared twice" in str(twice.error)

    updated = decorators.sync_schedules()
    assert "sync-a" in updated.updated
    row = Schedule.objects.get(name="sync-a")
    assert row.schedule != "@every 5m"
    assert row.call == ((), {"n": 4})

    Run.objects.create(schedule=row, name="sync-a", function=row.function, status="succeeded")
    with code_schedules._lock:
        del code_schedules._declared["sync-a"]
    gone = decorators.sync_schedules()
    assert gone.orphaned == ["sync-a"]
    row.refresh_from_db()
    assert (row.enabled, row.orphaned, row.next_run_at) == (False, True, None)
    assert row.runs.count() == 1  # history kept

    periodic("@every 10m", name="sync-a", kwargs={"n": 4})(job_a)
    back = decorators.sync_schedules()
    assert "sync-a" in back.updated
    row.refresh_from_db()
    assert (row.enabled, row.orphaned) == (True, False)
    assert row.next_run_at is not None


@pytest.mark.usefixtures("declared")
@pytest.mark.django_db
def test_sync_takes_over_an_admin_row_of_the_same_name(fake_clock: FakeClock) -> None:
    Schedule.objects.create(
        name="testapp-minutely",
        function="custom.name",
        schedule="@every 1h",
    )
    decorators.sync_schedules()
    row = Schedule.objects.get(name="testapp-minutely")
    assert row.origin == Origin.CODE
    assert row.function == "tests.integration.testapp.tasks:minutely"


@pytest.mark.django_db
def test_htask_sync_command(fake_clock: FakeClock) -> None:
    out = StringIO()
    call_command("htask", "sync", stdout=out)
    assert "created: testapp-minutely" in out.getvalue()
    out = StringIO()
    call_command("htask", "sync", stdout=out)
    assert "0 created, 0 updated, 1 unchanged" in out.getvalue()


def nightly() -> None: ...


@pytest.mark.usefixtures("declared")
@pytest.mark.django_db
def test_periodic_cron_in_a_zone(fake_clock: FakeClock) -> None:
    periodic("30 4 * * *", tz="Asia/Tokyo", name="nightly", grace=60, catch_up="all")(nightly)
    decorators.sync_schedules()
    row = Schedule.objects.get(name="nightly")
    # 2030-01-01 00:00 UTC is 09:00 in Tokyo: the next 04:30 there is 19:30 UTC.
    assert row.next_run_at == fake_clock.now() + timedelta(hours=19, minutes=30)
    assert (row.timezone, row.grace, row.catch_up) == ("Asia/Tokyo", 60.0, "all")


def morning() -> None: ...


@pytest.mark.usefixtures("declared")
@pytest.mark.django_db
def test_periodic_takes_a_fluent_schedule(fake_clock: FakeClock) -> None:
    from django_htask.engine import every

    periodic(every().day.at("10:30"), name="morning", overlap="delay")(morning)
    decorators.sync_schedules()
    row = Schedule.objects.get(name="morning")
    assert row.next_run_at == fake_clock.now() + timedelta(hours=10, minutes=30)
    assert row.overlap == "delay"


@pytest.mark.usefixtures("declared")
@pytest.mark.django_db
def test_periodic_timeout_is_synced_and_a_bad_one_recorded(fake_clock: FakeClock) -> None:
    periodic("@every 5m", name="timed", timeout=timedelta(minutes=2))(job_a)
    decorators.sync_schedules()
    assert Schedule.objects.get(name="timed").timeout == 120.0
    bad = refused(lambda: periodic("@every 5m", name="bad-timeout", timeout=-1)(other))
    assert str(bad.error) == "timeout must be from 0.001 to 31536000 seconds, got -1"
