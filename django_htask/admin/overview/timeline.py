"""The overview's next 24 hours: the occurrences of the enabled schedules counted per
minute, from the groups :func:`~django_htask.admin.overview.data.next_hours` reads
(schedules sharing text, zone and ``next_run_at``, counted once). No query here.

An ``@every`` without jitter is counted by arithmetic, with no ``next_after`` per
occurrence: one of whole minutes once per first minute and interval, any other once per
distinct progression, at a cost of one step per minute it spans (an ``@every 10s``
costs 1,440 steps for its 8,640 occurrences); any other group follows its schedule's
``next_after`` to the horizon. All of that together costs at most
:data:`OCCURRENCE_BUDGET` steps; past it, a group counts only its stored
``next_run_at`` and the page says the timeline is partial. Every occurrence is counted
otherwise, however often a schedule fires.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "BUSIEST_SHOWN",
    "OCCURRENCE_BUDGET",
    "Group",
    "Timeline",
    "count_occurrences",
    "timeline_start",
]

#: Steps (occurrences followed, minutes counted) taken, at most, for the whole timeline.
OCCURRENCE_BUDGET = 200_000
#: Busiest minutes listed.
BUSIEST_SHOWN = 10

#: Schedules alike: their text, zone, stored ``next_run_at``, and how many they are.
Group = tuple[str, str, datetime, int]


@dataclass(frozen=True)
class Timeline:
    """Upcoming occurrences of the enabled schedules, per minute, from ``start``.

    ``per_minute[i]`` counts the occurrences due in minute ``start + i``.
    ``overdue``: schedules whose stored ``next_run_at`` is already past (the
    scheduler fires them as soon as it sees them; they are not in ``per_minute``).
    ``partial``: the :data:`OCCURRENCE_BUDGET` ran out; later groups count only their
    stored ``next_run_at``. ``invalid``: schedules whose text no longer parses.
    """

    start: datetime
    per_minute: list[int]
    schedules: int
    overdue: int = 0
    partial: bool = False
    invalid: int = 0

    @property
    def total(self) -> int:
        return sum(self.per_minute)

    def busiest(self, count: int = BUSIEST_SHOWN) -> list[tuple[datetime, int]]:
        """The ``count`` busiest minutes, busiest first (earliest first among equals)."""
        ranked = sorted(
            ((n, i) for i, n in enumerate(self.per_minute) if n), key=lambda p: (-p[0], p[1])
        )
        return [(self.start + timedelta(minutes=i), n) for n, i in ranked[:count]]


def timeline_start(now: datetime) -> datetime:
    """The timeline's first minute: the one ``now`` is in (UTC)."""
    return now.astimezone(UTC).replace(second=0, microsecond=0)


def count_occurrences(groups: Iterable[Group], now: datetime, hours: int, budget: int) -> Timeline:
    """The occurrences the ``groups`` fire in the ``hours`` hours from the current
    minute, per minute (see the module's docstring for the bounds). ``groups`` come
    in ``next_run_at`` order, none at or past the horizon.

    Each occurrence follows the stored ``next_run_at`` with the schedule's own
    ``next_after``, as the scheduler does; an overdue schedule is counted in
    ``overdue`` and then from its next occurrence after ``now``."""
    from django_htask.engine import parse_schedule  # noqa: PLC0415

    start = timeline_start(now)
    horizon = start + timedelta(hours=hours)
    per_minute = [0] * (hours * 60)
    schedules = overdue = invalid = 0
    partial = False
    left = budget
    steady: Counter[_Steps] = Counter()
    for text, zone, stored, count in groups:
        schedules += count
        if stored <= now:
            overdue += count
        if left <= 0:  # the budget is spent: the stored occurrence only
            partial = True
            _add(per_minute, start, stored, horizon, count)
            continue
        try:
            parsed = parse_schedule(text, tz=zone or None)
        except (ValueError, LookupError):
            invalid += count
            _add(per_minute, start, stored, horizon, count)
            continue
        when: datetime | None = stored
        if stored <= now:
            when = parsed.next_after(now)
            left -= 1
        if when is None or not start <= when < horizon:
            continue
        steps = _steps_after(parsed, when, start, horizon)
        if steps is not None:
            _add(per_minute, start, when, horizon, count)
            # The rest by arithmetic at the end, once per distinct progression.
            if steps not in steady and not steps.whole_minutes:
                if steps.cost > left:
                    partial = True
                    continue
                left -= steps.cost
            steady[steps] += count
            continue
        while when is not None and when < horizon:
            if left <= 0:
                partial = True
                break
            _add(per_minute, start, when, horizon, count)
            left -= 1
            when = parsed.next_after(when)
    for steps, count in steady.items():
        steps.add_to(per_minute, count)
    return Timeline(start, per_minute, schedules, overdue, partial, invalid)


