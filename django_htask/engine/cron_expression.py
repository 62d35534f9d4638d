"""Cron expressions: parsed and validated once, then evaluated fast in wall time.

:func:`compile_cron` turns the body of a cron schedule (5 fields, 6 fields with seconds
first, or a descriptor such as ``@daily``) into a :class:`CronExpression`. The text is
checked field by field so an error names the bad part, expanded by croniter (names,
ranges, steps, ``?``), and checked for an expression that can never fire.

A :class:`CronExpression` knows nothing about time zones: it answers "which is the
first matching *wall* time after this one?" on naive datetimes. The time-zone and DST
rules live in :mod:`django_htask.engine.schedules`. Evaluation uses croniter's
expansion with a small table walk (a few ``bisect`` calls per answer) instead of
croniter's own search, which is an order of magnitude slower; expressions that use
croniter's special forms (``L``, ``W``, ``#``) are evaluated by croniter itself.

Compiled expressions are cached per text (an LRU of 4,096), so 100k schedules that
share 100 expressions hold 100 compiled tables.
"""

from __future__ import annotations

import calendar
import functools
import re
import threading
from bisect import bisect_left
from collections.abc import Sequence
from datetime import date, datetime, timedelta

from croniter import CroniterBadDateError, CroniterError, croniter

from .errors import InvalidSchedule

__all__ = ["DESCRIPTORS", "CronExpression", "compile_cron"]

#: The ``@`` descriptors and the expressions they stand for.
DESCRIPTORS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_FIELDS_5 = ("minute", "hour", "day-of-month", "month", "day-of-week")
_FIELDS_6 = ("second", *_FIELDS_5)
_RANGES = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "day-of-month": (1, 31),
    "month": (1, 12),
    "day-of-week": (0, 7),
}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NAMES = {"month": frozenset(_MONTHS), "day-of-week": frozenset(_WEEKDAYS)}
# Longest month lengths, February counted with its leap day.
_MAX_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ALL_DAYS = tuple(tuple(range(1, n + 1)) for n in range(32))
_SPECIAL = re.compile(r"[LW#]")
_MAX_TEXT = 1000
# How far ahead a search goes before it says "never": every expression that passed
# the feasibility check fires at least once in 8 years (29 February).
_SEARCH_YEARS = 100
_MAX_YEAR = 9999


