"""Functions decorated with Django's own ``@task`` (Django >= 6.0 only)."""

from __future__ import annotations

from django.tasks import TaskContext, task

from django_htask import Snooze

from .tasks import calls, lock, record


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


@task
def exits(kind: str) -> None:
    """Raise what ends a process: ``SystemExit(2)`` or ``KeyboardInterrupt``."""
    record("exits", kind)
    if kind == "keyboard":
        raise KeyboardInterrupt("stop")
    raise SystemExit(2)


class ReportError(Exception):
    """An error of this module (its class path is not a builtin's)."""


@task
def fails_verbosely(message: str) -> None:
    """Raise a ReportError with a message of several lines and a note, from a KeyError."""
    record("fails_verbosely", message)
    try:
        raise KeyError("the cause")
    except KeyError as cause:
        error = ReportError(message)
        error.add_note("ValueError: a note that reads like an error")
        raise error from cause


@task
def snoozes_once(label: str) -> str:
    """Snooze 5 s at its first call with ``label``, then return it."""
    with lock:
        calls["snoozes_once"].append(label)
        made = calls["snoozes_once"].count(label)
    if made == 1:
        raise Snooze(5)
    return label


@task
def fails_twice(label: str) -> str:
    """Raise ConnectionError at the first two calls with ``label``, then return it."""
    with lock:
        calls["fails_twice"].append(label)
        made = calls["fails_twice"].count(label)
    if made <= 2:
        raise ConnectionError(f"{label}: call {made}")
    return label
