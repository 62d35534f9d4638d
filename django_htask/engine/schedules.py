"""Schedules: values that say when a job runs next.

A schedule is an immutable value with ``next_after(dt) -> datetime | None`` (an aware
datetime in, an aware UTC datetime out, ``None`` once it will never fire again) and a
canonical ``str()`` that :func:`parse_schedule` reads back to an equal value.

* :class:`CronSchedule`: a cron expression evaluated in an IANA zone, with the DST rule
  of Vixie/ISC cron (see :meth:`CronSchedule.next_after`).
* :class:`IntervalSchedule`: elapsed time, unaffected by DST.
* :class:`OnceSchedule`: one instant.
* :class:`SolarSchedule`: a solar event (sunrise, sunset, a dawn …) at a place, by the
  optional astral library.

Text forms read by :func:`parse_schedule`::

    30 4 * * *                     5 fields: minute hour day-of-month month day-of-week
    */10 * * * * *                 6 fields, seconds first
    0 9 * JAN-MAR MON-FRI          names, ranges, lists, steps, ``?``
    @yearly @annually @monthly @weekly @daily @midnight @hourly
    @every 90s   @every 5m   @every 1h30m   @every 500ms   @every 14d
    CRON_TZ=Asia/Tokyo 30 4 * * *  (or TZ=Asia/Tokyo)
    @once 2027-01-01T09:00+09:00
    @solar sunset 48.85 2.35       event latitude longitude (needs astral)

and optional prefixes ``FROM=<iso>`` and ``UNTIL=<iso>`` (no occurrence before / after
these instants), and, after ``@every``, ``anchor=<iso>``, ``jitter=<duration>`` and
``immediately`` (see :class:`IntervalSchedule`).
"""

from __future__ import annotations

import functools
import math
import re
from datetime import UTC, datetime, timedelta, tzinfo
from typing import SupportsFloat, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .cron_expression import (
    DESCRIPTORS,
    CronExpression,
    compile_cron,
    split_fields,
    unknown_descriptor,
)
from .errors import InvalidSchedule
from .solar import EVENTS, event_on, local_mean_time, require_astral

__all__ = [
    "CronSchedule",
    "IntervalSchedule",
    "OnceSchedule",
    "Schedule",
    "SolarSchedule",
    "describe",
    "format_duration",
    "parse_duration",
    "parse_schedule",
]

