"""``schedule_many``: many calls checked, then stored in batches, all or none."""

from __future__ import annotations

import asyncio
import math
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext

from django_htask import aschedule_many, schedule_many, task
from django_htask.engine import ArgumentError, FakeClock, FunctionNotRegistered, PayloadError
from django_htask.models import Task, TaskStatus
from django_htask.signals import task_scheduled
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db

ADD = "tests.integration.testapp.tasks:add"


@task(timeout=30)
def timed_many(n: int) -> None:
    """A task whose runs may take 30 s."""


def test_every_call_is_stored_in_order_with_the_options_given(fake_clock: FakeClock) -> None:
    calls: list[tuple[Any, Any, Any]] = [(tasks.add, (n,), {"b": 1}) for n in range(5)]
    calls.append((ADD, [9], {}))
    stored = schedule_many(calls, delay=60, max_attempts=3, queue_name="bulk")
    assert [t.call for t in stored] == [((n,), {"b": 1}) for n in range(5)] + [((9,), {})]
    rows = list(Task.objects.order_by("id"))
    assert [r.token for r in rows] == [t.token for t in stored]
    assert len({r.token for r in rows}) == 6
    assert {(r.status, r.run_at, r.max_attempts, r.queue_name, r.function) for r in rows} == {
        (TaskStatus.PENDING, fake_clock.now() + timedelta(seconds=60), 3, "bulk", ADD)
    }


