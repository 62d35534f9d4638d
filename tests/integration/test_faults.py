"""Faults met in one process, on the fake clock: tasks that raise what ends a process,
caught-up occurrences and the overlap policy, rows written behind the model's back.

The same faults with real processes (``kill -9``, SIGSTOP) are in
``tests/acceptance/test_faults.py`` and ``tests/cluster/test_faults.py``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from django_htask import schedule
from django_htask.engine import FakeClock
from django_htask.models import Run, RunStatus, Schedule, Task, TaskStatus
from django_htask.signals import run_finished
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "tests.integration.testapp.tasks:add"
EXITS = "tests.integration.testapp.tasks:exits"
EXCLUSIVE = "tests.integration.testapp.tasks:exclusive"
MakeNode = Callable[..., Any]


def make_schedule(
    name: str, function: str = ADD, args: tuple[Any, ...] = (1,), **kw: Any
) -> Schedule:
    row = Schedule(name=name, function=function, schedule=kw.pop("text", "@every 1m"), **kw)
    row.set_call(args)
    row.save()
    return row


# -- 2. a task that raises SystemExit or KeyboardInterrupt ------------------------------
@pytest.mark.parametrize(
    ("kind", "error"),
    [("system", "SystemExit: 1"), ("exit", "SystemExit: 1"), ("keyboard", "KeyboardInterrupt: ")],
)
def test_a_task_raising_what_ends_a_process_fails_only_its_run(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, kind: str, error: str
) -> None:
    finished: list[tuple[str, str]] = []

    def on_finished(sender: object, status: str, error: str, **kwargs: object) -> None:
        finished.append((status, error))

    run_finished.connect(on_finished)
    try:
        node = make_node()
        poison = schedule(tasks.exits, kind, max_attempts=1)
        fake_clock.advance(0)
        after = schedule(tasks.add, 2, 3)  # the node goes on serving
        fake_clock.advance(0)
    finally:
        run_finished.disconnect(on_finished)
    poison.refresh_from_db()
    assert (poison.status, poison.attempts, poison.last_error) == (TaskStatus.FAILED, 1, error)
    assert type_name(error) in poison.traceback
    run = Run.objects.get(task=poison)
    assert (run.status, run.error) == (RunStatus.FAILED, error)
    assert finished[0] == (RunStatus.FAILED, error)
    assert Task.objects.get(pk=after.pk).status == TaskStatus.SUCCEEDED
    assert calls["add"] == [5]
    assert not node.stop_requested


def type_name(error: str) -> str:
    return error.split(":", maxsplit=1)[0]


@pytest.mark.parametrize(
    ("function", "message", "stored"),
    [
        (tasks.boom, "bad\x00value", "bad\\x00value"),
        (tasks.boom_bytes, b"bad\xffvalue", "bad\\udcffvalue"),
    ],
    ids=["nul", "lone-surrogate"],
)
def test_an_error_text_no_database_can_store_is_written_escaped(
    make_node: MakeNode,
    fake_clock: FakeClock,
    calls: Any,
    function: Any,
    message: str | bytes,
    stored: str,
) -> None:
    """A task's exception message comes from its arguments, which come from anyone:
    PostgreSQL's text columns refuse NUL, and UTF-8 cannot encode a lone surrogate
    (what a file name that is not UTF-8 decodes to). Such an error is written with
    those characters escaped. Before, on PostgreSQL, the write of the node's whole
    batch of finished runs failed and was tried again and again: the node recorded
    nothing more and claimed no other task."""
    node = make_node()
    poison = schedule(function, message, max_attempts=1)
    fake_clock.advance(0)
    after = schedule(tasks.add, 2, 3)
    fake_clock.advance(0)

    poison.refresh_from_db()
    error = f"RuntimeError: {stored}"
    assert (poison.status, poison.last_error) == (TaskStatus.FAILED, error)
    assert stored in poison.traceback
    assert Run.objects.get(task=poison).error == error
    assert Task.objects.get(pk=after.pk).status == TaskStatus.SUCCEEDED
    assert calls[function.__name__] == [message]
    assert not node.stop_requested


def test_a_schedule_run_raising_system_exit_fails_and_the_schedule_goes_on(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    row = make_schedule("exits", function=EXITS, args=("system",))
    make_node()
    fake_clock.advance(60)
    fake_clock.advance(60)
    runs = list(Run.objects.filter(schedule=row).values_list("status", "error"))
    assert runs == [(RunStatus.FAILED, "SystemExit: 1")] * 2
    assert calls["exits"] == ["system", "system"]


# -- 10. caught-up occurrences and the overlap policy ------------------------------------
def _behind(row: Schedule, fake_clock: FakeClock) -> None:
    """The node was down: the schedule is 5 m 45 s behind (6 occurrences due)."""
    behind = fake_clock.now() - timedelta(minutes=5, seconds=45)
    Schedule.objects.filter(pk=row.pk).update(next_run_at=behind)


@pytest.fixture
def exclusive() -> Any:
    tasks.running.update(now=0, most=0)
    yield tasks.running
    tasks.gate.set()


def test_catch_up_all_with_overlap_skip_runs_one_and_skips_the_rest(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, exclusive: Any
) -> None:
    row = make_schedule("caught", function=EXCLUSIVE, args=("x",), catch_up="all", overlap="skip")
    _behind(row, fake_clock)
    tasks.gate.set()
    make_node(workers=4)
    fake_clock.advance(0)
    assert calls["exclusive"] == ["x"]
    statuses = list(Run.objects.order_by("id").values_list("status", flat=True))
    assert statuses == [RunStatus.SKIPPED] * 5 + [RunStatus.SUCCEEDED]
    first = Run.objects.order_by("scheduled_for").first()
    assert first is not None and first.status == RunStatus.SUCCEEDED
    assert first.scheduled_for is not None
    why = f"skipped: the run of {first.scheduled_for.isoformat()} runs (overlap=skip)"
    for skipped in Run.objects.filter(status=RunStatus.SKIPPED):
        assert skipped.error == why


def test_catch_up_all_with_overlap_delay_runs_them_one_after_another(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, exclusive: Any
) -> None:
    row = make_schedule("caught", function=EXCLUSIVE, args=("y",), catch_up="all", overlap="delay")
    _behind(row, fake_clock)
    node = make_node(workers=4, start=False)
    node.start()  # not make_node's advance(0): it would wait for the job
    fake_clock.advance(0, wait=False)
    wait_for(lambda: len(calls["exclusive"]) == 1)
    for _ in range(3):  # polls while the first run is blocked: nothing else starts
        fake_clock.advance(node.poll_interval, wait=False)
    assert len(calls["exclusive"]) == 1
    tasks.gate.set()
    wait_for(lambda: len(calls["exclusive"]) == 6)
    fake_clock.advance(0)
    assert exclusive["most"] == 1
    runs = Run.objects.filter(schedule=row).order_by("scheduled_for")
    assert [r.status for r in runs] == [RunStatus.SUCCEEDED] * 6
    times = [r.scheduled_for for r in runs]
    assert times == sorted(set(times))  # each occurrence once, in order


def test_catch_up_all_with_overlap_allow_runs_them_together(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, exclusive: Any
) -> None:
    row = make_schedule("caught", function=EXCLUSIVE, args=("z",), catch_up="all", overlap="allow")
    _behind(row, fake_clock)
    make_node(workers=6, start=False).start()
    fake_clock.advance(0, wait=False)
    wait_for(lambda: len(calls["exclusive"]) == 6)
    assert exclusive["most"] == 6
    tasks.gate.set()


# -- 4. rows the node cannot use ---------------------------------------------------------
BAD_ROWS = [
    ("spec", "schedule = 'every now and then'", "InvalidSchedule"),
    ("zone", "timezone = 'Mars/Olympus_Mons'", "Mars/Olympus_Mons"),
    ("catch_up", "catch_up = 'bogus'", "catch_up 'bogus' is not one of"),
    ("overlap", "overlap = 'maybe'", "overlap 'maybe' is not one of"),
    ("max_attempts", "max_attempts = 0", "max_attempts 0 is not >= 1"),
    ("backoff", "retry_backoff = -100", "retry_backoff -100.0 is not a finite number >= 0"),
    ("grace", "grace = -5", "grace -5.0 is not empty or a finite number >= 0"),
    ("function", "function = 'gone.module:renamed'", "FunctionNotRegistered"),
    ("payload", "payload = %s", "PayloadError"),
]


@pytest.mark.parametrize(("label", "change", "reason"), BAD_ROWS, ids=[r[0] for r in BAD_ROWS])
def test_a_row_the_node_cannot_use_is_marked_broken_and_costs_nothing_more(
    make_node: MakeNode,
    fake_clock: FakeClock,
    calls: Any,
    caplog: pytest.LogCaptureFixture,
    label: str,
    change: str,
    reason: str,
) -> None:
    good = make_schedule("good", args=(1,))
    bad = make_schedule("bad", args=(2,))
    node = make_node()
    # What a producer in another language might write, on a database migrated before
    # the CHECK constraints that refuse the numbers out of range (0004) existed.
    with without_check_constraints("django_htask_schedule"):
        with connection.cursor() as cursor:
            undecodable = [b"\xc1"] if "%s" in change else []  # 0xc1: never used in msgpack
            cursor.execute(
                f"UPDATE django_htask_schedule SET {change}, next_run_at = %s WHERE id = %s",
                [*undecodable, connection.ops.adapt_datetimefield_value(fake_clock.now()), bad.pk],
            )
        with caplog.at_level(logging.ERROR, logger="django_htask"):
            fake_clock.advance(1)  # the poll sees the change; the row fires and breaks
            for _ in range(3):
                fake_clock.advance(60)
    bad.refresh_from_db()
    assert reason in bad.broken
    assert bad.next_run_at is None
    assert bad.last_status == RunStatus.FAILED
    [run] = Run.objects.filter(schedule=bad)
    assert (run.status, run.error) == (RunStatus.FAILED, f"broken: {bad.broken}")
    broken_logs = [r for r in caplog.records if getattr(r, "action", "") == "schedule_broken"]
    assert len(broken_logs) == 1  # one error, not one per occurrence
    assert bad.pk not in node.placed_schedules()  # no timer: no CPU
    assert calls["add"] == [1, 1, 1]  # the good one kept firing
    assert Run.objects.filter(schedule=good, status=RunStatus.SUCCEEDED).count() == 3
    # Saved again (in the admin, say) with its values put right, it fires again.
    fixed = Schedule.objects.get(pk=bad.pk)
    fixed.schedule, fixed.timezone, fixed.catch_up, fixed.overlap = (
        "@every 1m",
        "UTC",
        "latest",
        "skip",
    )
    fixed.max_attempts, fixed.retry_backoff, fixed.grace, fixed.function = 1, 1.0, None, ADD
    fixed.set_call((2,))
    fixed.save()
    assert fixed.broken == ""
    fake_clock.advance(60)
    assert sorted(calls["add"][-2:]) == [1, 2]


@contextlib.contextmanager
def without_check_constraints(table: str) -> Iterator[None]:
    """The table's CHECK constraints (migration 0004) off while the block runs, as on a
    database migrated before they existed: keep the node's look at the row inside it.

    SQLite: a pragma of this connection (SQLite checks a constraint only when a statement
    writes one of its columns, so the node's own writes pass). PostgreSQL: the
    constraints dropped, then added back ``NOT VALID`` (PostgreSQL checks every
    constraint on every row an ``UPDATE`` writes, so a node could not mark the row
    broken with them back). MariaDB: dropped, then added back without checking the rows
    there (``check_constraint_checks`` off for the ``ALTER``)."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA ignore_check_constraints = ON")
            try:
                yield
            finally:
                cursor.execute("PRAGMA ignore_check_constraints = OFF")
            return
        listing, drop, add = _CHECKS_SQL[connection.vendor]
        cursor.execute(listing, [table])
        checks = cursor.fetchall()
        for name, _definition in checks:
            cursor.execute(drop.format(table=table, name=name))
        try:
            yield
        finally:
            if connection.vendor == "mysql":
                cursor.execute("SET SESSION check_constraint_checks = OFF")
            try:
                for name, definition in checks:
                    cursor.execute(add.format(table=table, name=name, definition=definition))
            finally:
                if connection.vendor == "mysql":
                    cursor.execute("SET SESSION check_constraint_checks = ON")


