"""Cron expressions: parsed and validated once, then evaluated fast in wall time.

:func:`compile_cron` turns the body of a cron schedule (5 fields, 6 fields with seconds
first, or a descriptor such as ``@daily``) into a :class:`CronExpression`. Each field is
read here, item by item, so an error names the bad part, and the text means what
robfig/cron and Vixie cron say it means:

* ``N-N`` is the one value N, with or without a step (``5-5``, ``59-59/15``,
  ``SUN-SUN``); croniter reads it as the whole field.
* ``*`` (or ``*/1``, or ``?`` in the day fields) anywhere in a list selects every value,
  and such a day field leaves the other day field to decide alone; two restricted day
  fields match when either does (cron's OR).
* ``N/S`` is ``N-max/S``; ``A-B`` with ``A > B`` wraps around the end of the field
  (``SAT-SUN``, ``22-2``, ``NOV-FEB/2``), counting the step across the wrap.
* Day-of-week 7 is Sunday, as 0 is. Only ASCII digits, letters and spaces are read.

The expression is then checked for one that can never fire (30 February).

A :class:`CronExpression` knows nothing about time zones: it answers "which is the
first matching *wall* time after this one?" on naive datetimes. The time-zone and DST
rules live in :mod:`django_htask.engine.schedules`. Evaluation is a small table walk (a
few ``bisect`` calls per answer). croniter's day forms (``L``, ``W``, ``#`` in the day
fields) are accepted too: croniter is asked once per month which days they select, and
everything else is evaluated here.

Compiled expressions are cached per text (an LRU of 4,096), so 100k schedules that
share 100 expressions hold 100 compiled tables.
"""

from __future__ import annotations

import calendar
import difflib
import functools
import re
from bisect import bisect_left
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import NamedTuple

from .errors import InvalidSchedule

__all__ = [
    "DESCRIPTORS",
    "FIELDS",
    "CronExpression",
    "compile_cron",
    "split_fields",
    "unknown_descriptor",
]

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

#: The field names, in the order of a 6-field expression.
FIELDS = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
_FIELDS_5 = FIELDS[1:]
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")


class _Bounds(NamedTuple):
    lo: int
    hi: int  # the highest value written (day-of-week: 7, read as Sunday)
    names: dict[str, int]


_BOUNDS = {
    "second": _Bounds(0, 59, {}),
    "minute": _Bounds(0, 59, {}),
    "hour": _Bounds(0, 23, {}),
    "day-of-month": _Bounds(1, 31, {}),
    "month": _Bounds(1, 12, {name: i + 1 for i, name in enumerate(_MONTHS)}),
    "day-of-week": _Bounds(0, 7, {name: i for i, name in enumerate(_WEEKDAYS)}),
}
# Longest month lengths, February counted with its leap day.
_MAX_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ALL_DAYS = tuple(tuple(range(1, n + 1)) for n in range(32))
_ITEM = re.compile(r"([0-9A-Z]+)(?:-([0-9A-Z]+))?(?:/([0-9]+))?", re.ASCII)
_SPACE = re.compile(r"[ \t\n\r\f\v]+", re.ASCII)
_MAX_TEXT = 1000
# How far ahead a search goes before it says "never": every expression that passed
# the feasibility check fires at least once in 8 years (29 February).
_SEARCH_YEARS = 100
_MAX_YEAR = 9999


class _Field(NamedTuple):
    values: tuple[int, ...]  # sorted; day-of-week 0-6
    star: bool  # an item is *, */1 or ?: the field does not restrict
    special: tuple[str, ...]  # croniter's day forms (L, W, #), as written


