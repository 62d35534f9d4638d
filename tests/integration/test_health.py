"""Health: ``check_health``, ``manage.py htask health`` (in process and as a
subprocess against a broken database) and the JSON endpoint of ``django_htask.urls``."""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_htask.engine import FakeClock
from django_htask.health import DEFAULT_MAX_LATE, check_health, parse_max_late
from django_htask.models import Node, Schedule, Task, TaskStatus
from django_htask.store import get_store
from tests.acceptance.conftest import manage as run_manage
from tests.integration.node_rows import node_row

ADD = "tests.integration.testapp.tasks:add"
URL = "/htask/health/"

db = pytest.mark.django_db


def htask_health(*args: str) -> tuple[int, str, str]:
    """``htask health *args`` in process: (exit code, stdout, stderr)."""
    out, err = StringIO(), StringIO()
    try:
        call_command("htask", "health", *args, stdout=out, stderr=err)
    except SystemExit as exc:
        code = int(exc.code or 0)
    else:
        code = 0
    return code, out.getvalue(), err.getvalue()


def task_due(fake_clock: FakeClock, ago: float, status: str = TaskStatus.PENDING) -> Task:
    return Task.objects.create(
        function=ADD, run_at=fake_clock.now() - timedelta(seconds=ago), status=status
    )


def schedule_row(name: str, text: str = "@every 45s", **kw: Any) -> Schedule:
    row = Schedule(name=name, function=ADD, schedule=text, **kw)
    row.set_call((1,))
    row.save()
    return row


def db_down() -> Any:
    """Every query on the default connection fails as when the server is gone."""
    error = OperationalError('connection to server at "db.internal" (10.0.0.5) failed')
    return mock.patch.object(connection, "cursor", side_effect=error)


# -- the verdict ---------------------------------------------------------------------------
@db
def test_a_live_node_and_nothing_due_is_healthy(fake_clock: FakeClock) -> None:
    node_row("n-1", fake_clock.now(), silent_for=5)
    verdict = check_health()
    assert verdict.healthy
    assert verdict.problem is None
    assert verdict.live_nodes == ("n-1",)
    assert verdict.max_late == DEFAULT_MAX_LATE
    assert verdict.line() == "healthy: 1 live node, nothing due (max late 60s)"


