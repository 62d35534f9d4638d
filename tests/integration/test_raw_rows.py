"""Rows written behind the ORM (raw SQL, a producer in another language), as a node
runs (issue 14, items 4 and 5): timestamps in any common ISO 8601 text form are the
same instant, on SQLite as on PostgreSQL; numbers out of range are refused by CHECK
constraints, and a node meeting one anyway marks the schedule broken.

MySQL and MariaDB store times in ``DATETIME`` columns, which take no zone: there a
producer writes UTC as ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (``T`` in place of the space
too), and a text with a zone (``Z``, ``+01:00``) is refused by the server (error 1292),
never read as another instant: the MariaDB pass checks that refusal instead."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction

from django_htask.engine import FakeClock, registry
from django_htask.models import Run, RunStatus, Schedule, Task, TaskStatus, new_token
from tests.conftest import START
from tests.integration.test_faults import without_check_constraints

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "tests.integration.testapp.tasks:add"
MakeNode = Any


#: The server refuses a time with a zone (see the module).
ZONES_REFUSED = connection.vendor == "mysql"
#: MySQL's DOUBLE has no infinity (its driver refuses one before the server sees it).
NO_INFINITY = connection.vendor == "mysql"


def written(text: str) -> str:
    """The ISO 8601 time ``text`` as a producer writes it on this database: as is, or
    in UTC with no zone on MySQL/MariaDB (see the module)."""
    if not ZONES_REFUSED:
        return text
    instant = datetime.fromisoformat(text).astimezone(UTC)
    return instant.replace(tzinfo=None).isoformat(sep=" ")


def has_zone(text: str) -> bool:
    return text.endswith("Z") or text[-6] in "+-"


def assert_zone_refused(write: Callable[[], object]) -> None:
    """On MySQL/MariaDB, a time with a zone is refused loudly, and nothing is written."""
    with pytest.raises(DatabaseError, match="Incorrect datetime value"), transaction.atomic():
        write()


def insert(table: str, values: dict[str, Any]) -> int:
    """Insert a row as a producer in another language does: plain SQL, texts for times."""
    columns = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", list(values.values()))
        cursor.execute(f"SELECT max(id) FROM {table}")
        return int(cursor.fetchone()[0])


def insert_schedule(next_run_at: str, **overrides: Any) -> int:
    values = {
        "name": "raw",
        "function": ADD,
        "schedule": "@every 1m",
        "timezone": "UTC",
        "payload": registry.check_call(ADD, (1,), {}),
        "enabled": True,
        "next_run_at": next_run_at,
        "last_status": "",
        "catch_up": "latest",
        "overlap": "skip",
        "max_attempts": 1,
        "retry_backoff": 10.0,
        "origin": "admin",
        "orphaned": False,
        "version": 0,
        "created_at": written("2029-12-31T23:00:00Z"),
        "updated_at": written("2029-12-31T23:00:00Z"),
        **overrides,
    }
    return insert("django_htask_schedule", values)


def insert_task(run_at: str, **overrides: Any) -> int:
    values = {
        "token": new_token(),
        "function": ADD,
        "payload": registry.check_call(ADD, (2, 3), {}),
        "run_at": run_at,
        "status": "pending",
        "attempts": 0,
        "max_attempts": 1,
        "last_error": "",
        "traceback": "",
        "created_at": written("2029-12-31T23:00:00Z"),
        **overrides,
    }
    return insert("django_htask_task", values)


def stored_text(table: str, column: str, pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT CAST({column} AS TEXT) FROM {table} WHERE id = %s", [pk])
        return str(cursor.fetchone()[0])


# -- 4. timestamps in every common text form ---------------------------------------------
# 2030-01-01T00:00:30Z (START + 30 s), or 250 ms later, as tools write it.
DUE = START + timedelta(seconds=30)
FORMS = [
    ("2030-01-01T00:00:30+00:00", DUE),
    ("2030-01-01T00:00:30Z", DUE),
    ("2030-01-01T00:00:30.250Z", DUE + timedelta(microseconds=250_000)),
    ("2030-01-01T00:00:30.250000+00:00", DUE + timedelta(microseconds=250_000)),
    ("2030-01-01T01:00:30+01:00", DUE),
    ("2029-12-31T19:00:30.123456489-05:00", DUE + timedelta(microseconds=123_456)),
    ("2030-01-01 00:00:30.25", DUE + timedelta(microseconds=250_000)),
    ("2030-01-01T00:00:30", DUE),
]
SQLITE_TEXT = {  # what Django itself writes on SQLite: naive UTC, str(datetime)
    DUE: "2030-01-01 00:00:30",
    DUE + timedelta(microseconds=250_000): "2030-01-01 00:00:30.250000",
    DUE + timedelta(microseconds=123_456): "2030-01-01 00:00:30.123456",
}


@pytest.mark.parametrize(("text", "instant"), FORMS, ids=[f[0] for f in FORMS])
def test_a_schedule_inserted_with_an_iso_next_run_fires_once_per_occurrence(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, text: str, instant: datetime
) -> None:
    node = make_node()
    if ZONES_REFUSED and has_zone(text):
        assert_zone_refused(lambda: insert_schedule(text))
        assert not Schedule.objects.exists()
        return
    pk = insert_schedule(text)
    if connection.vendor == "sqlite":
        assert stored_text("django_htask_schedule", "next_run_at", pk) == SQLITE_TEXT[instant]
        assert stored_text("django_htask_schedule", "created_at", pk) == "2029-12-31 23:00:00"
    assert Schedule.objects.get(pk=pk).next_run_at == instant
    fake_clock.advance(1)  # the poll sees the new row
    assert node.placed_schedules() == {pk: instant}
    fake_clock.advance(30)  # due: it fires
    fake_clock.advance(60)  # and again a minute later
    fake_clock.advance(20)
    runs = Run.objects.filter(schedule_id=pk).order_by("scheduled_for")
    assert [(r.scheduled_for, r.status) for r in runs] == [
        (instant, RunStatus.SUCCEEDED),
        (instant + timedelta(minutes=1), RunStatus.SUCCEEDED),
    ]
    assert calls["add"] == [1, 1]
    assert Schedule.objects.get(pk=pk).next_run_at == instant + timedelta(minutes=2)


@pytest.mark.parametrize(("text", "instant"), FORMS, ids=[f[0] for f in FORMS])
def test_a_task_inserted_with_an_iso_run_at_runs_at_its_time(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, text: str, instant: datetime
) -> None:
    make_node()
    if ZONES_REFUSED and has_zone(text):
        assert_zone_refused(lambda: insert_task(text))
        assert not Task.objects.exists()
        return
    pk = insert_task(text)
    if connection.vendor == "sqlite":
        assert stored_text("django_htask_task", "run_at", pk) == SQLITE_TEXT[instant]
    assert Task.objects.get(pk=pk).run_at == instant
    fake_clock.advance(29)
    assert calls["add"] == []  # not before its time
    fake_clock.advance(2)
    task = Task.objects.get(pk=pk)
    assert (task.status, task.attempts, calls["add"]) == (TaskStatus.SUCCEEDED, 1, [5])
    assert task.started_at is not None and task.started_at >= instant


def test_an_iso_time_set_by_an_update_is_read_as_the_same_instant(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    row = Schedule(name="moved", function=ADD, schedule="@every 1h")
    row.set_call((7,))
    row.save()

    def move(text: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE django_htask_schedule SET next_run_at = %s WHERE id = %s", [text, row.pk]
            )

    if ZONES_REFUSED:
        before = Schedule.objects.get(pk=row.pk).next_run_at
        assert_zone_refused(lambda: move("2030-01-01T09:00:10+09:00"))
        assert Schedule.objects.get(pk=row.pk).next_run_at == before
    move(written("2030-01-01T09:00:10+09:00"))
    row.refresh_from_db()
    assert row.next_run_at == START + timedelta(seconds=10)
    fake_clock.advance(1)
    fake_clock.advance(10)
    assert calls["add"] == [7]
    assert Run.objects.get(schedule=row).scheduled_for == START + timedelta(seconds=10)


UNREADABLE = ["bogus", "2030-02-30T10:00:00Z", "2030-01-01T10:00:00+25:00", "1"]


@pytest.mark.parametrize("text", UNREADABLE)
def test_a_time_that_cannot_be_read_is_refused_at_insert(fake_clock: FakeClock, text: str) -> None:
    with pytest.raises(DatabaseError) as exc, transaction.atomic():
        insert_task(text)
    if connection.vendor == "sqlite":
        assert isinstance(exc.value, IntegrityError)
        assert "django_htask_task.run_at is not a time django-htask can read" in str(exc.value)
    assert not Task.objects.exists()


# -- 5. CHECK constraints -----------------------------------------------------------------
SCHEDULE_VALUES = [
    ("max_attempts", 0),
    ("max_attempts", 1001),
    ("retry_backoff", -100.0),
    ("retry_backoff", 1e308),
    ("retry_backoff", float("inf")),
    ("grace", -5.0),
    ("grace", 1e308),
]
TASK_VALUES = [("max_attempts", 0), ("max_attempts", 1001), ("priority", 101), ("priority", -101)]


@pytest.mark.parametrize(("column", "value"), SCHEDULE_VALUES)
def test_a_check_constraint_refuses_a_schedule_number_out_of_range(
    fake_clock: FakeClock, column: str, value: float
) -> None:
    refused = DatabaseError if NO_INFINITY and value == float("inf") else IntegrityError
    with pytest.raises(refused), transaction.atomic():
        insert_schedule("2030-01-01 00:00:30", **{column: value})
    assert not Schedule.objects.exists()
    pk = insert_schedule("2030-01-01 00:00:30")
    with pytest.raises(refused), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE django_htask_schedule SET {column} = %s WHERE id = %s", [value, pk])
    bounds = {"max_attempts": (1, 1000), "retry_backoff": (0, 86400), "grace": (0, 31536000)}
    with connection.cursor() as cursor:  # the bounds themselves are in range
        for bound in bounds[column]:
            cursor.execute(
                f"UPDATE django_htask_schedule SET {column} = %s WHERE id = %s", [bound, pk]
            )


@pytest.mark.parametrize(("column", "value"), TASK_VALUES)
def test_a_check_constraint_refuses_a_task_number_out_of_range(
    fake_clock: FakeClock, column: str, value: int
) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_task("2030-01-01 00:00:30", **{column: value})
    assert not Task.objects.exists()
    pk = insert_task("2030-01-01 00:00:30")
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE django_htask_task SET {column} = %s WHERE id = %s", [value, pk])


# A row from before the constraints (or with them off): the node marks it broken.
OVER = [
    ("max_attempts", 5000, "max_attempts 5000 is over the limit of 1000"),
    ("retry_backoff", 1e308, "retry_backoff 1e+308 is over the limit of 86400"),
    ("grace", 1e308, "grace 1e+308 is over the limit of 31536000"),
]


@pytest.mark.parametrize(("column", "value", "reason"), OVER, ids=[o[0] for o in OVER])
def test_a_schedule_over_a_limit_is_marked_broken_and_the_others_go_on(
    make_node: MakeNode,
    fake_clock: FakeClock,
    calls: Any,
    caplog: pytest.LogCaptureFixture,
    column: str,
    value: float,
    reason: str,
) -> None:
    good = Schedule(name="good", function=ADD, schedule="@every 1m")
    good.set_call((1,))
    good.save()
    node = make_node()
    with (
        without_check_constraints("django_htask_schedule"),
        caplog.at_level(logging.ERROR, logger="django_htask"),
    ):
        pk = insert_schedule(written("2030-01-01T00:00:30Z"), **{column: value})
        fake_clock.advance(1)
        for _ in range(3):
            fake_clock.advance(60)
    bad = Schedule.objects.get(pk=pk)
    assert (bad.broken, bad.next_run_at, bad.last_status) == (reason, None, RunStatus.FAILED)
    [run] = Run.objects.filter(schedule=bad)
    assert (run.status, run.error) == (RunStatus.FAILED, f"broken: {reason}")
    assert [r.action for r in caplog.records if hasattr(r, "action")].count("schedule_broken") == 1
    assert pk not in node.placed_schedules()
    assert calls["add"] == [1, 1, 1]  # the good one kept firing


# -- migration 0004 on a database that holds such rows ----------------------------------
def migrate(target: str | None) -> None:
    """Migrate django_htask to ``target`` (None: its latest migration, as the other tests
    expect the database)."""
    from django.db.migrations.executor import MigrationExecutor

    from django_htask.store import install
    from django_htask.store.sqlite import TIMESTAMPS

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    if target is None:
        [(_app, target)] = executor.loader.graph.leaf_nodes("django_htask")
    executor.migrate([("django_htask", target)])
    install()  # what post_migrate does after `manage.py migrate`
    if connection.vendor == "sqlite" and target < "0004":  # the timestamp triggers came later
        with connection.cursor() as cursor:
            for table, columns in TIMESTAMPS.items():
                for column in columns:
                    for event in ("insert", "update"):
                        cursor.execute(f"DROP TRIGGER {table}_{column}_utc_{event}")


def test_migration_0004_puts_old_rows_in_range_and_their_times_in_one_form(
    fake_clock: FakeClock,
) -> None:
    migrate("0003_queues")
    try:
        bad = insert_schedule(written("2030-01-01T00:00:30Z"), retry_backoff=-100.0, grace=1e308)
        fine = insert_schedule(written("2030-01-01T01:00:30+01:00"), name="fine")
        task = insert_task(written("2030-01-01T00:00:30.5Z"), max_attempts=0, priority=500)
    finally:
        migrate(None)  # through 0004_ranges_and_timestamps, to the latest
    row = Schedule.objects.get(pk=bad)
    assert (row.retry_backoff, row.grace, row.next_run_at) == (0.0, 31536000.0, None)
    assert row.broken == (
        "retry_backoff -100.0 was out of range (0 to 86400); grace 1e+308 was out of range "
        "(0 to 31536000): migration 0004 set retry_backoff=0.0, grace=31536000.0; "
        "check and save it"
    )
    assert Schedule.objects.get(pk=fine).broken == ""
    assert Schedule.objects.get(pk=fine).next_run_at == DUE
    moved = Task.objects.get(pk=task)
    assert (moved.max_attempts, moved.priority) == (1, 100)
    assert moved.run_at == DUE + timedelta(microseconds=500_000)
    if connection.vendor == "sqlite":
        assert stored_text("django_htask_task", "run_at", task) == "2030-01-01 00:00:30.500000"
        assert stored_text("django_htask_task", "created_at", task) == "2029-12-31 23:00:00"
