"""Faults with a real ``runscheduler`` process on SQLite: ``kill -9`` in the middle of a
batch, a task that takes its process down, a task raising SystemExit, a database that
was never migrated.

Jobs log ``start n <pid> <time>`` and ``end n <pid> <time>`` lines to a file, so the
test knows which functions really started; the database says what the scheduler
recorded. The same kill on PostgreSQL is in ``tests/cluster/test_faults.py``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, Scheduler, _env, wait_until

pytestmark = pytest.mark.slow

Query = Callable[..., list[tuple[Any, ...]]]
NOOP = "tests.acceptance.app.tasks:noop"


def log_lines(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [line.split() for line in log.read_text().splitlines()]


def counted(log: Path, word: str) -> Counter[str]:
    """How many ``word`` lines each job logged (``start`` or ``end``), by job number."""
    return Counter(parts[1] for parts in log_lines(log) if parts[0] == word)


def test_kill_9_charges_only_the_tasks_whose_function_had_started(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    tmp_path: Path,
) -> None:
    """24 tasks of 2 s on 4 workers, half with max_attempts=1; the node is killed with
    SIGKILL after about 8 have finished, then started again. Only the 4 running at the
    kill have used an attempt; the others run as if nothing happened."""
    log = tmp_path / "jobs.log"
    ids = django_code(
        "from django_htask import schedule\n"
        "from tests.acceptance.app.tasks import slow\n"
        "for n in range(24):\n"
        f"    t = schedule(slow, n, 2.0, {str(log)!r}, max_attempts=1 if n % 2 else 3)\n"
        "    print(t.pk)\n"
    ).split()
    number = {int(task_id): str(n) for n, task_id in enumerate(ids)}
    first = start_scheduler("--workers", "4", "--poll-interval", "0.2")
    wait_until(
        lambda: (
            sum(counted(log, "end").values()) >= 8 and sum(counted(log, "start").values()) >= 12
        ),
        60,
        "8 jobs done and the next 4 started",
    )
    first.process.send_signal(signal.SIGKILL)
    first.wait_exit()
    started, ended = counted(log, "start"), counted(log, "end")
    running_at_kill = set(started) - set(ended)
    assert 1 <= len(running_at_kill) <= 4
    assert sum(started.values()) <= 12  # 4 workers: never more started than they took
    start_scheduler("--workers", "4", "--poll-interval", "0.2")
    wait_until(
        lambda: not query("SELECT 1 FROM django_htask_task WHERE status IN ('pending', 'running')"),
        90,
        "every task finished",
    )
    starts = counted(log, "start")
    rows = query("SELECT id, status, attempts, max_attempts, last_error FROM django_htask_task")
    crashed_runs = Counter(
        task_id
        for (task_id,) in query(
            "SELECT task_id FROM django_htask_run WHERE error LIKE '%stopped answering%'"
        )
    )
    for task_id, status, attempts, max_attempts, error in rows:
        n = number[task_id]
        assert attempts == starts[n], (n, attempts, starts[n])  # an attempt is a start
        if n in running_at_kill:
            assert crashed_runs[task_id] == 1
            if max_attempts == 1:
                assert status == "failed", (n, status)
                assert "stopped answering during attempt 1 of 1" in error
            else:
                assert (status, attempts) == ("succeeded", 2)
        else:  # claimed or not before the kill, it never ran: nothing is charged
            assert (status, attempts, crashed_runs[task_id]) == ("succeeded", 1, 0), n


def test_a_task_that_takes_its_process_down_is_tried_max_attempts_times_then_fails(
    db_file: Path,
    django_code: Callable[[str], str],
    query: Query,
    tmp_path: Path,
) -> None:
    log = tmp_path / "jobs.log"
    django_code(
        "from django_htask import schedule\n"
        "from tests.acceptance.app.tasks import die\n"
        f"schedule(die, {str(log)!r}, max_attempts=2)\n"
    )
    for attempt in (1, 2):  # each start (as systemd would) tries it again, and dies
        node = Scheduler(db_file, ["--poll-interval", "0.2"], {})
        try:
            assert node.wait_exit(timeout=30) == 1, node.stderr
        finally:
            node.kill()
        assert counted(log, "start")["die"] == attempt
    survivor = Scheduler(db_file, ["--poll-interval", "0.2"], {})
    try:
        survivor.wait_ready()
        wait_until(
            lambda: query("SELECT status FROM django_htask_task") == [("failed",)],
            30,
            "the poison task failed",
        )
        [(attempts, error)] = query("SELECT attempts, last_error FROM django_htask_task")
        assert attempts == 2
        assert "stopped answering during attempt 2 of 2: killed, crashed or out of memory" in (
            error
        )
        runs = query("SELECT status, attempt FROM django_htask_run ORDER BY attempt")
        assert runs == [("failed", 1), ("failed", 2)]
        django_code(f"from django_htask import schedule\nschedule('{NOOP}', 'after')\n")
        wait_until(
            lambda: query("SELECT 1 FROM django_htask_task WHERE status = 'succeeded'"),
            30,
            "the next task",
        )
        assert counted(log, "start")["die"] == 2  # never a third time
        assert survivor.process.poll() is None
    finally:
        survivor.kill()


@pytest.mark.parametrize(("kind", "error"), [("system", "SystemExit: 1"), ("keyboard", "Keyb")])
def test_a_task_raising_system_exit_fails_and_the_node_goes_on(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    kind: str,
    error: str,
) -> None:
    node = start_scheduler("--poll-interval", "0.2")
    django_code(
        "from django_htask import schedule\n"
        f"schedule('tests.acceptance.app.tasks:exits', {kind!r}, max_attempts=3)\n"
        f"schedule('{NOOP}', 'after', delay=1)\n"
    )
    wait_until(
        lambda: len(query("SELECT 1 FROM django_htask_task WHERE status = 'succeeded'")) == 1,
        30,
        "the task after it",
    )
    wait_until(
        lambda: (
            query("SELECT status FROM django_htask_task WHERE function LIKE '%exits'")
            == [("failed",)]
        ),
        30,
        "three attempts",
    )
    runs = query(
        "SELECT status, error, traceback FROM django_htask_run WHERE function LIKE '%exits'"
    )
    assert len(runs) == 3  # retried like any failure, then failed: never an endless loop
    assert all(s == "failed" and e.startswith(error) and "Traceback" in tb for s, e, tb in runs)
    assert node.process.poll() is None
    node.send(signal.SIGTERM)
    assert node.wait_exit() == 0, node.stderr


def test_runscheduler_on_a_database_never_migrated_exits_and_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite3"
    result = subprocess.run(
        [sys.executable, "-m", "django", "runscheduler"],
        env=_env(empty),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "run `manage.py migrate`" in result.stderr
    assert "0001_initial" in result.stderr
    assert "retrying" not in result.stderr


def test_a_node_killed_and_started_again_under_the_same_id_hands_back_its_tasks(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    tmp_path: Path,
) -> None:
    """``--node-id web-1`` (a container restarted under its pod's name): the task the
    killed process had started is charged its attempt and run again at once, not
    held for ever by the new process renewing the dead one's lease as its own."""
    log = tmp_path / "jobs.log"
    django_code(
        "from django_htask import schedule\n"
        "from tests.acceptance.app.tasks import slow\n"
        f"schedule(slow, 0, 3.0, {str(log)!r}, max_attempts=2)\n"
    )
    first = start_scheduler("--node-id", "web-1", "--poll-interval", "0.2")
    wait_until(lambda: counted(log, "start")["0"] == 1, 30, "the task started")
    first.process.send_signal(signal.SIGKILL)
    first.wait_exit()
    second = start_scheduler("--node-id", "web-1", "--poll-interval", "0.2")
    wait_until(
        lambda: query("SELECT status FROM django_htask_task") == [("succeeded",)],
        30,
        "the task run again by the new process",
    )
    [(attempts, node)] = query("SELECT attempts, node FROM django_htask_task")
    assert attempts == 2 == counted(log, "start")["0"]
    assert node == "web-1"  # the success: on the task's row, no run row
    runs = query("SELECT status, node, error FROM django_htask_run ORDER BY id")
    assert [(status, node) for status, node, _error in runs] == [("failed", "web-1")]
    assert "stopped answering during attempt 1 of 2" in runs[0][2]
    assert "handed back what it held" in second.stderr
