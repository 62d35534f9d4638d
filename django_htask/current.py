"""The one-off task this thread is running, if any: set by the node around each call
of a task's function (``node/execution.py``), read by ``current_batch()``."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["current_task_id", "running_task", "set_running_task"]

_task: contextvars.ContextVar[int | None] = contextvars.ContextVar("htask_task", default=None)


def current_task_id() -> int | None:
    """The id of the task whose function is running in this thread (None outside one)."""
    return _task.get()


@contextmanager
def running_task(task_id: int | None) -> Iterator[None]:
    """Within the block, :func:`current_task_id` is ``task_id``."""
    token = _task.set(task_id)
    try:
        yield
    finally:
        _task.reset(token)


def set_running_task(task_id: int | None) -> None:
    """:func:`current_task_id` is ``task_id`` for the rest of this context: an asyncio
    task's own, which ends with it (a call on a node's async lane). Nothing is reset, so
    nothing fails when the task's coroutine is closed from another context."""
    _task.set(task_id)