#: By vendor: how :func:`without_check_constraints` lists a table's CHECK constraints
#: (name, definition), drops one and adds it back.
_CHECKS_SQL = {
    "postgresql": (
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s::regclass AND contype = 'c'",
        'ALTER TABLE {table} DROP CONSTRAINT "{name}"',
        'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition} NOT VALID',
    ),
    "mysql": (
        "SELECT constraint_name, CONCAT('CHECK (', check_clause, ')') "
        "FROM information_schema.check_constraints "
        "WHERE constraint_schema = DATABASE() AND table_name = %s AND level = 'Table'",
        "ALTER TABLE {table} DROP CONSTRAINT `{name}`",
        "ALTER TABLE {table} ADD CONSTRAINT `{name}` {definition}",
    ),
}


def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def test_a_broken_schedule_shows_in_htask_status_htask_list_and_the_admin(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    from io import StringIO

    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    row = make_schedule("poisoned", args=(1,))
    make_node()
    Schedule.objects.filter(pk=row.pk).update(function="gone.module:renamed")
    fake_clock.advance(60)
    status = StringIO()
    call_command("htask", "status", stdout=status)
    assert "schedules: 0 enabled, 1 broken" in status.getvalue()
    assert "poisoned: broken: FunctionNotRegistered" in status.getvalue()
    listing = StringIO()
    call_command("htask", "list", stdout=listing)
    assert "poisoned  [broken]" in listing.getvalue()
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    page = client.get("/admin/django_htask/schedule/?broken=yes").content.decode()
    assert "poisoned" in page and "FunctionNotRegistered" in page
    assert "poisoned" not in client.get("/admin/django_htask/schedule/?broken=no").content.decode()
    change = client.get(f"/admin/django_htask/schedule/{row.pk}/change/").content.decode()
    assert "gone.module:renamed" in change and "FunctionNotRegistered" in change
