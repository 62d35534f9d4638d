"""Task results: what a task's function returns is stored on its row (msgpack, as
arguments travel), read back by ``get_result`` / ``aget_result`` as the function's
return annotation declares, and shown by the admin."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from datetime import date
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_htask import Result, TaskNotFound, aget_result, get_result, schedule
from django_htask.conf import get_settings, load
from django_htask.engine import FakeClock, PayloadError, decode_result, encode_result
from django_htask.models import Run, RunStatus, Task, TaskStatus
from tests.integration.test_node import wait_for
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

MakeNode = Callable[..., Any]


def ran(make_node: MakeNode, fake_clock: FakeClock, fn: Any, *args: Any, **node: Any) -> Task:
    """Schedule ``fn(*args)``, have a node run it now, and return its row."""
    make_node(**node)
    row = schedule(fn, *args)
    fake_clock.advance(0)
    row.refresh_from_db()
    return row


@pytest.mark.parametrize(
    ("fn", "args", "expected"),
    [
        (tasks.add, (2, 3), 5),
        (tasks.echo, ("héllo",), "héllo"),
        (tasks.echo, ({"a": [1, 2], "b": None},), {"a": [1, 2], "b": None}),
        (tasks.echo, ((1, "x"),), (1, "x")),  # a tuple stays a tuple (an ext type)
        (tasks.blob, (3,), b"xxx"),
        (tasks.adouble, (21,), 42),  # an async function's result
    ],
)
def test_a_return_value_is_stored_and_read_back(
    make_node: MakeNode, fake_clock: FakeClock, fn: Any, args: tuple[Any, ...], expected: Any
) -> None:
    row = ran(make_node, fake_clock, fn, *args)
    assert row.status == TaskStatus.SUCCEEDED
    assert row.result is not None and decode_result(row.result) == expected
    result = get_result(row.token)
    assert result == Result(row.token, TaskStatus.SUCCEEDED, expected, "", 1, fake_clock.now())
    assert type(result.value) is type(expected)


def test_a_result_is_read_as_the_return_annotation_declares(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    row = ran(make_node, fake_clock, tasks.tally, ["a", "b"])
    # Stored as a map (a dataclass travels as its fields), read back as a Tally.
    assert decode_result(row.result) == {"total": 2, "on": date(2030, 1, 1), "words": ("a", "b")}
    result = get_result(row.token)
    assert result is not None
    assert result.value == tasks.Tally(2, date(2030, 1, 1), ("a", "b"))


def test_a_result_that_no_longer_fits_its_annotation_is_read_as_decoded(
    make_node: MakeNode, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    row = ran(make_node, fake_clock, tasks.tally, ["a"])
    Task.objects.filter(pk=row.pk).update(result=encode_result({"total": "one"}))
    with caplog.at_level(logging.WARNING, logger="django_htask.models"):
        result = get_result(row.token)
    assert result is not None and result.value == {"total": "one"}
    (record,) = [r for r in caplog.records if getattr(r, "action", "") == "result_as_decoded"]
    assert "Tally" in record.getMessage() and row.token in record.getMessage()


def test_none_stores_nothing(make_node: MakeNode, fake_clock: FakeClock) -> None:
    row = ran(make_node, fake_clock, tasks.echo, None)
    assert (row.status, row.result) == (TaskStatus.SUCCEEDED, None)
    result = get_result(row.token)
    assert result is not None and (result.status, result.value) == (TaskStatus.SUCCEEDED, None)


def test_a_result_over_the_limit_fails_the_run_without_a_retry(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    small = dataclasses.replace(get_settings(), result_max_bytes=100)
    make_node(settings=small)
    row = schedule(tasks.blob, 200, max_attempts=3)
    fake_clock.advance(0)
    fake_clock.advance(60)  # a retry would have run by now
    row.refresh_from_db()
    assert (row.status, row.attempts, row.result) == (TaskStatus.FAILED, 1, None)
    assert row.last_error == (
        "ResultNotStored: the result (bytes) is 202 bytes encoded, over the limit of 100 "
        "(RESULT_MAX_BYTES is 100); the function ran, so the task is not retried"
    )
    run = Run.objects.get(task=row)
    assert (run.status, run.error) == (RunStatus.FAILED, row.last_error)
    result = get_result(row.token)
    assert result is not None
    assert (result.status, result.value, result.error) == (TaskStatus.FAILED, None, row.last_error)


def test_a_result_that_cannot_be_encoded_fails_the_run_without_a_retry(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    row = schedule(tasks.opaque, max_attempts=3)
    fake_clock.advance(0)
    fake_clock.advance(60)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.result) == (TaskStatus.FAILED, 1, None)
    assert calls["opaque"] == [None]
    assert row.last_error.startswith("ResultNotStored: cannot encode lock <unlocked _thread.lock")
    assert "at result: its type is not supported" in row.last_error
    assert "not retried" in row.last_error


def test_a_schedule_run_keeps_no_result_and_never_fails_for_one(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    from django_htask.models import Schedule

    row = Schedule(
        name="s", function="tests.integration.testapp.tasks:opaque", schedule="@every 1m"
    )
    row.set_call(())
    row.save()
    make_node()
    fake_clock.advance(60)
    assert calls["opaque"] == [None]
    assert Run.objects.get(schedule=row).status == RunStatus.SUCCEEDED


def test_get_result_of_a_pending_running_failed_and_unknown_task(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    later = schedule(tasks.add, 1, delay=60)
    assert get_result(later.token) == Result(later.token, TaskStatus.PENDING, None, "", 0, None)
    with pytest.raises(TaskNotFound, match="no task has the token 'no-such-token'"):
        get_result("no-such-token")
    make_node()
    running = schedule(tasks.slow, "r")
    failing = schedule(tasks.boom, "bad")
    fake_clock.advance(0, wait=False)
    wait_for(lambda: calls["slow-start"] == ["r"])
    wait_for(lambda: Task.objects.filter(pk=failing.pk, status=TaskStatus.FAILED).exists())
    result = get_result(running.token)
    assert result is not None
    assert (result.status, result.value, result.attempts) == (TaskStatus.RUNNING, None, 1)
    failed = get_result(failing.token)
    assert failed is not None
    assert (failed.status, failed.value) == (TaskStatus.FAILED, None)
    assert failed.error == "RuntimeError: bad"
    assert failed.finished_at == fake_clock.now()
    tasks.gate.set()
    fake_clock.advance(0)
    done = get_result(running.token)
    assert done is not None and (done.status, done.value) == (TaskStatus.SUCCEEDED, None)


def test_aget_result_is_the_async_twin(make_node: MakeNode, fake_clock: FakeClock) -> None:
    row = ran(make_node, fake_clock, tasks.add, 4, 5)
    result = asyncio.run(aget_result(row.token))
    assert result is not None and (result.status, result.value) == (TaskStatus.SUCCEEDED, 9)
    with pytest.raises(TaskNotFound):
        asyncio.run(aget_result("no-such-token"))


def test_a_stored_result_that_is_not_one_raises_payload_error(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    row = ran(make_node, fake_clock, tasks.add, 1)
    Task.objects.filter(pk=row.pk).update(result=b"\xc1")  # never used by msgpack
    with pytest.raises(PayloadError, match="cannot decode the result"):
        get_result(row.token)


def test_sending_a_failed_task_again_clears_its_result() -> None:
    from django_htask.operations import send_again

    row = schedule(tasks.add, 1)  # no node: nothing runs it again meanwhile
    Task.objects.filter(pk=row.pk).update(status=TaskStatus.FAILED, result=encode_result(1))
    assert send_again([row.pk]).sent == (row.pk,)
    row.refresh_from_db()
    assert (row.status, row.result) == (TaskStatus.PENDING, None)


@pytest.mark.parametrize("value", [0, -1, 1.5, "1"])
def test_the_result_limit_setting_is_checked(value: object) -> None:
    with pytest.raises(ImproperlyConfigured, match="RESULT_MAX_BYTES"):
        load({"RESULT_MAX_BYTES": value})
    assert load({"RESULT_MAX_BYTES": 10}).result_max_bytes == 10
    assert load(None).result_max_bytes == 1 << 20