_UTC_ZONE = ZoneInfo("UTC")
_ONE_US = timedelta(microseconds=1)
_ONE_S = timedelta(seconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_TEXT = 2000


# -- zones and instants ---------------------------------------------------------------
@functools.lru_cache(maxsize=1024)
def _zone_by_name(name: str) -> ZoneInfo:
    if not name or name != name.strip():
        raise InvalidSchedule(f"unknown time zone {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule(f"unknown time zone {name!r}") from None


def _zone(tz: object) -> ZoneInfo:
    """``tz`` (a name, a ZoneInfo, UTC or None) as a ZoneInfo; None means UTC."""
    if tz is None or tz is UTC:
        return _UTC_ZONE
    if isinstance(tz, ZoneInfo):
        if tz.key is None:
            raise InvalidSchedule(f"time zone {tz!r} has no IANA name; give one by name")
        return _zone_by_name(tz.key)
    if isinstance(tz, str):
        return _zone_by_name(tz)
    raise InvalidSchedule(f"expected a time zone name or ZoneInfo, got {tz!r}")


def _aware(dt: object, what: str) -> datetime:
    if not isinstance(dt, datetime):
        raise TypeError(f"{what} must be a datetime, got {dt!r}")
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"{what} must be an aware datetime (with a time zone), got {dt!r}")
    return dt


def _instant(dt: object, what: str) -> datetime:
    """An aware datetime as UTC (raises naming ``what`` when it is naive)."""
    return _aware(dt, what).astimezone(UTC)


def _iso(dt: datetime) -> str:
    return dt.isoformat()


def _parse_instant(text: str, zone: ZoneInfo, what: str) -> datetime:
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidSchedule(f"{what} {text!r} is not an ISO 8601 date and time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=zone)
    return dt


# -- durations ------------------------------------------------------------------------
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)", re.ASCII)


def parse_duration(text: str) -> float:
    """``"1h30m"``, ``"90s"``, ``"500ms"``, ``"14d"`` as seconds (raises InvalidSchedule)."""
    if not isinstance(text, str) or not text:
        raise InvalidSchedule(f"expected a duration such as '5m' or '1h30m', got {text!r}")
    pos = 0
    total = 0.0
    seen: set[str] = set()
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        number, unit = match.groups()
        if unit in seen:
            raise InvalidSchedule(f"duration {text!r} repeats the unit {unit!r}")
        seen.add(unit)
        total += float(number) * _UNITS[unit]
        pos = match.end()
    if pos != len(text):
        raise InvalidSchedule(
            f"duration {text!r} is not valid at {text[pos:]!r}; "
            "expected numbers with units d, h, m, s or ms, such as '1h30m'"
        )
    return total


def format_duration(seconds: float) -> str:
    """Seconds in the canonical duration text (``5400 -> "1h30m"``)."""
    ms = round(seconds * 1000)
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    if ms:
        parts.append(f"{ms}ms")
    return "".join(parts)


def _check_seconds(value: object, what: str, *, allow_zero: bool) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSchedule(f"{what} must be a number of seconds, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        need = "zero or more" if allow_zero else "more than zero"
        raise InvalidSchedule(f"{what} must be {need} seconds, got {value!r}")
    ms = round(seconds * 1000)
    if abs(ms / 1000 - seconds) > 1e-9 * max(1.0, seconds):
        raise InvalidSchedule(f"{what} must be a whole number of milliseconds, got {value!r}")
    if ms > 100 * 366 * 86_400_000:
        raise InvalidSchedule(f"{what} of {value!r} seconds is more than 100 years")
    return ms / 1000


# -- the schedules --------------------------------------------------------------------
class _Bounded:
    """What every schedule shares: optional ``start`` and ``end`` instants (inclusive)."""

    __slots__ = ("end", "start")

    start: datetime | None
    end: datetime | None

    def _set_bounds(self, start: datetime | None, end: datetime | None) -> None:
        start = None if start is None else _instant(start, "start")
        end = None if end is None else _instant(end, "end")
        if start is not None and end is not None and end < start:
            raise InvalidSchedule(f"end {end.isoformat()} is before start {start.isoformat()}")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)

    def _bounds_prefix(self) -> str:
        parts = []
        if self.start is not None:
            parts.append(f"FROM={_iso(self.start)} ")
        if self.end is not None:
            parts.append(f"UNTIL={_iso(self.end)} ")
        return "".join(parts)

    def _clip(self, found: datetime | None) -> datetime | None:
        if found is None or (self.end is not None and found > self.end):
            return None
        return found

    def _floor(self, dt: datetime) -> datetime:
        # The instant to search after so that nothing before ``start`` is returned.
        if self.start is not None and dt < self.start:
            return self.start - _ONE_US
        return dt

    def _key(self) -> tuple[object, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Bounded)
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._key()))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")