@db
def test_the_stuck_threads_of_the_live_nodes_are_said_and_counted(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    store = get_store()
    for node_id, silent_for, stuck in (("n-1", 5, 2), ("n-2", 5, 1), ("n-dead", 7200, 4)):
        node_row(node_id, now)
        store.heartbeat(node_id, now - timedelta(seconds=silent_for), now, stuck)
    verdict = check_health()
    assert verdict.healthy  # a node past MAX_ABANDONED_THREADS starts afresh by itself
    assert verdict.stuck_threads == 3  # the dead node's are gone with its process
    assert verdict.line() == "healthy: 2 live nodes, nothing due, 3 stuck threads (max late 60s)"
    assert verdict.as_json()["stuck_threads"] == 3


@db
def test_no_node_at_all_is_unhealthy(fake_clock: FakeClock) -> None:
    verdict = check_health()
    assert not verdict.healthy
    assert verdict.line() == "unhealthy: no live node (no node has registered)"


@db
def test_a_node_whose_heartbeat_is_stale_is_dead(fake_clock: FakeClock) -> None:
    node_row("n-old", fake_clock.now(), silent_for=7200)
    node_row("n-older", fake_clock.now(), silent_for=9000)
    verdict = check_health()
    assert verdict.live_nodes == ()
    assert verdict.problem == (
        "no live node (last heartbeat 2029-12-31T22:00:00Z from n-old, 7200s ago)"
    )


@db
def test_the_heartbeat_limit_is_node_timeout(fake_clock: FakeClock) -> None:
    node_row("n-1", fake_clock.now(), silent_for=60)  # NODE_TIMEOUT: still live
    assert check_health().healthy
    fake_clock.advance(1)
    assert check_health().problem == (
        "no live node (last heartbeat 2029-12-31T23:59:00Z from n-1, 61s ago)"
    )


@db
def test_a_stopped_node_is_not_live(fake_clock: FakeClock) -> None:
    node = node_row("n-1", fake_clock.now())
    Node.objects.filter(id=node.id).update(stopped_at=fake_clock.now())
    assert check_health().problem == (
        "no live node (last heartbeat 2030-01-01T00:00:00Z from n-1, 0s ago, stopped)"
    )


@db
def test_work_due_within_max_late_is_not_late(fake_clock: FakeClock) -> None:
    node_row("n-1", fake_clock.now())
    task_due(fake_clock, 59)
    task_due(fake_clock, 3600, status=TaskStatus.RUNNING)  # started: not waiting
    task_due(fake_clock, 3600, status=TaskStatus.FAILED)
    task_due(fake_clock, -30)  # not due yet
    verdict = check_health()
    assert verdict.healthy
    assert verdict.oldest_due_seconds == 59
    assert verdict.line() == (
        "healthy: 1 live node, oldest due work 59s ago: "
        "tests.integration.testapp.tasks:add (max late 60s)"
    )
    exactly = check_health(max_late=59)  # due exactly max_late ago: not later than it
    assert exactly.healthy


@db
def test_a_task_due_long_ago_and_an_overdue_schedule_are_late(fake_clock: FakeClock) -> None:
    schedule_row("pulse")  # next_run_at 00:00:45
    schedule_row("off", enabled=False)
    broken = schedule_row("broken")
    Schedule.objects.filter(pk=broken.pk).update(broken="zone gone")
    fake_clock.advance(150)  # 00:02:30: pulse due 105 s ago
    node_row("n-1", fake_clock.now())
    task_due(fake_clock, 125)
    task_due(fake_clock, 90)
    verdict = check_health()
    assert (verdict.late_tasks, verdict.late_schedules) == (2, 1)
    assert verdict.problem == (
        "2 tasks and 1 schedule were due more than 60s ago "
        "(oldest due 125s ago: tests.integration.testapp.tasks:add)"
    )
    assert check_health(max_late=100).problem == (
        "1 task and 1 schedule were due more than 100s ago "
        "(oldest due 125s ago: tests.integration.testapp.tasks:add)"
    )
    assert check_health(max_late=110).problem == (
        "1 task was due more than 110s ago "
        "(oldest due 125s ago: tests.integration.testapp.tasks:add)"
    )
    assert check_health(max_late=200).healthy


@db
def test_a_paused_queue_s_work_is_not_late_and_the_queue_is_named(fake_clock: FakeClock) -> None:
    from django_htask import pause_queue

    schedule_row("pulse", queue_name="slow")
    fake_clock.advance(300)
    node_row("n-1", fake_clock.now())
    Task.objects.create(function=ADD, run_at=fake_clock.now() - timedelta(seconds=200),
                        queue_name="slow")  # fmt: skip
    task_due(fake_clock, 20)
    pause_queue("slow")
    verdict = check_health()
    assert (verdict.late_tasks, verdict.late_schedules, verdict.paused_queues) == (0, 0, ("slow",))
    assert verdict.line() == (
        "healthy: 1 live node, oldest due work 20s ago: tests.integration.testapp.tasks:add, "
        "queues paused: slow (max late 60s)"
    )


@db
def test_an_overdue_schedule_alone_is_named(fake_clock: FakeClock) -> None:
    schedule_row("pulse")
    fake_clock.advance(300)
    node_row("n-1", fake_clock.now())
    assert check_health().problem == (
        "1 schedule was due more than 60s ago (oldest due 255s ago: schedule pulse)"
    )


@db
def test_no_node_and_late_work_are_both_said_on_one_line(fake_clock: FakeClock) -> None:
    task_due(fake_clock, 600)
    line = check_health().line()
    assert line == (
        "unhealthy: no live node (no node has registered); 1 task was due more than 60s "
        "ago (oldest due 600s ago: tests.integration.testapp.tasks:add)"
    )
    assert "\n" not in line


@db
def test_a_named_node_must_be_live(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    node_row("n-live", now)
    node_row("n-dead", now, silent_for=300)
    assert check_health(node="n-live").line() == (
        "healthy: 1 live node (node n-live live), nothing due (max late 60s)"
    )
    dead = check_health(node="n-dead")
    assert dead.node_state == "dead"
    assert dead.problem == ("node n-dead is dead (last heartbeat 2029-12-31T23:55:00Z, 300s ago)")
    unknown = check_health(node="n-nobody")
    assert unknown.node_state == "unknown"
    assert unknown.problem == "node n-nobody is not registered"


@db
def test_a_named_dead_node_when_none_is_live_is_said_once(fake_clock: FakeClock) -> None:
    node_row("n-dead", fake_clock.now(), silent_for=300)
    assert check_health(node="n-dead").problem == (
        "no live node (last heartbeat 2029-12-31T23:55:00Z from n-dead, 300s ago)"
    )


@db
def test_a_database_error_is_the_verdict_not_an_exception(fake_clock: FakeClock) -> None:
    with db_down():
        verdict = check_health()
    assert not verdict.healthy
    assert verdict.problem == (
        'database unavailable (OperationalError: connection to server at "db.internal" '
        "(10.0.0.5) failed)"
    )
    assert verdict.as_json()["problem"] == "database unavailable (OperationalError)"


@pytest.mark.parametrize("bad", [-1, "soon", "nan", "inf", None])
def test_max_late_must_be_a_finite_number_of_seconds(bad: object) -> None:
    with pytest.raises(ValueError, match="max_late must be a number of seconds >= 0"):
        parse_max_late(bad)


def test_max_late_accepts_numbers_and_their_text() -> None:
    assert parse_max_late("90") == 90.0
    assert parse_max_late(0) == 0.0
    assert parse_max_late("1.5") == 1.5


# -- manage.py htask health, in process ----------------------------------------------------
@db
def test_command_healthy_exits_0_with_one_line(fake_clock: FakeClock) -> None:
    node_row("n-1", fake_clock.now())
    code, out, err = htask_health("--node", "n-1", "--max-late", "30")
    assert (code, err) == (0, "")
    assert out == "healthy: 1 live node (node n-1 live), nothing due (max late 30s)\n"


@db
def test_command_unhealthy_exits_1_with_one_line_on_stderr(fake_clock: FakeClock) -> None:
    node_row("n-1", fake_clock.now(), silent_for=120)
    code, out, err = htask_health()
    assert (code, out) == (1, "")
    assert err == (
        "unhealthy: no live node (last heartbeat 2029-12-31T23:58:00Z from n-1, 120s ago)\n"
    )


@db
def test_command_with_late_work_and_a_larger_max_late(fake_clock: FakeClock) -> None:
    node_row("n-1", fake_clock.now())
    task_due(fake_clock, 125)
    code, _, err = htask_health()
    assert code == 1
    assert "1 task was due more than 60s ago (oldest due 125s ago" in err
    code, out, _ = htask_health("--max-late", "300")
    assert code == 0
    assert "oldest due work 125s ago" in out


@db
def test_command_of_a_dead_or_unknown_node_exits_1(fake_clock: FakeClock) -> None:
    node_row("n-live", fake_clock.now())
    node_row("n-dead", fake_clock.now(), silent_for=600)
    assert htask_health("--node", "n-dead")[0] == 1
    code, _, err = htask_health("--node", "n-gone")
    assert (code, err) == (1, "unhealthy: node n-gone is not registered\n")


@db
def test_command_database_down_exits_1(fake_clock: FakeClock) -> None:
    with db_down():
        code, out, err = htask_health()
    assert (code, out) == (1, "")
    assert err.startswith("unhealthy: database unavailable (OperationalError: connection")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-late", "-5"], "--max-late must be a number of seconds >= 0, got '-5'"),
        (["--max-late", "soon"], "--max-late must be a number of seconds >= 0, got 'soon'"),
        (["--node", ""], "--node must be 1 to 100 characters, got 0"),
    ],
)
def test_command_bad_options_exit_2(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message) as caught:
        call_command("htask", "health", *args, stdout=StringIO(), stderr=StringIO())
    assert caught.value.returncode == 2


