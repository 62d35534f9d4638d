"""``wait_result``: a web process schedules a task and waits for its result while a
``runscheduler`` process runs it, as a view would (nothing shared but the database)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import Scheduler

pytestmark = pytest.mark.slow

ADD = "tests.acceptance.app.tasks:add_after"


def test_a_web_process_waits_for_the_result_another_process_computes(
    start_scheduler: Callable[..., Scheduler], django_code: Callable[[str], str]
) -> None:
    start_scheduler("--workers", "2")
    out = django_code(
        "import asyncio, time\n"
        "from django_htask import await_result, schedule, wait_result\n"
        f"task = schedule({ADD!r}, 2, 3, 0.5)\n"
        "t0 = time.monotonic()\n"
        "result = wait_result(task.token, timeout=30)\n"
        "print(result.status, result.value, result.attempts, time.monotonic() - t0 >= 0.5)\n"
        f"other = schedule({ADD!r}, 40, 2, 0.2)\n"
        "result = asyncio.run(await_result(other.token, timeout=30))\n"
        "print(result.status, result.value)\n"
    )
    assert out.splitlines() == ["succeeded 5 1 True", "succeeded 42"]


def test_async_tasks_run_by_a_node_process_return_their_results_and_time_out_at_an_await(
    start_scheduler: Callable[..., Scheduler], django_code: Callable[[str], str]
) -> None:
    """``async def`` tasks on two workers, each worker's loop kept between its calls:
    every result comes back, and a timeout cancels a call where it awaits."""
    start_scheduler("--workers", "2")
    aadd = "tests.acceptance.app.tasks:aadd_after"
    out = django_code(
        "from django_htask import schedule, wait_result\n"
        f"tasks = [schedule({aadd!r}, n, 1, 0.05) for n in range(6)]\n"
        f"slow = schedule({aadd!r}, 0, 0, 60, timeout=1)\n"
        "print([wait_result(t.token, timeout=30).value for t in tasks])\n"
        "result = wait_result(slow.token, timeout=30)\n"
        "print(result.status, result.attempts, result.error)\n"
    )
    assert out.splitlines() == [
        "[1, 2, 3, 4, 5, 6]",
        "failed 1 TimedOut: the run took longer than its timeout of 1s",
    ]


def test_a_task_no_node_runs_times_out_naming_its_status(
    django_code: Callable[[str], str], tmp_path: Path
) -> None:
    out = django_code(
        "import time\n"
        "from django_htask import ResultTimeout, schedule, wait_result\n"
        f"task = schedule({ADD!r}, 1, 1, 0)\n"
        "t0 = time.monotonic()\n"
        "try:\n"
        "    wait_result(task.token, timeout=0.3)\n"
        "except ResultTimeout as exc:\n"
        "    waited = time.monotonic() - t0\n"
        "    print(waited >= 0.3, exc.status, isinstance(exc, TimeoutError))\n"
        "    print(exc)\n"
    )
    first, message = out.splitlines()
    assert first == "True pending True"
    assert message.endswith(
        "has not ended within 0.3s: it is pending (wait_result leaves it as it is; "
        "cancel(token) stops it)"
    )


def test_progress_reported_in_a_worker_process_is_read_by_the_waiting_process(
    start_scheduler: Callable[..., Scheduler], django_code: Callable[[str], str]
) -> None:
    scheduler = start_scheduler("--pool", "process", "--workers", "1")
    out = django_code(
        "import os\n"
        "from django_htask import schedule, wait_result\n"
        "task = schedule('tests.acceptance.app.tasks:counts', 4)\n"
        "result = wait_result(task.token, timeout=60)\n"
        "p = result.progress\n"
        f"node = {scheduler.process.pid}\n"
        "print(result.status, result.value, p['done'], p['of'], p['pid'] != node)\n"
    )
    assert out.strip() == "succeeded 4 4 4 True"  # written from the worker process
