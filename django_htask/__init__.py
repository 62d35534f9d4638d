"""django-htask: a scheduler for Django.

The engine (``django_htask.engine``) is pure Python and usable without Django. The
Django-facing names below are imported lazily, so importing this package needs no
settings::

    from django_htask import periodic, schedule, task
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__ as __version__

__all__ = [
    "AbortResult",
    "Batch",
    "BatchState",
    "Graph",
    "QueueInfo",
    "Result",
    "ResultTimeout",
    "RetryPolicy",
    "Snooze",
    "TaskNotFound",
    "Using",
    "aabort",
    "abort",
    "acancel",
    "aget_result",
    "aget_task",
    "areschedule",
    "aschedule",
    "aschedule_many",
    "aset_progress",
    "await_result",
    "batch",
    "call",
    "cancel",
    "chain",
    "current_batch",
    "current_token",
    "get_batch",
    "get_result",
    "get_task",
    "group",
    "limit_queue",
    "list_queues",
    "pause_queue",
    "periodic",
    "reschedule",
    "resume_queue",
    "schedule",
    "schedule_many",
    "set_progress",
    "task",
    "using",
    "wait_result",
]

_LAZY = {
    "AbortResult": "django_htask.scheduled",
    "Batch": "django_htask.compose",
    "BatchState": "django_htask.compose",
    "batch": "django_htask.compose",
    "Graph": "django_htask.compose",
    "call": "django_htask.compose",
    "chain": "django_htask.compose",
    "group": "django_htask.compose",
    "current_batch": "django_htask.compose",
    "get_batch": "django_htask.compose",
    "RetryPolicy": "django_htask.engine.backoff",
    "TaskNotFound": "django_htask.exceptions",
    "ResultTimeout": "django_htask.exceptions",
    "Snooze": "django_htask.exceptions",
    "aabort": "django_htask.scheduled",
    "abort": "django_htask.scheduled",
    "current_token": "django_htask.engine",
    "task": "django_htask.functions",
    "periodic": "django_htask.code_schedules",
    "schedule": "django_htask.api",
    "cancel": "django_htask.scheduled",
    "reschedule": "django_htask.scheduled",
    "get_task": "django_htask.scheduled",
    "get_result": "django_htask.scheduled",
    "aget_result": "django_htask.scheduled",
    "wait_result": "django_htask.scheduled",
    "await_result": "django_htask.scheduled",
    "Result": "django_htask.scheduled",
    "aschedule": "django_htask.api",
    "acancel": "django_htask.scheduled",
    "areschedule": "django_htask.scheduled",
    "aget_task": "django_htask.scheduled",
    "schedule_many": "django_htask.api",
    "aschedule_many": "django_htask.api",
    "using": "django_htask.api",
    "set_progress": "django_htask.progress",
    "aset_progress": "django_htask.progress",
    "Using": "django_htask.api",
    "QueueInfo": "django_htask.queue_control",
    "limit_queue": "django_htask.queue_control",
    "list_queues": "django_htask.queue_control",
    "pause_queue": "django_htask.queue_control",
    "resume_queue": "django_htask.queue_control",
}

if TYPE_CHECKING:
    from .api import Using, aschedule, aschedule_many, schedule, schedule_many, using
    from .code_schedules import periodic
    from .compose import (
        Batch,
        BatchState,
        Graph,
        batch,
        call,
        chain,
        current_batch,
        get_batch,
        group,
    )
    from .engine import current_token
    from .engine.backoff import RetryPolicy
    from .exceptions import ResultTimeout, Snooze, TaskNotFound
    from .functions import task
    from .progress import aset_progress, set_progress
    from .queue_control import QueueInfo, limit_queue, list_queues, pause_queue, resume_queue
    from .scheduled import (
        AbortResult,
        Result,
        aabort,
        abort,
        acancel,
        aget_result,
        aget_task,
        areschedule,
        await_result,
        cancel,
        get_result,
        get_task,
        reschedule,
        wait_result,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'django_htask' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
