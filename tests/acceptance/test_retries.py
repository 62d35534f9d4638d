"""Retry policies with ``runscheduler`` as a subprocess, in each pool (docs/retries.md):
a task that fails twice with ConnectionError is retried a second apart and succeeds; a
ValueError in ``give_up_on`` fails its task at once, saying why. In the process pool
the error is raised in a worker process, and matched in the node by its class names."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import Scheduler, wait_until

pytestmark = pytest.mark.slow

Query = Callable[..., list[tuple[Any, ...]]]
FLAKY = "tests.acceptance.app.tasks:flaky"


def call_times(log: Path, label: str) -> list[float]:
    """When each call with ``label`` began (the log's time column)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [float(line.split()[-1]) for line in lines if line.startswith(f"call {label} ")]


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_policy_retries_connection_errors_and_gives_up_on_value_errors(
    pool: str,
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Query,
    tmp_path: Path,
) -> None:
    log = tmp_path / "calls.log"
    start_scheduler("--pool", pool, "--workers", "2", "--poll-interval", "0.2")
    django_code(
        "from django_htask import RetryPolicy, schedule\n"
        "policy = RetryPolicy(1, kind='fixed', attempts=4, retry_on=(ConnectionError,),"
        " give_up_on=('ValueError',))\n"
        f"schedule({FLAKY!r}, 'c', 2, 'ConnectionError', {str(log)!r}, retry=policy)\n"
        f"schedule({FLAKY!r}, 'v', 2, 'ValueError', {str(log)!r}, retry=policy)\n"
    )
    ended = (
        "SELECT status, attempts, last_error FROM django_htask_task "
        "WHERE status IN ('succeeded', 'failed') ORDER BY id"
    )
    rows = wait_until(lambda: len(query(ended)) == 2 and query(ended), 30, "both tasks ended")
    (c_status, c_attempts, _), (v_status, v_attempts, v_error) = rows
    assert (c_status, c_attempts) == ("succeeded", 3)
    assert (v_status, v_attempts) == ("failed", 1)
    assert v_error == "ValueError: v: call 1; not retried: ValueError is in give_up_on"
    times = call_times(log, "c")
    assert len(times) == 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # A fixed 1 s backoff: each retry is due a second after the attempt before ended
    # (and a node polling every 0.2 s, or woken by its timer, starts it soon after).
    assert all(1.0 <= gap < 3.0 for gap in gaps), gaps
    assert len(call_times(log, "v")) == 1