class CronExpression:
    """A validated cron expression, evaluated in naive wall time. Immutable, thread-safe.

    ``text`` is the canonical body (upper-case names, single spaces, descriptors in
    lower case); ``fields`` are the 5 or 6 fields it stands for; ``hour_is_star`` says
    whether the hour field is literally ``*`` (which selects the DST rule).
    """

    __slots__ = (
        "_croniter",
        "_croniter_lock",
        "_day_cache",
        "_dom",
        "_dow",
        "_hours",
        "_minutes",
        "_months",
        "_seconds",
        "fields",
        "has_seconds",
        "hour_is_star",
        "special",
        "text",
    )

    def __init__(self, text: str) -> None:
        text, fields = _normalise(text)
        self.text = text
        self.fields = fields
        self.has_seconds = len(fields) == 6
        names = _FIELDS_6 if self.has_seconds else _FIELDS_5
        for name, field in zip(names, fields, strict=True):
            _check_field(name, field)
        cron_text = " ".join(fields)
        try:
            expanded, _nth = croniter.expand(cron_text, second_at_beginning=self.has_seconds)
        except CroniterError as exc:
            raise InvalidSchedule(_locate_error(text, fields, names, exc)) from None
        # croniter's order: minute, hour, day of month, month, day of week[, second]
        minute, hour, dom, month, dow = expanded[:5]
        second = expanded[5] if self.has_seconds else [0]
        self._seconds = _full(second, 0, 59)
        self._minutes = _full(minute, 0, 59)
        self._hours = _full(hour, 0, 23)
        self._months = _full(month, 1, 12)
        self._dom: frozenset[int] | None = None if dom == ["*"] else frozenset(_ints(dom))
        self._dow: frozenset[int] | None = None if dow == ["*"] else frozenset(_ints(dow))
        self.hour_is_star = fields[2 if self.has_seconds else 1] == "*"
        self.special = bool(_SPECIAL.search(cron_text))
        self._day_cache: dict[int, tuple[int, ...]] = {}
        self._croniter: croniter | None = None
        self._croniter_lock = threading.Lock()
        if self.special:
            self._croniter = croniter(
                cron_text, datetime(2000, 1, 1), second_at_beginning=self.has_seconds
            )
            if self._special_next(datetime(2000, 1, 1)) is None:
                raise InvalidSchedule(f"cron expression {text!r} can never fire")
        else:
            self._check_feasible()

    # -- validation ------------------------------------------------------------------
    def _check_feasible(self) -> None:
        dom = self._dom
        if dom is None or self._dow is not None:
            return  # any day, or day-of-month OR day-of-week: both always occur
        if any(d <= _MAX_DAYS[m] for m in self._months for d in dom):
            return
        months = ", ".join(calendar.month_name[m] for m in self._months)
        days = ", ".join(str(d) for d in sorted(dom))
        raise InvalidSchedule(
            f"cron expression {self.text!r} can never fire: day {days} does not exist in {months}"
        )

    # -- evaluation ------------------------------------------------------------------
    def next_after(self, wall: datetime) -> datetime | None:
        """The first matching wall time strictly after ``wall`` (naive), or None."""
        if self.special:
            return self._special_next(wall)
        found = self._search(
            wall.year, wall.month, wall.day, wall.hour, wall.minute, wall.second + 1
        )
        return None if found is None else datetime(*found)

    def next_at_or_after(self, wall: datetime) -> datetime | None:
        """The first matching wall time at or after ``wall`` (naive, whole seconds)."""
        if self.special:
            return self._special_next(wall - timedelta(seconds=1))
        found = self._search(wall.year, wall.month, wall.day, wall.hour, wall.minute, wall.second)
        return None if found is None else datetime(*found)

    def matches(self, wall: datetime) -> bool:
        """Whether the wall time ``wall`` (naive) matches, to the second."""
        whole = wall.replace(microsecond=0)
        return wall.microsecond == 0 and self.next_at_or_after(whole) == whole

    def _search(
        self, y: int, mo: int, d: int, h: int, mi: int, s: int
    ) -> tuple[int, int, int, int, int, int] | None:
        # Find the first (y, mo, d, h, mi, s) >= the given one that matches. Values may
        # overflow their field (s == 60, d == 32): a failed bisect carries upwards.
        months, hours, minutes, seconds = self._months, self._hours, self._minutes, self._seconds
        n_months, n_hours, n_minutes, n_seconds = (
            len(months),
            len(hours),
            len(minutes),
            len(seconds),
        )
        limit = min(y + _SEARCH_YEARS, _MAX_YEAR)
        while True:
            i = bisect_left(months, mo)
            if i == n_months:
                y += 1
                if y > limit:
                    return None
                mo, d, h, mi, s = 1, 1, 0, 0, 0
                continue
            if months[i] != mo:
                mo, d, h, mi, s = months[i], 1, 0, 0, 0
            days = self._days(y, mo)
            j = bisect_left(days, d)
            if j == len(days):
                mo, d, h, mi, s = mo + 1, 1, 0, 0, 0
                continue
            if days[j] != d:
                d, h, mi, s = days[j], 0, 0, 0
            k = bisect_left(hours, h)
            if k == n_hours:
                d, h, mi, s = d + 1, 0, 0, 0
                continue
            if hours[k] != h:
                h, mi, s = hours[k], 0, 0
            m = bisect_left(minutes, mi)
            if m == n_minutes:
                h, mi, s = h + 1, 0, 0
                continue
            if minutes[m] != mi:
                mi, s = minutes[m], 0
            q = bisect_left(seconds, s)
            if q == n_seconds:
                mi, s = mi + 1, 0
                continue
            return y, mo, d, h, mi, seconds[q]

    def _days(self, y: int, mo: int) -> tuple[int, ...]:
        key = y * 16 + mo
        days = self._day_cache.get(key)
        if days is not None:
            return days
        n_days = calendar.monthrange(y, mo)[1]
        dom, dow = self._dom, self._dow
        if dom is None and dow is None:
            days = _ALL_DAYS[n_days]
        else:
            # cron counts weekdays from Sunday = 0; Python from Monday = 0.
            first = (date(y, mo, 1).weekday() + 1) % 7
            by_dow = (
                ()
                if dow is None
                else (d for d in range(1, n_days + 1) if (first + d - 1) % 7 in dow)
            )
            by_dom = () if dom is None else (d for d in dom if d <= n_days)
            if dom is None:
                days = tuple(by_dow)
            elif dow is None:
                days = tuple(sorted(by_dom))
            else:  # both restricted: cron's OR
                days = tuple(sorted({*by_dom, *by_dow}))
        if len(self._day_cache) > 1024:
            self._day_cache.clear()
        self._day_cache[key] = days
        return days

    def _special_next(self, wall: datetime) -> datetime | None:
        # croniter on naive datetimes is pure wall-time arithmetic.
        it = self._croniter
        assert it is not None
        with self._croniter_lock:
            try:
                found: datetime = it.get_next(datetime, start_time=wall)
            except (CroniterBadDateError, OverflowError, ValueError):
                return None
        return found if found.year <= _MAX_YEAR else None

    def __repr__(self) -> str:
        return f"CronExpression({self.text!r})"


