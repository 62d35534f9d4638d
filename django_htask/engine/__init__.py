"""The django-htask engine: pure Python, no Django import anywhere below here.

Usable on its own::

    from django_htask.engine import Scheduler

    with Scheduler(workers=4) as scheduler:
        handle = scheduler.call_later(2.5, print, "hello")
"""

from __future__ import annotations

# -- core: errors, clocks, tokens, pool, scheduler (issue 2) -------------------------
from .clock import FakeClock, SystemClock
from .errors import (
    ArgumentError,
    FunctionNotRegistered,
    HtaskError,
    InvalidSchedule,
    PayloadError,
    SchedulerClosed,
    SchedulerFull,
    TokenCancelled,
)
from .interfaces import BusySource, Clock, Executor
from .pool import WorkerPool
from .scheduler import Scheduler, TimerHandle, TimerQueue
from .tokens import CancelToken, current_token

# -- schedules, fluent API, Cron runner, wrappers (issue 3) --------------------------

# -- registry, wire format, binding (issue 4) ----------------------------------------

# -- timing wheel, batching executors (issue 5) --------------------------------------

__all__ = [
    "ArgumentError",
    "BusySource",
    "CancelToken",
    "Clock",
    "Executor",
    "FakeClock",
    "FunctionNotRegistered",
    "HtaskError",
    "InvalidSchedule",
    "PayloadError",
    "Scheduler",
    "SchedulerClosed",
    "SchedulerFull",
    "SystemClock",
    "TimerHandle",
    "TimerQueue",
    "TokenCancelled",
    "WorkerPool",
    "current_token",
]
