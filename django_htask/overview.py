"""What the admin's overview page shows, read in a few bounded queries.

:func:`read_overview`
    the nodes, the last 24 hours (runs per hour by outcome, lateness p50/p99 per
    hour, the schedules failing most) and the next 24 hours (upcoming occurrences
    per minute, the busiest minutes).
:func:`recent_runs`
    the last runs of several schedules (the strip of marks in the schedule list and
    on a schedule's page), in one query.

Every query is bounded so that 100k schedules and 1M runs stay fast (see "Queries at
scale" in ``docs/admin.md`` and ``bench/overview.py``):

- the runs of the last 24 h are counted by the database, grouped by hour and status,
  through the index on ``Run.started_at``; lateness percentiles are computed here from
  at most :data:`LATENESS_SAMPLE` rows (every k-th run by id when there are more);
- the next 24 h are computed from each enabled schedule's stored ``next_run_at``
  (index ``htask_sched_due``) and its text: schedules sharing text, zone and
  ``next_run_at`` are counted once (a ``GROUP BY``); an ``@every`` without jitter is
  counted by arithmetic, with no ``next_after`` per occurrence: one of whole minutes
  once per first minute and interval, any other once per distinct progression, at a
  cost of one step per minute it spans (an ``@every 10s`` costs 1,440 steps for its
  8,640 occurrences); any other group follows its schedule's ``next_after`` to the
  horizon. All of that together costs at most :data:`OCCURRENCE_BUDGET` steps; past
  it, a group counts only its stored ``next_run_at`` and the page says the timeline
  is partial. Every occurrence is counted otherwise, however often a schedule fires;
- a schedule's last runs are read through the index ``htask_run_recent``
  (``schedule``, ``started_at``): one ``SELECT … LIMIT 20`` per schedule of the page,
  joined by ``UNION ALL`` in one query.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import (
    Case,
    Count,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce, Mod

from . import clock
from .conf import get_settings
from .db import scheduler_alias
from .models import GATED, Node, Run, RunStatus, Schedule, Task, TaskStatus
from .operations import node_state

__all__ = [
    "FAILING_SHOWN",
    "HOURS",
    "LATENESS_SAMPLE",
    "NODES_SHOWN",
    "OCCURRENCE_BUDGET",
    "OUTCOMES",
    "STRIP",
    "WAITING_SHOWN",
    "Failing",
    "Hour",
    "NodeLine",
    "Overview",
    "RunMark",
    "Timeline",
    "Waiting",
    "next_hours",
    "read_overview",
    "recent_runs",
]

logger = logging.getLogger(__name__)

#: Hours looked back and ahead.
HOURS = 24
#: Runs in a schedule's strip.
STRIP = 20
#: Schedules listed as failing most.
FAILING_SHOWN = 10
#: Nodes listed (the most recent heartbeats first).
NODES_SHOWN = 50
#: Runs read, at most, for the lateness percentiles of the last 24 h.
LATENESS_SAMPLE = 10_000
#: Steps (occurrences followed, minutes counted) taken, at most, for the whole timeline.
OCCURRENCE_BUDGET = 200_000
#: Busiest minutes listed.
BUSIEST_SHOWN = 10
#: The busiest locks and limited functions shown with tasks waiting on them, at most.
WAITING_SHOWN = 5
#: The outcomes of runs, in the order the charts stack them.
OUTCOMES = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.MISSED,
    RunStatus.SKIPPED,
    RunStatus.RUNNING,
)
#: Outcomes whose lateness (started minus scheduled) is a scheduler's delay; a missed
#: or skipped occurrence is recorded when it is noticed, not started.
_STARTED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.RUNNING)


@dataclass(frozen=True)
class NodeLine:
    """A node as the overview lists it: its state, heartbeat age and work."""

    id: str
    hostname: str
    pid: int
    state: str  # live, dead, stopped
    heartbeat_age: float  # seconds
    queues: str
    leased_tasks: int  # tasks it holds (locked_by), whatever their status
    running_tasks: int
    running_runs: int  # schedule runs it is running

    @property
    def heartbeat_text(self) -> str:
        """The heartbeat's age in words: ``4.2 s``, ``12 min``, ``3 h``, ``2 days``."""
        age = self.heartbeat_age
        if age < 90:
            return f"{age:.1f} s"
        if age < 90 * 60:
            return f"{age / 60:.0f} min"
        if age < 48 * 3600:
            return f"{age / 3600:.0f} h"
        return f"{age / 86400:.0f} days"


