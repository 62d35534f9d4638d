"""The clock the Django layer reads: the engine's :class:`SystemClock` unless a test
swaps in a :class:`~django_htask.engine.FakeClock` with :func:`use_clock`.

``schedule()``, ``Schedule.save()`` and ``runscheduler`` all read the time here, so a
test that drives a fake clock sees one consistent time everywhere.

:func:`stamp` writes an instant for people, as the admin, a task's name and a
schedule's preview show it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime, tzinfo

from django_htask.engine import Clock, SystemClock

__all__ = ["TIME_FORMAT", "get_clock", "now", "stamp", "use_clock"]

#: Seconds and the zone's abbreviation: ``2030-01-01 22:36:05 CET``.
TIME_FORMAT = "%Y-%m-%d %H:%M:%S %Z"

_clock: Clock = SystemClock()


def get_clock() -> Clock:
    return _clock


def now() -> datetime:
    """The current time (aware, UTC)."""
    return _clock.now()


@contextlib.contextmanager
def use_clock(clock: Clock) -> Iterator[Clock]:
    """Read the time from ``clock`` inside the block (tests)."""
    global _clock  # noqa: PLW0603
    previous, _clock = _clock, clock
    try:
        yield clock
    finally:
        _clock = previous


def stamp(at: datetime, zone: tzinfo) -> str:
    """``at`` in ``zone``, to the second, with the zone's abbreviation."""
    return at.astimezone(zone).strftime(TIME_FORMAT)
