"""``manage.py runscheduler`` as a subprocess, on a SQLite file."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, Scheduler, _env, wait_until

pytestmark = pytest.mark.slow

Query = Callable[..., list[tuple[Any, ...]]]

NOOP = "tests.acceptance.app.tasks:noop"


def test_banner_and_clean_exit_on_sigterm(
    start_scheduler: Callable[..., Scheduler], tmp_path: Path
) -> None:
    exit_file = tmp_path / "atexit.txt"
    scheduler = start_scheduler(
        "--workers", "3", "--node-id", "banner-node", HTASK_ACCEPTANCE_ATEXIT=str(exit_file)
    )
    out = scheduler.stdout
    for part in ("node:      banner-node", "database:  sqlite", "workers:   3", "0 schedules"):
        assert part in out, out
    scheduler.send(signal.SIGTERM)
    assert scheduler.wait_exit() == 0, scheduler.stderr
    assert "stopped." in scheduler.stdout
    assert "node banner-node stopped" in scheduler.stderr  # the log is flushed
    # It ends without tearing the interpreter down, but the project's exit handlers run.
    assert exit_file.read_text() == "exit handler ran"


def test_the_banner_names_the_node_before_the_start_logs(db_file: Path) -> None:
    """The start logs (at info: the node registered, the schedules synced) come after
    the banner's first lines, which say which node and which database they are about;
    what it loaded comes once it has."""
    done = subprocess.run(
        [sys.executable, "-m", "django", "runscheduler", "--batch", "--node-id", "first"],
        env=_env(db_file),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order written
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert lines[0].startswith("django-htask ") and lines[0].endswith(" scheduler"), lines
    assert lines[1:3] == ["  node:      first", f"  database:  sqlite {db_file}"], lines
    started = lines.index("node first started: 0 schedules, 0 pending tasks")  # its log
    loaded = next(i for i, line in enumerate(lines) if line.startswith("  loaded:"))
    assert 2 < started < loaded, lines


def test_a_schedule_created_by_another_process_fires_within_the_poll_interval(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
) -> None:
    scheduler = start_scheduler("--poll-interval", "0.5")
    out = django_code(
        "from datetime import timedelta\n"
        "from django_htask.models import Schedule\n"
        "from django_htask.clock import now\n"
        f"s = Schedule(name='made-elsewhere', function='{NOOP}', schedule='@every 1h')\n"
        "s.save()\n"
        "Schedule.objects.filter(pk=s.pk).update(next_run_at=now() + timedelta(seconds=1))\n"
        "print(now().timestamp())\n"
    )
    created = float(out.strip())
    wait_until(
        lambda: query("SELECT status FROM django_htask_run WHERE name = 'made-elsewhere'"),
        10,
        "the run",
    )
    latency = time.time() - created
    # due 1 s after the edit; seen within the poll interval (0.5 s) plus slack
    assert latency < 1 + 0.5 + 1.0, latency
    assert scheduler.process.poll() is None


def test_a_task_scheduled_in_a_rolled_back_transaction_never_runs(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
) -> None:
    start_scheduler("--poll-interval", "0.3")
    django_code(
        "from django.db import transaction\n"
        "from django_htask import schedule\n"
        "try:\n"
        "    with transaction.atomic():\n"
        "        schedule('" + NOOP + "', 'rolled-back')\n"
        "        raise RuntimeError\n"
        "except RuntimeError:\n"
        "    pass\n"
        "with transaction.atomic():\n"
        "    schedule('" + NOOP + "', 'committed')\n"
    )
    wait_until(
        lambda: query("SELECT 1 FROM django_htask_task WHERE status = 'succeeded'"),
        10,
        "the committed task",
    )
    assert query("SELECT count(*) FROM django_htask_task") == [(1,)]
    assert query("SELECT count(*) FROM django_htask_run") == [(0,)]  # a success: no run row


def _run_sleeper(
    django_code: Callable[[str], str], query: Query, seconds: float, marker: Path
) -> None:
    """Schedule a job that sleeps, then touches ``marker``; wait until it runs."""
    django_code(
        "from tests.acceptance.app.tasks import sleep_then_touch\n"
        "from django_htask import schedule\n"
        f"schedule(sleep_then_touch, {seconds}, {str(marker)!r})\n"
    )
    wait_until(
        lambda: query("SELECT 1 FROM django_htask_task WHERE status = 'running'"), 10, "running"
    )


def test_sigterm_lets_a_running_job_finish(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    tmp_path: Path,
) -> None:
    scheduler = start_scheduler("--poll-interval", "0.2")
    marker = tmp_path / "marker"
    _run_sleeper(django_code, query, 1.0, marker)
    scheduler.send(signal.SIGTERM)
    assert scheduler.wait_exit() == 0, scheduler.stderr
    assert marker.read_text() == "done"
    assert query("SELECT status, attempts FROM django_htask_task") == [("succeeded", 1)]


def test_sigterm_past_the_timeout_exits_at_once_and_ends_the_attempt(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    tmp_path: Path,
) -> None:
    scheduler = start_scheduler("--poll-interval", "0.2", HTASK_ACCEPTANCE_SHUTDOWN="0.3")
    _run_sleeper(django_code, query, 30.0, tmp_path / "never")
    started = time.monotonic()
    scheduler.send(signal.SIGTERM)
    assert scheduler.wait_exit() == 0, scheduler.stderr
    # The process did not wait for the job's thread (30 s): it exited with it.
    assert time.monotonic() - started < 10
    assert "leaving 1 runs unfinished" in scheduler.stdout
    # The function had started: that attempt counts (max_attempts=1: failed, said why).
    [(status, attempts, locked_by, error)] = query(
        "SELECT status, attempts, locked_by, last_error FROM django_htask_task"
    )
    assert (status, attempts, locked_by) == ("failed", 1, None)
    assert error.startswith("interrupted: the node stopped (SHUTDOWN_TIMEOUT 0.3s)")
    assert query("SELECT status, error FROM django_htask_run") == [("failed", error)]


def test_a_second_signal_exits_at_once(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    tmp_path: Path,
) -> None:
    scheduler = start_scheduler("--poll-interval", "0.2")
    _run_sleeper(django_code, query, 30.0, tmp_path / "never")
    scheduler.send(signal.SIGTERM)
    wait_until(lambda: "stopping" in scheduler.stdout, 10, "stopping")
    scheduler.send(signal.SIGINT)
    assert scheduler.wait_exit(timeout=10) == 1


def test_a_locked_database_is_survived(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    db_file: Path,
) -> None:
    django_code(
        "from django_htask.models import Schedule\n"
        f"Schedule(name='tick', function='{NOOP}', schedule='@every 1s').save()\n"
    )
    scheduler = start_scheduler("--poll-interval", "0.2", HTASK_ACCEPTANCE_TIMEOUT="0.2")

    def runs() -> int:
        return int(query("SELECT count(*) FROM django_htask_run")[0][0])

    wait_until(lambda: runs() >= 1, 10, "a first run")
    lock = sqlite3.connect(db_file, timeout=10, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # hold the lock for 3 seconds
            assert scheduler.process.poll() is None, scheduler.stderr
            time.sleep(0.05)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    before = runs()
    wait_until(lambda: runs() >= before + 2, 15, "runs after the database came back")
    assert scheduler.process.poll() is None
    assert "database unavailable" in scheduler.stderr
    scheduler.send(signal.SIGTERM)
    assert scheduler.wait_exit() == 0, scheduler.stderr