@dataclass(frozen=True)
class Hour:
    """One hour of the last 24: runs started in it by outcome, and their lateness."""

    start: datetime
    counts: dict[str, int]
    p50: float | None  # seconds from due to started, of runs started in the hour
    p99: float | None
    lateness_runs: int  # the runs the percentiles were computed from

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class Failing:
    """A schedule with failed runs in the last 24 h."""

    schedule_id: int
    name: str
    failed: int
    runs: int  # all its runs in the window


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


@dataclass(frozen=True)
class RunMark:
    """One run in a schedule's strip."""

    id: int
    status: str
    started_at: datetime | None
    scheduled_for: datetime | None
    duration: float | None
    error: str


@dataclass(frozen=True)
class Waiting:
    """Due tasks waiting on a lock (``kind`` ``"lock"``) or on a function's
    ``max_running`` (``"limit"``): ``name`` is the lock or the function."""

    kind: str
    name: str
    count: int


@dataclass(frozen=True)
class Overview:
    """Everything the overview page shows, read at ``now``."""

    now: datetime
    nodes: list[NodeLine]
    node_timeout: float
    hours: list[Hour]
    failing: list[Failing]
    timeline: Timeline
    lateness_sampled: bool = False
    tasks: dict[str, int] = field(default_factory=dict)
    waiting: list[Waiting] = field(default_factory=list)

    @property
    def live_nodes(self) -> int:
        return sum(1 for n in self.nodes if n.state == "live")

    @property
    def runs_total(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for hour in self.hours:
            totals.update(hour.counts)
        return {status: totals[status] for status in OUTCOMES}


def read_overview(now: datetime | None = None, *, using: str | None = None) -> Overview:
    """The overview at ``now`` (default: the clock's) of the database ``using``
    (default: the scheduler's, django_htask.db)."""
    now = now or clock.now()
    using = using or scheduler_alias()
    hours, sampled = last_hours(now, using=using)
    return Overview(
        now=now,
        nodes=nodes(now, using=using),
        node_timeout=get_settings().node_timeout,
        hours=hours,
        failing=failing_most(now, using=using),
        timeline=next_hours(now, using=using),
        lateness_sampled=sampled,
        tasks=task_counts(using=using),
        waiting=waiting_on_gates(now, using=using),
    )


# -- nodes -------------------------------------------------------------------------------
def _count(queryset: QuerySet[Any], by: str) -> Subquery:
    grouped = queryset.order_by().values(by).annotate(c=Count("pk")).values("c")
    return Subquery(grouped[:1], output_field=IntegerField())


def nodes(now: datetime, *, using: str | None = None) -> list[NodeLine]:
    """The :data:`NODES_SHOWN` nodes heard from last, with their work (one query)."""
    using = using or scheduler_alias()
    mine = Task.objects.using(using).filter(locked_by=OuterRef("id"))
    runs = Run.objects.using(using).filter(node=OuterRef("id"), status=RunStatus.RUNNING, task=None)
    rows = (
        Node.objects.using(using)
        .annotate(
            n_leased=_count(mine, "locked_by"),
            n_tasks=_count(mine.filter(status=TaskStatus.RUNNING), "locked_by"),
            n_runs=_count(runs, "node"),
        )
        .order_by("-last_heartbeat")[:NODES_SHOWN]
    )
    return [
        NodeLine(
            id=row.id,
            hostname=row.hostname,
            pid=row.pid,
            state=node_state(row, now),
            heartbeat_age=max(0.0, (now - row.last_heartbeat).total_seconds()),
            queues=row.queues,
            leased_tasks=row.n_leased or 0,
            running_tasks=row.n_tasks or 0,
            running_runs=row.n_runs or 0,
        )
        for row in rows
    ]


def task_counts(*, using: str | None = None) -> dict[str, int]:
    """One-off tasks pending and running (index on ``status``)."""
    rows = (
        Task.objects.using(using or scheduler_alias())
        .filter(status__in=(TaskStatus.PENDING, TaskStatus.RUNNING))
        .order_by()
        .values_list("status")
        .annotate(n=Count("id"))
    )
    counts = {TaskStatus.PENDING.value: 0, TaskStatus.RUNNING.value: 0}
    counts.update({str(status): n for status, n in rows})
    return counts


def waiting_on_gates(
    now: datetime, *, using: str | None = None, shown: int = WAITING_SHOWN
) -> list[Waiting]:
    """The locks and the limited functions with the most due tasks waiting on them
    (pending and due at ``now``: a task whose lock is free starts at the next claim),
    ``shown`` of each kind at most, busiest first. One query, through the partial index
    of the pending tasks with a lock or a limit; ``htask status`` shows the same."""
    rows = (
        Task.objects.using(using or scheduler_alias())
        .filter(GATED, run_at__lte=now)
        .order_by()
        .values_list("lock", "function", "max_running")
        .annotate(n=Count("id"))
    )
    locks: Counter[str] = Counter()
    limits: Counter[str] = Counter()
    for lock, function, max_running, n in rows:
        if lock is not None:
            locks[lock] += n
        if max_running is not None:
            limits[function] += n
    return [
        Waiting(kind, name, n)
        for kind, counts in (("lock", locks), ("limit", limits))
        for name, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:shown]
    ]


