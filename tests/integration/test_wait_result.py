"""``wait_result`` / ``await_result`` in the caller's process: what it refuses, and a
task that has ended already (tests/acceptance/test_wait_result.py waits for a node in
another process)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from django_htask import (
    Result,
    ResultTimeout,
    TaskNotFound,
    await_result,
    get_result,
    schedule,
    wait_result,
)
from django_htask import scheduled as scheduled_module
from django_htask.engine import FakeClock
from django_htask.models import Task, TaskStatus
from tests.integration.testapp import tasks


@pytest.mark.django_db(transaction=True)
def test_a_task_that_ended_is_returned_at_once(fake_clock: FakeClock) -> None:
    task = schedule(tasks.add, 1, b=2)
    Task.objects.filter(pk=task.pk).update(
        status=TaskStatus.FAILED, last_error="RuntimeError: boom", attempts=1
    )
    result = wait_result(task.token, timeout=0)
    assert (result.status, result.error, result.value) == ("failed", "RuntimeError: boom", None)
    assert asyncio.run(await_result(task.token)).status == "failed"


@pytest.mark.django_db(transaction=True)
def test_a_pending_task_times_out_with_its_status(fake_clock: FakeClock) -> None:
    task = schedule(tasks.add, 1, b=2)
    for wait in (
        lambda: wait_result(task.token, timeout=timedelta(milliseconds=50)),
        lambda: asyncio.run(await_result(task.token, timeout=0.05)),
    ):
        with pytest.raises(ResultTimeout) as info:
            wait()
        assert (info.value.token, info.value.status, info.value.timeout) == (
            task.token,
            "pending",
            0.05,
        )
    assert Task.objects.get(pk=task.pk).status == TaskStatus.PENDING  # left as it was


@pytest.mark.django_db(transaction=True)
def test_an_unknown_token_is_task_not_found() -> None:
    with pytest.raises(TaskNotFound):
        wait_result("no-such-token", timeout=1)


@pytest.mark.django_db(transaction=True)
def test_waiting_inside_a_transaction_is_refused(fake_clock: FakeClock) -> None:
    with transaction.atomic():
        task = schedule(tasks.add, 1, b=2)
        with pytest.raises(RuntimeError, match="inside a transaction on the database 'default'"):
            wait_result(task.token, timeout=1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": -1}, "timeout must be seconds >= 0, a timedelta or None, got -1"),
        ({"timeout": "1m"}, "timeout must be seconds >= 0, a timedelta or None, got '1m'"),
        ({"timeout": float("nan")}, "timeout must be seconds >= 0, a timedelta or None, got nan"),
        ({"poll": 0}, "poll must be seconds > 0, got 0"),
        ({"poll": float("inf")}, "poll must be seconds > 0, got inf"),
    ],
)
def test_bad_options_are_value_errors_naming_them(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        wait_result("any", **options)
    assert str(info.value) == message


def _end_when_waited(pk: int, status: TaskStatus) -> threading.Thread:
    """A thread that, once ``wait_result`` has marked the task ``waited``, ends it as a
    node would: an UPDATE of its status on a connection of its own."""

    def end() -> None:
        try:
            while not Task.objects.filter(pk=pk, waited=True).exists():
                time.sleep(0.01)
            Task.objects.filter(pk=pk).update(status=status, attempts=1)
        finally:
            connection.close()

    thread = threading.Thread(target=end)
    thread.start()
    return thread


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_the_end_of_a_waited_task_wakes_the_waiter(
    fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two reads, ``poll`` (60 s) apart but for the notice (the wait would time out
    after 20 s): the one before the end, and the one the notice wakes."""
    reads: list[str] = []

    def counted(token: str) -> Result:
        reads.append(token)
        return get_result(token)

    monkeypatch.setattr(scheduled_module, "get_result", counted)
    task = schedule(tasks.add, 1, b=2)
    thread = _end_when_waited(task.pk, TaskStatus.SUCCEEDED)
    assert wait_result(task.token, timeout=20, poll=60).status == "succeeded"
    thread.join()
    assert reads == [task.token, task.token]
    other = schedule(tasks.add, 1, b=2)
    thread = _end_when_waited(other.pk, TaskStatus.CANCELLED)
    assert asyncio.run(await_result(other.token, timeout=20, poll=60)).status == "cancelled"
    thread.join()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_only_the_end_of_a_waited_task_is_announced(fake_clock: FakeClock) -> None:
    import psycopg

    from django_htask.store.listen import ENDED, connection_params

    quiet, waited = schedule(tasks.add, 1, b=2), schedule(tasks.add, 2, b=2)
    Task.objects.filter(pk=waited.pk).update(waited=True)
    with psycopg.connect(**connection_params(), autocommit=True) as listening:
        listening.execute(f"LISTEN {ENDED}")
        Task.objects.filter(pk=quiet.pk).update(status=TaskStatus.SUCCEEDED)
        Task.objects.filter(pk=waited.pk).update(status=TaskStatus.RUNNING)  # not an end
        Task.objects.filter(pk=waited.pk).update(status=TaskStatus.FAILED)
        Task.objects.filter(pk=waited.pk).update(last_error="again")  # status not set
        heard = [n.payload for n in listening.notifies(timeout=1)]
    assert heard == [waited.token]
