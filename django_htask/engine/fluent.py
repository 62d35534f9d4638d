"""The human-friendly way to write a schedule (htask's and gocron's fluent layer).

::

    every(2).seconds
    every(5).minutes.not_immediately()
    every().hour.at(":30")
    every().day.at("10:30").in_tz("Asia/Tokyo")
    every().monday.at("08:30:15")
    every(2).weeks.from_(start).until(end)
    once(datetime(2027, 1, 1, 9, tzinfo=tokyo))

Each builder is immutable (every step returns a new one) and is itself usable as a
schedule: it has ``next_after`` and a ``str()`` that :func:`parse_schedule` reads, and
``.schedule`` gives the plain value (:class:`CronSchedule`, :class:`IntervalSchedule`).
Mistakes raise :class:`InvalidSchedule` at once: ``every(0)``, ``.at("25:00")``,
``every(2).monday``.

What each form means:

* ``every(n).seconds / .minutes / .hours`` and ``.days / .weeks`` without ``at``:
  elapsed time (:class:`IntervalSchedule`). A runner runs it once as soon as it is
  added, then every ``n`` units, unless ``.not_immediately()``. With ``.from_(t)``
  the occurrences are ``t, t + n units, ...`` (``.not_immediately()`` drops ``t``).
* ``every().day.at("10:30")``, ``every().monday.at("08:30:15")``: wall time in the
  zone given by ``.in_tz`` (UTC by default), as a cron expression, so the DST rule of
  :class:`CronSchedule` applies. A weekday without ``at`` runs at midnight.
* ``every(n).hours.at(":MM")`` (``n`` divides 24) and ``every(n).minutes.at(":SS")``
  (``n`` divides 60): the given minute of the hour / second of the minute.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, tzinfo
from typing import overload

from .errors import InvalidSchedule
from .schedules import (
    CronSchedule,
    IntervalSchedule,
    OnceSchedule,
    Schedule,
    _instant,
    _zone,
)

__all__ = ["Every", "every", "once"]

_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_CRON_DAYS = {name: name[:3].upper() for name in _WEEKDAYS}
_DAY_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_OF_HOUR = re.compile(r"^:?(\d{2})(?::(\d{2}))?$")
_OF_MINUTE = re.compile(r"^:(\d{2})$")


class _Step:
    """A property of :class:`Every` that sets its unit or weekday (``every(5).minutes``,
    ``every().monday``): read on a builder, it is the next builder."""

    __slots__ = ("_step",)

    def __init__(self, step: Callable[[Every], Every]) -> None:
        self._step = step

    @overload
    def __get__(self, built: None, owner: type[Every]) -> _Step: ...
    @overload
    def __get__(self, built: Every, owner: type[Every]) -> Every: ...
    def __get__(self, built: Every | None, owner: type[Every]) -> _Step | Every:
        return self if built is None else self._step(built)


def _units(unit: str) -> tuple[_Step, _Step]:
    """The singular and the plural property of ``unit`` (``minute``, ``minutes``)."""
    return (
        _Step(lambda built: built._unit(unit, plural=False)),
        _Step(lambda built: built._unit(unit, plural=True)),
    )


def _weekdays(names: tuple[str, ...]) -> tuple[_Step, ...]:
    """The property of each weekday in ``names``."""
    return tuple(_Step(functools.partial(_on_weekday, name=name)) for name in names)


def _on_weekday(built: Every, name: str) -> Every:
    return built._weekday(name)


@dataclass(frozen=True)
class Every:
    """A schedule under construction; see :func:`every`."""

    interval: int = 1
    unit: str | None = None
    weekday: str | None = None
    at_time: tuple[int, int, int] | None = None
    start: datetime | None = None
    end: datetime | None = None
    immediately: bool = True
    zone: str | None = None

    # -- units -----------------------------------------------------------------------
    def _unit(self, unit: str, plural: bool) -> Every:
        if self.unit is not None:
            raise InvalidSchedule(f"the unit is given twice: {self.unit} and {unit}")
        if not plural and self.interval != 1:
            raise InvalidSchedule(
                f"every({self.interval}).{unit} reads wrong; write every({self.interval}).{unit}s"
            )
        return replace(self, unit=unit)

    second, seconds = _units("second")
    minute, minutes = _units("minute")
    hour, hours = _units("hour")
    day, days = _units("day")
    week, weeks = _units("week")

    def _weekday(self, name: str) -> Every:
        if self.interval != 1:
            raise InvalidSchedule(f"every({self.interval}).{name} is not supported; use every()")
        built = self._unit("week", plural=False)
        return replace(built, weekday=name)

    monday, tuesday, wednesday, thursday, friday, saturday, sunday = _weekdays(_WEEKDAYS)

    # -- modifiers -------------------------------------------------------------------
    def at(self, text: str) -> Every:
        """The time of day (``"10:30"``, ``"08:30:15"``) for ``day`` and weekdays, the
        minute of the hour (``":30"``) for ``hours``, the second (``":15"``) for
        ``minutes``."""
        if not isinstance(text, str):
            raise InvalidSchedule(f"at() takes a string such as '10:30', got {text!r}")
        if self.at_time is not None:
            raise InvalidSchedule("at() is given twice")
        unit = self.unit
        if unit == "day" or (unit == "week" and self.weekday is not None):
            if unit == "day" and self.interval != 1:
                raise InvalidSchedule(
                    f"every({self.interval}).days.at() is not supported: cron cannot count "
                    "days across months; use every().day.at() or an interval"
                )
            match = _DAY_TIME.match(text)
            if match is None:
                raise InvalidSchedule(f"at({text!r}): expected 'HH:MM' or 'HH:MM:SS'")
            h, m, s = int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
        elif unit == "hour":
            match = _OF_HOUR.match(text)
            if match is None or not text.startswith(":"):
                raise InvalidSchedule(f"at({text!r}) for hours: expected ':MM' or ':MM:SS'")
            h, m, s = 0, int(match.group(1)), int(match.group(2) or 0)
            if 24 % self.interval:
                raise InvalidSchedule(
                    f"every({self.interval}).hours.at(): {self.interval} does not divide 24"
                )
        elif unit == "minute":
            match = _OF_MINUTE.match(text)
            if match is None:
                raise InvalidSchedule(f"at({text!r}) for minutes: expected ':SS'")
            h, m, s = 0, 0, int(match.group(1))
            if 60 % self.interval:
                raise InvalidSchedule(
                    f"every({self.interval}).minutes.at(): {self.interval} does not divide 60"
                )
        else:
            raise InvalidSchedule(
                f"at({text!r}) applies to a day, a weekday, hours or minutes, "
                f"not to {unit or 'a builder without a unit'}"
            )
        if not (h <= 23 and m <= 59 and s <= 59):
            raise InvalidSchedule(f"at({text!r}): {h:02d}:{m:02d}:{s:02d} is not a time of day")
        return replace(self, at_time=(h, m, s))

    def from_(self, start: datetime) -> Every:
        """No occurrence before ``start`` (aware); an interval counts from it."""
        return replace(self, start=_instant(start, "from_()"))

    def until(self, end: datetime) -> Every:
        """No occurrence after ``end`` (aware)."""
        return replace(self, end=_instant(end, "until()"))

    def not_immediately(self) -> Every:
        """An interval waits one interval before its first run."""
        return replace(self, immediately=False)

    def in_tz(self, zone: str | tzinfo) -> Every:
        """The zone of ``at`` times (IANA name); intervals are elapsed time anyway."""
        key = _zone(zone).key
        return replace(self, zone=key)

    # -- the value -------------------------------------------------------------------
    @property
    def schedule(self) -> Schedule:
        """The schedule value this builder stands for."""
        unit = self.unit
        if unit is None:
            raise InvalidSchedule(
                f"every({self.interval}) needs a unit: .seconds, .minutes, .day, .monday …"
            )
        if self.at_time is None and self.weekday is None:
            seconds = self.interval * _SECONDS[unit]
            start = self.start
            if start is not None and not self.immediately:
                start += timedelta(seconds=seconds)
            return IntervalSchedule(
                seconds, start=start, end=self.end, immediately=self.immediately
            )
        h, m, s = self.at_time or (0, 0, 0)
        if unit == "minute":
            minutes = "*" if self.interval == 1 else f"*/{self.interval}"
            fields = [str(s), minutes, "*", "*", "*", "*"]
        elif unit == "hour":
            hours = "*" if self.interval == 1 else f"*/{self.interval}"
            fields = [str(m), hours, "*", "*", "*"]
            if s:
                fields.insert(0, str(s))
        else:
            dow = "*" if self.weekday is None else _CRON_DAYS[self.weekday]
            fields = [str(m), str(h), "*", "*", dow]
            if s:
                fields.insert(0, str(s))
        return CronSchedule(" ".join(fields), self.zone, start=self.start, end=self.end)

    def next_after(self, dt: datetime) -> datetime | None:
        """``self.schedule.next_after(dt)``."""
        return self.schedule.next_after(dt)

    def __str__(self) -> str:
        return str(self.schedule)


def every(interval: int = 1) -> Every:
    """Start a fluent schedule: ``every(5).minutes``, ``every().day.at("10:30")``."""
    if isinstance(interval, bool) or not isinstance(interval, int):
        raise InvalidSchedule(f"every() takes a whole number, got {interval!r}")
    if interval < 1:
        raise InvalidSchedule(f"every() takes a number of at least 1, got {interval!r}")
    return Every(interval=interval)


def once(at: datetime, tz: str | tzinfo | None = None) -> OnceSchedule:
    """A schedule that fires once, at ``at`` (a naive ``at`` is read in ``tz``, UTC by
    default)."""
    return OnceSchedule(at, tz)
