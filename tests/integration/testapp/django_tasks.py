"""Functions decorated with Django's own ``@task`` (Django >= 6.0 only)."""

from __future__ import annotations

from django.tasks import TaskContext, task

from .tasks import record


@task
def double(x: int) -> int:
    record("double", x)
    return x * 2


@task(priority=10, takes_context=True)
def with_context(context: TaskContext, label: str) -> str:
    record("with_context", (label, context.attempt, context.task_result.id))
    return label


@task
def fails(message: str) -> None:
    record("fails", message)
    raise ValueError(message)


@task
async def async_double(x: int) -> int:
    record("async_double", x)
    return x * 2