class CronExpression:
    """A validated cron expression, evaluated in naive wall time. Immutable, thread-safe.

    ``text`` is the canonical body (upper-case names, single spaces, descriptors in
    lower case); ``fields`` are the 5 or 6 fields it stands for; ``hour_is_star`` says
    whether the hour field selects every hour through ``*`` (alone, as ``*/1`` or in a
    list), which selects the DST rule.
    """

    __slots__ = (
        "_day_cache",
        "_day_text",
        "_dom",
        "_dow",
        "_fields",
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
        names = FIELDS if self.has_seconds else _FIELDS_5
        parsed = {
            name: _parse_field(name, field) for name, field in zip(names, fields, strict=True)
        }
        parsed.setdefault("second", _Field((0,), False, ()))
        self._fields = parsed
        self._seconds = parsed["second"].values
        self._minutes = parsed["minute"].values
        self._hours = parsed["hour"].values
        self._months = parsed["month"].values
        dom, dow = parsed["day-of-month"], parsed["day-of-week"]
        # None: the field does not restrict the day (cron's OR applies when both do).
        self._dom: frozenset[int] | None = None if dom.star else frozenset(dom.values)
        self._dow: frozenset[int] | None = None if dow.star else frozenset(dow.values)
        self.hour_is_star = parsed["hour"].star
        self.special = bool(dom.special or dow.special)
        self._day_cache: dict[int, tuple[int, ...]] = {}
        self._day_text = ""
        if self.special:
            months = parsed["month"]
            month_text = "*" if len(months.values) == 12 else ",".join(map(str, months.values))
            self._day_text = " ".join(
                ("0", "0", _croniter_field(dom), month_text, _croniter_field(dow))
            )
            self._check_special(text, fields, names)
            if self._search(2000, 1, 1, 0, 0, 0) is None:
                raise InvalidSchedule(f"cron expression {text!r} can never fire")
        else:
            self._check_feasible()

    def values(self, field: str) -> tuple[int, ...]:
        """The values a field selects, sorted (``"second"`` ... ``"day-of-week"``).

        Day-of-week is 0-6 with Sunday 0 (a written 7 is 0); croniter's ``L``, ``W``
        and ``#`` items are not values and are not listed.
        """
        if field not in FIELDS:
            raise ValueError(f"unknown cron field {field!r}; expected one of {FIELDS}")
        return self._fields[field].values

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

    def _check_special(self, text: str, fields: tuple[str, ...], names: tuple[str, ...]) -> None:
        # croniter checks its own day forms; find the field its message is about. (It
        # is imported here and in _special_days only: it costs 25 ms to import, and
        # only L, W and # need it.)
        from croniter import CroniterError, croniter  # noqa: PLC0415

        try:
            croniter.expand(self._day_text)
        except CroniterError as exc:
            for name, field in zip(names, fields, strict=True):
                if name in ("day-of-month", "day-of-week") and self._fields[name].special:
                    probe = ["0", "0", "*", "*", "*"]
                    probe[2 if name == "day-of-month" else 4] = _croniter_field(self._fields[name])
                    try:
                        croniter.expand(" ".join(probe))
                    except CroniterError as field_exc:
                        raise InvalidSchedule(
                            f"{name} field {field!r} is not valid in {text!r}: {field_exc}"
                        ) from None
            raise InvalidSchedule(f"cron expression {text!r} is not valid: {exc}") from None

    # -- evaluation ------------------------------------------------------------------
    def next_after(self, wall: datetime) -> datetime | None:
        """The first matching wall time strictly after ``wall`` (naive), or None."""
        found = self._search(
            wall.year, wall.month, wall.day, wall.hour, wall.minute, wall.second + 1
        )
        return None if found is None else datetime(*found)

    def next_at_or_after(self, wall: datetime) -> datetime | None:
        """The first matching wall time at or after ``wall`` (naive, whole seconds)."""
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
        if self.special:
            days = self._special_days(y, mo)
        elif dom is None and dow is None:
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

    def _special_days(self, y: int, mo: int) -> tuple[int, ...]:
        # croniter on naive datetimes is pure wall-time arithmetic: ask it for the days
        # its day fields select (the other fields are ours). One walk costs about the
        # same per match as a walk per month, so it fills the twelve months from here.
        months = [(y + (mo - 1 + i) // 12, (mo - 1 + i) % 12 + 1) for i in range(12)]
        found: dict[tuple[int, int], list[int]] = {month: [] for month in months}
        from croniter import CroniterBadDateError, croniter  # noqa: PLC0415

        try:
            it = croniter(self._day_text, datetime(y, mo, 1) - timedelta(seconds=1))
            while True:
                day: datetime = it.get_next(datetime)
                if (day.year, day.month) not in found:
                    break
                found[day.year, day.month].append(day.day)
        except (CroniterBadDateError, OverflowError, ValueError):
            pass  # no further match at all, or past the end of time
        for year, month in months[1:]:
            self._day_cache[year * 16 + month] = tuple(found[year, month])
        return tuple(found[y, mo])

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
def split_fields(text: str) -> list[str]:
    """``text`` split on ASCII whitespace (cron does not separate fields with a no-break
    space or an ideographic space; those stay in the field and make it invalid)."""
    return [part for part in _SPACE.split(text) if part]


def unknown_descriptor(word: str, known: Sequence[str]) -> InvalidSchedule:
    """The error of ``word``, an ``@`` word that is none of ``known``: it names the
    known ones, and the one ``word`` is a typo of, if it is close to one."""
    close = difflib.get_close_matches(word.lower(), known, n=1, cutoff=0.8)
    guess = f": did you mean {close[0]!r}?" if close else ""
    return InvalidSchedule(f"unknown descriptor {word!r}{guess} (known: {', '.join(known)})")


def _normalise(text: str) -> tuple[str, tuple[str, ...]]:
    if not isinstance(text, str):
        raise InvalidSchedule(f"a cron expression must be a string, got {text!r}")
    if len(text) > _MAX_TEXT:
        raise InvalidSchedule(f"cron expression is too long ({len(text)} characters)")
    parts = split_fields(text)
    if not parts:
        raise InvalidSchedule("empty cron expression")
    if not text.isascii():
        bad = next(ch for ch in text if not ch.isascii())
        raise InvalidSchedule(
            f"cron expression {text!r}: {bad!r} is not allowed "
            "(only ASCII letters, digits, spaces and * , - / ? #)"
        )
    if parts[0].startswith("@"):
        name = parts[0].lower()
        if name not in DESCRIPTORS:
            raise unknown_descriptor(parts[0], list(DESCRIPTORS))
        if len(parts) != 1:
            raise InvalidSchedule(f"descriptor {parts[0]!r} takes no fields, got {text!r}")
        return name, tuple(DESCRIPTORS[name].split())
    if len(parts) not in (5, 6):
        raise InvalidSchedule(
            f"cron expression {text!r} has {len(parts)} fields; expected 5 "
            "(minute hour day-of-month month day-of-week) or 6 (with seconds first)"
        )
    fields = tuple(p.upper() for p in parts)
    return " ".join(fields), fields


def _parse_field(name: str, field: str) -> _Field:
    """Read one field into the values it selects (see the module docstring)."""
    lo, hi, _names = _BOUNDS[name]
    top = 6 if name == "day-of-week" else hi  # where * and N/S stop
    day_field = name in ("day-of-month", "day-of-week")
    if field == "?":
        if not day_field:
            raise InvalidSchedule(
                f"'?' is only allowed in day-of-month and day-of-week, not in {name}"
            )
        return _Field(tuple(range(lo, top + 1)), True, ())
    values: set[int] = set()
    star = False
    special: list[str] = []
    for item in field.split(","):
        if not item:
            raise InvalidSchedule(f"{name} field {field!r} has an empty list item")
        if day_field and _is_day_form(name, item):
            special.append(item)  # L, W, #: croniter checks and evaluates these
            continue
        if "?" in item:
            raise InvalidSchedule(f"{name} field {field!r}: '?' must be the whole field")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()):
                raise InvalidSchedule(f"{name} field {field!r}: step {step_text!r} is not a number")
            step = int(step_text)
            if step == 0:
                raise InvalidSchedule(f"{name} field {field!r}: step 0")
        if base == "*":
            star = star or step == 1
            values.update(range(lo, top + 1, step))
            continue
        match = _ITEM.fullmatch(item)
        if match is None:
            raise InvalidSchedule(f"{name} field {field!r}: {base!r} is not a value or a range")
        first = _value(name, field, match.group(1))
        if match.group(2) is None:
            # N/S is N-max/S; day-of-week 7 is 0 before it steps.
            start = 0 if first == 7 else first
            values.update(range(start, top + 1, step) if slash else (first,))
        else:
            values.update(_range(name, first, _value(name, field, match.group(2)), step))
    if name == "day-of-week":
        values = {v % 7 for v in values}
    return _Field(tuple(sorted(values)), star, tuple(special))


def _range(name: str, first: int, last: int, step: int) -> range | list[int]:
    if first == last:
        return [first]  # N-N is N, whatever the step (robfig/cron, Vixie cron)
    lo, hi, _names = _BOUNDS[name]
    if name == "day-of-week":
        if first == 7:
            first = 0
        hi = 6  # a wrapping range cycles through the seven days
    if first <= last:
        return range(first, last + 1, step)
    # Wraps past the end of the field: count the step across the end (NOV-FEB/2 is
    # November, January).
    size = hi - lo + 1
    span = (last - first) % size
    return [lo + (first - lo + k) % size for k in range(0, span + 1, step)]


def _value(name: str, field: str, text: str) -> int:
    lo, hi, names = _BOUNDS[name]
    if text.isdigit():
        value = int(text)
        if not lo <= value <= hi:
            raise InvalidSchedule(f"{name} field {field!r}: {value} is out of range {lo}-{hi}")
        return value
    if text in names:
        return names[text]
    what = "a number or a name" if names else "a number"
    raise InvalidSchedule(f"{name} field {field!r}: {text!r} is not {what}")


def _is_day_form(name: str, item: str) -> bool:
    """Whether ``item`` is one of croniter's day forms (``L``, ``15W``, ``5#2``, ``L5``)."""
    if name == "day-of-month":
        return "L" in item or "W" in item
    return "#" in item or item.startswith("L")


def _croniter_field(field: _Field) -> str:
    """A day field for croniter: its plain items as explicit values, its day forms as
    written (so croniter reads only the forms that are its own)."""
    if field.star:
        return "*"
    return ",".join((*map(str, field.values), *field.special))
