"""Retry policies on tasks and schedules (docs/retries.md), run by a node on the fake
clock: which failures are retried, when, and what a failure not retried says."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import checks
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from django_htask import RetryPolicy, periodic, schedule, schedule_many
from django_htask.decorators import bad_declarations, sync_schedules, task
from django_htask.engine import FakeClock
from django_htask.models import Run, RunStatus, Schedule, Task, TaskStatus
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

FLAKY = "tests.integration.testapp.tasks:flaky"
MakeNode = Any


def state(task: Task) -> tuple[str, int]:
    task.refresh_from_db()
    return task.status, task.attempts


def test_a_connection_error_is_retried_at_the_policys_times_then_succeeds(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    policy = RetryPolicy(5, kind="linear", attempts=4, retry_on=(ConnectionError,))
    task = schedule(tasks.flaky, "a", 2, retry=policy)
    assert (task.max_attempts, task.retry_kind, task.retry_backoff) == (4, "linear", 5.0)
    fake_clock.advance(0)
    assert state(task) == (TaskStatus.PENDING, 1)
    assert task.run_at == fake_clock.now() + timedelta(seconds=5)  # linear: 5 x 1
    assert task.last_error == "ConnectionError: a: call 1"
    fake_clock.advance(5)
    assert state(task) == (TaskStatus.PENDING, 2)
    assert task.run_at == fake_clock.now() + timedelta(seconds=10)  # linear: 5 x 2
    fake_clock.advance(9)
    assert calls["flaky"] == ["a", "a"]
    fake_clock.advance(1)
    assert state(task) == (TaskStatus.SUCCEEDED, 3)
    assert [(r.attempt, r.status) for r in Run.objects.attempts_of(task)] == [
        (1, "failed"),
        (2, "failed"),
        (3, "succeeded"),  # from the task's row: a success writes no run row
    ]


def test_an_error_not_in_retry_on_fails_at_once_saying_why(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    policy = RetryPolicy(1, attempts=5, retry_on=(ConnectionError,))
    task = schedule(tasks.flaky, "v", 3, "ValueError", retry=policy)
    fake_clock.advance(0)
    assert state(task) == (TaskStatus.FAILED, 1)
    why = "not retried: ValueError is not in retry_on (builtins.ConnectionError)"
    assert task.last_error == f"ValueError: v: call 1; {why}"
    assert Run.objects.get().error == task.last_error
    fake_clock.advance(60)
    assert calls["flaky"] == ["v"]


def test_give_up_on_wins_over_retry_on_and_matches_subclasses(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    policy = RetryPolicy(1, attempts=5, retry_on=(Exception,), give_up_on=("builtins.LookupError",))
    gone = schedule(tasks.flaky, "k", 3, "KeyError", retry=policy)
    kept = schedule(tasks.flaky, "c", 1, "ConnectionResetError", retry=policy)
    assert gone.give_up_on == "builtins.LookupError"
    fake_clock.advance(0)
    assert state(gone) == (TaskStatus.FAILED, 1)
    assert gone.last_error.endswith(
        "not retried: KeyError is a builtins.LookupError, in give_up_on"
    )
    assert state(kept) == (TaskStatus.PENDING, 1)
    fake_clock.advance(1)
    assert state(kept) == (TaskStatus.SUCCEEDED, 2)


def test_the_last_attempt_fails_without_a_filter_reason(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    task = schedule(
        tasks.flaky,
        "x",
        9,
        "ValueError",
        retry=RetryPolicy(2, kind="fixed", attempts=2, retry_on=(ValueError,)),
    )
    fake_clock.advance(0)
    fake_clock.advance(2)
    assert state(task) == (TaskStatus.FAILED, 2)
    assert task.last_error == "ValueError: x: call 2"


def test_a_function_declared_with_a_policy_gives_it_to_its_tasks(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    task = schedule(tasks.flaky_by_default, "d", 2)
    columns = (task.max_attempts, task.retry_kind, task.retry_backoff, task.retry_on)
    assert columns == (3, "fixed", 3.0, "builtins.ConnectionError")
    fake_clock.advance(0)
    assert task_run_at(task) == fake_clock.now() + timedelta(seconds=3)
    fake_clock.advance(3)
    assert task_run_at(task) == fake_clock.now() + timedelta(seconds=3)  # fixed
    fake_clock.advance(3)
    assert state(task) == (TaskStatus.SUCCEEDED, 3)
    # The call's own max_attempts wins over the function's attempts; its own policy
    # over the function's.
    assert schedule(tasks.flaky_by_default, "e", 0, max_attempts=7).max_attempts == 7
    own = schedule(tasks.flaky_by_default, "f", 0, retry=RetryPolicy(1))
    assert (own.max_attempts, own.retry_kind, own.retry_on) == (1, "exponential", "")


def task_run_at(task: Task) -> Any:
    task.refresh_from_db()
    return task.run_at


def test_a_task_without_a_policy_keeps_the_settings_backoff(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    task = schedule(tasks.flaky, "n", 2, "ValueError", max_attempts=3)
    assert (task.retry_kind, task.retry_backoff, task.retry_backoff_max) == (
        "exponential",
        None,
        None,
    )
    fake_clock.advance(0)
    assert task_run_at(task) == fake_clock.now() + timedelta(seconds=1)  # RETRY_BACKOFF = 1
    fake_clock.advance(1)
    assert task_run_at(task) == fake_clock.now() + timedelta(seconds=2)  # doubled
    fake_clock.advance(2)
    assert state(task) == (TaskStatus.SUCCEEDED, 3)


def test_full_jitter_keeps_the_retry_within_the_delay(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    task = schedule(tasks.flaky, "j", 1, retry=RetryPolicy(100, 60, jitter="full", attempts=2))
    assert (task.retry_backoff_max, task.retry_jitter) == (60.0, "full")
    fake_clock.advance(0)
    assert fake_clock.now() <= task_run_at(task) <= fake_clock.now() + timedelta(seconds=60)


def test_schedule_many_stores_each_functions_policy_in_the_calls_order(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    made = schedule_many(
        [
            (tasks.flaky, ("a", 0), {}),
            (tasks.flaky_by_default, ("b", 0), {}),
            (tasks.flaky_by_default, ("c", 0), {}),
            (tasks.flaky, ("d", 0), {}),
        ]
    )
    rows = Task.objects.filter(pk__in=[t.pk for t in made]).order_by("pk")
    assert [t.pk for t in made] == [t.pk for t in rows]
    assert [(t.retry_kind, t.max_attempts) for t in rows] == [
        ("exponential", 1),
        ("fixed", 3),
        ("fixed", 3),
        ("exponential", 1),
    ]
    same = schedule_many([(FLAKY, ("e", 0), {})] * 2, retry=RetryPolicy(2, attempts=2))
    assert {(t.retry_backoff, t.max_attempts) for t in same} == {(2.0, 2)}


def flaky_schedule(args: tuple[Any, ...], **fields: Any) -> Schedule:
    """A schedule of ``flaky(*args)`` every minute, validated as the admin does."""
    row = Schedule(name="s", function=FLAKY, schedule="@every 1m", **fields)
    row.set_call(args)
    row.full_clean()
    row.save()
    return row


def test_a_schedule_with_a_policy_retries_its_run_by_it(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    flaky_schedule(
        ("s", 2),
        max_attempts=4,
        retry_backoff=3,
        retry_kind="linear",
        retry_on="builtins.ConnectionError",
    )
    make_node()
    fake_clock.advance(60)
    assert calls["flaky"] == ["s"]
    fake_clock.advance(3)  # linear: 3 x 1
    assert calls["flaky"] == ["s", "s"]
    fake_clock.advance(5)
    assert calls["flaky"] == ["s", "s"]
    fake_clock.advance(1)  # linear: 3 x 2
    assert calls["flaky"] == ["s", "s", "s"]
    assert list(Run.objects.order_by("attempt").values_list("attempt", "status")) == [
        (1, "failed"),
        (2, "failed"),
        (3, "succeeded"),
    ]


def test_a_schedules_run_not_in_retry_on_is_not_retried(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    flaky_schedule(("s", 5, "ValueError"), max_attempts=3, retry_backoff=1, give_up_on="ValueError")
    make_node()
    fake_clock.advance(60)
    fake_clock.advance(10)
    run = Run.objects.get()
    assert (run.status, run.attempt) == (RunStatus.FAILED, 1)
    assert run.error == "ValueError: s: call 1; not retried: ValueError is in give_up_on"


# -- bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"retry": "3 times"}, TypeError, "retry must be a RetryPolicy, got '3 times'"),
        (
            {"retry": RetryPolicy(100_000)},
            ValueError,
            "retry_backoff must be from 0 to 86400 seconds, got 100000",
        ),
        (
            {"retry": RetryPolicy(1, 10**9)},
            ValueError,
            "retry_backoff_max must be from 0 to 31536000 seconds, got 1000000000",
        ),
        (
            {"retry": RetryPolicy(attempts=1001)},
            ValueError,
            "max_attempts must be from 1 to 1000, got 1001",
        ),
        (
            {"retry": RetryPolicy(attempts=3), "max_attempts": 2},
            ValueError,
            "max_attempts 2 and the retry policy's attempts 3 differ: give one of them",
        ),
    ],
)
def test_a_bad_policy_is_refused_when_scheduled_naming_it(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        schedule(tasks.flaky, "z", 0, **kwargs)
    assert str(raised.value) == message
    assert not Task.objects.exists()


def test_a_bad_policy_is_refused_by_task_when_decorated() -> None:
    with pytest.raises(
        ValueError, match=r"retry_on: exception class .nowhere\.Gone. cannot be imported"
    ):
        task(retry=RetryPolicy(retry_on=("nowhere.Gone",)))
    with pytest.raises(TypeError, match="retry must be a RetryPolicy, got 3"):
        task(retry=3)  # type: ignore[arg-type]


def test_the_database_refuses_a_kind_it_does_not_know() -> None:
    task = schedule(tasks.flaky, "z", 0)
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.filter(pk=task.pk).update(retry_kind="quadratic")
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.filter(pk=task.pk).update(retry_backoff_max=-1)


def test_a_schedules_exception_lists_are_validated_naming_the_bad_one() -> None:
    row = Schedule(
        name="s", function=FLAKY, schedule="@every 1m", retry_on="builtins.OSError, nowhere.X"
    )
    row.set_call(("s", 0))
    with pytest.raises(ValidationError) as raised:
        row.full_clean()
    assert raised.value.message_dict["retry_on"] == [
        "retry_on: exception class 'nowhere.X' cannot be imported: No module named 'nowhere'"
    ]


# -- @periodic ---------------------------------------------------------------------------
@pytest.mark.usefixtures("declared")
def test_periodic_syncs_its_policy_to_the_schedule_and_drops_it_when_removed() -> None:
    policy = RetryPolicy(2, 30, kind="fixed", jitter="equal", attempts=3, give_up_on=(ValueError,))
    periodic("@every 1m", name="policy-sync", args=("p", 0), retry=policy)(tasks.flaky)
    sync_schedules()
    row = Schedule.objects.get(name="policy-sync")
    columns = (
        row.max_attempts,
        row.retry_backoff,
        row.retry_kind,
        row.retry_backoff_max,
        row.retry_jitter,
        row.retry_on,
        row.give_up_on,
    )
    assert columns == (3, 2.0, "fixed", 30.0, "equal", "", "builtins.ValueError")
    periodic("@every 1m", name="policy-sync", args=("p", 0), max_attempts=2)(tasks.flaky)
    sync_schedules()
    row.refresh_from_db()
    assert (row.max_attempts, row.retry_backoff, row.retry_kind, row.give_up_on) == (
        2,
        10.0,
        "exponential",
        "",
    )


@pytest.mark.usefixtures("declared")
def test_a_bad_periodic_policy_is_a_system_check_error() -> None:
    periodic("@every 1m", name="bad-policy", retry=RetryPolicy(attempts=2), max_attempts=5)(
        tasks.flaky
    )
    [bad] = bad_declarations()
    assert "max_attempts 5 and the retry policy's attempts 2 differ" in str(bad)
    errors = [e for e in checks.run_checks() if e.id == "django_htask.E008"]
    assert any("max_attempts 5 and the retry policy's attempts 2 differ" in e.msg for e in errors)
    assert not Schedule.objects.filter(name="bad-policy").exists()