_MINUTE_US = 60_000_000


@dataclass(frozen=True)
class _Steps:
    """``count`` occurrences ``first + k * step`` (microseconds from the timeline's
    start): an ``@every`` without jitter after its first occurrence. Two schedules
    whose occurrences fall in the same minutes compare equal, so that they are counted
    once (a step of whole minutes: only the minute of ``first`` matters)."""

    first: int
    step: int
    count: int

    @property
    def whole_minutes(self) -> bool:
        return self.step % _MINUTE_US == 0

    @property
    def cost(self) -> int:
        """The loop :meth:`add_to` makes: one turn an occurrence, or a minute."""
        spanned = (self.first + (self.count - 1) * self.step) // _MINUTE_US
        return min(self.count, spanned - self.first // _MINUTE_US + 1)

    def add_to(self, per_minute: list[int], n: int) -> None:
        """Add ``n`` to the minutes of the occurrences; for a step under a minute,
        each minute's count is the difference of the occurrences before its two
        bounds (an exact division), not a walk through thousands of occurrences."""
        first, step, count = self.first, self.step, self.count
        if step >= _MINUTE_US:
            for k in range(count):
                per_minute[(first + k * step) // _MINUTE_US] += n
            return

        def before(bound: int) -> int:  # occurrences strictly before ``bound``
            return 0 if bound <= first else min(count, -((first - bound) // step))

        last = (first + (count - 1) * step) // _MINUTE_US
        for i in range(first // _MINUTE_US, last + 1):
            per_minute[i] += n * (before((i + 1) * _MINUTE_US) - before(i * _MINUTE_US))


def _steps_after(parsed: Any, when: datetime, start: datetime, horizon: datetime) -> _Steps | None:
    """The occurrences of ``parsed`` after ``when`` and before ``horizon`` when they
    are evenly spaced (an ``@every`` without jitter: ``next_after`` adds its step, on
    its grid from the second one on); None for any other schedule, or when none is."""
    from django_htask.engine import IntervalSchedule  # noqa: PLC0415

    if not isinstance(parsed, IntervalSchedule) or parsed.jitter:
        return None
    second = parsed.next_after(when)
    if second is None or second >= horizon:
        return None
    step = parsed.next_after(second)
    if step is None:  # past its end after the second one
        return _Steps(_us(second - start), _MINUTE_US, 1)
    step_us = _us(step - second)
    limit = horizon if parsed.end is None else min(horizon, parsed.end + timedelta(microseconds=1))
    first = _us(second - start)
    count = -((first - _us(limit - start)) // step_us)  # the k with first + k * step < limit
    return _Steps(
        first - first % _MINUTE_US if step_us % _MINUTE_US == 0 else first, step_us, count
    )


def _us(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _add(
    per_minute: list[int], start: datetime, when: datetime | None, horizon: datetime, n: int
) -> None:
    if when is None or not start <= when < horizon:
        return
    per_minute[int((when - start).total_seconds() // 60)] += n