def compile_cron(text: str) -> CronExpression:
    """The compiled expression for ``text`` (cached per canonical text; raises
    :class:`InvalidSchedule`)."""
    found = _compiled.get(text)
    if found is None:
        found = _compile(_normalise(text)[0])
        if len(_compiled) >= 4096:
            _compiled.clear()
        _compiled[text] = found
    return found


_compiled: dict[str, CronExpression] = {}


@functools.lru_cache(maxsize=4096)
def _compile(text: str) -> CronExpression:
    return CronExpression(text)


# -- helpers ---------------------------------------------------------------------------
def _normalise(text: str) -> tuple[str, tuple[str, ...]]:
    if not isinstance(text, str):
        raise InvalidSchedule(f"a cron expression must be a string, got {text!r}")
    if len(text) > _MAX_TEXT:
        raise InvalidSchedule(f"cron expression is too long ({len(text)} characters)")
    parts = text.split()
    if not parts:
        raise InvalidSchedule("empty cron expression")
    if parts[0].startswith("@"):
        name = parts[0].lower()
        if len(parts) != 1:
            raise InvalidSchedule(f"descriptor {parts[0]!r} takes no fields, got {text!r}")
        if name not in DESCRIPTORS:
            known = ", ".join(DESCRIPTORS)
            raise InvalidSchedule(f"unknown descriptor {parts[0]!r} (known: {known})")
        return name, tuple(DESCRIPTORS[name].split())
    if len(parts) not in (5, 6):
        raise InvalidSchedule(
            f"cron expression {text!r} has {len(parts)} fields; expected 5 "
            "(minute hour day-of-month month day-of-week) or 6 (with seconds first)"
        )
    fields = tuple(p.upper() for p in parts)
    return " ".join(fields), fields


def _check_field(name: str, field: str) -> None:
    lo, hi = _RANGES[name]
    names = _NAMES.get(name, frozenset())
    for item in field.split(","):
        if not item:
            raise InvalidSchedule(f"{name} field {field!r} has an empty list item")
        base, slash, step = item.partition("/")
        if slash:
            if not step.isdigit():
                raise InvalidSchedule(f"{name} field {field!r}: step {step!r} is not a number")
            if int(step) == 0:
                raise InvalidSchedule(f"{name} field {field!r}: step 0")
        if base == "*":
            continue
        if base == "?":
            if name not in ("day-of-month", "day-of-week"):
                raise InvalidSchedule(
                    f"'?' is only allowed in day-of-month and day-of-week, not in {name}"
                )
            continue
        if _SPECIAL.search(base) and name in ("day-of-month", "day-of-week"):
            continue  # L, W, #: croniter checks these; _locate_error names the field
        ends = base.split("-")
        if len(ends) > 2 or not all(ends):
            raise InvalidSchedule(f"{name} field {field!r}: {base!r} is not a value or a range")
        for end in ends:
            if end.isdigit():
                value = int(end)
                if not lo <= value <= hi:
                    raise InvalidSchedule(
                        f"{name} field {field!r}: {value} is out of range {lo}-{hi}"
                    )
            elif end not in names:
                what = "a number or a name" if names else "a number"
                raise InvalidSchedule(f"{name} field {field!r}: {end!r} is not {what}")


def _locate_error(
    text: str, fields: tuple[str, ...], names: tuple[str, ...], exc: Exception
) -> str:
    # croniter's message names the whole expression; find the field it is about.
    for i, (name, field) in enumerate(zip(names, fields, strict=True)):
        probe = ["*"] * len(fields)
        probe[i] = field
        try:
            croniter.expand(" ".join(probe), second_at_beginning=len(fields) == 6)
        except CroniterError as field_exc:
            return f"{name} field {field!r} is not valid in {text!r}: {field_exc}"
    return f"cron expression {text!r} is not valid: {exc}"


def _ints(values: Sequence[int | str]) -> list[int]:
    return [v for v in values if isinstance(v, int)]


def _full(values: Sequence[int | str], lo: int, hi: int) -> tuple[int, ...]:
    if list(values) == ["*"]:
        return tuple(range(lo, hi + 1))
    return tuple(sorted(set(_ints(values))))
