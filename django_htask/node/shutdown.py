"""What a node that stops leaves behind when jobs outlive ``SHUTDOWN_TIMEOUT``.

The jobs in a call cannot be stopped from inside the process; the process must end
them, and it does, at once, after writing: each of their tasks ends that attempt
(retried no earlier than :data:`EXIT_GRACE` later, or failed), each of their schedule
runs is noted interrupted and still counts as running until the node is dead,
:data:`EXIT_GRACE` seconds later. The jobs a worker had not called yet are handed back:
a task pending again as it was, a schedule run failed unstarted.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django_htask.retry import RetryPolicy
from django_htask.store import Abandoned

from .running import Snapshot

__all__ = ["EXIT_GRACE", "abandoned"]

#: A node that must exit with runs still going counts as alive this many seconds more,
#: so that no other node starts their schedules before its process is gone.
EXIT_GRACE = 2.0


def abandoned(left: Snapshot, now: datetime, timeout: float, retry: RetryPolicy) -> list[Abandoned]:
    """What :meth:`Store.abandon` is given for the jobs ``left`` unfinished."""
    interrupted = (
        f"interrupted: the node stopped (SHUTDOWN_TIMEOUT {timeout:g}s) before the run finished"
    )
    unstarted = "not run: the node stopped before a worker took it"
    result = []
    for run_id in left.runs:
        started = ("run", run_id) in left.calling
        result.append(Abandoned(interrupted if started else unstarted, started, run_id=run_id))
    for task in left.tasks:
        started = ("task", task.id) in left.calling
        retry_at = None
        if started and task.attempts < task.max_attempts:
            retry_at = now + timedelta(seconds=retry.delay(task.attempts))
        error = interrupted if started else unstarted
        result.append(Abandoned(error, started, task_id=task.id, retry_at=retry_at))
    return result
