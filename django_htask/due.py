"""When a one-off task is due: ``at`` or ``delay`` checked against now and
:data:`MAX_DELAY` (for :func:`~django_htask.api.schedule`,
:func:`~django_htask.scheduled.reschedule` and the django.tasks backend), and a
:class:`~django_htask.exceptions.Snooze`'s seconds within the same bound."""

from __future__ import annotations

import math
import sys
from datetime import datetime, timedelta

from . import clock
from .engine.errors import short_repr

__all__ = ["MAX_DELAY", "due_time", "seconds_of"]


#: The furthest ahead a one-off task may be scheduled: 100 years (of 365.25 days).
#: Anything later is almost always a unit mistake, and stays far from ``datetime.max``.
MAX_DELAY = timedelta(days=36525)


def due_time(at: datetime | None, delay: float | timedelta | None) -> datetime:
    """When a task given ``at`` or ``delay`` runs; ValueError naming the bad argument
    (a missing zone, a negative delay, or more than :data:`MAX_DELAY` ahead)."""
    if at is not None and delay is not None:
        raise ValueError(f"give at or delay, not both (at={at!r}, delay={delay!r})")
    now = clock.now()
    if at is not None:
        if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
            raise ValueError(f"at must be an aware datetime, got {at!r}")
        latest = now + MAX_DELAY
        if at > latest:
            raise ValueError(
                f"at must be at most 100 years from now (no later than "
                f"{latest.isoformat(timespec='seconds')}), got {at!r}"
            )
        return at
    if delay is None:
        return now
    return now + timedelta(seconds=seconds_of(delay, "delay"))


def seconds_of(value: object, what: str) -> float:
    """``value``, a number of seconds or a timedelta, as seconds: from 0 to
    :data:`MAX_DELAY`. TypeError or ValueError saying ``what`` it is and naming it
    otherwise (not a number, negative, NaN, infinite, or more than 100 years; an int
    too large for a float is more than 100 years)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int past a float's range: the largest float, or its negative
            seconds = -sys.float_info.max if value < 0 else sys.float_info.max
    else:
        raise TypeError(f"{what} must be seconds or a timedelta, got {short_repr(value)}")
    if not 0 <= seconds < math.inf:
        raise ValueError(f"{what} must be >= 0 and finite, got {short_repr(value)}")
    if seconds > MAX_DELAY.total_seconds():
        raise ValueError(
            f"{what} must be at most 100 years ({MAX_DELAY.total_seconds():.0f} seconds), "
            f"got {short_repr(value)}"
        )
    return seconds