def test_a_function_s_own_timeout_is_each_task_s_default(fake_clock: FakeClock) -> None:
    plain, timed = schedule_many([(tasks.add, (1,), {}), (timed_many, (1,), {})])
    assert (plain.timeout, timed.timeout) == (None, 30.0)
    both = schedule_many([(tasks.add, (1,), {}), (timed_many, (1,), {})], timeout=5)
    assert [t.timeout for t in both] == [5.0, 5.0]


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ((tasks.add, (), {}), ArgumentError, "calls[2]: "),
        ((tasks.add, ("one",), {}), ArgumentError, "calls[2]: "),
        (("tests.nowhere:gone", (), {}), FunctionNotRegistered, "calls[2]: "),
        ((tasks.add, (object(),), {}), PayloadError, "calls[2]: "),
        (
            (tasks.add, (1,)),
            TypeError,
            "calls[2] must be a tuple (fn, args, kwargs), (fn, args, kwargs, key) or (fn, ",
        ),
        ((tasks.add, "12", {}), TypeError, "calls[2]: args must be a sequence"),
        ((tasks.add, (1,), [("b", 2)]), TypeError, "calls[2]: kwargs must be a mapping"),
    ],
)
def test_one_bad_call_raises_naming_its_place_and_nothing_is_stored(
    fake_clock: FakeClock, bad: Any, error: type[Exception], message: str
) -> None:
    calls = [(tasks.add, (1,), {}), (tasks.add, (2,), {}), bad, (tasks.add, (4,), {})]
    with pytest.raises(error) as raised:
        schedule_many(calls)
    assert str(raised.value).startswith(message)
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be an int >= 1, got 0"),
        ({"batch_size": 0}, "batch_size must be an int >= 1, got 0"),
        ({"delay": -1}, "delay must be >= 0 and finite, got -1"),
        ({"timeout": 0}, "timeout"),
    ],
)
def test_bad_options_are_named(
    fake_clock: FakeClock, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        schedule_many([(tasks.add, (1,), {})], **options)
    assert not Task.objects.exists()


def test_the_tasks_have_their_ids_where_an_insert_cannot_return_them(
    fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MySQL returns no ids from a multi-row insert (MariaDB does: ``RETURNING``); the
    tasks are read back by token there. Forced here on every database."""
    monkeypatch.setattr(type(connection.features), "can_return_rows_from_bulk_insert", False)
    stored = schedule_many([(tasks.add, (n,), {}) for n in range(1200)], batch_size=1000)
    rows = dict(Task.objects.values_list("token", "id"))
    assert len(rows) == 1200
    assert [t.pk for t in stored] == [rows[t.token] for t in stored]


def test_rows_are_inserted_batch_size_per_statement(fake_clock: FakeClock) -> None:
    calls = ((tasks.add, (n,), {}) for n in range(2500))  # any iterable
    with CaptureQueriesContext(connection) as queries:
        stored = schedule_many(calls, batch_size=1000)
    inserts = [q for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    # At most 1000 a statement, fewer where the database takes fewer parameters (SQLite).
    fields = [f for f in Task._meta.concrete_fields if not f.primary_key]
    per_statement = min(1000, connection.ops.bulk_batch_size(fields, stored))
    assert len(inserts) == math.ceil(2500 / per_statement)
    assert len(stored) == Task.objects.count() == 2500
    assert all(t.pk is not None for t in stored)
    assert schedule_many([]) == []


@pytest.mark.django_db(transaction=True)
def test_they_are_part_of_the_caller_s_transaction_and_signalled_once_it_commits(
    fake_clock: FakeClock,
) -> None:
    signalled: list[str] = []

    def receiver(sender: Any, task: Task, **kwargs: Any) -> None:
        signalled.append(task.token)

    task_scheduled.connect(receiver)
    try:

        def rolled_back() -> None:
            with transaction.atomic():
                schedule_many([(tasks.add, (n,), {}) for n in range(3)])
                raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError):
            rolled_back()
        assert not Task.objects.exists()
        assert signalled == []
        with transaction.atomic():
            stored = schedule_many([(tasks.add, (n,), {}) for n in range(3)])
            assert signalled == []
        assert signalled == [t.token for t in stored]
    finally:
        task_scheduled.disconnect(receiver)


@pytest.mark.django_db(transaction=True)
def test_the_async_twin(fake_clock: FakeClock) -> None:
    got: list[Any] = []

    def run() -> None:
        try:
            got.append(asyncio.run(aschedule_many([(tasks.add, (1,), {})], delay=5)))
        except BaseException as exc:
            got.append(exc)

    thread = threading.Thread(target=run)  # an event loop of its own
    thread.start()
    thread.join(30)
    [[stored]] = got
    assert Task.objects.get().token == stored.token


def _fields(task: Task) -> dict[str, Any]:
    return {f.attname: getattr(task, f.attname) for f in Task._meta.concrete_fields}


def test_the_tasks_returned_are_the_rows_stored_and_post_init_still_fires() -> None:
    """The returned tasks are made without ``Model.__init__`` (store/inserts.py,
    ``_task_of``): each holds its row's values exactly, is saved (not adding, on its
    database) and can be saved again; with a ``post_init`` receiver on Task, they are
    made the usual way and the receiver sees each."""
    stored = schedule_many([(tasks.add, (n,), {"b": 2}) for n in range(3)])
    for task_ in stored:
        row = Task.objects.get(pk=task_.pk)
        assert _fields(task_) == _fields(row)
        assert (task_._state.adding, task_._state.db) == (False, row._state.db)
    stored[0].priority = 5
    stored[0].save(update_fields=["priority"])
    assert Task.objects.get(pk=stored[0].pk).priority == 5
    seen: list[Task] = []

    def receiver(sender: type[Task], instance: Task, **kwargs: Any) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Task)
    try:
        again = schedule_many([(tasks.add, (n,), {"b": 2}) for n in range(2)])
    finally:
        post_init.disconnect(receiver, sender=Task)
    assert [t.pk for t in again] == [t.pk for t in seen[-2:]]
    assert [_fields(t) for t in again] == [_fields(Task.objects.get(pk=t.pk)) for t in again]


#: Keys and locks an array literal must quote (PostgreSQL's are made in store/postgres.py).
AWKWARD = ['a"b', "back\\slash", "{braces}", "a,b", " spaced ", "NULL", "é ✓", '\\"', "x'y"]


def test_awkward_keys_locks_and_mixed_options_are_stored_as_given(fake_clock: FakeClock) -> None:
    calls: list[Any] = [
        (tasks.add, (n,), {"b": 1}, key, AWKWARD[-1 - n]) for n, key in enumerate(AWKWARD)
    ]
    calls.append((tasks.add, (99,), {}, None, None))  # no key, the function's lock (none)
    calls.append((timed_many, (1,), {}, None, None))  # its own timeout (30 s) beside None
    stored = schedule_many(calls, max_running=3)
    rows = {r.pk: r for r in Task.objects.all()}
    assert [(rows[t.pk].key, rows[t.pk].lock) for t in stored] == [
        *((key, AWKWARD[-1 - n]) for n, key in enumerate(AWKWARD)),
        (None, None),
        (None, None),
    ]
    assert [rows[t.pk].timeout for t in stored] == [None] * (len(AWKWARD) + 1) + [30.0]
    assert {rows[t.pk].max_running for t in stored} == {3}
    assert [bytes(rows[t.pk].payload) for t in stored] == [bytes(t.payload) for t in stored]
    assert [rows[t.pk].call for t in stored] == [
        *(((n,), {"b": 1}) for n in range(len(AWKWARD))),
        ((99,), {}),
        ((1,), {}),
    ]


def _spy_pipelined(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record whether each multi-batch insert on PostgreSQL went through psycopg's
    pipeline (store/postgres.py, ``_pipelined``)."""
    from django_htask.store import postgres

    seen: list[bool] = []
    real = postgres._pipelined

    def spy(*args: Any) -> bool:
        seen.append(real(*args))
        return seen[-1]

    monkeypatch.setattr(postgres, "_pipelined", spy)
    return seen


def test_many_batches_keep_the_calls_order_and_their_ids(
    fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a batch is sent before the one before is made into tasks (the
    pipeline): each task still gets its own row's id, in the calls' order."""
    pipelined = _spy_pipelined(monkeypatch)
    stored = schedule_many([(tasks.add, (n,), {"b": n % 7}) for n in range(2503)], batch_size=100)
    rows = {r.pk: r for r in Task.objects.all()}
    assert len(rows) == len(stored) == 2503
    assert [rows[t.pk].token for t in stored] == [t.token for t in stored]
    assert [rows[t.pk].call for t in stored] == [((n,), {"b": n % 7}) for n in range(2503)]
    assert pipelined == ([True] if connection.vendor == "postgresql" else [])


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a PostgreSQL trigger fails a row")
def test_a_statement_that_fails_in_a_later_batch_stores_nothing(
    fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipeline's error is Django's, raised from schedule_many; nothing of the
    batches before it stays, and the connection goes on."""
    from django.db import DatabaseError

    with connection.cursor() as cursor:  # undone with the test's transaction
        cursor.execute(
            "CREATE FUNCTION explode() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.lock = 'explode' THEN RAISE EXCEPTION 'exploded: %', NEW.token; END IF; "
            "RETURN NEW; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER explode BEFORE INSERT ON django_htask_task "
            "FOR EACH ROW EXECUTE FUNCTION explode()"
        )
    pipelined = _spy_pipelined(monkeypatch)
    calls: list[Any] = [
        (tasks.add, (n,), {}, None, "explode" if n == 37 else None) for n in range(50)
    ]
    with pytest.raises(DatabaseError, match="exploded: "):
        schedule_many(calls, batch_size=10)
    assert pipelined == [True]
    assert Task.objects.count() == 0
    calls[37] = (tasks.add, (37,), {})
    assert len(schedule_many(calls, batch_size=10)) == Task.objects.count() == 50
