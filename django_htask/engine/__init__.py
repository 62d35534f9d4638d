"""The django-htask engine: pure Python, no Django import anywhere below here.

Usable on its own::

    from django_htask.engine import Scheduler

    with Scheduler(workers=4) as scheduler:
        handle = scheduler.call_later(2.5, print, "hello")
"""

from __future__ import annotations

# -- core: errors, clocks, tokens, pool, scheduler -----------------------------------
from .clock import FakeClock, SystemClock
from .errors import (
    CALL_ERRORS,
    ArgumentError,
    ForcedStop,
    FunctionNotRegistered,
    HtaskError,
    InvalidSchedule,
    PayloadError,
    SchedulerClosed,
    SchedulerFull,
    TokenCancelled,
)
from .interfaces import BusySource, Clock, Executor
from .interrupt import RunGuard
from .pool import WorkerPool
from .scheduler import Scheduler, TimerHandle, TimerQueue
from .tokens import CancelToken, current_token

# -- schedules, fluent API, Cron runner, wrappers ------------------------------------
# isort: split
from .cron import Cron, EntrySnapshot, RunEvent, plan_occurrences
from .fluent import Every, every, once
from .schedules import (
    CronSchedule,
    IntervalSchedule,
    OnceSchedule,
    Schedule,
    SolarSchedule,
    describe,
    parse_schedule,
)
from .wrappers import (
    JobSkipped,
    RunContext,
    chain,
    current_run,
    delay_if_still_running,
    recover,
    retry,
    skip_if_still_running,
    timeout,
)

# -- registry, wire format, binding --------------------------------------------------
# isort: split
from .binding import Binder
from .codec import decode_call, decode_result, encode_call, encode_result
from .registry import Registry, registry

# -- timing wheel, batching executors ------------------------------------------------
# isort: split
from .executors import (
    BulkExecutor,
    ChunkExecutor,
    DelayExecutor,
    LessExecutor,
    PeriodicalExecutor,
    TaskContainer,
)
from .timetable import Timetable
from .wheel import TimingWheel

__all__ = [
    "CALL_ERRORS",
    "ArgumentError",
    "Binder",
    "BulkExecutor",
    "BusySource",
    "CancelToken",
    "ChunkExecutor",
    "Clock",
    "Cron",
    "CronSchedule",
    "DelayExecutor",
    "EntrySnapshot",
    "Every",
    "Executor",
    "FakeClock",
    "ForcedStop",
    "FunctionNotRegistered",
    "HtaskError",
    "IntervalSchedule",
    "InvalidSchedule",
    "JobSkipped",
    "LessExecutor",
    "OnceSchedule",
    "PayloadError",
    "PeriodicalExecutor",
    "Registry",
    "RunContext",
    "RunEvent",
    "RunGuard",
    "Schedule",
    "Scheduler",
    "SchedulerClosed",
    "SchedulerFull",
    "SolarSchedule",
    "SystemClock",
    "TaskContainer",
    "TimerHandle",
    "TimerQueue",
    "Timetable",
    "TimingWheel",
    "TokenCancelled",
    "WorkerPool",
    "chain",
    "current_run",
    "current_token",
    "decode_call",
    "decode_result",
    "delay_if_still_running",
    "describe",
    "encode_call",
    "encode_result",
    "every",
    "once",
    "parse_schedule",
    "plan_occurrences",
    "recover",
    "registry",
    "retry",
    "skip_if_still_running",
    "timeout",
]
