"""``runscheduler``'s options as a user gives them: queues, ``--max-tasks``, ``--batch``,
``--backend`` and the errors for bad values (a subprocess on a SQLite file)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, _env

pytestmark = pytest.mark.slow

Query = Callable[..., list[tuple[Any, ...]]]
NOOP = "tests.acceptance.app.tasks:noop"


def run(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", "runscheduler", "--poll-interval", "0.2", *args],
        env=_env(db),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def enqueue(django_code: Callable[[str], str], *queues: str) -> None:
    django_code(
        "from django_htask import schedule\n"
        + "".join(f"schedule('{NOOP}', queue_name={q!r})\n" for q in queues)
    )


def test_batch_runs_what_is_due_in_the_queues_served_then_exits(
    db_file: Path, django_code: Callable[[str], str], query: Query
) -> None:
    enqueue(django_code, "default", "queue-1", "queue-2")
    done = run(db_file, "--batch", "--queue", "queue-1", "--queue", "queue-2")
    assert done.returncode == 0, done.stderr
    assert "queues:    queue-1,queue-2, exits when nothing is due (--batch)" in done.stdout
    assert "nothing is due any more (--batch)." in done.stdout
    rows = dict(query("SELECT queue_name, status FROM django_htask_task"))
    assert rows == {"default": "pending", "queue-1": "succeeded", "queue-2": "succeeded"}
    done = run(db_file, "--batch", "--queue", "*", "--exclude-queue", "missing")
    assert done.returncode == 0, done.stderr
    assert {s for (s,) in query("SELECT status FROM django_htask_task")} == {"succeeded"}


def test_max_tasks_exits_after_that_many(
    db_file: Path, django_code: Callable[[str], str], query: Query
) -> None:
    enqueue(django_code, *["default"] * 5)
    done = run(db_file, "--max-tasks", "2", "--workers", "4")
    assert done.returncode == 0, done.stderr
    assert "ran the maximum of 2 tasks (--max-tasks)." in done.stdout
    counts = dict(query("SELECT status, count(*) FROM django_htask_task GROUP BY status"))
    assert counts == {"succeeded": 2, "pending": 3}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-tasks", "0"], "--max-tasks must be greater than zero, got 0"),
        (["--max-tasks", "-1"], "--max-tasks must be greater than zero, got -1"),
        (
            ["--queue", "a", "--exclude-queue", "a"],
            "--exclude-queue can only be used when every queue is served",
        ),
        (["--queue", "a,b"], "a queue name must be 1 to 100 characters"),
        (["--node-id", ""], "--node-id must be 1 to 100 characters, got 0"),
        (["--processes", "0"], "--processes must be >= 1, got 0"),
        (
            ["--processes", "2"],
            "--processes 2: the SQLite database 'default' is for one node; several nodes "
            "need PostgreSQL, MySQL or MariaDB",
        ),
        (
            ["--processes", "3", "--node-id", "a"],
            "--processes 3: leave out --node-id, which names one node",
        ),
        (
            ["--processes", "2", "--metrics-port", "0"],
            "--processes 2: leave out --metrics-port, which serves one node's metrics",
        ),
        (["--node-id", "n" * 101], "--node-id must be 1 to 100 characters, got 101"),
        (["--backend", "unknown"], "--backend 'unknown': no such alias in TASKS"),
        (
            ["--max-tasks-per-child", "5"],
            "--max-tasks-per-child is for the process pool: add --pool process",
        ),
        (
            ["--pool", "process", "--max-memory-per-child", "-1"],
            "--max-memory-per-child must be >= 0 (0: no limit), got -1",
        ),
        (
            ["--pool", "process", "--workers", "0"],
            "--pool process needs --workers >= 1 (a worker process each), got 0",
        ),
    ],
)
def test_bad_options_are_refused_and_named(db_file: Path, args: list[str], message: str) -> None:
    done = run(db_file, *args)
    assert done.returncode == 1, done.stdout
    assert message in done.stderr


def test_a_node_runs_with_the_collector_on_and_its_set_up_frozen(
    db_file: Path, django_code: Callable[[str], str]
) -> None:
    """The node's process turned the garbage collector off while Django set up, and on
    again with what the set-up made frozen (left out of its collections): a task run
    there finds it so."""
    token = django_code(
        "from django_htask import schedule\n"
        "print(schedule('tests.acceptance.app.tasks:collector').token)\n"
    ).strip()
    done = run(db_file, "--batch")
    assert done.returncode == 0, done.stderr
    out = django_code(
        f"from django_htask import get_result\nr = get_result({token!r})\n"
        "print(r.status, r.value['enabled'], r.value['frozen'])\n"
    )
    status, enabled, frozen = out.split()
    assert (status, enabled) == ("succeeded", "True"), out
    # Django's modules, models and the node's own: tens of thousands of objects.
    assert int(frozen) > 10_000, out