# -- the last 24 hours -------------------------------------------------------------------
def window_start(now: datetime, hours: int = HOURS) -> datetime:
    """The start of the first of ``hours`` whole hours ending with the current one."""
    top = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return top - timedelta(hours=hours - 1)


def last_hours(
    now: datetime, hours: int = HOURS, *, using: str | None = None
) -> tuple[list[Hour], bool]:
    """The runs started in each of the last ``hours`` hours (the current one last),
    by outcome, with lateness p50/p99; and whether the lateness was sampled."""
    since = window_start(now, hours)
    recent = Run.objects.using(using or scheduler_alias()).filter(started_at__gte=since)
    recent = recent.order_by()
    # The hour of each run as a number from a CASE over the hours' bounds (plain
    # comparisons, no date function per row); grouped by it alone, the outcomes counted
    # apart: grouped by status too, SQLite would scan the status index (the whole
    # table) rather than the range of started_at.
    hour = Case(
        *[
            When(started_at__lt=since + timedelta(hours=i + 1), then=Value(i))
            for i in range(hours - 1)
        ],
        default=Value(hours - 1),
        output_field=IntegerField(),
    )
    counts: dict[int, Counter[str]] = {}
    per_hour = (
        recent.annotate(hour=hour)
        .values("hour")
        .annotate(**{str(s): Count("id", filter=Q(status=s)) for s in OUTCOMES})
    )
    for row in per_hour:
        values: dict[str, Any] = dict(row)
        counts[values.pop("hour")] = Counter(values)
    started = sum(c[s] for c in counts.values() for s in _STARTED)
    timed = recent.filter(status__in=_STARTED, scheduled_for__isnull=False)
    step = math.ceil(started / LATENESS_SAMPLE) if started > LATENESS_SAMPLE else 1
    if step > 1:
        timed = timed.alias(bucket=Mod("id", step)).filter(bucket=0)
    lateness: dict[int, list[float]] = {}
    for index, started_at, scheduled_for in timed.annotate(hour=hour).values_list(
        "hour", "started_at", "scheduled_for"
    ):
        if started_at is None or scheduled_for is None:  # excluded by the filter
            continue
        delay = max(0.0, (started_at - scheduled_for).total_seconds())
        lateness.setdefault(index, []).append(delay)
    result = []
    for i in range(hours):
        start = since + timedelta(hours=i)
        late = sorted(lateness.get(i, []))
        by_status = counts.get(i, Counter())
        result.append(
            Hour(
                start=start,
                counts={status: by_status[status] for status in OUTCOMES},
                p50=_percentile(late, 0.50),
                p99=_percentile(late, 0.99),
                lateness_runs=len(late),
            )
        )
    return result, step > 1


