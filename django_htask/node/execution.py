"""Running one call of a registered function: the single place that sends the run
signals, times the call and captures what it raised. A node's workers use it for tasks
and schedule runs, and ``manage.py htask run`` for a schedule run by hand."""

from __future__ import annotations

import asyncio
import inspect
import logging
import traceback
from datetime import datetime
from typing import Any

from django.db import close_old_connections

from django_htask.engine import (
    ArgumentError,
    Clock,
    FunctionNotRegistered,
    PayloadError,
    decode_call,
    registry,
)
from django_htask.enums import RunStatus
from django_htask.signals import run_finished, run_started
from django_htask.store import RunOutcome

__all__ = ["call_of", "execute"]

logger = logging.getLogger(__name__)


def call_of(payload: bytes) -> tuple[list[Any], dict[str, Any]]:
    """The ``(args, kwargs)`` a stored payload holds (PayloadError if it cannot be
    read)."""
    if not payload:
        return [], {}
    _name, args, kwargs = decode_call(payload)
    return list(args), dict(kwargs)


def execute(
    function: str,
    payload: bytes,
    *,
    clock: Clock,
    node: str,
    name: str,
    attempt: int,
    scheduled_for: datetime | None,
    schedule_id: int | None = None,
    task_id: int | None = None,
    refresh_connections: bool = True,
) -> RunOutcome:
    """Call the registered ``function`` with the call ``payload`` holds; never raises.

    Whatever the function raises ends the run failed, ``SystemExit`` and
    ``KeyboardInterrupt`` included (they end only this run, not the process). The run
    is ``retryable`` (in ``extra``) unless it could not start at all (a function not
    registered, a payload or arguments that do not fit). With ``refresh_connections``
    (a worker's call) the database connections are refreshed before and after, as a
    request's are."""
    from django_htask.models import Run  # noqa: PLC0415 - the signals' sender

    if refresh_connections:
        close_old_connections()
    started_at = clock.now()
    info: dict[str, Any] = {
        "name": name,
        "function": function,
        "node": node,
        "schedule_id": schedule_id,
        "task_id": task_id,
        "scheduled_for": scheduled_for,
        "attempt": attempt,
    }
    run_started.send_robust(sender=Run, **info)
    t0 = clock.monotonic()
    status = RunStatus.SUCCEEDED
    error = tb = ""
    retryable = False
    try:
        try:
            args, kwargs = call_of(payload)
            fn, bound_args, bound_kwargs = registry.bind(function, args, kwargs)
        except (FunctionNotRegistered, PayloadError, ArgumentError) as exc:
            status = RunStatus.FAILED
            error = f"{type(exc).__name__}: {exc}"
            logger.error("%s cannot run: %s", name, error, extra={"action": "run_unrunnable"})
        else:
            if inspect.iscoroutinefunction(fn):
                asyncio.run(fn(*bound_args, **bound_kwargs))
            else:
                fn(*bound_args, **bound_kwargs)
    except BaseException as exc:  # a task's SystemExit ends that run only
        status = RunStatus.FAILED
        retryable = True
        error = f"{type(exc).__name__}: {exc}"
        tb = traceback.format_exc()
        level = logging.WARNING if isinstance(exc, Exception) else logging.ERROR
        logger.log(level, "%s failed: %s", name, error, extra={"action": "run_failed"})
    finally:
        if refresh_connections:
            close_old_connections()
    duration = clock.monotonic() - t0
    finished_at = clock.now()
    run_finished.send_robust(sender=Run, status=status, error=error, duration=duration, **info)
    return RunOutcome(
        status=status,
        function=function,
        name=name,
        node=node,
        attempt=attempt,
        scheduled_for=scheduled_for,
        started_at=started_at,
        finished_at=finished_at,
        duration=duration,
        error=error,
        traceback=tb,
        schedule_id=schedule_id,
        task_id=task_id,
        extra={"retryable": retryable},
    )
