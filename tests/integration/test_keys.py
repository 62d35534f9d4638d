"""Keys of one-off tasks (``schedule(key=...)``): at most one pending task per key,
decided by the database; each ``on_conflict``; ``schedule_many`` with keys."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from django_htask import aschedule, reschedule, schedule, schedule_many
from django_htask.engine import FakeClock
from django_htask.exceptions import DuplicateKey
from django_htask.keys import KEY_MAX_LENGTH
from django_htask.models import Run, RunStatus, Task, TaskStatus
from django_htask.operations import send_again
from django_htask.signals import task_scheduled
from django_htask.store import RunOutcome, get_store
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db

ADD = "tests.integration.testapp.tasks:add"


def pending(key: str) -> list[Task]:
    return list(Task.objects.filter(key=key, status=TaskStatus.PENDING))


def test_ignore_returns_the_pending_task_unchanged(fake_clock: FakeClock) -> None:
    first = schedule(tasks.add, 1, key="reminder:42", delay=60)
    again = schedule(tasks.add, 2, key="reminder:42", delay=5, max_attempts=3)
    assert again.token == first.token and again.pk == first.pk
    [row] = pending("reminder:42")
    assert row.call == ((1,), {}) and row.max_attempts == 1
    assert row.run_at == fake_clock.now() + timedelta(seconds=60)
    assert (again.call, again.run_at) == (row.call, row.run_at)  # what is stored


def test_replace_moves_the_pending_task_to_the_new_call_keeping_its_token(
    fake_clock: FakeClock,
) -> None:
    first = schedule(tasks.add, 1, key="k", delay=60, queue_name="a")
    Task.objects.filter(pk=first.pk).update(attempts=1, last_error="boom")  # a retry's
    moved = schedule(
        tasks.add, 2, b=3, key="k", on_conflict="replace", delay=5, max_attempts=4,
        queue_name="b", timeout=7,
    )  # fmt: skip
    assert (moved.pk, moved.token) == (first.pk, first.token)
    [row] = pending("k")
    assert row.call == ((2,), {"b": 3})
    assert row.run_at == fake_clock.now() + timedelta(seconds=5)
    assert (row.max_attempts, row.queue_name, row.timeout) == (4, "b", 7.0)
    assert (row.attempts, row.last_error) == (0, "")
    assert (moved.call, moved.run_at, moved.queue_name) == (row.call, row.run_at, "b")


def test_raise_names_the_key_and_the_pending_task_and_stores_nothing() -> None:
    first = schedule(tasks.add, 1, key="k")
    with pytest.raises(DuplicateKey) as caught:
        schedule(tasks.add, 2, key="k", on_conflict="raise")
    assert (caught.value.key, caught.value.token) == ("k", first.token)
    assert "'k'" in str(caught.value) and first.token in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert Task.objects.count() == 1 and pending("k")[0].call == ((1,), {})


def test_raise_inside_the_caller_s_transaction_leaves_the_transaction_usable() -> None:
    schedule(tasks.add, 1, key="k")
    with transaction.atomic():
        with pytest.raises(DuplicateKey):
            schedule(tasks.add, 2, key="k", on_conflict="raise")
        other = schedule(tasks.add, 3, key="other", on_conflict="raise")
    assert pending("other")[0].token == other.token


def test_a_key_is_global_across_queues() -> None:
    first = schedule(tasks.add, 1, key="k", queue_name="emails")
    assert schedule(tasks.add, 1, key="k", queue_name="reports").token == first.token
    with pytest.raises(DuplicateKey):
        schedule(tasks.add, 1, key="k", queue_name="reports", on_conflict="raise")


def test_a_finished_task_frees_its_key() -> None:
    first = schedule(tasks.add, 1, key="k")
    Task.objects.filter(pk=first.pk).update(status=TaskStatus.SUCCEEDED)
    second = schedule(tasks.add, 1, key="k", on_conflict="raise")
    assert second.token != first.token
    running = Task.objects.filter(pk=second.pk)
    running.update(status=TaskStatus.RUNNING)  # a running one frees it too
    third = schedule(tasks.add, 1, key="k", on_conflict="raise")
    assert len({first.token, second.token, third.token}) == 3


def test_tasks_without_a_key_never_conflict() -> None:
    a, b = schedule(tasks.add, 1), schedule(tasks.add, 1)
    assert a.token != b.token and a.key is None and Task.objects.count() == 2


def test_the_database_refuses_a_second_pending_row_with_a_key() -> None:
    schedule(tasks.add, 1, key="k")
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.create(function=ADD, run_at=Task.objects.get().run_at, key="k")


@pytest.mark.parametrize(
    ("key", "error", "message"),
    [
        ("", ValueError, "key must be a non-empty string, got ''"),
        (42, TypeError, "key must be a str, got 42"),
        ("x" * (KEY_MAX_LENGTH + 1), ValueError, f"at most {KEY_MAX_LENGTH} characters, got 201"),
    ],
)
def test_a_bad_key_is_refused_naming_it(key: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        schedule(tasks.add, 1, key=key)
    assert not Task.objects.exists()


def test_the_longest_key_is_stored() -> None:
    key = "x" * KEY_MAX_LENGTH
    assert Task.objects.get(pk=schedule(tasks.add, 1, key=key).pk).key == key


def test_a_bad_on_conflict_is_refused_naming_it_and_the_allowed_ones() -> None:
    allowed = "on_conflict must be one of 'ignore', 'replace', 'raise', got 'update'"
    with pytest.raises(ValueError, match=allowed):
        schedule(tasks.add, 1, key="k", on_conflict="update")
    with pytest.raises(ValueError, match="got 'update'"):
        schedule_many([(tasks.add, (1,), {}, "k")], on_conflict="update")
    assert not Task.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_signal_is_sent_for_tasks_written_not_for_one_kept() -> None:
    seen: list[str] = []

    def receiver(task: Task, **_: Any) -> None:
        seen.append(task.token)

    task_scheduled.connect(receiver)
    try:
        with transaction.atomic():
            first = schedule(tasks.add, 1, key="k")
            schedule(tasks.add, 2, key="k")
            schedule(tasks.add, 3, key="k", on_conflict="replace")
    finally:
        task_scheduled.disconnect(receiver)
    assert seen == [first.token, first.token]


@pytest.mark.django_db(transaction=True)  # asgiref's thread has a connection of its own
def test_aschedule_takes_the_key() -> None:
    first = asyncio.run(aschedule(tasks.add, 1, key="k"))
    again = asyncio.run(aschedule(tasks.add, 2, key="k", on_conflict="replace"))
    assert again.token == first.token and pending("k")[0].call == ((2,), {})


def test_a_plain_schedule_writes_no_conflict_clause() -> None:
    with CaptureQueriesContext(connection) as queries:
        schedule(tasks.add, 1)
    [insert] = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert "ON CONFLICT" not in insert


# -- schedule_many ---------------------------------------------------------------------
def test_schedule_many_ignore_the_first_call_with_a_key_stands() -> None:
    held = schedule(tasks.add, 0, key="held")
    stored = schedule_many(
        [
            (tasks.add, (1,), {}, "a"),
            (tasks.add, (2,), {}),
            (tasks.add, (3,), {}, "a"),
            (tasks.add, (4,), {}, "held"),
            (tasks.add, (5,), {}, None),
        ]
    )
    assert [t.call[0] for t in stored] == [(1,), (2,), (1,), (0,), (5,)]
    assert stored[0].token == stored[2].token and stored[3].token == held.token
    assert Task.objects.count() == 4
    assert pending("a")[0].call == ((1,), {}) and pending("held")[0].call == ((0,), {})


def test_schedule_many_replace_the_last_call_with_a_key_wins() -> None:
    held = schedule(tasks.add, 0, key="held")
    stored = schedule_many(
        [
            (tasks.add, (1,), {}, "a"),
            (tasks.add, (2,), {}, "held"),
            (tasks.add, (3,), {}, "a"),
            (tasks.add, (4,), {}, "held"),
        ],
        on_conflict="replace",
    )
    assert [t.call[0] for t in stored] == [(3,), (4,), (3,), (4,)]
    assert stored[0].token == stored[2].token and stored[1].token == stored[3].token == held.token
    assert pending("a")[0].call == ((3,), {}) and pending("held")[0].call == ((4,), {})
    assert Task.objects.count() == 2


def test_schedule_many_raise_on_a_key_twice_in_the_batch_names_both_places() -> None:
    calls = [(tasks.add, (1,), {}, "a"), (tasks.add, (2,), {}), (tasks.add, (3,), {}, "a")]
    with pytest.raises(DuplicateKey, match=r"calls\[0\] and calls\[2\] both have it") as caught:
        schedule_many(calls, on_conflict="raise")
    assert (caught.value.key, caught.value.token) == ("a", None)
    assert not Task.objects.exists()


def test_schedule_many_raise_on_a_pending_key_stores_nothing() -> None:
    held = schedule(tasks.add, 0, key="held")
    calls = [(tasks.add, (1,), {}, "a"), (tasks.add, (2,), {}, "held")]
    with pytest.raises(DuplicateKey) as caught:
        schedule_many(calls, on_conflict="raise", batch_size=1)
    assert (caught.value.key, caught.value.token) == ("held", held.token)
    assert list(Task.objects.values_list("key", flat=True)) == ["held"]


def test_schedule_many_keys_across_batches() -> None:
    calls = [(tasks.add, (n,), {}, f"k{n % 3}") for n in range(7)]
    stored = schedule_many(calls, batch_size=2)
    assert [t.call[0] for t in stored] == [(0,), (1,), (2,), (0,), (1,), (2,), (0,)]
    assert Task.objects.count() == 3


def test_schedule_many_a_bad_key_names_its_place() -> None:
    with pytest.raises(ValueError, match=r"calls\[1\]: key must be a non-empty string"):
        schedule_many([(tasks.add, (1,), {}, "a"), (tasks.add, (1,), {}, "")])
    with pytest.raises(TypeError, match=r"calls\[0\]: key must be a str, got 3"):
        schedule_many([(tasks.add, (1,), {}, 3)])
    assert not Task.objects.exists()


# -- putting tasks back to pending ----------------------------------------------------------
def test_send_again_supersedes_a_failed_task_whose_key_a_newer_pending_task_holds(
    fake_clock: FakeClock,
) -> None:
    old = schedule(tasks.add, 1, key="k")
    Task.objects.filter(pk=old.pk).update(status=TaskStatus.FAILED, last_error="boom")
    plain = schedule(tasks.add, 1)
    Task.objects.filter(pk=plain.pk).update(status=TaskStatus.FAILED)
    new = schedule(tasks.add, 2, key="k")
    result = send_again([old.pk, plain.pk])
    assert (result.sent, result.superseded, result.not_failed) == ((plain.pk,), (old.pk,), {})
    old.refresh_from_db()
    assert (old.status, old.finished_at) == (TaskStatus.CANCELLED, fake_clock.now())
    assert old.last_error == f"superseded by pending task {new.token} with the same key"
    assert [t.token for t in pending("k")] == [new.token]


def test_send_again_puts_back_a_failed_task_whose_key_is_free() -> None:
    old = schedule(tasks.add, 1, key="k")
    Task.objects.filter(pk=old.pk).update(status=TaskStatus.FAILED)
    assert send_again([old.pk]).sent == (old.pk,)
    assert schedule(tasks.add, 2, key="k").token == old.token  # pending again, with its key


def test_reschedule_moves_a_keyed_task_and_keeps_its_key(fake_clock: FakeClock) -> None:
    task = schedule(tasks.add, 1, key="k")
    assert reschedule(task.token, delay=30)
    [row] = pending("k")
    assert (row.token, row.run_at) == (task.token, fake_clock.now() + timedelta(seconds=30))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_retry_racing_a_schedule_of_its_key_is_superseded_not_an_error(
    fake_clock: FakeClock,
) -> None:
    """The retry's write waits on the key's index for a transaction that scheduled the
    same key and has not committed; once it commits, the retry is superseded by it (the
    write undone to its savepoint and tried again), not a unique-violation error."""
    store = get_store()
    now = fake_clock.now()
    store.register_node("n1", "host", 1, "0", now)
    old = schedule(tasks.add, 1, key="k", max_attempts=3)
    assert [t.id for t in store.start_tasks("n1", now, 1, now + timedelta(seconds=60))] == [old.pk]
    inserted, release = threading.Event(), threading.Event()
    new: list[Task] = []
    errors: list[BaseException] = []

    def racing() -> None:
        try:
            with transaction.atomic():
                new.append(schedule(tasks.add, 2, key="k"))
                inserted.set()
                release.wait(30)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    retry = RunOutcome(
        status=RunStatus.FAILED,
        function=ADD,
        name=ADD,
        node="n1",
        attempt=1,
        scheduled_for=now,
        started_at=now,
        finished_at=now,
        task_id=old.pk,
        retry_at=now + timedelta(seconds=10),
        error="boom",
    )

    def recording() -> None:
        try:
            get_store().record("n1", [retry])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    scheduler = threading.Thread(target=racing)
    scheduler.start()
    assert inserted.wait(30)
    recorder = threading.Thread(target=recording)
    recorder.start()
    deadline = time.monotonic() + 30
    with connection.cursor() as cursor:  # the retry's write waits for the schedule
        while True:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
            if cursor.fetchone()[0] or time.monotonic() > deadline:
                break
            time.sleep(0.02)
    release.set()
    scheduler.join(30)
    recorder.join(30)
    assert not scheduler.is_alive() and not recorder.is_alive()
    assert errors == []
    old.refresh_from_db()
    assert old.status == TaskStatus.CANCELLED
    assert old.last_error == f"superseded by pending task {new[0].token} with the same key"
    assert [t.token for t in pending("k")] == [new[0].token]
    assert [r.error for r in Run.objects.filter(task=old)] == ["boom"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_replace_is_notified_as_a_new_task_is_and_moves_the_next_due_time(
    fake_clock: FakeClock,
) -> None:
    """A node LISTENing hears of a replaced task, and reads its new time."""
    import psycopg

    from django_htask.store.listen import connection_params
    from django_htask.store.postgres import CHANNEL

    now = fake_clock.now()
    schedule(tasks.add, 1, key="k", delay=600)
    assert get_store().task_outlook(now) == (False, now + timedelta(seconds=600))
    with psycopg.connect(**connection_params(), autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        schedule(tasks.add, 2, key="k", on_conflict="replace", delay=5)
        heard = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
    assert heard == ["task"]
    assert get_store().task_outlook(now) == (False, now + timedelta(seconds=5))
