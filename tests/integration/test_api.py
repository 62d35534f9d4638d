"""schedule / cancel / reschedule / get_task, from views and transactions."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import transaction

from django_htask import (
    AbortResult,
    Graph,
    aabort,
    acancel,
    aget_task,
    areschedule,
    aschedule,
    cancel,
    get_task,
    reschedule,
    schedule,
    schedule_many,
    task,
    using,
)
from django_htask.api import MAX_DELAY
from django_htask.engine import ArgumentError, FakeClock, FunctionNotRegistered, PayloadError
from django_htask.models import Task, TaskStatus
from django_htask.signals import task_scheduled
from tests.conftest import START
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db


def test_schedule_stores_a_pending_task_for_now_at_or_after_a_delay(
    fake_clock: FakeClock,
) -> None:
    now = fake_clock.now()
    t1 = schedule(tasks.add, 1, b=2)
    assert (t1.status, t1.run_at, t1.function) == (
        TaskStatus.PENDING,
        now,
        "tests.integration.testapp.tasks:add",
    )
    assert t1.call == ((1,), {"b": 2})
    assert schedule(tasks.add, 1, delay=90).run_at == now + timedelta(seconds=90)
    assert schedule(tasks.add, 1, delay=timedelta(hours=1)).run_at == now + timedelta(hours=1)
    at = now + timedelta(days=2)
    t4 = schedule("tests.integration.testapp.tasks:add", 5, at=at, max_attempts=3)
    assert (t4.run_at, t4.max_attempts) == (at, 3)
    assert schedule("custom.name").function == "custom.name"
    assert Task.objects.count() == 5


def test_bad_calls_fail_in_the_caller_and_store_nothing(fake_clock: FakeClock) -> None:
    with pytest.raises(ArgumentError):
        schedule(tasks.add)  # a is missing
    with pytest.raises(ArgumentError):
        schedule(tasks.add, "one")
    with pytest.raises(FunctionNotRegistered, match="nowhere:gone"):
        schedule("nowhere:gone")
    with pytest.raises(PayloadError):
        schedule(tasks.when, object())
    with pytest.raises(ValueError, match="not both"):
        schedule(tasks.add, 1, at=fake_clock.now(), delay=5)
    with pytest.raises(ValueError, match="aware"):
        schedule(tasks.add, 1, at=datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="-5"):
        schedule(tasks.add, 1, delay=-5)
    with pytest.raises(ValueError, match="max_attempts"):
        schedule(tasks.add, 1, max_attempts=0)
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    ("when", "named"),
    [
        ({"delay": 1e20}, "delay must be at most 100 years (3155760000 seconds), got 1e+20"),
        ({"delay": timedelta.max}, "delay must be at most 100 years"),
        ({"delay": MAX_DELAY + timedelta(seconds=1)}, "delay must be at most 100 years"),
        ({"at": datetime.max.replace(tzinfo=UTC)}, "at must be at most 100 years from now"),
        ({"at": START + MAX_DELAY + timedelta(seconds=1)}, "later than 2130-01-02T00:00:00+00:00"),
    ],
)
def test_a_time_too_far_ahead_is_a_value_error_naming_the_argument_and_the_bound(
    fake_clock: FakeClock, when: dict[str, Any], named: str
) -> None:
    task = schedule(tasks.add, 1, delay=60)
    for call in (
        lambda: schedule(tasks.add, 1, **when),
        lambda: reschedule(task.token, **when),
    ):
        with pytest.raises(ValueError) as info:
            call()
        assert not isinstance(info.value, OverflowError)
        assert named in str(info.value)
    assert list(Task.objects.values_list("run_at", flat=True)) == [task.run_at]


def test_the_furthest_time_allowed_is_accepted(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    assert schedule(tasks.add, 1, delay=MAX_DELAY).run_at == now + MAX_DELAY
    assert schedule(tasks.add, 1, at=now + MAX_DELAY).run_at == now + MAX_DELAY


def not_a_task() -> None: ...


def test_an_unregistered_function_is_named_with_how_to_register_it(
    fake_clock: FakeClock,
) -> None:
    fix = "decorate it with @task, in a module that is imported at start:"
    with pytest.raises(FunctionNotRegistered) as info:
        schedule(tasks.record, "x", 1)  # a plain function in an app's tasks module
    assert str(info.value) == (
        f"tests.integration.testapp.tasks.record is not registered: {fix} "
        "tests.integration.testapp.tasks"
    )
    with pytest.raises(FunctionNotRegistered) as info:
        schedule(not_a_task)  # defined outside any installed app
    assert str(info.value) == (
        f"tests.integration.test_api.not_a_task is not registered: {fix} "
        "<app>.tasks, the tasks module of an installed app"
    )
    with pytest.raises(FunctionNotRegistered) as info:
        schedule("tests.integration.testapp.tasks:record")
    assert str(info.value) == (
        "no function is registered as 'tests.integration.testapp.tasks:record': "
        f"{fix} tests.integration.testapp.tasks"
    )
    assert not Task.objects.exists()


def test_datetimes_travel_with_their_type(fake_clock: FakeClock) -> None:
    when = fake_clock.now() + timedelta(minutes=3)
    task = schedule(tasks.when, when)
    task.refresh_from_db()
    assert task.call == ((when,), {})


def schedule_then_fail() -> None:
    with transaction.atomic():
        schedule(tasks.add, 1)
        raise RuntimeError("roll back")


@pytest.mark.django_db(transaction=True)
def test_a_task_scheduled_in_a_rolled_back_transaction_never_exists(
    fake_clock: FakeClock,
) -> None:
    sent: list[Task] = []

    def receiver(task: Task, **kwargs: object) -> None:
        sent.append(task)

    task_scheduled.connect(receiver)
    try:
        with pytest.raises(RuntimeError, match="roll back"):
            schedule_then_fail()
        assert not Task.objects.exists()
        assert sent == []
        with transaction.atomic():
            kept = schedule(tasks.add, 2)
            assert sent == []  # not before the commit
        assert sent == [kept]
    finally:
        task_scheduled.disconnect(receiver)


def test_cancel(fake_clock: FakeClock) -> None:
    task = schedule(tasks.add, 1, delay=60)
    assert cancel(task.token) is True
    task.refresh_from_db()
    assert task.status == TaskStatus.CANCELLED
    assert task.finished_at == fake_clock.now()
    assert cancel(task.token) is False  # already cancelled
    assert cancel("no-such-token") is False
    running = schedule(tasks.add, 1)
    Task.objects.filter(pk=running.pk).update(status=TaskStatus.RUNNING)
    assert cancel(running.token) is False
    done = schedule(tasks.add, 1)
    Task.objects.filter(pk=done.pk).update(status=TaskStatus.SUCCEEDED)
    assert cancel(done.token) is False


def test_reschedule_moves_a_pending_task_and_releases_its_lease(fake_clock: FakeClock) -> None:
    task = schedule(tasks.add, 1, delay=60)
    Task.objects.filter(pk=task.pk).update(locked_by="some-node")
    assert reschedule(task.token, delay=600) is True
    task.refresh_from_db()
    assert task.run_at == fake_clock.now() + timedelta(seconds=600)
    assert task.locked_by is None
    at = fake_clock.now() + timedelta(days=1)
    assert reschedule(task.token, at=at) is True
    assert get_task(task.token).run_at == at  # type: ignore[union-attr]
    assert reschedule("no-such-token", delay=1) is False
    cancel(task.token)
    assert reschedule(task.token, delay=1) is False


def test_get_task(fake_clock: FakeClock) -> None:
    task = schedule(tasks.add, 1)
    assert get_task(task.token) == task
    assert get_task("nope") is None


@pytest.mark.django_db(transaction=True)
def test_async_variants(fake_clock: FakeClock) -> None:
    async def scenario() -> None:
        task = await aschedule(tasks.add, 1, delay=5)
        assert (await aget_task(task.token)) == task
        assert await areschedule(task.token, delay=50)
        assert await acancel(task.token)
        assert not await acancel(task.token)
        with pytest.raises(ValueError, match="delay must be at most 100 years"):
            await aschedule(tasks.add, 1, delay=1e20)
        with pytest.raises(ValueError, match="at must be at most 100 years"):
            await areschedule(task.token, at=datetime.max.replace(tzinfo=UTC))
        other = await aschedule(tasks.add, 1, delay=5)
        assert await aabort(other.token) is AbortResult.CANCELLED
        third = await aschedule(tasks.add, 1, delay=5)
        assert await acancel(third.token, abort=True)

    # On a thread of its own: the test is independent of any event loop left around.
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(scenario())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    assert errors == []
    assert list(Task.objects.values_list("status", flat=True)) == [TaskStatus.CANCELLED] * 3


# -- timeouts and abort (docs/timeouts.md) -------------------------------------------------
@task(timeout=30)
def timed(n: int) -> None:
    """A task whose runs may take 30 s."""


def test_a_timeout_is_stored_from_the_call_or_the_task_decorator(fake_clock: FakeClock) -> None:
    assert schedule(tasks.add, 1, timeout=2.5).timeout == 2.5
    assert schedule(tasks.add, 1, timeout=timedelta(minutes=1)).timeout == 60.0
    assert schedule(tasks.add, 1).timeout is None  # DEFAULT_TIMEOUT applies at run time
    assert schedule(timed, 1).timeout == 30.0
    assert schedule(timed, 1, timeout=5).timeout == 5.0  # the call's own wins


@pytest.mark.parametrize(
    ("timeout", "message"),
    [
        (0, "timeout must be from 0.001 to 31536000 seconds, got 0"),
        (-1, "timeout must be from 0.001 to 31536000 seconds, got -1"),
        (float("inf"), "timeout must be from 0.001 to 31536000 seconds, got inf"),
        ("10", "timeout must be seconds or a timedelta, got '10'"),
        (True, "timeout must be seconds or a timedelta, got True"),
    ],
)
def test_a_bad_timeout_is_a_value_error_naming_it(
    fake_clock: FakeClock, timeout: Any, message: str
) -> None:
    with pytest.raises(ValueError, match="timeout must") as info:
        schedule(tasks.add, 1, timeout=timeout)
    assert str(info.value) == message
    assert not Task.objects.exists()


@task(priority=7)
def urgent(n: int) -> None:
    """A task whose runs go before others due with them."""


def test_a_priority_is_stored_from_the_call_or_the_task_decorator(fake_clock: FakeClock) -> None:
    assert schedule(tasks.add, 1).priority == 0
    assert schedule(tasks.add, 1, priority=-100).priority == -100
    assert schedule(urgent, 1).priority == 7
    assert schedule(urgent, 1, priority=0).priority == 0  # the call's own wins
    assert [t.priority for t in schedule_many([(urgent, (1,), {}), (tasks.add, (2,), {})])] == [
        7,
        0,
    ]
    many = schedule_many([(urgent, (1,), {}), (tasks.add, (2,), {})], priority=100)
    assert [t.priority for t in many] == [100, 100]
    assert using(priority=3).schedule(tasks.add, 1).priority == 3
    graph = Graph()
    graph.add(tasks.add, 1, priority=-3)
    graph.add(urgent, 2)
    assert [t.priority for t in graph.schedule()] == [-3, 7]
    stored = Task.objects.order_by("id").values_list("priority", flat=True)
    assert list(stored) == [0, -100, 7, 0, 7, 0, 100, 100, 3, -3, 7]


@pytest.mark.parametrize(
    ("priority", "message"),
    [
        (101, "priority must be from -100 to 100, got 101"),
        (-101, "priority must be from -100 to 100, got -101"),
        (1.5, "priority must be an int from -100 to 100, got 1.5"),
        ("high", "priority must be an int from -100 to 100, got 'high'"),
        (True, "priority must be an int from -100 to 100, got True"),
    ],
)
def test_a_bad_priority_is_a_value_error_naming_it(
    fake_clock: FakeClock, priority: Any, message: str
) -> None:
    for call in (
        lambda: schedule(tasks.add, 1, priority=priority),
        lambda: schedule_many([(tasks.add, (1,), {})], priority=priority),
        lambda: task(priority=priority),
    ):
        with pytest.raises(ValueError, match="priority must") as info:
            call()
        assert str(info.value) == message
    assert not Task.objects.exists()


def test_abort_cancels_a_pending_task_and_asks_for_a_running_one(fake_clock: FakeClock) -> None:
    from django_htask import abort

    pending = schedule(tasks.add, 1, delay=60)
    assert abort(pending.token) is AbortResult.CANCELLED
    assert Task.objects.get(pk=pending.pk).status == TaskStatus.CANCELLED
    running = schedule(tasks.add, 1)
    Task.objects.filter(pk=running.pk).update(status=TaskStatus.RUNNING, locked_by="n1")
    assert abort(running.token) is AbortResult.REQUESTED
    assert Task.objects.get(pk=running.pk).abort_requested_at == fake_clock.now()
    assert abort(running.token) is AbortResult.REQUESTED  # asked already: still running
    assert cancel(running.token) is False  # cancel alone leaves a running task alone
    assert cancel(running.token, abort=True) is True
    Task.objects.filter(pk=running.pk).update(status=TaskStatus.SUCCEEDED)
    assert abort(running.token) is AbortResult.NOT_FOUND
    assert not abort(running.token)  # NOT_FOUND is false, the others true
    assert abort("no-such-token") is AbortResult.NOT_FOUND
