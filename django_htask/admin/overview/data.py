"""The overview's data: every query the admin's overview page reads (the node list's
counts and ``htask status``'s tasks waiting too), in a few bounded queries.

:func:`read_overview`
    the nodes, the last 24 hours (runs per hour by outcome, lateness p50/p99 per
    hour, the schedules failing most), the next 24 hours (upcoming occurrences
    per minute, counted by :mod:`~django_htask.admin.overview.timeline`) and the
    queues paused and limited.
The nodes' work is counted by ``Node.objects.with_work()`` (:mod:`django_htask.querysets`),
as the node list counts it.

Every query is bounded so that 100k schedules and 1M runs stay fast (see "Queries at
scale" in ``docs/admin.md`` and ``bench/overview.py``):

- the runs of the last 24 h are counted by the database, grouped by hour and status,
  through the index on ``Run.started_at``, and the tasks' successes (which write no
  run row) through the ended tasks' index (``htask_task_ended``: status and end, all
  the count reads); lateness percentiles are computed here from at most
  :data:`LATENESS_SAMPLE` rows of each (every k-th by id when there are more);
- the next 24 h are computed from each enabled schedule's stored ``next_run_at``
  (index ``htask_sched_due``) and its text: schedules sharing text, zone and
  ``next_run_at`` are counted once (a ``GROUP BY``), within a budget of steps.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Case, Count, IntegerField, Q, Value, When
from django.db.models.functions import Coalesce, Mod

from django_htask import clock
from django_htask.conf import get_settings
from django_htask.db import scheduler_alias
from django_htask.enums import CALLED
from django_htask.models import Node, Queue, Run, RunStatus, Schedule, Task, TaskStatus
from django_htask.operations import node_state
from django_htask.queues import NO_STATES, QueueStates

from .timeline import OCCURRENCE_BUDGET, Timeline, count_occurrences, timeline_start
from .waiting import WAITING_SHOWN, Waiting, waiting_on_gates, why_waiting

__all__ = [
    "FAILING_SHOWN",
    "HOURS",
    "LATENESS_SAMPLE",
    "NODES_SHOWN",
    "OUTCOMES",
    "WAITING_SHOWN",
    "Failing",
    "Hour",
    "NodeLine",
    "Overview",
    "Pruning",
    "Waiting",
    "next_hours",
    "read_overview",
    "waiting_on_gates",
    "why_waiting",
]

logger = logging.getLogger(__name__)

#: Hours looked back and ahead.
HOURS = 24
#: Schedules listed as failing most.
FAILING_SHOWN = 10
#: Nodes listed (the most recent heartbeats first).
NODES_SHOWN = 50
#: Runs read, at most, for the lateness percentiles of the last 24 h.
LATENESS_SAMPLE = 10_000
#: The outcomes of runs, in the order the charts stack them.
OUTCOMES = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.MISSED,
    RunStatus.SKIPPED,
    RunStatus.SNOOZED,
    RunStatus.RUNNING,
)


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
class Pruning:
    """What is kept, and the last round of pruning a node recorded: the node, when,
    and the rows it deleted since it started (None: no node has pruned yet)."""

    tasks_kept: str  # "7 days", "succeeded 7 days, failed 30 days, …"
    runs_kept: str
    node: str | None = None
    at: datetime | None = None
    tasks: int = 0
    runs: int = 0


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
    pruning: Pruning | None = None
    #: The queues paused and limited.
    queues: QueueStates = NO_STATES

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
        pruning=pruning(using=using),
        queues=Queue.objects.using(using).states(),
    )


# -- nodes -------------------------------------------------------------------------------
def nodes(now: datetime, *, using: str | None = None) -> list[NodeLine]:
    """The :data:`NODES_SHOWN` nodes heard from last, with their work (one query)."""
    rows = Node.objects.using(using or scheduler_alias()).with_work()
    return [
        NodeLine(
            id=row.id,
            hostname=row.hostname,
            pid=row.pid,
            state=node_state(row, now),
            heartbeat_age=max(0.0, (now - row.last_heartbeat).total_seconds()),
            queues=row.queues,
            leased_tasks=getattr(row, "n_leased", None) or 0,
            running_tasks=getattr(row, "n_tasks", None) or 0,
            running_runs=getattr(row, "n_runs", None) or 0,
        )
        for row in rows.heard_last()[:NODES_SHOWN]
    ]


def pruning(*, using: str | None = None) -> Pruning:
    """The retention, and the node that pruned last (one read of the node rows)."""
    settings = get_settings()
    runs_days = settings.run_retention_days
    kept = Pruning(
        settings.task_retention_days.describe(),
        f"{runs_days} days" if runs_days else "for ever",
    )
    rows = Node.objects.using(using or scheduler_alias()).filter(pruned_at__isnull=False)
    last = rows.order_by("-pruned_at").first()
    if last is None:
        return kept
    return Pruning(
        kept.tasks_kept,
        kept.runs_kept,
        last.id,
        last.pruned_at,
        last.pruned_tasks,
        last.pruned_runs,
    )


def task_counts(*, using: str | None = None) -> dict[str, int]:
    """One-off tasks pending and running (``Task.objects.by_status()``)."""
    counts = {TaskStatus.PENDING.value: 0, TaskStatus.RUNNING.value: 0}
    counts.update(Task.objects.using(using or scheduler_alias()).by_status())
    return counts


# -- the last 24 hours -------------------------------------------------------------------
def window_start(now: datetime, hours: int = HOURS) -> datetime:
    """The start of the first of ``hours`` whole hours ending with the current one."""
    top = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return top - timedelta(hours=hours - 1)


def _hour_of(column: str, since: datetime, hours: int) -> Case:
    """The hour of a row (0 to ``hours - 1`` from ``since``) by its ``column``, as a
    number from a CASE over the hours' bounds: plain comparisons, no date function per
    row."""
    return Case(
        *[
            When(**{f"{column}__lt": since + timedelta(hours=i + 1)}, then=Value(i))
            for i in range(hours - 1)
        ],
        default=Value(hours - 1),
        output_field=IntegerField(),
    )


def _lateness(
    rows: Any, hour: Case, due: str, count: int, lateness: dict[int, list[float]]
) -> bool:
    """Add to ``lateness`` (by hour) the seconds from column ``due`` to ``started_at``
    of ``rows`` (``count`` of them): every k-th by id when there are more than
    :data:`LATENESS_SAMPLE`; return whether they were sampled so."""
    step = math.ceil(count / LATENESS_SAMPLE) if count > LATENESS_SAMPLE else 1
    if step > 1:
        rows = rows.alias(bucket=Mod("id", step)).filter(bucket=0)
    for index, started_at, due_at in rows.annotate(hour=hour).values_list(
        "hour", "started_at", due
    ):
        if started_at is None or due_at is None:  # excluded by the filter
            continue
        delay = max(0.0, (started_at - due_at).total_seconds())
        lateness.setdefault(index, []).append(delay)
    return step > 1


def last_hours(
    now: datetime, hours: int = HOURS, *, using: str | None = None
) -> tuple[list[Hour], bool]:
    """The runs started in each of the last ``hours`` hours (the current one last),
    by outcome, with lateness p50/p99; and whether the lateness was sampled. Tasks'
    successes, which write no run row, are read from the tasks, in the hour each ended
    (:func:`~django_htask.querysets.task_success_run`)."""
    using = using or scheduler_alias()
    since = window_start(now, hours)
    recent = Run.objects.using(using).filter(started_at__gte=since).without_task_successes()
    successes = Task.objects.using(using).succeeded_since(since)
    # Grouped by the hour alone, the outcomes counted apart: grouped by status too,
    # SQLite would scan the status index (the whole table) rather than the range of
    # started_at.
    hour, ended = _hour_of("started_at", since, hours), _hour_of("finished_at", since, hours)
    counts: dict[int, Counter[str]] = {}
    per_hour = (
        recent.order_by()
        .annotate(hour=hour)
        .values("hour")
        .annotate(**{str(s): Count("id", filter=Q(status=s)) for s in OUTCOMES})
    )
    for row in per_hour:
        values: dict[str, Any] = dict(row)
        counts[values.pop("hour")] = Counter(values)
    succeeded = 0
    # COUNT(*): the ended tasks' index holds the status and the end, all this reads.
    for index, n in successes.annotate(hour=ended).values_list("hour").annotate(n=Count("*")):
        counts.setdefault(index, Counter())[RunStatus.SUCCEEDED] += n
        succeeded += n
    started = sum(c[s] for c in counts.values() for s in CALLED) - succeeded
    lateness: dict[int, list[float]] = {}
    timed = recent.filter(status__in=CALLED, scheduled_for__isnull=False)
    sampled = _lateness(timed, hour, "scheduled_for", started, lateness)
    timed_tasks = successes.filter(started_at__isnull=False)
    sampled = _lateness(timed_tasks, ended, "run_at", succeeded, lateness) or sampled
    result = []
    for i in range(hours):
        late = sorted(lateness.get(i, []))
        by_status = counts.get(i, Counter())
        result.append(
            Hour(
                start=since + timedelta(hours=i),
                counts={status: by_status[status] for status in OUTCOMES},
                p50=_percentile(late, 0.50),
                p99=_percentile(late, 0.99),
                lateness_runs=len(late),
            )
        )
    return result, sampled


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
    minute from the current minute: the schedules sharing text, zone and
    ``next_run_at`` read as one group, counted by
    :func:`~django_htask.admin.overview.timeline.count_occurrences`."""
    horizon = timeline_start(now) + timedelta(hours=hours)
    groups = (
        Schedule.objects.using(using or scheduler_alias())
        .filter(enabled=True, broken="", next_run_at__lt=horizon)
        .order_by()
        .values_list("schedule", "timezone", "next_run_at")
        .annotate(n=Count("id"))
        .order_by("next_run_at")
    )
    return count_occurrences(groups, now, hours, budget)