def _percentile(ordered: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of sorted values, nearest rank (None for no values)."""
    if not ordered:
        return None
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def failing_most(
    now: datetime, hours: int = HOURS, limit: int = FAILING_SHOWN, *, using: str | None = None
) -> list[Failing]:
    """The schedules with the most failed runs started in the last ``hours`` hours."""
    using = using or scheduler_alias()
    since = window_start(now, hours)
    recent = Run.objects.using(using).filter(started_at__gte=since).order_by()
    # Through the index htask_run_outcome (status, started_at). Grouped by a plain
    # schedule_id, SQLite would rather scan the whole of htask_run_recent in schedule
    # order (to group without sorting) than sort the few failures: COALESCE hides that
    # order from it. Tasks' runs (no schedule, 0 here) are dropped after.
    top = [
        {"schedule_id": row["sid"], "failed": row["failed"]}
        for row in recent.filter(status=RunStatus.FAILED)
        .values(sid=Coalesce("schedule_id", 0))
        .annotate(failed=Count("id"))
        .order_by("-failed", "sid")[: limit + 1]
        if row["sid"]
    ][:limit]
    # All runs of those few only (index htask_run_recent), not of every schedule.
    totals = dict(
        recent.filter(schedule_id__in=[r["schedule_id"] for r in top])
        .values_list("schedule_id")
        .annotate(n=Count("id"))
    )
    rows = [{**r, "runs": totals.get(r["schedule_id"], r["failed"])} for r in top]
    names = dict(
        Schedule.objects.using(using)
        .filter(pk__in=[r["schedule_id"] for r in rows])
        .values_list("pk", "name")
    )
    return [
        Failing(
            schedule_id=r["schedule_id"],
            name=names.get(r["schedule_id"], f"#{r['schedule_id']}"),
            failed=r["failed"],
            runs=r["runs"],
        )
        for r in rows
    ]


# -- the next 24 hours -------------------------------------------------------------------
def next_hours(
    now: datetime,
    hours: int = HOURS,
    *,
    budget: int = OCCURRENCE_BUDGET,
    using: str | None = None,
) -> Timeline:
    """The occurrences the enabled schedules fire in the next ``hours`` hours, per
    minute from the current minute (see the module's docstring for the bounds).

    Each occurrence follows the stored ``next_run_at`` with the schedule's own
    ``next_after``, as the scheduler does; an overdue schedule is counted in
    ``overdue`` and then from its next occurrence after ``now``."""
    from django_htask.engine import parse_schedule  # noqa: PLC0415

    start = now.astimezone(UTC).replace(second=0, microsecond=0)
    horizon = start + timedelta(hours=hours)
    per_minute = [0] * (hours * 60)
    groups = (
        Schedule.objects.using(using or scheduler_alias())
        .filter(enabled=True, broken="", next_run_at__lt=horizon)
        .order_by()
        .values_list("schedule", "timezone", "next_run_at")
        .annotate(n=Count("id"))
        .order_by("next_run_at")
    )
    schedules = overdue = invalid = 0
    partial = False
    left = budget
    steady: Counter[_Steps] = Counter()
    for text, zone, stored, n in groups:
        schedules += n
        if stored <= now:
            overdue += n
        if left <= 0:  # the budget is spent: the stored occurrence only
            partial = True
            _add(per_minute, start, stored, horizon, n)
            continue
        try:
            parsed = parse_schedule(text, tz=zone or None)
        except (ValueError, LookupError):
            invalid += n
            _add(per_minute, start, stored, horizon, n)
            continue
        when: datetime | None = stored
        if stored <= now:
            when = parsed.next_after(now)
            left -= 1
        if when is None or not start <= when < horizon:
            continue
        steps = _steps_after(parsed, when, start, horizon)
        if steps is not None:
            _add(per_minute, start, when, horizon, n)
            # The rest by arithmetic at the end, once per distinct progression.
            if steps not in steady and not steps.whole_minutes:
                if steps.cost > left:
                    partial = True
                    continue
                left -= steps.cost
            steady[steps] += n
            continue
        while when is not None and when < horizon:
            if left <= 0:
                partial = True
                break
            _add(per_minute, start, when, horizon, n)
            left -= 1
            when = parsed.next_after(when)
    for steps, n in steady.items():
        steps.add_to(per_minute, n)
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


# -- a schedule's last runs --------------------------------------------------------------
def recent_runs(
    schedule_ids: Iterable[int], count: int = STRIP, *, using: str | None = None
) -> dict[int, list[RunMark]]:
    """The last ``count`` runs of each schedule (oldest first), in one query:
    ``id IN (… UNION ALL …)`` of one ``SELECT id … ORDER BY started_at DESC LIMIT count``
    per schedule, each an index range on ``(schedule, started_at)``."""
    ids = sorted(set(schedule_ids))
    found: dict[int, list[RunMark]] = {pk: [] for pk in ids}
    if not ids:
        return found
    runs = Run.objects.using(using or scheduler_alias())
    # One subquery compiled once, repeated per schedule: compiling a hundred through the
    # ORM would cost more than running them. Each is wrapped so that its LIMIT is
    # allowed in a UNION ALL (SQLite, PostgreSQL).
    inner = runs.filter(schedule_id=0).order_by("-started_at", "-id").values("id")[:count]
    sql, params = inner.query.sql_with_params()
    if list(params) != [0]:  # pragma: no cover - Django inlines the LIMIT
        raise AssertionError(f"unexpected parameters {params!r} in {sql}")
    union = " UNION ALL ".join(f"SELECT * FROM ({sql}) AS htask_last_{i}" for i in range(len(ids)))
    rows = (
        runs.filter(id__in=RawSQL(union, ids))  # our own SQL, the ids as parameters
        .order_by()
        .values_list(
            "id", "schedule_id", "status", "started_at", "scheduled_for", "duration", "error"
        )
    )
    for run_id, schedule_id, status, started_at, scheduled_for, duration, error in rows:
        first = error.splitlines()[0][:200] if error else ""
        found[schedule_id].append(
            RunMark(run_id, status, started_at, scheduled_for, duration, first)
        )
    oldest = datetime.min.replace(tzinfo=UTC)
    for marks in found.values():
        marks.sort(key=lambda m: (m.started_at or oldest, m.id))
    return found
