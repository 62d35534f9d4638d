"""When a one-off task is due: ``at`` or ``delay`` checked against now and
:data:`MAX_DELAY` (for :func:`~django_htask.api.schedule`,
:func:`~django_htask.scheduled.reschedule` and the django.tasks backend)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from . import clock

__all__ = ["MAX_DELAY", "due_time"]


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
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = float(delay)
    else:
        raise TypeError(f"delay must be seconds or a timedelta, got {delay!r}")
    if not 0 <= seconds < math.inf:
        raise ValueError(f"delay must be >= 0 and finite, got {delay!r}")
    if seconds > MAX_DELAY.total_seconds():
        raise ValueError(
            f"delay must be at most 100 years ({MAX_DELAY.total_seconds():.0f} seconds), "
            f"got {delay!r}"
        )
    return now + timedelta(seconds=seconds)
