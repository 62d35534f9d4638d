"""What a caller does with a one-off task once it is scheduled, by its token:
``cancel``, ``abort``, ``reschedule``, ``get_task``, ``get_result`` and their async twins
(:mod:`django_htask.api` schedules it; both are re-exported there and by the package
root)::

    from django_htask import cancel, get_result

    cancel(task.token)
    result = get_result(task.token)   # TaskNotFound if no task has this token
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction

from . import clock, notices
from .conf import get_settings
from .db import scheduler_alias
from .due import due_time
from .exceptions import TaskNotFound
from .models import Task, TaskStatus
from .retention import gone_reason
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
    "cancel",
    "get_result",
    "get_task",
    "reschedule",
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
        .only(*fields, "attempts", "finished_at")
        .filter(token=token)
        .first()
    )
    if row is None:
        raise TaskNotFound(token, gone_reason(token, get_settings().task_retention_days))
    status = TaskStatus(row.status)
    value = row.result_value() if status == TaskStatus.SUCCEEDED else None
    return Result(row.token, status, value, row.last_error, row.attempts, row.finished_at)


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