# -- manage.py htask health, as a subprocess -------------------------------------------------
def manage(tmp_path: Path, database: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m django *args`` with the acceptance settings on ``database``."""
    return run_manage(tmp_path, "", *args, database=database, HTASK_ACCEPTANCE_TIMEOUT="1")


def test_exec_against_a_file_that_is_not_a_database_exits_1(tmp_path: Path) -> None:
    junk = tmp_path / "db.sqlite3"
    junk.write_bytes(b"this is not a database\n" * 200)
    done = manage(tmp_path, junk, "htask", "health")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        "unhealthy: database unavailable (DatabaseError: file is not a database)\n"
    )


def test_exec_against_a_database_it_cannot_open_exits_1(tmp_path: Path) -> None:
    done = manage(tmp_path, tmp_path / "missing" / "db.sqlite3", "htask", "health")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == (
        "unhealthy: database unavailable (OperationalError: unable to open database file)\n"
    )


def test_exec_on_a_real_database_follows_the_nodes(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite3"
    migrated = manage(tmp_path, database, "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    done = manage(tmp_path, database, "htask", "health")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == "unhealthy: no live node (no node has registered)\n"
    register = (
        "from django.utils import timezone; from django_htask.models import Node; "
        "now = timezone.now(); Node.objects.create(id='n-1', hostname='h', pid=1, "
        "started_at=now, last_heartbeat=now, version='t')"
    )
    created = manage(tmp_path, database, "shell", "-c", register)
    assert created.returncode == 0, created.stdout + created.stderr
    done = manage(tmp_path, database, "htask", "health", "--node", "n-1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("healthy: 1 live node (node n-1 live), nothing due")


# -- the endpoint ----------------------------------------------------------------------------
def test_the_endpoint_is_mounted_under_the_htask_namespace() -> None:
    assert reverse("htask:health") == URL


@db
def test_endpoint_healthy_is_200_with_the_verdict(fake_clock: FakeClock, client: Client) -> None:
    node_row("n-1", fake_clock.now(), silent_for=3)
    task_due(fake_clock, 20)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(URL)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert "no-cache" in response["Cache-Control"]
    assert "max-age=0" in response["Cache-Control"]
    assert response.json() == {
        "healthy": True,
        "problem": None,
        "checked_at": "2030-01-01T00:00:00Z",
        "max_late_seconds": 60.0,
        "database": True,
        "node": None,
        "node_state": None,
        "live_nodes": 1,
        "last_heartbeat_seconds": 3.0,
        "late_tasks": 0,
        "late_schedules": 0,
        "oldest_due_seconds": 20.0,
        "paused_queues": [],
        "stuck_threads": 0,
    }
    assert queries.captured_queries  # it looked
    assert all(q["sql"].lstrip().upper().startswith("SELECT") for q in queries.captured_queries)


@db
def test_endpoint_unhealthy_is_503_and_names_no_host(fake_clock: FakeClock, client: Client) -> None:
    node_row("n-1", fake_clock.now(), silent_for=600)
    response = client.get(URL)
    assert response.status_code == 503
    body = response.json()
    assert body["healthy"] is False
    assert body["problem"] == (
        "no live node (last heartbeat 2029-12-31T23:50:00Z from n-1, 600s ago)"
    )
    assert body["live_nodes"] == 0
    assert '"host"' not in response.content.decode()
    assert "pid" not in body


@db
def test_endpoint_late_work_is_503(fake_clock: FakeClock, client: Client) -> None:
    node_row("n-1", fake_clock.now())
    task_due(fake_clock, 125)
    body = client.get(URL).json()
    assert (body["healthy"], body["late_tasks"], body["oldest_due_seconds"]) == (False, 1, 125.0)
    assert body["problem"].startswith("1 task was due more than 60s ago")
    response = client.get(URL, {"max_late": "300"})
    assert response.status_code == 200
    assert response.json()["max_late_seconds"] == 300.0


@db
def test_endpoint_node_parameter(fake_clock: FakeClock, client: Client) -> None:
    node_row("n-1", fake_clock.now())
    node_row("n-2", fake_clock.now(), silent_for=120)
    ok = client.get(URL, {"node": "n-1"})
    assert (ok.status_code, ok.json()["node_state"]) == (200, "live")
    dead = client.get(URL, {"node": "n-2"})
    assert (dead.status_code, dead.json()["node_state"]) == (503, "dead")
    unknown = client.get(URL, {"node": "n-3"})
    assert unknown.status_code == 503
    assert unknown.json()["problem"] == "node n-3 is not registered"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"max_late": "soon"}, "max_late must be a number of seconds >= 0, got 'soon'"),
        ({"max_late": "-1"}, "max_late must be a number of seconds >= 0, got '-1'"),
        ({"max_late": "nan"}, "max_late must be a number of seconds >= 0, got 'nan'"),
        ({"node": ""}, "node must be 1 to 100 characters, got 0"),
        ({"node": "x" * 101}, "node must be 1 to 100 characters, got 101"),
    ],
)
def test_endpoint_bad_parameters_are_400_naming_them(
    client: Client, query: dict[str, str], message: str
) -> None:
    response = client.get(URL, query)  # no django_db mark: a query would raise
    assert response.status_code == 400
    assert response.json() == {"error": message}


@db
def test_endpoint_answers_head_and_refuses_other_methods(
    fake_clock: FakeClock, client: Client
) -> None:
    node_row("n-1", fake_clock.now())
    assert client.head(URL).status_code == 200
    for method in (client.post, client.put, client.delete):
        assert method(URL).status_code == 405


@db
def test_endpoint_database_down_is_503_never_500(
    fake_clock: FakeClock, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        mock.patch.dict(connection.settings_dict, {"ATOMIC_REQUESTS": True}),
        db_down(),
    ):
        response = client.get(URL)
    assert response.status_code == 503
    body = response.json()
    assert (body["healthy"], body["database"]) == (False, False)
    assert body["problem"] == "database unavailable (OperationalError)"
    assert "db.internal" not in response.content.decode()  # the message stays in the log
    logged = [r for r in caplog.records if getattr(r, "action", "") == "health_database_error"]
    assert len(logged) == 1
    assert "db.internal" in logged[0].getMessage()


def test_the_verdict_is_json_serialisable_as_is() -> None:
    from datetime import UTC, datetime

    from django_htask.health import Verdict

    verdict = Verdict(checked_at=datetime(2030, 1, 1, tzinfo=UTC), max_late=60.0)
    assert json.loads(json.dumps(verdict.as_json()))["problem"] == (
        "no live node (no node has registered)"
    )
