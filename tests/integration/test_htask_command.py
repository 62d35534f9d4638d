"""``manage.py htask``: list, run, sync, status, prune (called in process)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_htask import schedule
from django_htask.engine import FakeClock
from django_htask.models import Origin, Run, RunStatus, Schedule
from django_htask.store import get_store
from tests.integration.node_rows import node_row
from tests.integration.testapp import tasks

pytestmark = pytest.mark.django_db

ADD = "tests.integration.testapp.tasks:add"
BOOM = "tests.integration.testapp.tasks:boom"


def htask(*args: str) -> str:
    out = StringIO()
    call_command("htask", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def make(
    name: str, text: str, function: str = ADD, args: tuple[Any, ...] = (1,), **kw: Any
) -> Schedule:
    row = Schedule(name=name, function=function, schedule=text, **kw)
    row.set_call(args)
    row.save()
    return row


def test_list_shows_each_schedule_in_words_with_its_next_runs(fake_clock: FakeClock) -> None:
    make("tokyo", "30 4 * * *", timezone="Asia/Tokyo")
    make("off", "@hourly", enabled=False)
    out = htask("list", "--runs", "2")
    assert "tokyo\n    30 4 * * *  (every day at 04:30 (Asia/Tokyo))" in out
    assert "next: 2030-01-02 04:30:00 JST" in out
    assert "next: 2030-01-03 04:30:00 JST" in out
    assert "next: 2030-01-04" not in out
    assert "off  [disabled]" in out


def test_list_counts_from_the_stored_next_run_and_shows_an_overdue_one(
    fake_clock: FakeClock,
) -> None:
    make("pulse", "@every 45s")  # saved at 00:00:00: next_run_at 00:00:45
    fake_clock.advance(20)
    out = htask("list", "--runs", "2")
    assert "next: 2030-01-01 00:00:45 UTC\n    next: 2030-01-01 00:01:30 UTC\n" in out
    fake_clock.advance(80)  # 00:01:40, and no scheduler ran
    out = htask("list", "--runs", "2")
    overdue = "    next: due now (overdue since 2030-01-01 00:00:45 UTC)"
    assert f"{overdue}\n    next: 2030-01-01 00:02:15 UTC\n" in out


def test_list_with_nothing_says_so() -> None:
    assert "no schedules" in htask("list")


def test_run_calls_the_function_here_and_records_a_run(calls: Any) -> None:
    row = make("adder", "@daily", args=(2,))
    out = htask("run", "adder")
    assert "adder: succeeded" in out
    assert calls["add"] == [2]
    run = Run.objects.get()
    assert (run.schedule_id, run.status, run.name) == (row.pk, RunStatus.SUCCEEDED, "adder")
    row.refresh_from_db()
    assert row.last_status == RunStatus.SUCCEEDED


def test_run_of_a_failing_schedule_exits_1_with_the_error(calls: Any) -> None:
    make("bad", "@daily", function=BOOM, args=("kaput",))
    with pytest.raises(CommandError, match="bad failed") as info:
        htask("run", "bad")
    assert info.value.returncode == 1
    run = Run.objects.get()
    assert run.status == RunStatus.FAILED
    assert run.error == "RuntimeError: kaput"
    assert "Traceback" in run.traceback


def test_run_of_a_snoozing_schedule_exits_1_and_is_not_run_again(calls: Any) -> None:
    make("dozy", "@daily", function="tests.integration.testapp.tasks:snoozing", args=("h", 1))
    with pytest.raises(CommandError, match=r"dozy snoozed \(run \d+\)") as info:
        htask("run", "dozy")
    assert info.value.returncode == 1
    run = Run.objects.get()
    assert (run.status, run.error) == (RunStatus.SNOOZED, "snoozed: runs again in 30s")
    assert calls["snoozing"] == ["h"]


def test_run_of_an_unknown_name_exits_2_naming_it() -> None:
    make("known", "@daily")
    with pytest.raises(CommandError, match=r"no schedule named 'nope' \(known: known\)") as info:
        htask("run", "nope")
    assert info.value.returncode == 2
    assert not Run.objects.exists()


def test_sync_creates_the_code_defined_schedules() -> None:
    out = htask("sync")
    assert "created: testapp-minutely" in out
    assert Schedule.objects.get(name="testapp-minutely").origin == Origin.CODE
    assert "0 created" in htask("sync")


def test_status_shows_nodes_pending_tasks_and_failures(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    node_row("n-live", now)
    node_row("n-dead", now, silent_for=7200)
    get_store().heartbeat("n-live", now, now, stuck=2)
    schedule(tasks.add, 1)
    schedule(tasks.add, 1, delay=60)
    Run.objects.create(
        name="job",
        function=ADD,
        status=RunStatus.FAILED,
        error="ValueError: x\nmore",
        started_at=now - timedelta(minutes=6),
        finished_at=now - timedelta(minutes=5),
    )
    fake_clock.advance(1)
    out = htask("status")
    assert "nodes: 1 live, 1 dead or stopped" in out
    assert "n-live  live" in out and "n-dead  dead" in out
    assert "vtest  2 stuck threads\n" in out  # the n-live line; none said for n-dead
    assert "tasks: 2 pending (1 overdue), 0 running" in out
    assert "failures in the last 24h: 1" in out
    assert "job: ValueError: x" in out


def test_status_lists_the_nodes_heard_from_last_and_counts_them_all(
    fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_htask.management.commands import htask as command

    monkeypatch.setattr(command, "NODES_LISTED", 2)
    now = fake_clock.now()
    for i, silent_for in enumerate((0, 7200, 7300, 7400)):
        node_row(f"n{i}", now, silent_for=silent_for)
    out = htask("status")
    assert "nodes: 1 live, 3 dead or stopped" in out
    assert "n0  live" in out and "n1  dead" in out and "n2 " not in out
    assert "… and 2 more" in out


def test_prune_deletes_old_finished_runs(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    for name, days in (("old", 9), ("new", 1)):
        at = now - timedelta(days=days)
        Run.objects.create(
            name=name, function=ADD, status=RunStatus.SUCCEEDED, started_at=at, finished_at=at
        )
    assert "deleted 0 finished tasks, 1 runs" in htask("prune", "--days", "7")
    assert list(Run.objects.values_list("name", flat=True)) == ["new"]
    with pytest.raises(CommandError, match="--days: days must be a number > 0") as info:
        htask("prune", "--days", "-1")
    assert info.value.returncode == 2


def test_run_of_a_schedule_naming_an_unregistered_function_fails_clearly() -> None:
    Schedule.objects.bulk_create([Schedule(name="ghost", function="gone:job", schedule="@daily")])
    with pytest.raises(CommandError, match="ghost failed") as info:
        htask("run", "ghost")
    assert info.value.returncode == 1
    run = Run.objects.get()
    assert run.status == RunStatus.FAILED
    assert run.error == "FunctionNotRegistered: no function is registered as 'gone:job'"
