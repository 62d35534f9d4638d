"""Snooze (docs/retries.md, "Snooze"): a run that raises ``Snooze`` runs again later
without its attempt counting. Its call (``execute``), the one decision whether it may
(``snooze_delay``), and a node on the in-memory store and the fake clock."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from django_htask import Snooze
from django_htask.conf import get_settings
from django_htask.engine import FakeClock, RunGuard, registry
from django_htask.enums import RunStatus, TaskStatus
from django_htask.exceptions import HtaskError
from django_htask.node import Node
from django_htask.node.execution import Call, execute, retry_delay, snooze_delay
from django_htask.store import RunOutcome
from django_htask.testing import InMemoryStore

from .conftest import START

SNOOZING = "tests.integration.testapp.tasks:snoozing"
MakeNode = Callable[..., Node]
SECOND = timedelta(seconds=1)


def call_of(function: str, *args: Any) -> Call:
    return Call(
        registry.check_call(function, args, {}), function, function, "n", 1, None, task_id=1
    )


# -- Snooze ------------------------------------------------------------------------------
def test_snooze_takes_seconds_or_a_timedelta_and_is_no_error() -> None:
    assert Snooze(30).seconds == 30.0
    assert Snooze(timedelta(minutes=2)).seconds == 120.0
    assert str(Snooze(1.5)) == "snoozed: runs again in 1.5s"
    assert not isinstance(Snooze(1), HtaskError)  # not an error: the task asks for it


@pytest.mark.parametrize(
    ("seconds", "error", "message"),
    [
        (-1, ValueError, "Snooze seconds must be >= 0 and finite, got -1"),
        (math.nan, ValueError, "Snooze seconds must be >= 0 and finite, got nan"),
        (math.inf, ValueError, "Snooze seconds must be >= 0 and finite, got inf"),
        ("30", TypeError, "Snooze seconds must be seconds or a timedelta, got '30'"),
        (None, TypeError, "Snooze seconds must be seconds or a timedelta, got None"),
        (True, TypeError, "Snooze seconds must be seconds or a timedelta, got True"),
        (
            1e12,
            ValueError,
            "Snooze seconds must be at most 100 years (3155760000 seconds), got 1000000000000.0",
        ),
        (
            10**400,
            ValueError,
            "Snooze seconds must be at most 100 years (3155760000 seconds), got <int of 1329 bits>",
        ),
    ],
)
def test_a_bad_snooze_is_an_error_naming_it(seconds: Any, error: type, message: str) -> None:
    with pytest.raises(error) as raised:
        Snooze(seconds)
    assert str(raised.value) == message


# -- its call ----------------------------------------------------------------------------
def test_a_snooze_from_a_nested_call_ends_the_run_snoozed_with_its_seconds() -> None:
    outcome = execute(call_of(SNOOZING, "nested", 1, 45.0), clock=FakeClock(START))
    assert (outcome.status, outcome.error, outcome.traceback) == (
        RunStatus.SNOOZED,
        "snoozed: runs again in 45s",
        "",
    )
    assert outcome.extra == {"retryable": False, "snooze": 45.0}


def test_a_bad_snooze_fails_the_attempt_with_its_error_retried_as_any() -> None:
    outcome = execute(call_of(SNOOZING, "bad", 1, -1.0), clock=FakeClock(START))
    assert outcome.status == RunStatus.FAILED
    assert outcome.error == "ValueError: Snooze seconds must be >= 0 and finite, got -1.0"
    assert outcome.extra["retryable"] and "raise Snooze(seconds)" in outcome.traceback


def test_a_run_asked_to_stop_that_then_snoozes_ends_stopped() -> None:
    guard = RunGuard()
    guard.stop("Aborted: asked", retryable=False)
    outcome = execute(call_of(SNOOZING, "stopped", 1), clock=FakeClock(START), guard=guard)
    assert (outcome.status, outcome.error) == (RunStatus.FAILED, "Aborted: asked")
    assert "snooze" not in outcome.extra


# -- the decision ----------------------------------------------------------------------
def snoozed(seconds: float = 30.0) -> RunOutcome:
    extra: dict[str, object] = {"retryable": False, "snooze": seconds}
    return RunOutcome("snoozed", "f", "f", "n", 1, None, START, START, extra=extra)


def test_a_snooze_under_the_bound_waits_its_seconds_and_is_no_retry() -> None:
    outcome = snoozed(12.5)
    assert snooze_delay(outcome, 2, 3, "MAX_SNOOZES") == 12.5
    assert outcome.status == RunStatus.SNOOZED
    assert retry_delay(outcome, 1, 3, lambda: pytest.fail("a policy built")) is None


def test_a_snooze_at_the_bound_fails_the_run_unretried_saying_why() -> None:
    outcome = snoozed()
    assert snooze_delay(outcome, 3, 3, "its max_snoozes") is None
    assert (outcome.status, outcome.extra["retryable"]) == (RunStatus.FAILED, False)
    assert outcome.error == (
        "TooManySnoozes: it asked to snooze 30s more after 3 snoozes, the most its "
        "max_snoozes allows (3); not retried"
    )
    assert retry_delay(outcome, 1, 3, lambda: pytest.fail("a policy built")) is None


def test_a_run_that_did_not_snooze_is_left_alone() -> None:
    ok = RunOutcome("succeeded", "f", "f", "n", 1, None, START, START)
    assert snooze_delay(ok, 100, 0, "MAX_SNOOZES") is None
    assert ok.status == RunStatus.SUCCEEDED


# -- a node ------------------------------------------------------------------------------
def runs(store: InMemoryStore, **where: int) -> list[tuple[str, int, Any]]:
    """A schedule's runs, or a task's attempts (its success from its row)."""
    rows = store.attempts_of(where["task_id"]) if "task_id" in where else store.runs_of(**where)
    return [(r.status, r.attempt, r.started_at) for r in rows]


def test_a_task_snoozing_twice_then_succeeding_made_one_attempt(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    tid = store.add_task(SNOOZING, "twice", 2, max_attempts=1)
    make_node()
    clock.advance(0)
    task = store.tasks[tid]
    assert (task.status, task.run_at, task.attempts, task.snoozes) == (
        TaskStatus.PENDING,
        START + 30 * SECOND,
        0,
        1,
    )
    assert task.locked_by is None and task.last_error == ""
    clock.advance(30)
    clock.advance(30)
    assert (task.status, task.attempts, task.snoozes) == (TaskStatus.SUCCEEDED, 1, 2)
    assert calls["snoozing"] == ["twice"] * 3
    assert runs(store, task_id=tid) == [
        ("snoozed", 1, START),
        ("snoozed", 1, START + 30 * SECOND),
        ("succeeded", 1, START + 60 * SECOND),
    ]
    assert store.runs_of(task_id=tid)[0].error == "snoozed: runs again in 30s"


def test_past_max_snoozes_the_next_snooze_fails_the_task_unretried(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    tid = store.add_task(SNOOZING, "often", 9, max_attempts=3)
    make_node(settings=dataclasses.replace(get_settings(), max_snoozes=1))
    clock.advance(0)
    clock.advance(30)
    clock.advance(10)  # a retry would have run by now (RETRY_BACKOFF is 1 s here)
    task = store.tasks[tid]
    assert (task.status, task.attempts, task.snoozes) == (TaskStatus.FAILED, 1, 1)
    assert task.last_error == (
        "TooManySnoozes: it asked to snooze 30s more after 1 snoozes, the most MAX_SNOOZES "
        "allows (1); not retried"
    )
    assert [r[0] for r in runs(store, task_id=tid)] == ["snoozed", "failed"]


def test_a_task_s_own_max_snoozes_wins_over_the_setting(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    tid = store.add_task(SNOOZING, "never", 1, max_snoozes=0)
    make_node()
    clock.advance(0)
    task = store.tasks[tid]
    assert (task.status, task.snoozes) == (TaskStatus.FAILED, 0)
    assert "the most its max_snoozes allows (0)" in task.last_error


def test_a_bad_snooze_fails_the_attempt_and_the_retry_policy_applies(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    tid = store.add_task(SNOOZING, "bad", 5, -1.0, max_attempts=2)
    make_node()
    clock.advance(0)
    clock.advance(1)  # RETRY_BACKOFF is 1 s in the test settings
    task = store.tasks[tid]
    assert (task.status, task.attempts, task.snoozes) == (TaskStatus.FAILED, 2, 0)
    assert task.last_error == "ValueError: Snooze seconds must be >= 0 and finite, got -1.0"
    assert [r[0] for r in runs(store, task_id=tid)] == ["failed", "failed"]


def test_a_schedule_run_that_snoozes_runs_again_as_the_same_attempt(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    sid = store.add_schedule("s", SNOOZING, "@every 1m", args=("s", 2, 10.0), max_attempts=1)
    make_node()
    clock.advance(60)
    clock.advance(10)
    clock.advance(10)
    due = START + timedelta(minutes=1)
    assert runs(store, schedule_id=sid) == [
        ("snoozed", 1, due),
        ("snoozed", 1, due + 10 * SECOND),
        ("succeeded", 1, due + 20 * SECOND),
    ]
    assert {r.scheduled_for for r in store.runs_of(schedule_id=sid)} == {due}
    assert store.schedules[sid].last_status == "succeeded"


def test_past_max_snoozes_a_schedule_run_fails_unretried(
    make_node: MakeNode, clock: FakeClock, store: InMemoryStore, calls: Any
) -> None:
    sid = store.add_schedule(
        "s", SNOOZING, "@every 1m", args=("s", 9, 10.0), max_attempts=3, retry_backoff=1.0
    )
    make_node(settings=dataclasses.replace(get_settings(), max_snoozes=1))
    clock.advance(60)
    clock.advance(10)
    clock.advance(5)  # a retry would have run by now
    assert [r[:2] for r in runs(store, schedule_id=sid)] == [("snoozed", 1), ("failed", 1)]
    assert store.runs_of(schedule_id=sid)[1].error.startswith("TooManySnoozes: ")
