"""``runscheduler --pool process`` as a subprocess on SQLite: calls in worker processes,
a worker process killed mid-call, recycling by calls and by memory, and a node that
stops or is killed (docs/timeouts.md, "The process pool"). Timeouts and aborts with the
process pool: tests/acceptance/test_stopping.py."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import Scheduler, wait_until

pytestmark = pytest.mark.slow

Query = Callable[..., list[tuple[Any, ...]]]
TASKS = "tests.acceptance.app.tasks"
SUCCEEDED = "SELECT count(*) FROM django_htask_task WHERE status = 'succeeded'"


def pids(log: Path, word: str) -> list[int]:
    """The pid on each ``word`` line of a task log, in order."""
    if not log.exists():
        return []
    return [int(line.split()[-2]) for line in log.read_text().splitlines() if word in line]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of another parent counts as gone: it runs nothing.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def enqueue(django_code: Callable[[str], str], *calls: str) -> None:
    lines = "".join(f"schedule({call})\n" for call in calls)
    django_code(f"from django_htask import schedule\n{lines}")


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "jobs.log"


def pool_node(start: Callable[..., Scheduler], workers: int, *options: str) -> Scheduler:
    """A node with ``workers`` worker processes, polling every 0.2 s."""
    return start("--pool", "process", "--workers", str(workers), "--poll-interval", "0.2", *options)


def test_calls_run_in_worker_processes_that_are_reused(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    log: Path,
) -> None:
    node = pool_node(start_scheduler, 2)
    assert "workers:   2 worker processes\n" in node.stdout
    enqueue(django_code, *(f"{TASKS + ':slow'!r}, {n}, 0.3, {str(log)!r}" for n in range(6)))
    wait_until(lambda: query(SUCCEEDED) == [(6,)], 30, "the six tasks")
    used = set(pids(log, "start"))
    assert len(used) == 2, used  # two worker processes, each used for three calls
    assert node.process.pid not in used
    node.send(signal.SIGTERM)
    assert node.wait_exit() == 0, node.stderr
    wait_until(lambda: not any(alive(pid) for pid in used), 5, "the worker processes gone")


def test_a_worker_process_killed_mid_call_fails_that_run_only_and_is_replaced(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    log: Path,
) -> None:
    node = pool_node(start_scheduler, 2)
    enqueue(django_code, f"{TASKS + ':slow'!r}, 1, 60, {str(log)!r}, max_attempts=2")
    [victim] = wait_until(lambda: pids(log, "start 1"), 30, "the slow task")
    os.kill(victim, signal.SIGKILL)
    run = "SELECT status, error, attempt FROM django_htask_run ORDER BY id"
    wait_until(lambda: query(run), 30, "its run recorded")
    assert query(run)[0] == (
        "failed",
        "WorkerProcessDied: the worker process making the call ended (killed by signal 9 "
        "(SIGKILL))",
        1,
    )
    # Retried by its policy, in the process that replaced the killed one.
    [first, second] = wait_until(
        lambda: pids(log, "start 1")[1:] and pids(log, "start 1"), 30, "its second attempt"
    )
    assert first == victim != second
    assert node.process.poll() is None
    assert f"its worker process {victim} ended during the call" in node.stderr
    # A call that ends its own process (os._exit) is no different.
    enqueue(django_code, f"{TASKS + ':die'!r}, {str(log)!r}", f"{TASKS + ':noop'!r}, 'after'")
    wait_until(
        lambda: query("SELECT status, error FROM django_htask_run WHERE name LIKE '%die%'"),
        30,
        "the run that ended its process",
    )
    [(status, error)] = query("SELECT status, error FROM django_htask_run WHERE name LIKE '%die%'")
    assert (status, error) == (
        "failed",
        "WorkerProcessDied: the worker process making the call ended (exit status 1)",
    )
    wait_until(
        lambda: (
            query("SELECT status FROM django_htask_task WHERE function LIKE '%noop%'")
            == [("succeeded",)]
        ),
        30,
        "the task after it",
    )


def test_a_snooze_in_a_worker_process_runs_the_task_again_without_an_attempt(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    log: Path,
) -> None:
    pool_node(start_scheduler, 1)
    enqueue(django_code, f"{TASKS + ':snooze_then_log'!r}, 2, 0.2, {str(log)!r}")
    wait_until(lambda: query(SUCCEEDED) == [(1,)], 30, "the task, after two snoozes")
    assert query("SELECT attempts, snoozes FROM django_htask_task") == [(1, 2)]
    runs = query("SELECT status, attempt FROM django_htask_run ORDER BY id")
    assert runs == [("snoozed", 1), ("snoozed", 1)]  # the success: on the task's row
    assert len(pids(log, "call")) == 3


def test_a_worker_process_is_replaced_after_max_tasks_per_child_calls(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    log: Path,
) -> None:
    node = pool_node(start_scheduler, 1, "--max-tasks-per-child", "2")
    assert "1 worker processes, each replaced after 2 calls" in node.stdout
    enqueue(django_code, *(f"{TASKS + ':slow'!r}, {n}, 0, {str(log)!r}" for n in range(6)))
    wait_until(lambda: query(SUCCEEDED) == [(6,)], 30, "the six tasks")
    used = pids(log, "start")
    assert used[0] == used[1] != used[2] == used[3] != used[4] == used[5], used
    assert len(set(used)) == 3, used
    assert node.stderr.count("replaced: it made 2 calls (MAX_TASKS_PER_CHILD 2)") == 3


def test_a_worker_process_is_replaced_once_its_memory_passed_the_limit(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    log: Path,
) -> None:
    node = pool_node(start_scheduler, 1, "--max-memory-per-child", "300")
    # 100 MiB more each call: the third takes it past 300 MiB, the fourth has a new one.
    enqueue(django_code, *(f"{TASKS + ':grow'!r}, 100, {str(log)!r}" for _ in range(4)))
    wait_until(lambda: query(SUCCEEDED) == [(4,)], 60, "the four tasks")
    used = pids(log, "grow")
    assert used[0] == used[1] == used[2] != used[3], used
    assert "replaced: its memory reached" in node.stderr
    assert "(MAX_MEMORY_PER_CHILD 300)" in node.stderr


def test_sigterm_lets_the_call_in_a_worker_process_finish(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    log: Path,
) -> None:
    node = pool_node(start_scheduler, 1)
    enqueue(django_code, f"{TASKS + ':slow'!r}, 1, 1.5, {str(log)!r}")
    [worker] = wait_until(lambda: pids(log, "start 1"), 30, "the task")
    # As a service manager does, SIGTERM to the node and its worker processes: the
    # worker process ignores it (its node decides when its call ends).
    node.send(signal.SIGTERM)
    os.kill(worker, signal.SIGTERM)
    assert node.wait_exit(30) == 0, node.stderr
    assert pids(log, "end 1") == [worker]
    assert query("SELECT status FROM django_htask_task") == [("succeeded",)]
    wait_until(lambda: not alive(worker), 5, "the worker process gone")


def test_a_node_killed_with_sigkill_takes_its_worker_processes_with_it(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    log: Path,
) -> None:
    node = pool_node(start_scheduler, 2)
    enqueue(django_code, f"{TASKS + ':slow'!r}, 1, 60, {str(log)!r}")
    [busy] = wait_until(lambda: pids(log, "start 1"), 30, "the task")
    node.send(signal.SIGKILL)
    node.wait_exit()
    # The call must not go on: another node will run it again once this one is dead.
    wait_until(lambda: not alive(busy), 5, "the busy worker process gone")
    assert pids(log, "end 1") == []