class CronSchedule(_Bounded):
    """A cron expression evaluated in an IANA time zone (UTC unless ``tz`` is given).

    ``expression`` is 5 fields, 6 fields with seconds first, or a descriptor such as
    ``@daily``. Compiled expressions are shared: 100k schedules over 100 distinct
    expressions hold 100 compiled tables.

    The DST rule is Vixie/ISC cron's. When the hour field is ``*`` the schedule runs by
    the clock: wall times in a spring-forward gap do not exist (nothing runs for them),
    and in a repeated fall-back hour it runs in both passes. Any other hour field gets
    the special rule: occurrences whose wall time falls in a gap run once, at the first
    valid instant after the gap, and in a repeated hour only the first pass runs.
    """

    __slots__ = ("_fixed", "cron", "tz")

    cron: CronExpression
    tz: ZoneInfo
    _fixed: timedelta | None

    def __init__(
        self,
        expression: str | CronExpression,
        tz: str | tzinfo | None = None,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> None:
        cron = expression if isinstance(expression, CronExpression) else compile_cron(expression)
        zone = _zone(tz)
        object.__setattr__(self, "cron", cron)
        object.__setattr__(self, "tz", zone)
        object.__setattr__(self, "_fixed", _fixed_offset(zone))
        self._set_bounds(start, end)

    @property
    def expression(self) -> str:
        """The canonical cron text (without the zone)."""
        return self.cron.text

    def next_after(self, dt: datetime) -> datetime | None:
        """The first occurrence strictly after ``dt`` (aware), as UTC; None if never."""
        after = self._floor(_instant(dt, "dt"))
        try:
            if self._fixed is not None:
                found = self._next_fixed(after, self._fixed)
            elif self.cron.hour_is_star:
                found = self._next_by_clock(after)
            else:
                found = self._next_by_wall(after)
        except OverflowError:
            return None
        return self._clip(found)

    # -- evaluation ------------------------------------------------------------------
    def _next_fixed(self, after: datetime, offset: timedelta) -> datetime | None:
        wall = self.cron.next_after((after + offset).replace(tzinfo=None))
        return None if wall is None else (wall - offset).replace(tzinfo=UTC)

    def _next_by_wall(self, after: datetime) -> datetime | None:
        """The special rule: gap occurrences run at the gap's end, repeats run once."""
        zone, cron = self.tz, self.cron
        local = after.astimezone(zone)
        w0 = local.replace(tzinfo=None)
        if local.fold == 1 and _kind(w0, zone) == _REPEATED:
            # In the second pass: every first-pass instant of this hour is behind us.
            wall = cron.next_at_or_after(_repeat_end(after, zone))
        else:
            wall = cron.next_after(w0)
        if wall is None:
            return None
        kind = _kind(wall, zone)
        if kind == _GAP:
            return _gap_end(wall, zone)
        return wall.replace(tzinfo=zone, fold=0).astimezone(UTC)

    def _next_by_clock(self, after: datetime) -> datetime | None:
        """By the clock: the first real instant after ``after`` whose wall time matches."""
        zone, cron = self.tz, self.cron
        local = after.astimezone(zone)
        w0 = local.replace(tzinfo=None)
        wall: datetime | None
        if local.fold == 0 and _kind(w0, zone) == _REPEATED:
            # In the first pass of a repeated hour: the rest of this pass, then the
            # whole second pass, come before the wall times after the hour.
            end = _repeat_end(after, zone)  # first wall time after the repeated hour
            begin = _repeat_begin(after, zone)
            wall = cron.next_after(w0)
            if wall is not None and wall < end:
                return wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
            wall = cron.next_at_or_after(begin)
            if wall is not None and wall < end:
                return wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
            wall = cron.next_at_or_after(end)
        else:
            wall = cron.next_after(w0)
        while wall is not None:
            kind = _kind(wall, zone)
            if kind == _GAP:
                # This wall time does not exist: go on from the end of the gap.
                end_local = _gap_end(wall, zone).astimezone(zone).replace(tzinfo=None)
                wall = cron.next_at_or_after(end_local)
                continue
            found = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
            if found <= after:  # we are in the second pass: its instant is the later one
                found = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
            return found
        return None

    # -- value -----------------------------------------------------------------------
    def __str__(self) -> str:
        zone = "" if self.tz.key == "UTC" else f"CRON_TZ={self.tz.key} "
        return f"{zone}{self._bounds_prefix()}{self.cron.text}"

    def __repr__(self) -> str:
        return f"CronSchedule({str(self)!r})"

    def _key(self) -> tuple[object, ...]:
        return (self.cron.text, self.tz.key, self.start, self.end)


class IntervalSchedule(_Bounded):
    """Every ``seconds`` of elapsed time (DST does not change it).

    Without an ``anchor`` (or ``start``) the interval counts from the previous
    occurrence: ``next_after(t) == t + seconds``; a runner that computes the next run
    from the *scheduled* time therefore never drifts. With an ``anchor``, occurrences
    are ``anchor + k * seconds`` for every integer ``k``; with only a ``start``, they
    are ``start + k * seconds`` for ``k >= 0``.

    ``jitter`` (seconds, less than ``seconds``) delays each occurrence by a
    pseudo-random amount in ``[0, jitter)``, derived from the occurrence itself, so that
    ``next_after`` stays a pure function and several nodes agree on it.

    ``immediately`` asks a runner to run a new entry once as soon as it is added (it
    has no effect on ``next_after`` and none when there is a ``start`` or ``anchor``).
    """

    __slots__ = ("_step", "anchor", "immediately", "jitter", "seconds")

    seconds: float
    anchor: datetime | None
    jitter: float
    immediately: bool
    _step: timedelta

    def __init__(
        self,
        seconds: float | timedelta,
        anchor: datetime | None = None,
        jitter: float | timedelta = 0,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        immediately: bool = False,
    ) -> None:
        value = _check_seconds(seconds, "interval", allow_zero=False)
        spread = _check_seconds(jitter, "jitter", allow_zero=True)
        if spread >= value:
            raise InvalidSchedule(
                f"jitter of {format_duration(spread)} must be shorter than the interval "
                f"of {format_duration(value)}"
            )
        object.__setattr__(self, "seconds", value)
        object.__setattr__(self, "jitter", spread)
        object.__setattr__(self, "_step", timedelta(milliseconds=round(value * 1000)))
        object.__setattr__(self, "anchor", None if anchor is None else _instant(anchor, "anchor"))
        self._set_bounds(start, end)
        free = self.anchor is None and self.start is None
        object.__setattr__(self, "immediately", bool(immediately) and free)

    def next_after(self, dt: datetime) -> datetime | None:
        """The first occurrence strictly after ``dt`` (aware), as UTC; None if never."""
        after = _instant(dt, "dt")
        try:
            origin = self.anchor if self.anchor is not None else self.start
            if origin is None:
                found = after + self._step + self._jitter_for(after)
            else:
                found = self._next_on_grid(self._floor(after), origin)
        except OverflowError:
            return None
        return self._clip(found)

    def next_in_sequence(self, occurrence: datetime, dt: datetime) -> datetime | None:
        """The first occurrence strictly after ``dt`` of the sequence that goes through
        ``occurrence`` (an earlier one). Without an anchor, a start or jitter the
        interval counts from the previous occurrence, so this is ``occurrence`` plus a
        whole number of intervals, where ``next_after(dt)`` would start a new sequence
        at ``dt``: a runner jumping over a backlog keeps the schedule's times."""
        if self.anchor is not None or self.start is not None or self.jitter:
            return self.next_after(dt)
        after, origin = _instant(dt, "dt"), _instant(occurrence, "occurrence")
        if after < origin:
            return origin
        try:
            found = self._next_on_grid(after, origin)
        except OverflowError:
            return None
        return self._clip(found)

    def _next_on_grid(self, after: datetime, origin: datetime) -> datetime:
        step = self._step
        k = (after - origin) // step
        if self.start is not None and self.anchor is None:
            k = max(k, 0)
        for i in (k, k + 1):
            found = origin + i * step + self._jitter_for(origin + i * step)
            if found > after:
                return found
        raise AssertionError("unreachable: occurrence k + 1 is always after")

    def _jitter_for(self, base: datetime) -> timedelta:
        if not self.jitter:
            return timedelta(0)
        spread_ms = round(self.jitter * 1000)
        key = (base - _EPOCH) // _ONE_US
        return timedelta(milliseconds=_mix64(key) % spread_ms)

    def __str__(self) -> str:
        text = f"{self._bounds_prefix()}@every {format_duration(self.seconds)}"
        if self.anchor is not None:
            text += f" anchor={_iso(self.anchor)}"
        if self.jitter:
            text += f" jitter={format_duration(self.jitter)}"
        if self.immediately:
            text += " immediately"
        return text

    def __repr__(self) -> str:
        return f"IntervalSchedule({str(self)!r})"

    def _key(self) -> tuple[object, ...]:
        return (self.seconds, self.anchor, self.jitter, self.immediately, self.start, self.end)


class OnceSchedule(_Bounded):
    """One instant ``at`` (aware; a naive ``at`` is read in ``tz``, UTC by default)."""

    __slots__ = ("at",)

    at: datetime

    def __init__(self, at: datetime, tz: str | tzinfo | None = None) -> None:
        if not isinstance(at, datetime):
            raise InvalidSchedule(f"a one-off schedule needs a datetime, got {at!r}")
        if at.tzinfo is None:
            at = at.replace(tzinfo=_zone(tz))
        object.__setattr__(self, "at", at)
        self._set_bounds(None, None)

    def next_after(self, dt: datetime) -> datetime | None:
        """``at`` (as UTC) if it is after ``dt``, else None."""
        at = self.at.astimezone(UTC)
        return at if at > _instant(dt, "dt") else None

    def __str__(self) -> str:
        return f"@once {_iso(self.at)}"

    def __repr__(self) -> str:
        return f"OnceSchedule({str(self)!r})"

    def _key(self) -> tuple[object, ...]:
        # The instant as UTC: an aware datetime in a repeated wall hour never equals
        # one in another zone (PEP 495), so ``self.at`` itself would not round-trip.
        return (self.at.astimezone(UTC), self.at.utcoffset())


class SolarSchedule(_Bounded):
    """A solar event at a place, every day it happens.

    ``event`` is one of django-celery-beat's names (``dawn_astronomical``,
    ``dawn_nautical``, ``dawn_civil``, ``sunrise``, ``solar_noon``, ``sunset``,
    ``dusk_civil``, ``dusk_nautical``, ``dusk_astronomical``); ``latitude`` is north
    positive (-90 to 90) and ``longitude`` east positive (-180 to 180). The times are
    the astral library's (an optional dependency: ``pip install django-htask[solar]``).
    A day on which the event does not happen (the polar day or night) is skipped.
    """

    __slots__ = ("event", "latitude", "longitude")

    event: str
    latitude: float
    longitude: float

    #: Days searched for the next event before giving up (more than a year: at
    #: the poles some events happen once a year).
    SEARCH_DAYS = 400

    def __init__(
        self,
        event: str,
        latitude: SupportsFloat | str,
        longitude: SupportsFloat | str,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> None:
        if not isinstance(event, str) or event.lower() not in EVENTS:
            raise InvalidSchedule(
                f"unknown solar event {event!r}; expected one of {', '.join(EVENTS)}"
            )
        lat = _coordinate(latitude, "latitude", 90)
        lon = _coordinate(longitude, "longitude", 180)
        require_astral()
        object.__setattr__(self, "event", event.lower())
        object.__setattr__(self, "latitude", lat)
        object.__setattr__(self, "longitude", lon)
        self._set_bounds(start, end)

    def next_after(self, dt: datetime) -> datetime | None:
        """The first event strictly after ``dt`` (aware), as UTC; None if never."""
        after = self._floor(_instant(dt, "dt"))
        if self.end is not None and after >= self.end:
            return None
        # Local mean time days, in order: each holds at most one event, and a later
        # day's event is later (see solar.local_mean_time).
        day = after.astimezone(local_mean_time(self.longitude)).date() - timedelta(days=1)
        try:
            for _ in range(self.SEARCH_DAYS):
                found = event_on(self.event, self.latitude, self.longitude, day)
                if found is not None and found > after:
                    return self._clip(found)
                day += timedelta(days=1)
        except OverflowError:
            return None
        return None

    def __str__(self) -> str:
        return (
            f"{self._bounds_prefix()}@solar {self.event} "
            f"{_format_coordinate(self.latitude)} {_format_coordinate(self.longitude)}"
        )

    def __repr__(self) -> str:
        return f"SolarSchedule({str(self)!r})"

    def _key(self) -> tuple[object, ...]:
        return (self.event, self.latitude, self.longitude, self.start, self.end)


def _coordinate(value: SupportsFloat | str, what: str, limit: int) -> float:
    if isinstance(value, bool):
        raise InvalidSchedule(f"{what} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidSchedule(f"{what} {value!r} is not a number") from None
    if not math.isfinite(number) or not -limit <= number <= limit:
        raise InvalidSchedule(f"{what} must be from -{limit} to {limit} degrees, got {value!r}")
    return number + 0.0  # -0.0 is 0.0


def _format_coordinate(value: float) -> str:
    text = repr(value)
    return text.removesuffix(".0")


Schedule: TypeAlias = CronSchedule | IntervalSchedule | OnceSchedule | SolarSchedule


# -- DST helpers ----------------------------------------------------------------------
_NORMAL, _GAP, _REPEATED = 0, 1, 2


def _kind(wall: datetime, zone: ZoneInfo) -> int:
    """Whether the naive wall time is normal, in a gap, or in a repeated hour."""
    off0 = wall.replace(tzinfo=zone, fold=0).utcoffset()
    off1 = wall.replace(tzinfo=zone, fold=1).utcoffset()
    if off0 == off1:
        return _NORMAL
    assert off0 is not None
    assert off1 is not None
    return _REPEATED if off0 > off1 else _GAP


def _offset_at(instant: datetime, zone: ZoneInfo) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _transition(lo: datetime, hi: datetime, zone: ZoneInfo) -> datetime:
    """The first instant in ``(lo, hi]`` (UTC, whole seconds apart) whose offset differs
    from the offset at ``lo``; ``hi``'s offset must differ."""
    before = _offset_at(lo, zone)
    lo_s, hi_s = 0, int((hi - lo) // _ONE_S)
    while hi_s - lo_s > 1:
        mid = (lo_s + hi_s) // 2
        if _offset_at(lo + mid * _ONE_S, zone) == before:
            lo_s = mid
        else:
            hi_s = mid
    return lo + hi_s * _ONE_S


def _gap_end(wall: datetime, zone: ZoneInfo) -> datetime:
    """For a wall time in a gap: the transition instant (the first valid one after it)."""
    early = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)  # before the transition
    late = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)  # after it
    early = early.replace(microsecond=0)
    return _transition(early, late, zone)


def _repeat_bounds(instant: datetime, zone: ZoneInfo) -> tuple[datetime, timedelta]:
    """For an instant in a repeated hour: the transition instant and the size of the shift."""
    local = instant.astimezone(zone)
    wall = local.replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0)
    second = wall.replace(tzinfo=zone, fold=1)
    off0, off1 = first.utcoffset(), second.utcoffset()
    assert off0 is not None
    assert off1 is not None
    shift = off0 - off1
    lo = first.astimezone(UTC).replace(microsecond=0)
    hi = second.astimezone(UTC).replace(microsecond=0)
    return _transition(lo, hi, zone), shift


def _repeat_end(instant: datetime, zone: ZoneInfo) -> datetime:
    """The first wall time after the repeated hour that ``instant`` is in (naive)."""
    transition, shift = _repeat_bounds(instant, zone)
    return transition.astimezone(zone).replace(tzinfo=None) + shift


def _repeat_begin(instant: datetime, zone: ZoneInfo) -> datetime:
    """The first wall time of the repeated hour that ``instant`` is in (naive)."""
    transition, _shift = _repeat_bounds(instant, zone)
    return transition.astimezone(zone).replace(tzinfo=None)


@functools.lru_cache(maxsize=1024)
def _fixed_offset(zone: ZoneInfo) -> timedelta | None:
    """The zone's offset if it has never changed since 1970 and never will (UTC, Etc/*)."""
    if zone.key == "UTC" or zone.key.startswith("Etc/"):
        return zone.utcoffset(datetime(2000, 1, 1))
    return None


def _mix64(value: int) -> int:
    # splitmix64: a fast, well-spread hash of an integer.
    z = (value + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


# -- parsing --------------------------------------------------------------------------
_PREFIX = re.compile(r"^([A-Za-z_]+)=(\S*)$")
#: The ``@`` words :func:`parse_schedule` reads: its own, then cron's descriptors.
_WORDS = ("@every", "@once", "@solar", *DESCRIPTORS)


def parse_schedule(text: str, tz: str | tzinfo | None = None) -> Schedule:
    """Read a schedule from its text (see the module docstring for the forms).

    ``tz`` is the zone for cron expressions and naive dates when the text has no
    ``CRON_TZ=``/``TZ=`` prefix (a prefix wins). Raises :class:`InvalidSchedule`
    naming the bad part. Parsed values are cached per ``(text, zone)``.
    """
    if not isinstance(text, str):
        raise InvalidSchedule(f"a schedule must be text, got {text!r}")
    if isinstance(tz, str) or tz is None:
        return _parse_cached(text, tz or None)
    return _parse(text, _zone(tz))


@functools.lru_cache(maxsize=8192)
def _parse_cached(text: str, tz: str | None) -> Schedule:
    return _parse(text, _zone(tz))


def _parse(text: str, default_zone: ZoneInfo) -> Schedule:
    if len(text) > _MAX_TEXT:
        raise InvalidSchedule(f"schedule text is too long ({len(text)} characters)")
    words = split_fields(text)
    if not words:
        raise InvalidSchedule("empty schedule")
    zone = default_zone
    start_text: str | None = None
    end_text: str | None = None
    seen: set[str] = set()
    if words[0].upper() in ("CRON_TZ", "TZ", "FROM", "UNTIL"):
        raise InvalidSchedule(f"malformed prefix {words[0]!r}; expected {words[0]}=value")
    while words and "=" in words[0] and not words[0].startswith("@"):
        word = words.pop(0)
        match = _PREFIX.match(word)
        if match is None:
            raise InvalidSchedule(f"malformed prefix {word!r}; expected NAME=value")
        key, value = match.group(1).upper(), match.group(2)
        if key in ("CRON_TZ", "TZ"):
            key = "CRON_TZ"
        if key in seen:
            raise InvalidSchedule(f"prefix {key}= is given twice in {text!r}")
        seen.add(key)
        if not value:
            raise InvalidSchedule(f"malformed prefix {word!r}: no value after '='")
        if key == "CRON_TZ":
            zone = _zone_by_name(value)
        elif key == "FROM":
            start_text = value
        elif key == "UNTIL":
            end_text = value
        else:
            raise InvalidSchedule(
                f"unknown prefix {word!r}; expected CRON_TZ=, TZ=, FROM= or UNTIL="
            )
    if not words:
        raise InvalidSchedule(f"schedule {text!r} has prefixes but no schedule after them")
    start = None if start_text is None else _parse_instant(start_text, zone, "FROM")
    end = None if end_text is None else _parse_instant(end_text, zone, "UNTIL")
    head = words[0].lower()
    if head.startswith("@") and head not in _WORDS:
        raise unknown_descriptor(words[0], _WORDS)
    if head == "@once":
        if start is not None or end is not None:
            raise InvalidSchedule("FROM= and UNTIL= do not apply to @once")
        if len(words) != 2:
            raise InvalidSchedule(
                f"@once takes one ISO 8601 date and time, such as "
                f"'@once 2027-01-01T09:00+09:00'; got {text!r}"
            )
        return OnceSchedule(_parse_instant(words[1], zone, "@once time"), zone)
    if head == "@every":
        return _parse_every(words[1:], text, zone, start, end)
    if head == "@solar":
        if len(words) != 4:
            raise InvalidSchedule(
                "@solar takes an event, a latitude and a longitude, such as "
                f"'@solar sunset 48.85 2.35'; got {text!r}"
            )
        return SolarSchedule(words[1], words[2], words[3], start=start, end=end)
    return CronSchedule(" ".join(words), zone, start=start, end=end)


def _parse_every(
    words: list[str],
    text: str,
    zone: ZoneInfo,
    start: datetime | None,
    end: datetime | None,
) -> IntervalSchedule:
    if not words:
        raise InvalidSchedule(f"@every needs a duration, such as '@every 5m'; got {text!r}")
    seconds = parse_duration(words[0])
    if seconds <= 0:
        raise InvalidSchedule(f"@every needs a duration of more than zero, got {words[0]!r}")
    anchor: datetime | None = None
    jitter = 0.0
    immediately = False
    for word in words[1:]:
        name, eq, value = word.partition("=")
        name = name.lower()
        if name == "immediately" and not eq:
            immediately = True
        elif name == "anchor" and value:
            anchor = _parse_instant(value, zone, "anchor")
        elif name == "jitter" and value:
            jitter = parse_duration(value)
        else:
            raise InvalidSchedule(
                f"unknown @every option {word!r}; expected anchor=<iso>, jitter=<duration> "
                "or immediately"
            )
    return IntervalSchedule(seconds, anchor, jitter, start=start, end=end, immediately=immediately)


# -- descriptions ---------------------------------------------------------------------
def describe(schedule: object) -> str:
    """A short English description for admins, e.g. ``"every day at 04:30 (Asia/Tokyo)"``.

    Cron text is described by the ``cron-descriptor`` library; ``schedule`` may also be
    a schedule's text.
    """
    if isinstance(schedule, str):
        schedule = parse_schedule(schedule)
    if isinstance(schedule, CronSchedule):
        text = f"{_describe_cron(schedule.cron)} ({schedule.tz.key})"
    elif isinstance(schedule, IntervalSchedule):
        text = f"every {_describe_seconds(schedule.seconds)}"
        if schedule.anchor is not None:
            text += f" from {schedule.anchor.isoformat()}"
        if schedule.jitter:
            text += f" (up to {_describe_seconds(schedule.jitter)} later)"
    elif isinstance(schedule, OnceSchedule):
        return f"once at {schedule.at.isoformat()}"
    elif isinstance(schedule, SolarSchedule):
        text = (
            f"every day at {EVENTS[schedule.event]} (latitude "
            f"{_format_coordinate(schedule.latitude)}, longitude "
            f"{_format_coordinate(schedule.longitude)})"
        )
    else:
        raise TypeError(f"expected a schedule, got {schedule!r}")
    if schedule.start is not None:
        text += f", from {schedule.start.isoformat()}"
    if schedule.end is not None:
        text += f", until {schedule.end.isoformat()}"
    return text


@functools.lru_cache(maxsize=1024)
def _describe_cron(cron: CronExpression) -> str:
    from cron_descriptor import ExpressionDescriptor, Options  # noqa: PLC0415

    options = Options()
    options.use_24hour_time_format = True
    options.verbose = True
    try:
        text = str(ExpressionDescriptor(" ".join(cron.fields), options).get_description())
    except Exception:  # cron-descriptor does not know every croniter form
        return f"cron {cron.text}"
    # cron-descriptor 1.x says "At 08:30, every day, only on Monday" where 2.x says
    # "At 08:30, only on Monday": the same sentence from either.
    text = text.replace(", every day, ", ", ")
    for suffix in (", every day", ", every hour", ", every minute"):
        text = text.removesuffix(suffix)
    match = re.fullmatch(r"At (\d\d:\d\d(?::\d\d)?)", text)
    if match and cron.fields[-3:] == ("*", "*", "*"):
        return f"every day at {match.group(1)}"
    match = re.fullmatch(r"At (\d\d:\d\d(?::\d\d)?), only on (\w+)", text)
    if match:
        return f"every {match.group(2)} at {match.group(1)}"
    return text[:1].lower() + text[1:]


def _describe_seconds(seconds: float) -> str:
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return unit if count == 1 else f"{count} {unit}s"
    if seconds.is_integer():
        count = int(seconds)
        return "second" if count == 1 else f"{count} seconds"
    return format_duration(seconds)
