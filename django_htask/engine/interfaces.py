"""The interfaces of the engine, in one place.

Everything that is plugged into the engine (a clock, an executor) is described here
as a :class:`typing.Protocol`; the implementations live one per module.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = ["BusySource", "Clock", "Executor"]


@runtime_checkable
class BusySource(Protocol):
    """Something with work in flight that a :class:`~django_htask.engine.FakeClock`
    waits for before ``advance()`` returns (a scheduler's running tasks, say)."""

    def idle(self) -> bool: ...


@runtime_checkable
class Clock(Protocol):
    """Where the engine reads the time and how its threads wait for it.

    Time is counted in whole microseconds since the Unix epoch (UTC), so that a
    datetime survives the trip to the timer queue and back exactly.

    A thread that waits for a time calls ``wait(cond, deadline_us)`` holding ``cond``;
    a thread that changes what the waiter waits for calls ``kick(cond)`` holding
    ``cond``. :class:`SystemClock` maps these onto ``Condition.wait`` and
    ``Condition.notify``; :class:`FakeClock` wakes waiters only when its time is
    advanced past their deadline, which keeps tests deterministic.
    """

    def now(self) -> datetime:
        """The current wall time, an aware datetime in UTC."""
        ...

    def now_us(self) -> int:
        """The current wall time in microseconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for measuring durations)."""
        ...

    def wait(self, cond: threading.Condition, deadline_us: int | None) -> None:
        """Block on ``cond`` (held by the caller) until kicked or ``deadline_us``.

        May return early; callers re-check their state in a loop.
        """
        ...

    def kick(self, cond: threading.Condition) -> None:
        """Wake the threads waiting on ``cond`` (held by the caller)."""
        ...

    def track(self, source: BusySource) -> None:
        """Tell the clock about work in flight that is not a waiting thread."""
        ...

    def untrack(self, source: BusySource) -> None: ...

    def settled(self) -> None:
        """Called by a tracked source when it becomes idle."""
        ...


class Executor(Protocol):
    """Runs callables somewhere else: a :class:`~django_htask.engine.WorkerPool`, or any
    object with the same ``submit``."""

    def submit(self, fn: Callable[[], object]) -> None: ...
