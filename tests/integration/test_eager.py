"""The eager mode (``HTASK["EAGER"]``), ``drain()`` and the assertions of
``django_htask.testing``: a task runs in the test's process as a node would run it —
the same result, the same errors, the same rows."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import override_settings

from django_htask import get_result, schedule, using
from django_htask.engine import FakeClock, encode_call
from django_htask.models import Node, Run, Task, TaskStatus
from django_htask.store.rules import TIMED_OUT_PREFIX
from django_htask.testing import (
    DrainLimitReached,
    assert_scheduled,
    drain,
    refute_scheduled,
    scheduled,
)
from tests.integration.testapp import tasks

MakeNode = Callable[..., Any]


@pytest.fixture
def eager_clock(htask_eager: None, fake_clock: FakeClock) -> FakeClock:
    return fake_clock


def _outcome(token: str) -> tuple[str, Any, str, int]:
    result = get_result(token)
    return result.status, result.value, result.error, result.attempts


@pytest.mark.django_db
def test_a_task_due_now_runs_at_once_in_a_test_case(eager_clock: FakeClock) -> None:
    task = schedule(tasks.add, 1, b=2)
    assert _outcome(task.token) == ("succeeded", 3, "", 1)
    row = Task.objects.get(pk=task.pk)
    assert row.finished_at == eager_clock.now()
    assert not Node.objects.filter(stopped_at=None).exists()  # its node row is stopped


@pytest.mark.django_db
def test_arguments_and_results_travel_as_to_a_node(eager_clock: FakeClock) -> None:
    tally = schedule(tasks.tally, ["a", "b"])
    echo = schedule(tasks.echo, {"k": [1, 2]})
    assert get_result(tally.token).value == tasks.Tally(2, date(2030, 1, 1), ("a", "b"))
    assert get_result(echo.token).value == {"k": [1, 2]}


@pytest.mark.django_db(transaction=True)
def test_in_the_callers_transaction_it_runs_once_that_commits(
    eager_clock: FakeClock, calls: Any
) -> None:
    with transaction.atomic():
        task = schedule(tasks.add, 2)
        assert Task.objects.get(pk=task.pk).status == TaskStatus.PENDING
    assert _outcome(task.token) == ("succeeded", 2, "", 1)
    with transaction.atomic():
        rolled_back = schedule(tasks.add, 3)
        transaction.set_rollback(True)
    assert not Task.objects.filter(pk=rolled_back.pk).exists()
    assert calls["add"] == [2]


@pytest.mark.django_db
def test_a_test_cases_own_atomic_block_runs_it_when_its_commit_is_captured(
    eager_clock: FakeClock, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        task = schedule(tasks.add, 4)
    assert _outcome(task.token) == ("succeeded", 4, "", 1)


@pytest.mark.django_db
def test_a_task_due_later_waits_for_its_time_and_a_drain(eager_clock: FakeClock) -> None:
    task = schedule(tasks.add, 5, delay=60)
    waiting = assert_scheduled(tasks.add, 5)
    assert (waiting.token, waiting.args, waiting.kwargs) == (task.token, (5,), {})
    assert drain().ran == 0
    eager_clock.advance(60)
    drained = drain()
    assert (drained.succeeded, drained.ran) == (1, 1)
    assert _outcome(task.token) == ("succeeded", 5, "", 1)
    refute_scheduled(tasks.add)


@pytest.mark.django_db
def test_a_failure_is_retried_by_its_policy_as_on_a_node(
    eager_clock: FakeClock, calls: Any
) -> None:
    task = schedule(tasks.flaky, "eager-retry", 1, max_attempts=2)
    row = Task.objects.get(pk=task.pk)
    assert (row.status, row.attempts) == (TaskStatus.PENDING, 1)
    assert row.run_at > eager_clock.now()  # its retry waits, as a node leaves it
    assert Run.objects.filter(task=row, status="failed").count() == 1
    eager_clock.advance((row.run_at - eager_clock.now()).total_seconds())
    drained = drain()
    assert (drained.succeeded, drained.retried, drained.failed) == (1, 0, 0)
    assert _outcome(task.token) == ("succeeded", "eager-retry", "", 2)


@pytest.mark.django_db
def test_a_failure_for_good_is_recorded_not_raised(eager_clock: FakeClock) -> None:
    task = schedule(tasks.boom, "no")
    assert _outcome(task.token) == ("failed", None, "RuntimeError: no", 1)


@pytest.mark.django_db
@override_settings(HTASK={"EAGER": True, "TIMEOUT_GRACE": 0.05})
def test_a_timeout_stops_the_call(fake_clock: FakeClock) -> None:
    task = schedule(tasks.spin, 60.0, timeout=0.2)  # 60 s unless stopped
    status, _value, error, _attempts = _outcome(task.token)
    assert (status, error) == (
        "failed",
        f"{TIMED_OUT_PREFIX}the run took longer than its timeout of 0.2s",
    )


@pytest.mark.django_db
def test_what_a_task_schedules_runs_in_the_same_drain(eager_clock: FakeClock) -> None:
    schedule(tasks.chain, 2)
    assert sorted(
        t.function.rsplit(":", 1)[1] for t in Task.objects.filter(status="succeeded")
    ) == [
        "add",
        "add",
        "add",
        "chain",
        "chain",
        "chain",
    ]
    assert scheduled() == []


@pytest.mark.django_db
def test_a_task_that_schedules_itself_for_ever_is_stopped(fake_clock: FakeClock) -> None:
    schedule(tasks.again)
    with pytest.raises(DrainLimitReached, match="drain\\(\\) made 5 attempts"):
        drain(limit=5)
    assert Task.objects.filter(status="succeeded").count() == 5
    assert Task.objects.filter(status="pending").count() == 1  # not claimed: nothing lost


@pytest.mark.django_db
def test_drain_serves_one_queue_and_leaves_a_paused_one(fake_clock: FakeClock) -> None:
    from django_htask import pause_queue

    mail = schedule(tasks.add, 1, queue_name="mail")
    other = schedule(tasks.add, 2)
    assert drain(queue_name="mail").ran == 1
    assert Task.objects.get(pk=mail.pk).status == TaskStatus.SUCCEEDED
    assert Task.objects.get(pk=other.pk).status == TaskStatus.PENDING
    pause_queue("default")
    assert drain().ran == 0
    assert Task.objects.get(pk=other.pk).status == TaskStatus.PENDING


@pytest.mark.django_db
def test_the_assertions_name_what_waits(fake_clock: FakeClock) -> None:
    schedule(tasks.add, 1, b=2, delay=30)
    using().schedule(tasks.fetch, "https://example.com", 5.0, retry=2, key="k")
    assert assert_scheduled(tasks.add, 1).kwargs == {"b": 2}
    assert_scheduled(tasks.add, a=1, b=2)
    assert_scheduled("tests.integration.testapp.tasks:add", b=2)
    with pytest.raises(AssertionError) as info:
        assert_scheduled(tasks.add, 7)
    assert str(info.value) == (
        "no call of tests.integration.testapp.tasks:add with (7) waits to run; "
        "1 of its calls do: tests.integration.testapp.tasks:add(1, b=2) at 2030-01-01 00:00:30"
    )
    with pytest.raises(AssertionError, match=r"1 call\(s\) of .*:add with \(b=2\) wait"):
        refute_scheduled(tasks.add, b=2)
    refute_scheduled(tasks.add, 2)
    refute_scheduled(tasks.boom)
    with pytest.raises(TypeError, match="tasks:add cannot take these arguments"):
        assert_scheduled(tasks.add, 1, c=3)
    [fetch] = scheduled(tasks.fetch)
    assert fetch.arguments == {"url": "https://example.com", "timeout": 5.0, "retry": 2, "key": "k"}


#: Calls run eagerly and on a node: the same result or the same error. ``None`` as the
#: arguments: a stored call that no longer fits its function (written by raw SQL).
SAME = [
    (tasks.add, (2, 3)),
    (tasks.echo, ((1, "x"),)),
    (tasks.tally, (["a", "b"],)),
    (tasks.adouble, (21,)),
    (tasks.boom, ("bad",)),
    (tasks.blob, (1 << 21,)),  # a result over RESULT_MAX_BYTES
    (tasks.add, None),
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("fn", "args"), SAME, ids=lambda v: getattr(v, "__name__", None))
def test_eagerly_and_on_a_node_a_task_ends_the_same(
    make_node: MakeNode, fake_clock: FakeClock, fn: Any, args: tuple[Any, ...] | None
) -> None:
    def scheduled_call() -> str:
        task = schedule(fn, *(args or (1,)), delay=1)
        if args is None:
            payload = encode_call(task.function, ["one"], {"c": 1})
            Task.objects.filter(pk=task.pk).update(payload=payload)
        return task.token

    eagerly = scheduled_call()
    fake_clock.advance(1)
    with override_settings(HTASK={"EAGER": True}):
        assert drain().ran == 1
    on_node = scheduled_call()
    make_node()
    fake_clock.advance(1)
    assert _outcome(eagerly) == _outcome(on_node)
    assert _outcome(eagerly)[0] in {TaskStatus.SUCCEEDED, TaskStatus.FAILED}


@override_settings(HTASK={"EAGER": True})
def test_runscheduler_refuses_to_start_in_eager_mode() -> None:
    with pytest.raises(CommandError, match=r"HTASK\['EAGER'\] is on: tasks run in the processes"):
        call_command("runscheduler")
