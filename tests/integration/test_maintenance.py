"""Retention: what is past it goes (``prune_now``, ``htask prune``: what the nodes do
by themselves, tests/unit/node/test_pruning.py), and a pruned token says so."""

from __future__ import annotations

from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_htask.api import schedule
from django_htask.engine import FakeClock, encode_call
from django_htask.exceptions import TaskNotFound
from django_htask.models import Node, Run, RunStatus, Task, TaskStatus
from django_htask.operations import prune_now
from django_htask.scheduled import get_result, get_task
from django_htask.store import Pruned
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db

ADD = "tests.integration.testapp.tasks:add"


def make_run(name: str, days_ago: float, clock: FakeClock, status: str = "succeeded") -> Run:
    started = clock.now() - timedelta(days=days_ago)
    return Run.objects.create(
        name=name,
        function="f",
        status=status,
        started_at=started,
        finished_at=None if status == RunStatus.RUNNING else started,
    )


def ended(name: str, status: str, days_ago: float, clock: FakeClock, **fields: Any) -> Task:
    """A task that ended ``days_ago`` days ago (``status`` pending or running: it was
    due then, and has not ended), with a run unless it was cancelled or never ran."""
    at = clock.now() - timedelta(days=days_ago)
    done = status in (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED)
    task = Task.objects.create(
        function=ADD,
        payload=encode_call(ADD, (1,), {}),
        run_at=at,
        status=status,
        finished_at=at if done else None,
        last_error=name,
        **fields,
    )
    if status in (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.RUNNING):
        Run.objects.create(
            name=name,
            function=ADD,
            status=RunStatus.RUNNING if status == TaskStatus.RUNNING else status,
            started_at=at,
            finished_at=at if done else None,
            task=task,
        )
    return task


def names() -> list[str]:
    return sorted(Run.objects.values_list("name", flat=True))


def left() -> list[str]:
    return sorted(Task.objects.values_list("last_error", flat=True))


def test_runs_past_the_run_retention_go(fake_clock: FakeClock) -> None:
    make_run("old-ok", 31, fake_clock)
    make_run("old-failed", 40, fake_clock, status=RunStatus.FAILED)
    make_run("old-running", 40, fake_clock, status=RunStatus.RUNNING)
    make_run("recent", 29, fake_clock)
    assert prune_now() == Pruned(runs=2)  # RUN_RETENTION_DAYS defaults to 30
    assert names() == ["old-running", "recent"]
    assert prune_now(days=10) == Pruned(runs=1)
    assert names() == ["old-running"]


def test_finished_tasks_go_by_their_status_with_their_runs(
    fake_clock: FakeClock, settings: Any
) -> None:
    settings.HTASK = {"TASK_RETENTION_DAYS": {"failed": 30, "default": 3}}
    ended("old-ok", TaskStatus.SUCCEEDED, 4, fake_clock)
    ended("young-ok", TaskStatus.SUCCEEDED, 2, fake_clock)
    ended("young-failed", TaskStatus.FAILED, 10, fake_clock)
    ended("old-failed", TaskStatus.FAILED, 31, fake_clock)
    ended("old-cancelled", TaskStatus.CANCELLED, 4, fake_clock)
    ended("pending", TaskStatus.PENDING, 100, fake_clock)
    ended("running", TaskStatus.RUNNING, 100, fake_clock)
    assert prune_now() == Pruned(tasks=3, runs=2)
    assert left() == ["pending", "running", "young-failed", "young-ok"]
    assert names() == ["running", "young-failed", "young-ok"]


def test_a_function_s_own_retention_is_stored_and_applies(fake_clock: FakeClock) -> None:
    brief = schedule(tasks.brief)
    kept = schedule(tasks.kept)
    plain = schedule(tasks.add, 1)
    assert [t.retention for t in (brief, kept, plain)] == [3600, 0, None]
    for task, days_ago in ((brief, 2 / 24), (kept, 400), (plain, 2 / 24)):
        Task.objects.filter(pk=task.pk).update(
            status=TaskStatus.SUCCEEDED, finished_at=fake_clock.now() - timedelta(days=days_ago)
        )
    assert prune_now() == Pruned(tasks=1)  # brief's hour passed; kept: for ever
    assert set(Task.objects.values_list("pk", flat=True)) == {kept.pk, plain.pk}


def test_a_pruned_token_says_it_is_gone_and_how_long_tasks_are_kept(
    fake_clock: FakeClock, settings: Any
) -> None:
    settings.HTASK = {"TASK_RETENTION_DAYS": {"failed": 30}}
    token = ended("old", TaskStatus.SUCCEEDED, 8, fake_clock).token
    assert get_result(token).status == TaskStatus.SUCCEEDED
    prune_now()
    assert get_task(token) is None
    with pytest.raises(TaskNotFound) as caught:
        get_result(token)
    assert caught.value.token == token
    message = str(caught.value)
    assert repr(token) in message
    assert "succeeded 7 days, failed 30 days, cancelled 7 days" in message
    assert "TASK_RETENTION_DAYS" in message


