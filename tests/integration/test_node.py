"""The node on SQLite, driven by the engine's fake clock."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError, transaction

from django_htask import cancel, reschedule, schedule
from django_htask.decorators import sync_schedules
from django_htask.engine import FakeClock
from django_htask.models import Node, Run, RunStatus, Schedule, Task, TaskStatus
from django_htask.node import EXIT_GRACE, StartAborted, pruning
from django_htask.node import Node as Node_
from django_htask.retry import RetryPolicy
from django_htask.signals import run_finished, run_started
from django_htask.store import get_store
from django_htask.store.database import unavailable
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "tests.integration.testapp.tasks:add"
SLOW = "tests.integration.testapp.tasks:slow"
BOOM = "tests.integration.testapp.tasks:boom"
MakeNode = Callable[..., Any]


def make_schedule(
    name: str = "s", text: str = "@every 1m", function: str = ADD, **kwargs: Any
) -> Schedule:
    args = kwargs.pop("args", (1,) if function == ADD else ())
    row = Schedule(name=name, function=function, schedule=text, **kwargs)
    row.set_call(args)
    row.save()
    return row


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll (real time) until ``condition()``: for threads blocked on purpose."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def test_start_registers_the_node_and_loads_schedules(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    a = make_schedule("a")
    b = make_schedule("b", enabled=False)
    node = make_node()
    assert node.placed_schedules() == {a.pk: a.next_run_at}
    assert b.pk not in node.placed_schedules()
    row = Node.objects.get(id=node.node_id)
    assert row.last_heartbeat == fake_clock.now()


def test_a_schedule_fires_records_a_run_and_moves_next_run_at(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    row = make_schedule(text="@every 1m")
    node = make_node()
    fake_clock.advance(59)
    assert calls["add"] == []
    fake_clock.advance(1)
    assert calls["add"] == [1]
    run = Run.objects.get()
    assert (run.status, run.schedule_id, run.node, run.attempt) == (
        RunStatus.SUCCEEDED,
        row.pk,
        node.node_id,
        1,
    )
    assert run.scheduled_for == fake_clock.now()
    assert run.duration is not None
    row.refresh_from_db()
    assert row.next_run_at == fake_clock.now() + timedelta(minutes=1)
    assert (row.last_status, row.last_run_at) == (RunStatus.SUCCEEDED, fake_clock.now())
    fake_clock.advance(120)
    assert calls["add"] == [1, 1, 1]


def test_a_task_due_now_runs_once_and_is_recorded(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    node = make_node()
    task = schedule(tasks.add, 2, b=3)
    fake_clock.advance(0)
    assert calls["add"] == [5]
    task.refresh_from_db()
    assert (task.status, task.attempts, task.locked_by) == (TaskStatus.SUCCEEDED, 1, None)
    assert task.finished_at == fake_clock.now()
    assert not Run.objects.exists()  # a success: on the task's row, with its node
    [run] = Run.objects.attempts_of(task)
    assert (run.task_id, run.status, run.name, run.node) == (
        task.pk,
        RunStatus.SUCCEEDED,
        ADD,
        node.node_id,
    )
    fake_clock.advance(10)
    assert calls["add"] == [5]


def test_a_task_made_before_start_runs_at_its_time(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    task = schedule(tasks.add, 7, delay=5)
    node = make_node()
    assert node.next_task_wake() == task.run_at  # a timer, nothing claimed
    assert Task.objects.get(pk=task.pk).locked_by is None
    fake_clock.advance(4)
    assert calls["add"] == []
    fake_clock.advance(1)
    assert calls["add"] == [7]


def test_tasks_due_together_start_in_priority_order(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    priorities = {1: 0, 2: 10, 3: -5, 4: 10}
    for value, priority in priorities.items():
        schedule(tasks.add, value, delay=5, priority=priority)
    make_node(workers=1)
    fake_clock.advance(5)
    assert calls["add"] == [2, 4, 1, 3]  # priority first, then the order they were due


def test_a_claim_takes_the_highest_priority_first(fake_clock: FakeClock) -> None:
    low = schedule(tasks.add, 1)
    high = schedule(tasks.add, 2, delay=1)
    Task.objects.filter(pk=high.pk).update(priority=5)
    now = fake_clock.now() + timedelta(seconds=1)
    lease = now + timedelta(seconds=60)
    store = get_store()
    store.register_node("n1", "host", 1, "0", now)
    [first] = store.start_tasks("n1", now, 1, lease)
    [second] = store.start_tasks("n1", now, 1, lease)
    assert (first.id, second.id) == (high.pk, low.pk)


def test_a_timer_is_set_only_for_a_task_within_the_look_ahead(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, settings: Any
) -> None:
    settings.HTASK = {"LOOKAHEAD": 30.0}
    # 100 s ahead, not an hour: every 5 s poll is real work, and 720 of them took more
    # than advance()'s 10 s on a loaded CI machine.
    far = schedule(tasks.add, 9, delay=100)
    node = make_node(poll_interval=5.0)
    assert node.next_task_wake() is None
    fake_clock.advance(100 - 31)  # the last poll was at 65 s: 35 s ahead
    assert node.next_task_wake() is None
    fake_clock.advance(2)  # polled at 70 s: within 30 s
    assert node.next_task_wake() == far.run_at
    fake_clock.advance(28)
    assert calls["add"] == []
    fake_clock.advance(1)
    assert calls["add"] == [9]


def test_a_failing_task_is_retried_with_backoff_then_fails(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    task = schedule(tasks.boom, "bad", max_attempts=3)
    fake_clock.advance(0)
    task.refresh_from_db()
    assert (task.status, task.attempts) == (TaskStatus.PENDING, 1)
    assert task.run_at == fake_clock.now() + timedelta(seconds=1)  # RETRY_BACKOFF = 1
    assert "RuntimeError: bad" in task.last_error
    fake_clock.advance(1)
    task.refresh_from_db()
    assert (task.status, task.attempts) == (TaskStatus.PENDING, 2)
    assert task.run_at == fake_clock.now() + timedelta(seconds=2)
    fake_clock.advance(2)
    task.refresh_from_db()
    assert (task.status, task.attempts) == (TaskStatus.FAILED, 3)
    assert "Traceback" in task.traceback
    assert "raise RuntimeError(message)" in task.traceback
    assert len(calls["boom"]) == 3
    assert list(Run.objects.order_by("attempt").values_list("attempt", "status")) == [
        (1, "failed"),
        (2, "failed"),
        (3, "failed"),
    ]


def test_a_task_snoozing_twice_then_succeeding_made_one_attempt(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    task = schedule(tasks.snoozing, "twice", 2, 5.0)
    fake_clock.advance(0)
    task.refresh_from_db()
    assert (task.status, task.attempts, task.snoozes) == (TaskStatus.PENDING, 0, 1)
    assert task.run_at == fake_clock.now() + timedelta(seconds=5)
    fake_clock.advance(5)
    fake_clock.advance(5)
    task.refresh_from_db()
    assert (task.status, task.attempts, task.snoozes) == (TaskStatus.SUCCEEDED, 1, 2)
    assert [(r.status, r.attempt) for r in Run.objects.attempts_of(task)] == [
        ("snoozed", 1),
        ("snoozed", 1),
        ("succeeded", 1),  # from the task's row: a success writes no run row
    ]


def test_a_function_s_max_snoozes_is_stored_and_bounds_its_tasks(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_node()
    task = schedule(tasks.restless, "r", max_attempts=2)
    assert task.max_snoozes == 1  # @task(max_snoozes=1)
    fake_clock.advance(0)
    fake_clock.advance(30)
    task.refresh_from_db()
    assert (task.status, task.attempts, task.snoozes) == (TaskStatus.FAILED, 1, 1)
    assert task.last_error.startswith("TooManySnoozes: ")
    assert "the most its max_snoozes allows (1); not retried" in task.last_error


def test_a_failing_schedule_run_is_retried(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    make_schedule(text="@every 1m", function=BOOM, max_attempts=2, retry_backoff=5)
    make_node()
    fake_clock.advance(60)
    assert len(calls["boom"]) == 1
    fake_clock.advance(5)
    assert len(calls["boom"]) == 2
    assert list(Run.objects.order_by("attempt").values_list("attempt", "status")) == [
        (1, "failed"),
        (2, "failed"),
    ]


def test_an_unregistered_function_fails_the_task_and_breaks_the_schedule(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    row = make_schedule(text="@every 1m")
    Schedule.objects.filter(pk=row.pk).update(function="gone.module:renamed")
    task = schedule(tasks.add, 1, max_attempts=5)
    Task.objects.filter(pk=task.pk).update(function="gone.module:renamed")
    # Polls every 30 s: the ten minutes below are 20 polls, not 600 (each real work,
    # which under load took longer than FakeClock.advance's 10 real seconds).
    node = make_node(poll_interval=30.0)
    fake_clock.advance(60)
    task.refresh_from_db()
    assert (task.status, task.attempts) == (TaskStatus.FAILED, 1)  # never retried
    assert "gone.module:renamed" in task.last_error
    row.refresh_from_db()
    assert row.last_status == RunStatus.FAILED
    assert row.next_run_at is None  # kept, but it stops: nothing to run
    assert "FunctionNotRegistered" in row.broken
    assert node.placed_schedules() == {}
    fake_clock.advance(600)
    errors = list(Run.objects.order_by("id").values_list("error", flat=True))
    assert len(errors) == 2  # the task's run and one for the schedule
    assert all("FunctionNotRegistered" in e for e in errors)


def test_changes_by_another_process_are_seen_within_the_poll_interval(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    row = make_schedule(text="@every 1h")
    node = make_node(poll_interval=2.0)
    soon = fake_clock.now() + timedelta(seconds=5)
    # A QuerySet.update() is what another process's edit looks like to this node.
    Schedule.objects.filter(pk=row.pk).update(next_run_at=soon)
    fake_clock.advance(2)
    assert node.placed_schedules() == {row.pk: soon}
    Schedule.objects.filter(pk=row.pk).update(enabled=False)
    fake_clock.advance(2)
    assert node.placed_schedules() == {}
    fake_clock.advance(10)
    assert calls["add"] == []


def test_changes_in_the_nodes_own_process_are_seen_at_once(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    node = make_node(poll_interval=60.0)
    row = make_schedule(text="@every 5m")
    fake_clock.advance(0)
    assert node.placed_schedules() == {row.pk: row.next_run_at}
    task = schedule(tasks.add, 1, delay=10)
    fake_clock.advance(0)
    assert node.next_task_wake() == task.run_at


def test_a_schedule_changed_under_the_node_is_not_fired_twice(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    row = make_schedule(text="@every 1m")
    make_node(poll_interval=3600.0)
    # Another process moves it (the node has not polled yet): the claim must lose.
    later = fake_clock.now() + timedelta(minutes=10)
    Schedule.objects.filter(pk=row.pk).update(next_run_at=later)
    fake_clock.advance(60)
    assert calls["add"] == []
    fake_clock.advance(540)
    assert calls["add"] == [1]


@pytest.mark.parametrize(
    ("catch_up", "grace", "runs", "statuses"),
    [
        ("latest", None, [1], ["skipped"] * 5 + ["succeeded"]),
        ("all", None, [1] * 6, ["succeeded"] * 6),
        ("skip", None, [], ["missed"] * 6),
        ("latest", 30.0, [], ["missed"] * 6),
        ("all", 150.0, [1, 1], ["missed"] * 4 + ["succeeded"] * 2),
    ],
)
def test_misfire_policies(
    make_node: MakeNode,
    fake_clock: FakeClock,
    calls: Any,
    catch_up: str,
    grace: float | None,
    runs: list[int],
    statuses: list[str],
) -> None:
    row = make_schedule(text="@every 1m", catch_up=catch_up, grace=grace, overlap="allow")
    # The node was down: the due time is 5 minutes and 45 seconds ago.
    behind = fake_clock.now() - timedelta(minutes=5, seconds=45)
    Schedule.objects.filter(pk=row.pk).update(next_run_at=behind)
    make_node()
    assert calls["add"] == runs
    # One row per occurrence due, in the order of the occurrences.
    rows = list(Run.objects.order_by("scheduled_for").values_list("scheduled_for", "status"))
    assert [status for _when, status in rows] == statuses
    assert [when for when, _status in rows] == [behind + timedelta(minutes=i) for i in range(6)]
    row.refresh_from_db()
    assert row.next_run_at == fake_clock.now() + timedelta(seconds=15)


def test_the_occurrences_not_run_are_counted_by_the_overview_and_the_metrics(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    """Five occurrences folded into the run of the sixth (``catch_up="latest"``): the
    overview and the metrics count them as skipped, beside the one run."""
    from django_htask.admin.overview.data import read_overview
    from tests.integration.test_metrics import scrape, value

    row = make_schedule(text="@every 1m", overlap="allow")
    behind = fake_clock.now() - timedelta(minutes=5, seconds=45)
    Schedule.objects.filter(pk=row.pk).update(next_run_at=behind)
    make_node()
    assert calls["add"] == [1]
    totals = read_overview(fake_clock.now()).runs_total
    assert (totals["skipped"], totals["succeeded"], totals["missed"]) == (5, 1, 0)
    samples, _, _ = scrape()
    runs = "django_htask_recent_runs"
    assert value(samples, runs, name=row.name, function=row.function, status="skipped") == 5
    assert value(samples, runs, name=row.name, function=row.function, status="succeeded") == 1


def test_overlap_skip(make_node: MakeNode, fake_clock: FakeClock, calls: Any) -> None:
    make_schedule(text="@every 1m", function=SLOW, overlap="skip", args=("x",))
    make_node()
    fake_clock.advance(60, wait=False)
    wait_for(lambda: len(calls["slow-start"]) == 1)
    fake_clock.advance(60, wait=False)
    wait_for(lambda: Run.objects.filter(status=RunStatus.SKIPPED).exists())
    tasks.gate.set()
    fake_clock.advance(0)
    assert calls["slow-start"] == ["x"]
    assert sorted(Run.objects.values_list("status", flat=True)) == ["skipped", "succeeded"]


def test_overlap_delay(make_node: MakeNode, fake_clock: FakeClock, calls: Any) -> None:
    make_schedule(text="@every 1m", function=SLOW, overlap="delay", args=("y",))
    make_node()
    fake_clock.advance(60, wait=False)
    wait_for(lambda: len(calls["slow-start"]) == 1)
    fake_clock.advance(60, wait=False)
    time.sleep(0.2)  # give a wrong implementation the chance to start it early
    assert len(calls["slow-start"]) == 1
    tasks.gate.set()
    wait_for(lambda: len(calls["slow-end"]) == 2)
    fake_clock.advance(0)
    assert list(Run.objects.values_list("status", flat=True)) == ["succeeded", "succeeded"]


def test_cancel_and_reschedule_a_held_task(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    node = make_node()
    a = schedule(tasks.add, 1, delay=10)
    b = schedule(tasks.add, 2, delay=10)
    fake_clock.advance(0)
    assert node.next_task_wake() == a.run_at
    assert cancel(a.token)
    assert reschedule(b.token, delay=100)
    fake_clock.advance(10)
    assert calls["add"] == []
    fake_clock.advance(100)
    assert calls["add"] == [2]
    assert Task.objects.get(pk=a.pk).status == TaskStatus.CANCELLED


def test_stop_past_its_timeout_ends_the_attempts_still_running_and_leaves_the_rest(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    node = make_node(workers=3)
    later = schedule(tasks.add, 1, delay=10)
    last = schedule(tasks.slow, "last", max_attempts=1)
    again = schedule(tasks.slow, "again", max_attempts=2)
    row = make_schedule("slow", text="@every 1s", function=SLOW, args=("run",))
    fake_clock.advance(1, wait=False)
    wait_for(lambda: len(calls["slow-start"]) == 3)
    stopped_at = fake_clock.now()
    node.stop(timeout=0.2)
    assert node.unfinished == 3  # the caller must now end the process (runscheduler does)
    last.refresh_from_db()
    assert (last.status, last.attempts, last.locked_by) == (TaskStatus.FAILED, 1, None)
    assert last.last_error.startswith("interrupted: the node stopped (SHUTDOWN_TIMEOUT 0.2s)")
    again.refresh_from_db()
    assert (again.status, again.attempts, again.locked_by) == (TaskStatus.PENDING, 1, None)
    # RETRY_BACKOFF is 1 s here: the retry waits until the node is gone, EXIT_GRACE.
    assert again.run_at == stopped_at + timedelta(seconds=EXIT_GRACE)
    later.refresh_from_db()
    assert (later.status, later.attempts, later.locked_by) == (TaskStatus.PENDING, 0, None)
    task_runs = Run.objects.filter(task__isnull=False).values_list("status", "attempt")
    assert sorted(task_runs) == [("failed", 1), ("failed", 1)]
    # The schedule's run goes on until the node is dead, EXIT_GRACE seconds from now:
    # no other node starts that schedule before this process is gone.
    run = Run.objects.get(schedule=row)
    assert (run.status, run.error) == (RunStatus.RUNNING, last.last_error)
    dead = Node.objects.get(id=node.node_id)
    assert dead.stopped_at is None
    timeout = timedelta(seconds=node.settings.node_timeout)
    assert dead.last_heartbeat + timeout == stopped_at + timedelta(seconds=EXIT_GRACE)
    store = get_store()
    store.register_node("survivor", "host", 1, "0", stopped_at)
    retry = RetryPolicy(10, 60)
    store.reap("survivor", stopped_at, stopped_at - timeout, retry)
    assert Run.objects.get(schedule=row).status == RunStatus.RUNNING  # not dead yet
    after = stopped_at + timedelta(seconds=EXIT_GRACE + 0.001)
    store.heartbeat("survivor", after, after + timeout)
    store.reap("survivor", after, after - timeout, retry)
    run.refresh_from_db()
    assert (run.status, run.error) == (RunStatus.FAILED, last.last_error)
    assert Node.objects.get(id=node.node_id).stopped_at == after


def test_stop_hands_back_a_task_no_worker_took_yet(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    node = make_node(workers=1)
    running = schedule(tasks.slow, "running")
    queued = schedule(tasks.add, 5, delay=0.5)
    fake_clock.advance(0, wait=False)
    wait_for(lambda: len(calls["slow-start"]) == 1)
    fake_clock.advance(1, wait=False)
    # One worker, busy: the task due is not claimed, it stays pending as it was.
    assert Task.objects.get(pk=queued.pk).status == TaskStatus.PENDING
    tasks.gate.set()
    wait_for(lambda: Task.objects.get(pk=running.pk).status == TaskStatus.SUCCEEDED)
    node.stop(timeout=5)
    assert node.unfinished == 0
    # The worker may have taken the queued task before the stop, or the node claimed it
    # and stopped before a worker called it (handed back): either way a clean stop.
    queued.refresh_from_db()
    assert (queued.status, queued.attempts) in ((TaskStatus.PENDING, 0), (TaskStatus.SUCCEEDED, 1))
    assert queued.locked_by is None
    assert Node.objects.get(id=node.node_id).stopped_at is not None


def test_signals(make_node: MakeNode, fake_clock: FakeClock, calls: Any) -> None:
    seen: list[tuple[str, str]] = []

    def started(name: str, **kwargs: Any) -> None:
        seen.append(("started", name))

    def finished(name: str, status: str, **kwargs: Any) -> None:
        seen.append((status, name))

    run_started.connect(started)
    run_finished.connect(finished)
    try:
        make_node()
        schedule(tasks.add, 1)
        schedule(tasks.boom)
        fake_clock.advance(0)
    finally:
        run_started.disconnect(started)
        run_finished.disconnect(finished)
    assert sorted(seen) == sorted(
        [("started", ADD), ("succeeded", ADD), ("started", BOOM), ("failed", BOOM)]
    )


def test_a_lost_database_is_retried_and_logged(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any, caplog: pytest.LogCaptureFixture
) -> None:
    node = make_node()
    real = node.store.task_outlook
    failures = [OperationalError("database is locked")] * 2

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real(*args, **kwargs)

    # The driver's error, through the store's one translation (StoreUnavailable).
    node.store.task_outlook = unavailable(flaky)  # type: ignore[method-assign]
    schedule(tasks.add, 4, delay=2)
    with caplog.at_level(logging.DEBUG, logger="django_htask"):
        fake_clock.advance(1)  # the wake-up and the first poll fail
        fake_clock.advance(5)
    assert calls["add"] == [4]
    actions = [getattr(r, "action", None) for r in caplog.records]
    # Each failure is logged: a warning once per delay announced, the others at DEBUG.
    # (On PostgreSQL the change notice and the NOTIFY of the same change can wake the
    # node twice at one instant of the fake clock, before its first poll: then both
    # failures fall within the first delay.)
    lost = [r for r in caplog.records if getattr(r, "action", None) == "db_unavailable"]
    assert len(lost) == 2
    assert lost[0].levelno == logging.WARNING
    assert (
        lost[0]
        .getMessage()
        .startswith("database unavailable (OperationalError: database is locked), ")
    )
    assert "db_back" not in actions or actions.index("db_back") > 0


def test_start_syncs_the_code_defined_schedules(make_node: MakeNode, fake_clock: FakeClock) -> None:
    node = make_node(sync=sync_schedules)
    row = Schedule.objects.get(name="testapp-minutely")
    assert (row.origin, row.function) == ("code", "tests.integration.testapp.tasks:minutely")
    assert node.placed_schedules() == {row.pk: fake_clock.now() + timedelta(minutes=1)}


def test_a_schedule_saved_in_a_transaction_is_seen_at_its_commit(
    make_node: MakeNode, fake_clock: FakeClock
) -> None:
    node = make_node(poll_interval=3600.0)
    with transaction.atomic():
        row = make_schedule("in-tx")
        fake_clock.advance(0)
        assert node.placed_schedules() == {}
    fake_clock.advance(0)
    assert node.placed_schedules() == {row.pk: row.next_run_at}


def test_a_deleted_schedule_is_dropped_when_it_comes_due(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    row = make_schedule(text="@every 1m")
    node = make_node(poll_interval=3600.0)
    Schedule.objects.filter(pk=row.pk).delete()
    fake_clock.advance(60)
    assert calls["add"] == []
    assert node.placed_schedules() == {}


def test_a_stop_request_ends_a_start_waiting_for_the_database(
    fake_clock: FakeClock, settings: Any
) -> None:
    settings.HTASK = {"DB_RETRY": 0.01, "DB_RETRY_MAX": 0.02}
    node = Node_(node_id="never-started", clock=fake_clock)
    attempts: list[int] = []

    def away() -> None:
        attempts.append(1)
        if len(attempts) == 3:
            node.request_stop()
        raise OperationalError("unable to open database file")

    node.store.install = unavailable(away)  # type: ignore[method-assign]
    with pytest.raises(StartAborted, match="never-started"):
        node.start()
    assert len(attempts) == 3
    node.stop()


def test_the_node_prunes_after_its_start(
    make_node: MakeNode, fake_clock: FakeClock, settings: Any
) -> None:
    settings.HTASK = {"RUN_RETENTION_DAYS": 7}
    old = fake_clock.now() - timedelta(days=8)
    recent = fake_clock.now() - timedelta(days=6)
    for name, started in (("old", old), ("recent", recent)):
        Run.objects.create(
            name=name,
            function=ADD,
            status=RunStatus.FAILED,
            started_at=started,
            finished_at=started,
        )
    node = make_node()
    assert Run.objects.count() == 2  # its start goes first
    fake_clock.advance(pruning.FIRST_DELAY)
    assert list(Run.objects.values_list("name", flat=True)) == ["recent"]
    assert Node.objects.get(pk=node.node_id).pruned_runs == 1


def test_runscheduler_rejects_bad_options() -> None:
    with pytest.raises(CommandError, match="--workers must be >= 0, got -1"):
        call_command("runscheduler", "--workers", "-1")
    with pytest.raises(CommandError, match="--poll-interval must be a finite number > 0, got 0"):
        call_command("runscheduler", "--poll-interval", "0")


def test_start_evaluates_no_cron_and_a_broken_schedule_fails_when_due(
    make_node: MakeNode, fake_clock: FakeClock, calls: Any
) -> None:
    row = make_schedule(text="@every 1m")
    # Raw SQL from another program leaves text that no longer parses.
    Schedule.objects.filter(pk=row.pk).update(schedule="every blue moon")
    node = make_node()
    assert node.placed_schedules() == {row.pk: row.next_run_at}  # loaded as stored
    fake_clock.advance(60)
    assert calls["add"] == []
    run = Run.objects.get()
    assert (run.status, run.schedule_id) == (RunStatus.FAILED, row.pk)
    assert "every blue moon" in run.error
    row.refresh_from_db()
    assert (row.next_run_at, row.last_status) == (None, RunStatus.FAILED)
    assert node.placed_schedules() == {}
