"""What a node that stops leaves behind when jobs outlive ``SHUTDOWN_TIMEOUT``.

The jobs in a call cannot be stopped from inside the process; the process must end
them, and it does, at once, after writing: each of their tasks ends that attempt
(retried no earlier than :data:`EXIT_GRACE` later, or failed), each of their schedule
runs is noted interrupted and still counts as running until the node is dead,
:data:`EXIT_GRACE` seconds later. The jobs a worker had not called yet are handed back:
a task pending again as it was, a schedule run failed unstarted.

:func:`shut_down` is a node's stop once its parts are made: the threads closed in
order, the results written, what is left handed back; :func:`shut_down_fenced` the
stop of a node declared dead, which writes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django_htask.exceptions import NodeFenced, StoreUnavailable
from django_htask.retry import RetryPolicy
from django_htask.store import Abandoned, RunOutcome

from .context import NodeContext
from .liveness import Liveness
from .running import Snapshot

__all__ = ["EXIT_GRACE", "abandoned", "shut_down", "shut_down_fenced"]

logger = logging.getLogger(__name__)

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
        aborted = ("task", task.id) in left.aborted
        if started and task.attempts < task.max_attempts and not aborted:
            retry_at = now + timedelta(seconds=task.retry.lost_delay(retry, task.attempts))
        error = interrupted if started else unstarted
        result.append(Abandoned(error, started, task_id=task.id, retry_at=retry_at))
    return result


def shut_down(
    ctx: NodeContext,
    liveness: Liveness,
    timeout: float,
    on_fenced: Callable[[NodeFenced], None],
) -> int:
    """Stop taking work, let running jobs finish (up to ``timeout`` seconds), and write
    it all down; return how many runs were still going (the process must then exit)."""
    node_id = ctx.node_id
    logger.info(
        "node %s stopping: waiting up to %.0fs for %d running jobs",
        node_id,
        timeout,
        len(ctx.running),
        extra={"action": "node_stopping"},
    )
    _close_threads(ctx, liveness, timeout)
    now = ctx.clock.now()
    outcomes = ctx.results.take()
    left = abandoned(ctx.running.snapshot(), now, timeout, ctx.task_retry)
    unfinished = sum(job.started for job in left)
    _write_stop(ctx, now, outcomes, left, unfinished, on_fenced)
    if unfinished:
        logger.warning(
            "node %s stopped with %d runs still going after %gs: they count as "
            "interrupted, and the process must exit now",
            node_id,
            unfinished,
            timeout,
            extra={"action": "node_abandoned", "unfinished": unfinished},
        )
    logger.info(
        "node %s stopped (%d runs written)",
        node_id,
        len(outcomes),
        extra={"action": "node_stopped"},
    )
    return unfinished


def _close_threads(ctx: NodeContext, liveness: Liveness, timeout: float) -> None:
    """Close the node's threads in order, all of them within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    ctx.control.close(timeout)  # the call in progress ends; nothing new starts
    ctx.running.refusing = True  # a job a worker has not called yet is not run
    ctx.jobs.close(wait=True, timeout=max(deadline - time.monotonic(), 0))
    if ctx.lane is not None:
        ctx.lane.close(max(deadline - time.monotonic(), 0))
    liveness.close(timeout)  # it renewed the leases while the jobs ran


def _write_stop(
    ctx: NodeContext,
    now: datetime,
    outcomes: list[RunOutcome],
    left: list[Abandoned],
    unfinished: int,
    on_fenced: Callable[[NodeFenced], None],
) -> None:
    """Write the runs' ``outcomes``, hand back the jobs ``left``, and mark the node
    stopped unless ``unfinished`` runs are still in a call."""
    node_id, store = ctx.node_id, ctx.store
    # This thread's connection was opened at start and has been idle since: after a
    # database restart it is a dead one, and the stop would fail on it. A fresh one.
    store.close()
    try:
        store.record(node_id, outcomes)
        if left:
            dead_at = now + timedelta(seconds=EXIT_GRACE)
            heartbeat_at = ctx.settings.dead_before(dead_at)
            store.abandon(node_id, now, left, dead_at, heartbeat_at)
        if not unfinished:  # nothing still in a call: a clean stop, handed back or not
            store.stop_node(node_id, now)
    except NodeFenced as exc:
        on_fenced(exc)
    except StoreUnavailable as exc:
        logger.error(
            "could not write the stop at shutdown (%d runs, and the node stopped): %s",
            len(outcomes),
            exc,
            extra={"action": "stop_unrecorded"},
        )
    finally:
        store.close()


def shut_down_fenced(ctx: NodeContext, liveness: Liveness) -> int:
    """Stop a node that was declared dead: nothing is written (the database would
    refuse it), nothing is waited for (the others run that work now). Return how many
    jobs were still in the workers' hands."""
    ctx.running.refusing = True
    ctx.control.close(wait=False)
    ctx.jobs.close(wait=False)
    if ctx.lane is not None:
        ctx.lane.close(None)
    liveness.close(wait=False)
    unfinished = len(ctx.running)
    ctx.results.clear()
    ctx.store.close()
    logger.info(
        "node %s stopped: it had been declared dead",
        ctx.node_id,
        extra={"action": "node_stopped"},
    )
    return unfinished