def test_zero_keeps_for_ever(fake_clock: FakeClock, settings: Any) -> None:
    settings.HTASK = {"RUN_RETENTION_DAYS": 0, "TASK_RETENTION_DAYS": 0}
    make_run("ancient", 3650, fake_clock)
    ended("ancient-task", TaskStatus.SUCCEEDED, 3650, fake_clock)
    Node.objects.create(
        id="gone",
        hostname="h",
        pid=1,
        started_at=fake_clock.now() - timedelta(days=3650),
        last_heartbeat=fake_clock.now() - timedelta(days=3650),
        stopped_at=fake_clock.now() - timedelta(days=3650),
    )
    assert prune_now() == Pruned()
    assert prune_now(dry_run=True) == Pruned()
    assert prune_now(days=3000) == Pruned(tasks=1, runs=2, nodes=1)  # days: for this call


@pytest.mark.parametrize("days", [0, -1, "7", True, float("nan")])
def test_days_must_be_more_than_zero(days: Any) -> None:
    with pytest.raises(ValueError, match="days must be a number > 0"):
        prune_now(days=days)


def test_rows_of_nodes_stopped_long_ago_go(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    for name, stopped in (("old", now - timedelta(days=31)), ("new", now), ("live", None)):
        Node.objects.create(
            id=name,
            hostname="h",
            pid=1,
            started_at=now - timedelta(days=40),
            last_heartbeat=now,
            stopped_at=stopped,
        )
    assert prune_now() == Pruned(nodes=1)
    assert sorted(Node.objects.values_list("id", flat=True)) == ["live", "new"]


def test_a_dry_run_counts_what_would_go(fake_clock: FakeClock) -> None:
    ended("old-ok", TaskStatus.SUCCEEDED, 8, fake_clock)
    ended("old-cancelled", TaskStatus.CANCELLED, 8, fake_clock)
    ended("young", TaskStatus.SUCCEEDED, 1, fake_clock)
    make_run("old-run", 31, fake_clock)
    expected = Pruned(tasks=2, runs=2)
    assert prune_now(dry_run=True) == expected
    assert len(left()) == 3
    assert prune_now() == expected


def test_it_goes_in_batches(fake_clock: FakeClock, settings: Any) -> None:
    settings.HTASK = {"PRUNE_BATCH": 2}
    for n in range(5):
        ended(f"old-{n}", TaskStatus.SUCCEEDED, 8, fake_clock)
    totals: list[Pruned] = []
    assert prune_now(progress=totals.append) == Pruned(tasks=5, runs=5)
    # tasks and their runs, two tasks a batch; the last finds one task
    assert [t.tasks for t in totals] == [2, 4, 5]
    assert left() == []


def test_htask_prune(fake_clock: FakeClock) -> None:
    ended("old", TaskStatus.SUCCEEDED, 8, fake_clock)
    make_run("old-run", 31, fake_clock)
    out = StringIO()
    call_command("htask", "prune", "--dry-run", stdout=out)
    assert out.getvalue().startswith(
        "would delete 1 finished tasks, 2 runs and 0 rows of stopped nodes past their "
        "retention: tasks kept 7 days (TASK_RETENTION_DAYS), runs 30 days (RUN_RETENTION_DAYS)"
    )
    assert len(names()) == 2
    out = StringIO()
    call_command("htask", "prune", stdout=out)
    assert out.getvalue().startswith("deleted 1 finished tasks, 2 runs and 0 rows")
    assert names() == left() == []


def test_htask_prune_refuses_zero_days() -> None:
    with pytest.raises(CommandError, match="--days: days must be a number > 0") as caught:
        call_command("htask", "prune", "--days", "0")
    assert caught.value.returncode == 2


def test_htask_status_says_the_retention_and_the_last_pruning(fake_clock: FakeClock) -> None:
    now: datetime = fake_clock.now()
    Node.objects.create(
        id="pruner",
        hostname="h",
        pid=1,
        started_at=now,
        last_heartbeat=now,
        pruned_tasks=12,
        pruned_runs=30,
        pruned_at=now,
    )
    out = StringIO()
    call_command("htask", "status", stdout=out)
    assert "retention: finished tasks 7 days, runs 30 days" in out.getvalue()
    assert "last pruned by pruner at 2030-01-01 00:00:00: 12 tasks and 30 runs" in out.getvalue()
