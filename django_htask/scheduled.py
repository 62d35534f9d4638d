"""What a caller does with a one-off task once it is scheduled, by its token:
``cancel``, ``abort``, ``reschedule``, ``get_task``, ``get_result``, ``wait_result``
and their async twins (:mod:`django_htask.api` schedules it; both are re-exported
there and by the package root)::

    from django_htask import cancel, get_result, wait_result

    cancel(task.token)
    result = get_result(task.token)   # TaskNotFound if no task has this token
    result = wait_result(task.token, timeout=30)   # once it ended; ResultTimeout if not
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections, transaction

from . import clock, notices
from .conf import get_settings
from .db import scheduler_alias
from .due import due_time
from .exceptions import ResultTimeout, TaskNotFound
from .models import Task, TaskStatus
from .retention import gone_reason
from .store import Notices, get_store
from .store.composed import cancelled

__all__ = [
    "AbortResult",
    "Result",
    "aabort",
    "abort",
    "acancel",
    "aget_result",
    "aget_task",
    "areschedule",
    "await_result",
    "cancel",
    "get_result",
    "get_task",
    "reschedule",
    "wait_result",
]


def _notify_nodes(using: str) -> None:
    """Once the caller's transaction commits, wake a node in this process (on
    PostgreSQL the update notifies the nodes too)."""
    transaction.on_commit(notices.notify_local_change, using=using, robust=True)


class AbortResult(enum.StrEnum):
    """What :func:`abort` did. True unless :attr:`NOT_FOUND`."""

    #: The task had not started: it is cancelled and will not run.
    CANCELLED = "cancelled"
    #: The task is running: its node stops it (docs/timeouts.md) and records its run
    #: as aborted; it is not retried.
    REQUESTED = "requested"
    #: No task has this token, or it has finished.
    NOT_FOUND = "not_found"

    def __bool__(self) -> bool:
        return self is not AbortResult.NOT_FOUND


def abort(token: str) -> AbortResult:
    """Stop the task with this token: cancel it if it has not started, else ask its node
    to stop it (cooperatively first, by force after ``TIMEOUT_GRACE``)."""
    if cancel(token):
        return AbortResult.CANCELLED
    using = scheduler_alias()
    running = Task.objects.using(using).filter(token=token, status=TaskStatus.RUNNING)
    asked = running.filter(abort_requested_at__isnull=True).update(abort_requested_at=clock.now())
    if asked:  # on PostgreSQL the update notifies the nodes; here, a node in this process
        _notify_nodes(using)
    return AbortResult.REQUESTED if asked or running.exists() else AbortResult.NOT_FOUND


_abort = abort  # cancel(abort=True) reaches it under its parameter's name


def cancel(token: str, *, abort: bool = False) -> bool:
    """Cancel a pending or waiting task, and the tasks waiting on it (each cancelled
    with the reason, unless it runs anyway: docs/howto-chains.md); its batch counts
    it. False if the token is unknown, or the task is running or finished. With
    ``abort=True`` a running task is stopped too (see :func:`abort`, which also says
    which of the two happened)."""
    if abort:
        return bool(_abort(token))
    using = scheduler_alias()
    now = clock.now()
    tasks = Task.objects.using(using)
    with transaction.atomic(using=using):
        count = tasks.filter(token=token, status__in=_NOT_STARTED).update(
            status=TaskStatus.CANCELLED, finished_at=now, locked_by=None, lease_expires_at=None
        )
        if count:
            followed = tasks.filter(token=token, followed=True).values_list("id", flat=True)
            for task_id in followed:  # the tasks waiting on it, its batch
                cancelled(using, task_id, now)
    return count == 1


#: A task not started yet: pending, or waiting for others.
_NOT_STARTED = (TaskStatus.PENDING, TaskStatus.WAITING)


def reschedule(
    token: str, at: datetime | None = None, delay: float | timedelta | None = None
) -> bool:
    """Move a pending task to ``at`` (or ``delay`` seconds from now, or now); a task
    waiting for others runs no sooner than that once they succeeded.

    False if the token is unknown, or the task is running or finished.
    """
    run_at = due_time(at, delay)
    using = scheduler_alias()
    count = (
        Task.objects.using(using)
        .filter(token=token, status__in=_NOT_STARTED)
        .update(run_at=run_at, locked_by=None, lease_expires_at=None)
    )
    if count:
        _notify_nodes(using)
    return count == 1


def get_task(token: str) -> Task | None:
    """The task with this token, or None: it was never queued, or it ended and was
    deleted once its retention passed (:func:`get_result` raises
    :class:`~django_htask.exceptions.TaskNotFound`, which says how long finished tasks
    are kept)."""
    return Task.objects.using(scheduler_alias()).filter(token=token).first()


@dataclass(frozen=True, slots=True)
class Result:
    """Where a task is and, once it succeeded, what its function returned
    (:func:`get_result`)."""

    token: str
    #: ``pending``, ``waiting`` (for the tasks it runs after), ``running``,
    #: ``succeeded``, ``failed`` or ``cancelled``.
    status: TaskStatus
    #: What the function returned, decoded to its return annotation; None until it
    #: succeeded, or when it returned None.
    value: Any
    #: The last attempt's error ("" if none failed).
    error: str
    #: Attempts started so far.
    attempts: int
    #: When it succeeded, failed or was cancelled; None before.
    finished_at: datetime | None
    #: What its function last reported with :func:`~django_htask.set_progress` (None:
    #: nothing yet).
    progress: Any = None


def get_result(token: str) -> Result:
    """The status and result of the task with this token. A task that has not
    succeeded has ``value`` None. Raises
    :class:`~django_htask.exceptions.TaskNotFound` (a ``LookupError``) when no task has
    the token: never queued, or deleted once finished past its retention (the message
    says how long finished tasks are kept: ``TASK_RETENTION_DAYS``); ``PayloadError``
    if its stored result cannot be read (see docs/api.md)."""
    fields = ("token", "function", "status", "result", "return_value", "last_error")
    row = (
        Task.objects.using(scheduler_alias())
        .only(*fields, "attempts", "finished_at", "progress")
        .filter(token=token)
        .first()
    )
    if row is None:
        raise TaskNotFound(token, gone_reason(token, get_settings().task_retention_days))
    status = TaskStatus(row.status)
    value = row.result_value() if status == TaskStatus.SUCCEEDED else None
    return Result(
        row.token, status, value, row.last_error, row.attempts, row.finished_at, row.progress
    )


#: A task that has ended: :func:`wait_result` returns then.
ENDED = frozenset({TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED})
#: :func:`wait_result`'s looks: the first pause this long, each later one this much
#: longer than the one before, up to ``poll`` seconds.
FIRST_PAUSE, PAUSE_GROWTH = 0.01, 1.5


def wait_result(
    token: str, timeout: float | timedelta | None = None, *, poll: float = 0.5
) -> Result:
    """Wait until the task with this token has ended (succeeded, failed, or was
    cancelled), and return its :class:`Result` (as :func:`get_result` reads it).

    ``timeout``: seconds (or a timedelta) to wait at most; None waits as long as it
    takes. Past it, :class:`~django_htask.exceptions.ResultTimeout` (a
    ``TimeoutError``) names the task and the status it was in; the task is left as it
    is. On PostgreSQL the task's end wakes it (a ``NOTIFY``, heard on the caller's own
    connection while it waits), and it reads the task's row again every ``poll``
    seconds in case a notice is lost. Elsewhere it reads the row,
    again after 10 ms, then less and less often, at most ``poll`` seconds apart: a
    short task is seen ending within milliseconds, a long wait costs a read every
    ``poll`` seconds. Raises :class:`~django_htask.exceptions.TaskNotFound` as
    :func:`get_result` does, and ``RuntimeError`` inside a transaction on the
    scheduler's database, where the task's end, committed by a node, might never be
    seen (nor a task scheduled in that transaction, which no node can see before it
    commits)."""
    wait = _Wait.of(token, timeout, poll)
    _outside_transaction(token)
    stack = contextlib.ExitStack()
    wait.heard(stack.enter_context(get_store().watch_end(token)))
    try:
        while True:
            wait.before_look()
            result = get_result(token)
            pause = wait.pause_after(result)
            if pause is None:
                return result
            if wait.ended is None:
                time.sleep(pause)
            else:
                wait.ended.wait(pause)
    finally:
        stack.close()


class _Wait:
    """When :func:`wait_result` and :func:`await_result` look again, and when they
    stop."""

    def __init__(self, token: str, limit: float, poll: float) -> None:
        self.token = token
        self.limit = limit
        self.poll = poll
        self.deadline = time.monotonic() + limit
        self.pause = min(FIRST_PAUSE, poll)
        self.ended: Notices | None = None

    def heard(self, ended: Notices | None) -> None:
        """``ended``: the store's notices of the task's end (None: it has none). With
        them every pause is ``poll`` long, cut short by the notice."""
        self.ended = ended
        if ended is not None:
            self.pause = self.poll

    def before_look(self) -> None:
        """Forget the notices heard before each read of the task: an end committed
        after the read is still announced, and cuts the next pause short."""
        if self.ended is not None:
            self.ended.clear()

    @classmethod
    def of(cls, token: str, timeout: float | timedelta | None, poll: float) -> _Wait:
        """A wait of ``timeout`` (None: no end), checked."""
        if isinstance(timeout, timedelta):
            timeout = timeout.total_seconds()
        limit = math.inf if timeout is None else timeout
        if isinstance(limit, bool) or not isinstance(limit, int | float) or not limit >= 0:
            raise ValueError(f"timeout must be seconds >= 0, a timedelta or None, got {timeout!r}")
        if isinstance(poll, bool) or not isinstance(poll, int | float) or not 0 < poll < math.inf:
            raise ValueError(f"poll must be seconds > 0, got {poll!r}")
        return cls(token, float(limit), float(poll))

    def pause_after(self, result: Result) -> float | None:
        """None when ``result`` says the task ended; else the seconds to wait before
        the next look (:class:`~django_htask.exceptions.ResultTimeout` past the
        deadline)."""
        if result.status in ENDED:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ResultTimeout(self.token, result.status, self.limit)
        pause, self.pause = self.pause, min(self.pause * PAUSE_GROWTH, self.poll)
        return min(pause, left)


def _outside_transaction(token: str) -> None:
    """RuntimeError when the caller is inside a transaction on the scheduler's
    database (see :func:`wait_result`)."""
    using = scheduler_alias()
    if connections[using].in_atomic_block:
        raise RuntimeError(
            f"wait_result({token!r}) inside a transaction on the database {using!r}: a "
            "node commits the task's end in its own transaction, which this one may never "
            "see, and no node sees a task scheduled in it before it commits; wait after "
            "the transaction (transaction.on_commit, or outside atomic())"
        )


async def await_result(
    token: str, timeout: float | timedelta | None = None, *, poll: float = 0.5
) -> Result:
    """:func:`wait_result` for async code: it pauses with ``asyncio.sleep``, so the
    event loop goes on while it waits; each look is :func:`aget_result`; a notice is
    waited for in Django's thread for sync code, on its connection."""
    wait = _Wait.of(token, timeout, poll)
    await sync_to_async(_outside_transaction)(token)
    stack = contextlib.ExitStack()
    wait.heard(await sync_to_async(stack.enter_context)(get_store().watch_end(token)))
    try:
        while True:
            wait.before_look()
            result = await aget_result(token)
            pause = wait.pause_after(result)
            if pause is None:
                return result
            if wait.ended is None:
                await asyncio.sleep(pause)
            else:
                await sync_to_async(wait.ended.wait)(pause)  # on the connection's thread
    finally:
        await sync_to_async(stack.close)()


# The async twins run the sync function in Django's thread for sync code
# (``thread_sensitive``), so a transaction opened around them behaves as in a view.


async def acancel(token: str, *, abort: bool = False) -> bool:
    """:func:`cancel` for async views."""
    return await sync_to_async(cancel)(token, abort=abort)


async def aabort(token: str) -> AbortResult:
    """:func:`abort` for async views."""
    return await sync_to_async(abort)(token)


async def areschedule(
    token: str, at: datetime | None = None, delay: float | timedelta | None = None
) -> bool:
    """:func:`reschedule` for async views."""
    return await sync_to_async(reschedule)(token, at=at, delay=delay)


async def aget_task(token: str) -> Task | None:
    """:func:`get_task` for async views."""
    return await sync_to_async(get_task)(token)


async def aget_result(token: str) -> Result:
    """:func:`get_result` for async views."""
    return await sync_to_async(get_result)(token)
