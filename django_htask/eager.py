"""Running due tasks in the caller's process, for tests: :func:`drain`, and the
``HTASK["EAGER"]`` mode that drains once a scheduled task's transaction commits.

A task runs here exactly as on a node, through the same code: the store claims it
(its attempt counted, its lock or limit weighed, a paused queue's left alone), the
node's :func:`~django_htask.node.execution.execute` decodes its arguments from the
stored payload, binds them to the function's annotations, calls it and encodes what it
returned, and the store records its end (its result, its retry or snooze as a pending
task due later, what its end releases). So a test sees the rows, the results and the
errors a node would leave.

What differs from a node: the call is made on the caller's thread, with the caller's
database connection (a test case's transaction sees what the task wrote). A timeout is
honoured (the call is asked to stop, then interrupted after ``TIMEOUT_GRACE``), but a
call stuck in C cannot be given up. Schedules (``@periodic``) do not fire: only tasks.
Time is :mod:`django_htask.clock`'s, so a test on a ``FakeClock`` decides when a task
scheduled for later, or a retry, is due.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from . import clock
from ._version import __version__
from .conf import HtaskSettings, get_settings
from .db import scheduler_alias
from .engine import RunGuard
from .enums import RunStatus
from .models import Task
from .queues import ALL, QueueFilter
from .retry import RetryPolicy
from .store import RunOutcome, Serving, StartedTask, get_store
from .store.base import Store
from .store.rules import timed_out

__all__ = ["DrainLimitReached", "Drained", "drain", "run_when_scheduled"]

logger = logging.getLogger(__name__)

#: The most attempts one :func:`drain` makes: more means a task that keeps scheduling
#: work due at once (itself, or a snooze of 0 s).
MOST_RUNS = 10_000

_here = threading.local()


class DrainLimitReached(RuntimeError):
    """:func:`drain` made ``limit`` attempts and tasks were still due."""


@dataclass
class Drained:
    """What :func:`drain` ran, by how each attempt ended."""

    #: Attempts that succeeded.
    succeeded: int = 0
    #: Attempts that failed for good (no attempt left, or an error not retried).
    failed: int = 0
    #: Attempts that failed and whose task runs again later (pending, due then).
    retried: int = 0
    #: Attempts that snoozed (``raise Snooze``): their task runs again later.
    snoozed: int = 0
    #: ``"function: error"`` of each attempt that failed, retried or not, in order.
    errors: list[str] = field(default_factory=list)

    @property
    def ran(self) -> int:
        """Attempts made."""
        return self.succeeded + self.failed + self.retried + self.snoozed

    def count(self, outcome: RunOutcome) -> None:
        if outcome.status == RunStatus.SUCCEEDED:
            self.succeeded += 1
            return
        if outcome.status == RunStatus.SNOOZED and outcome.retry_at is not None:
            self.snoozed += 1
            return
        self.errors.append(f"{outcome.function}: {outcome.error}")
        if outcome.retry_at is not None:
            self.retried += 1
        else:
            self.failed += 1


def drain(
    *, queue_name: str | None = None, using: str | None = None, limit: int = MOST_RUNS
) -> Drained:
    """Run the tasks due now (by :func:`django_htask.clock.now`) here, one at a time,
    until none is due: those the tasks run schedule, and retries due at once, too.

    ``queue_name``: only that queue's tasks (default: every queue; a paused queue's
    tasks wait, as they would for a node). ``using``: the database (default: the
    scheduler's). Raises :class:`DrainLimitReached` after ``limit`` attempts with tasks
    still due. A drain that finds nothing due writes nothing."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit!r}")
    store = get_store(using or scheduler_alias())
    queues = ALL if queue_name is None else QueueFilter.of([queue_name])
    drained = Drained()
    with _draining():
        serving = Serving(queues=queues, states=store.queue_states())
        if not store.task_outlook(clock.now(), serving)[0]:
            return drained
        from .node import new_node_id  # noqa: PLC0415  (only once a task is due)

        node_id = new_node_id("eager")
        store.register_node(node_id, socket.gethostname(), os.getpid(), __version__, clock.now())
        try:
            _run_due(store, node_id, serving, drained, limit)
        finally:
            store.stop_node(node_id, clock.now())
    return drained


def _run_due(store: Store, node_id: str, serving: Serving, drained: Drained, limit: int) -> None:
    """Claim and run the due tasks one by one (each claim sees the ends written before
    it), until none is due."""
    settings = get_settings()
    retry = RetryPolicy(settings.retry_backoff, settings.retry_backoff_max)
    while True:
        now = clock.now()
        if drained.ran >= limit:
            if store.task_outlook(now, serving)[0]:
                raise DrainLimitReached(
                    f"drain() made {limit} attempts and tasks are still due (a task "
                    "that schedules work due at once, again and again?)"
                )
            return
        lease_until = now + timedelta(seconds=settings.lease)
        started = store.start_tasks(node_id, now, 1, lease_until, serving=serving)
        if not started:
            return
        for task in started:
            outcome = _attempt(task, node_id, settings, retry)
            store.record(node_id, [outcome])
            drained.count(outcome)


def _attempt(
    task: StartedTask, node_id: str, settings: HtaskSettings, retry: RetryPolicy
) -> RunOutcome:
    """One attempt of ``task`` on this thread, under its timeout (nothing abandons this
    thread: the guard needs no settling)."""
    from .node.execution import execute, task_call, task_ended  # noqa: PLC0415

    timeout = task.timeout if task.timeout is not None else settings.default_timeout
    guard = RunGuard()
    with _stopped_after(guard, timeout, settings.timeout_grace) as arm:
        outcome = execute(
            task_call(task, node_id),
            clock=clock.get_clock(),
            guard=guard,
            max_result=settings.result_max_bytes,
            on_start=arm,
        )
    return task_ended(task, outcome, retry, settings.max_snoozes)


@contextmanager
def _stopped_after(guard: RunGuard, timeout: float | None, grace: float) -> Iterator[Any]:
    """A function that arms the call's timeout (the call's start), as a node's
    supervisor does: asked to stop at ``timeout`` seconds, interrupted ``grace`` seconds
    later. The timers are real: the call runs for real, whatever the clock says."""
    timers: list[threading.Timer] = []

    def force() -> None:
        guard.interrupt()

    def stop() -> None:
        if timeout is not None and guard.stop(timed_out(timeout), retryable=True):
            timers.append(threading.Timer(grace, force))
            timers[-1].daemon = True
            timers[-1].start()

    def arm() -> None:
        if timeout is not None:
            timers.append(threading.Timer(timeout, stop))
            timers[-1].daemon = True
            timers[-1].start()

    try:
        yield arm
    finally:
        for timer in list(timers):
            timer.cancel()


@contextmanager
def _draining() -> Iterator[None]:
    """Mark this thread as draining: a task scheduled by a task it runs is left to the
    loop (it claims it next) rather than drained again inside the call."""
    before = getattr(_here, "draining", False)
    _here.draining = True
    try:
        yield
    finally:
        _here.draining = before


def run_when_scheduled(sender: object, task: Task, **kwargs: object) -> None:
    """``task_scheduled``'s receiver: with ``HTASK["EAGER"]``, drain the database the
    task was written to (a task due later waits for a :func:`drain` once it is due)."""
    if not get_settings().eager or getattr(_here, "draining", False):
        return
    drain(using=task._state.db)
