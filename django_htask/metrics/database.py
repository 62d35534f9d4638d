"""Collecting what the database knows, at each scrape: :class:`DatabaseCollector`.

A handful of aggregate queries over indexed columns: the tasks pending and running (by
status), the runs started in the last :data:`~django_htask.metrics.prometheus.WINDOW`
seconds (by ``started_at``) and the tasks that succeeded in them (by ``finished_at``: a
success writes no run row), the schedules due, the nodes not stopped and the queues
acted on (paused, limited). It only reads.
A database error is the gauge ``django_htask_database_up 0`` (and a warning logged),
never a failed scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import Error, close_old_connections
from django.db.models import Count, F, Min, Q, Sum

from django_htask import clock
from django_htask.conf import get_settings
from django_htask.db import scheduler_alias
from django_htask.enums import CALLED
from django_htask.models import Node, Queue, Run, Schedule, Task, TaskStatus
from django_htask.querysets import due_task, node_is_live
from django_htask.store import rules

from .prometheus import DURATION_BUCKETS, LATENESS_BUCKETS, WINDOW, require_prometheus

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["DatabaseCollector"]

logger = logging.getLogger(__name__)


@dataclass
class _Histogram:
    """Cumulative bucket counts, their sum and count, for one label value."""

    buckets: list[int]
    count: int
    total: float


@dataclass
class _Facts:
    runs: list[Mapping[str, Any]] = field(default_factory=list)
    durations: dict[str, _Histogram] = field(default_factory=dict)
    lateness: dict[str, _Histogram] = field(default_factory=dict)
    tasks: list[Mapping[str, Any]] = field(default_factory=list)
    schedules: dict[str, Any] = field(default_factory=dict)
    nodes: list[tuple[str, datetime, int]] = field(default_factory=list)
    queues: list[tuple[str, bool, int | None]] = field(default_factory=list)


def _seconds(value: Any) -> float:
    """A sum of durations (a timedelta) or of seconds (a number), in seconds."""
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def _histograms(
    rows: Iterable[Mapping[str, Any]], bounds: Sequence[float]
) -> dict[str, _Histogram]:
    return {
        row["name"]: _Histogram(
            buckets=[row[f"le{i}"] for i in range(len(bounds))],
            count=row["n"],
            total=_seconds(row["total"]),
        )
        for row in rows
    }


def _added(*parts: dict[str, _Histogram]) -> dict[str, _Histogram]:
    """The histograms of ``parts`` added, name by name."""
    total: dict[str, _Histogram] = {}
    for part in parts:
        for name, histogram in part.items():
            was = total.get(name)
            if was is not None:
                buckets = [a + b for a, b in zip(was.buckets, histogram.buckets, strict=True)]
                total[name] = _Histogram(
                    buckets, was.count + histogram.count, was.total + histogram.total
                )
            else:
                total[name] = histogram
    return total


def _span_counts(prefix: str, start: str, end: str, bounds: Sequence[float]) -> dict[str, Any]:
    """The aggregates of a histogram of the seconds from column ``start`` to column
    ``end``: ``{prefix}n``, ``{prefix}total`` and a count per bound (``{prefix}le0`` …)."""
    return {
        f"{prefix}n": Count("id", filter=Q(**{f"{start}__isnull": False, f"{end}__isnull": False})),
        f"{prefix}total": Sum(F(end) - F(start)),
        **{
            f"{prefix}le{i}": Count(
                "id", filter=Q(**{f"{end}__lte": F(start) + timedelta(seconds=b)})
            )
            for i, b in enumerate(bounds)
        },
    }


def _unprefixed(rows: Iterable[Mapping[str, Any]], prefix: str) -> list[dict[str, Any]]:
    """Each row's name and its aggregates of ``prefix`` (:func:`_span_counts`), the
    prefix taken off."""
    return [
        {
            "name": row["name"],
            **{k[len(prefix) :]: v for k, v in row.items() if k.startswith(prefix)},
        }
        for row in rows
    ]


def _read_runs(facts: _Facts, now: datetime, window: float, using: str) -> None:
    """The runs of the last ``window`` seconds: those of schedules and tasks' attempts
    from the run rows, tasks' successes from the tasks, by their end (they write no
    run row: :func:`~django_htask.querysets.task_success_run`), in one query."""
    recent = Run.objects.using(using).last_hour(now, window).without_task_successes()
    facts.runs = list(recent.by_outcome(rules.reaped_runs()))
    timed = recent.filter(duration__isnull=False).values("name")
    durations = _histograms(
        timed.annotate(
            n=Count("id"),
            total=Sum("duration"),
            **{
                f"le{i}": Count("id", filter=Q(duration__lte=bound))
                for i, bound in enumerate(DURATION_BUCKETS)
            },
        ),
        DURATION_BUCKETS,
    )
    started = recent.filter(status__in=CALLED, scheduled_for__isnull=False).values("name")
    lateness = _histograms(
        started.annotate(**_span_counts("", "scheduled_for", "started_at", LATENESS_BUCKETS)),
        LATENESS_BUCKETS,
    )
    successes = list(
        Task.objects.using(using)
        .succeeded_since(now - timedelta(seconds=window))
        .values(name=F("function"))
        .annotate(
            n=Count("id"),
            retries=Count("id", filter=Q(attempts__gt=1)),
            **_span_counts("d_", "started_at", "finished_at", DURATION_BUCKETS),
            **_span_counts("l_", "run_at", "started_at", LATENESS_BUCKETS),
        )
    )
    facts.runs += [
        {**row, "function": row["name"], "status": TaskStatus.SUCCEEDED, "reaped": 0}
        for row in successes
    ]
    facts.durations = _added(durations, _histograms(_unprefixed(successes, "d_"), DURATION_BUCKETS))
    facts.lateness = _added(lateness, _histograms(_unprefixed(successes, "l_"), LATENESS_BUCKETS))


def _read(now: datetime, window: float, using: str) -> _Facts:
    facts = _Facts()
    _read_runs(facts, now, window, using)
    due = due_task(now)
    facts.tasks = list(
        Task.objects.using(using)
        .active()
        .order_by()
        .values("queue_name", "status")
        .annotate(n=Count("id"), due=Count("id", filter=due), oldest=Min("run_at", filter=due))
    )
    active_due = Q(enabled=True, broken="", next_run_at__lte=now)
    facts.schedules = Schedule.objects.using(using).aggregate(
        due=Count("id", filter=active_due),
        oldest=Min("next_run_at", filter=active_due),
        broken=Count("id", filter=~Q(broken="")),
    )
    facts.nodes = list(
        Node.objects.using(using)
        .not_stopped()
        .order_by("id")
        .values_list("id", "last_heartbeat", "stuck_threads")
    )
    facts.queues = list(Queue.objects.using(using).values_list("name", "paused", "max_running"))
    return facts


class DatabaseCollector:
    """A Prometheus collector (``collect()`` yields metric families) of what the
    database ``using`` knows, read at each scrape.

    ``window``: the seconds of runs the ``django_htask_recent_*`` series count.
    ``refresh_connections``: close the database connections that are obsolete or
    broken before and after reading (as a request does), for a collector that runs on
    a thread of its own (``runscheduler --metrics-port``)."""

    def __init__(
        self,
        *,
        using: str | None = None,
        window: float = WINDOW,
        refresh_connections: bool = False,
    ) -> None:
        require_prometheus()
        if not window > 0:
            raise ValueError(f"window must be > 0 seconds, got {window!r}")
        self.using = using or scheduler_alias()
        self.window = window
        self.refresh_connections = refresh_connections

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

        now = clock.now()
        facts: _Facts | None
        if self.refresh_connections:
            close_old_connections()
        try:
            facts = _read(now, self.window, self.using)
        except Error as exc:
            logger.warning(
                "metrics: database unavailable: %s",
                type(exc).__name__,
                exc_info=True,
                extra={"action": "metrics_database_error"},
            )
            facts = None
        finally:
            if self.refresh_connections:
                close_old_connections()
        yield GaugeMetricFamily(
            "django_htask_database_up",
            "1 when the database answered this scrape's queries, 0 when it did not "
            "(then no other django_htask_ series of the database is given).",
            value=0 if facts is None else 1,
        )
        if facts is not None:
            yield from _families(facts, now, self.window)


def _gauge(name: str, documentation: str, labels: Sequence[str] = ()) -> Any:
    from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415

    return GaugeMetricFamily(name, documentation, labels=list(labels))


def _histogram_family(
    name: str, documentation: str, bounds: Sequence[float], values: dict[str, _Histogram]
) -> Metric:
    from prometheus_client.core import HistogramMetricFamily  # noqa: PLC0415

    family = HistogramMetricFamily(name, documentation, labels=["name"])
    for label, h in sorted(values.items()):
        buckets = [(repr(float(b)), float(n)) for b, n in zip(bounds, h.buckets, strict=True)]
        family.add_metric([label], [*buckets, ("+Inf", float(h.count))], h.total)
    return family


def _age(now: datetime, when: datetime | None) -> float:
    return 0.0 if when is None else max(0.0, (now - when).total_seconds())


def _families(facts: _Facts, now: datetime, window: float) -> Iterator[Metric]:
    hour = f"the last {window:g} seconds"
    yield from _run_families(facts, hour, window)
    yield from _task_families(facts, now)
    schedules = facts.schedules
    due = _gauge(
        "django_htask_schedules_due",
        "Enabled, unbroken schedules whose next_run_at has passed (not yet fired).",
    )
    due.add_metric([], schedules["due"] or 0)
    yield due
    oldest = _gauge(
        "django_htask_oldest_due_schedule_age_seconds",
        "Seconds since the oldest due schedule was due (0: none is due).",
    )
    oldest.add_metric([], _age(now, schedules["oldest"]))
    yield oldest
    broken = _gauge(
        "django_htask_schedules_broken",
        "Schedules the scheduler marked broken (not fired until saved again).",
    )
    broken.add_metric([], schedules["broken"] or 0)
    yield broken
    yield from _node_families(facts, now)
    yield from _queue_families(facts)


def _queue_families(facts: _Facts) -> Iterator[Metric]:
    paused = _gauge(
        "django_htask_queue_paused",
        "1 for a queue paused (htask queue pause), 0 for one acted on and running, by queue.",
        ("queue",),
    )
    limit = _gauge(
        "django_htask_queue_limit",
        "The most tasks of a limited queue running at once on all nodes, by queue.",
        ("queue",),
    )
    for name, is_paused, max_running in facts.queues:
        paused.add_metric([name], 1 if is_paused else 0)
        if max_running is not None:
            limit.add_metric([name], max_running)
    yield from (paused, limit)


def _run_families(facts: _Facts, hour: str, window: float) -> Iterator[Metric]:
    window_family = _gauge(
        "django_htask_recent_window_seconds",
        "The seconds of runs the django_htask_recent_ series count.",
    )
    window_family.add_metric([], window)
    yield window_family
    runs = _gauge(
        "django_htask_recent_runs",
        f"Runs started in {hour} (a task's success: ended in it), by schedule (or "
        "function) name, function and status (running, succeeded, failed, missed, skipped).",
        ("name", "function", "status"),
    )
    retries = _gauge(
        "django_htask_recent_retries",
        f"Runs started in {hour} that were a retry (attempt > 1).",
        ("name", "function"),
    )
    reaped = _gauge(
        "django_htask_recent_reaped_runs",
        f"Runs started in {hour} that failed because their node stopped answering "
        "(failed by another node's reaper).",
        ("name", "function"),
    )
    retry_counts: dict[tuple[str, str], int] = {}
    reaped_counts: dict[tuple[str, str], int] = {}
    for row in sorted(facts.runs, key=lambda r: (r["name"], r["function"], r["status"])):
        key = (row["name"], row["function"])
        runs.add_metric([*key, row["status"]], row["n"])
        retry_counts[key] = retry_counts.get(key, 0) + row["retries"]
        reaped_counts[key] = reaped_counts.get(key, 0) + row["reaped"]
    for key, n in retry_counts.items():
        retries.add_metric(list(key), n)
    for key, n in reaped_counts.items():
        reaped.add_metric(list(key), n)
    yield runs
    yield retries
    yield reaped
    yield _histogram_family(
        "django_htask_recent_run_duration_seconds",
        f"How long the runs started in {hour} and finished took, by name.",
        DURATION_BUCKETS,
        facts.durations,
    )
    yield _histogram_family(
        "django_htask_recent_run_lateness_seconds",
        f"From due (scheduled_for) to started, for the runs started in {hour}, by name.",
        LATENESS_BUCKETS,
        facts.lateness,
    )


def _task_families(facts: _Facts, now: datetime) -> Iterator[Metric]:
    pending = _gauge(
        "django_htask_tasks_pending",
        "One-off tasks waiting to run (due or not), by queue.",
        ("queue",),
    )
    due = _gauge(
        "django_htask_tasks_due",
        "Pending one-off tasks whose run_at has passed (due, not started), by queue.",
        ("queue",),
    )
    running = _gauge("django_htask_tasks_running", "One-off tasks running, by queue.", ("queue",))
    oldest = _gauge(
        "django_htask_oldest_due_task_age_seconds",
        "Seconds since the oldest due pending task was due, by queue (0: none is due).",
        ("queue",),
    )
    counts: dict[str, dict[str, Any]] = {}
    for row in facts.tasks:
        queue = counts.setdefault(row["queue_name"], {"pending": 0, "due": 0, "running": 0})
        if row["status"] == TaskStatus.RUNNING:
            queue["running"] += row["n"]
        else:
            queue["pending"] += row["n"]
            queue["due"] += row["due"]
            queue["oldest"] = row["oldest"]
    for name, queue in sorted(counts.items()):
        pending.add_metric([name], queue["pending"])
        due.add_metric([name], queue["due"])
        running.add_metric([name], queue["running"])
        oldest.add_metric([name], _age(now, queue.get("oldest")))
    yield from (pending, due, running, oldest)


def _node_families(facts: _Facts, now: datetime) -> Iterator[Metric]:
    dead_before = get_settings().dead_before(now)
    live = _gauge(
        "django_htask_nodes_live",
        "Nodes live: not stopped, and a heartbeat within NODE_TIMEOUT.",
    )
    up = _gauge(
        "django_htask_node_up",
        "1 for a live node, 0 for one not stopped whose heartbeat is older than "
        "NODE_TIMEOUT (dead, not yet declared so), by node id.",
        ("node",),
    )
    age = _gauge(
        "django_htask_node_heartbeat_age_seconds",
        "Seconds since the last heartbeat of each node not stopped, by node id.",
        ("node",),
    )
    stuck = _gauge(
        "django_htask_node_stuck_threads",
        "Worker threads each node not stopped gave up, still stuck in calls that did not "
        "stop when forced (as of its last heartbeat; past MAX_ABANDONED_THREADS it starts "
        "afresh), by node id.",
        ("node",),
    )
    alive = 0
    for node_id, heartbeat, threads in facts.nodes:  # not stopped
        is_live = node_is_live(None, heartbeat, dead_before)
        alive += is_live
        up.add_metric([node_id], 1 if is_live else 0)
        age.add_metric([node_id], (now - heartbeat).total_seconds())
        stuck.add_metric([node_id], threads)
    live.add_metric([], alive)
    yield from (live, up, age, stuck)
