"""Metrics in Prometheus' text format: what the database knows, for the URL module's
``metrics/`` and ``runscheduler --metrics-port``, and, in a node's process, what that
node did (:class:`NodeMetrics`).

It needs ``prometheus-client`` (``pip install django-htask[metrics]``), imported here
only and only when metrics are asked for: importing django_htask does not need it.

:class:`DatabaseCollector` reads the database at each scrape, with a handful of
aggregate queries over indexed columns: the tasks pending and running (by status), the
runs started in the last :data:`WINDOW` seconds (by ``started_at``), the schedules due
and the nodes not stopped. It only reads. A database error is the gauge
``django_htask_database_up 0`` (and a warning logged), never a failed scrape. Every
series is listed in docs/operating.md ("Metrics").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.db import Error, close_old_connections
from django.db.models import Count, F, Min, Q, Sum

from django_htask import clock
from django_htask.conf import get_settings
from django_htask.db import scheduler_alias
from django_htask.models import Node, Run, RunStatus, Schedule, Task, TaskStatus
from django_htask.querysets import due_task, node_is_live
from django_htask.signals import rows_reaped, run_finished, run_started
from django_htask.store import rules

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

__all__ = [
    "DURATION_BUCKETS",
    "INSTALL",
    "LATENESS_BUCKETS",
    "WINDOW",
    "DatabaseCollector",
    "MetricsServer",
    "NodeMetrics",
    "database_registry",
    "render",
    "require_prometheus",
    "serve",
]

logger = logging.getLogger(__name__)

#: What to install when prometheus-client is missing.
INSTALL = "pip install django-htask[metrics]"
#: The seconds of runs the ``django_htask_recent_*`` series count: the last hour.
WINDOW = 3600.0
#: The buckets (upper bounds, seconds) of the run duration histograms.
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
#: The buckets (seconds) of the lateness histogram: from due to started.
LATENESS_BUCKETS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
#: The runs that started a call (a missed or skipped occurrence did not).
_STARTED = (RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED)


def require_prometheus() -> None:
    """Raise :class:`~django.core.exceptions.ImproperlyConfigured` naming what to
    install unless ``prometheus_client`` can be imported."""
    try:
        import prometheus_client  # noqa: F401, PLC0415
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"django-htask's metrics need the prometheus-client package: {INSTALL}"
        ) from exc


# -- what the database knows ---------------------------------------------------------------
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
    nodes: list[tuple[str, datetime]] = field(default_factory=list)


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


def _read(now: datetime, window: float, using: str) -> _Facts:
    facts = _Facts()
    recent = Run.objects.using(using).last_hour(now, window)
    facts.runs = list(recent.by_outcome(rules.reaped_runs()))
    timed = recent.filter(duration__isnull=False).values("name")
    facts.durations = _histograms(
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
    started = recent.filter(status__in=_STARTED, scheduled_for__isnull=False).values("name")
    facts.lateness = _histograms(
        started.annotate(
            n=Count("id"),
            total=Sum(F("started_at") - F("scheduled_for")),
            **{
                f"le{i}": Count(
                    "id", filter=Q(started_at__lte=F("scheduled_for") + timedelta(seconds=bound))
                )
                for i, bound in enumerate(LATENESS_BUCKETS)
            },
        ),
        LATENESS_BUCKETS,
    )
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
        Node.objects.using(using).not_stopped().order_by("id").values_list("id", "last_heartbeat")
    )
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


def _run_families(facts: _Facts, hour: str, window: float) -> Iterator[Metric]:
    window_family = _gauge(
        "django_htask_recent_window_seconds",
        "The seconds of runs the django_htask_recent_ series count.",
    )
    window_family.add_metric([], window)
    yield window_family
    runs = _gauge(
        "django_htask_recent_runs",
        f"Runs started in {hour}, by schedule (or function) name, function and status "
        "(running, succeeded, failed, missed, skipped).",
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
    alive = 0
    for node_id, heartbeat in facts.nodes:  # not stopped
        is_live = node_is_live(None, heartbeat, dead_before)
        alive += is_live
        up.add_metric([node_id], 1 if is_live else 0)
        age.add_metric([node_id], (now - heartbeat).total_seconds())
    live.add_metric([], alive)
    yield from (live, up, age)


def database_registry(*, using: str | None = None, window: float = WINDOW) -> Any:
    """A new private :class:`prometheus_client.CollectorRegistry` (never the global
    one) holding a :class:`DatabaseCollector`."""
    require_prometheus()
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(using=using, window=window))
    return registry


def render(registry: CollectorRegistry | None = None) -> tuple[bytes, str]:
    """The scrape of ``registry`` (default: :func:`database_registry`) in Prometheus'
    text format, and its content type."""
    require_prometheus()
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest  # noqa: PLC0415

    return generate_latest(registry or database_registry()), CONTENT_TYPE_LATEST


# -- what one node did -----------------------------------------------------------------------
class NodeMetrics:
    """The counters of the node ``node_id`` in this process, on ``registry``: its
    claims, runs started and finished, retries and the rows its reaper handed back.

    Fed by the signals the node sends (``run_started``, ``run_finished``,
    ``rows_reaped``: the node does not know of metrics); :meth:`connect` and
    :meth:`disconnect` wire and unwire them."""

    def __init__(self, node_id: str, registry: CollectorRegistry) -> None:
        require_prometheus()
        from prometheus_client import Counter, Gauge, Histogram  # noqa: PLC0415

        self.node_id = node_id
        self._uid = f"django_htask.metrics:{node_id}:{id(self)}"
        labels = ("name", "function")
        info = Gauge(
            "django_htask_node_info",
            "1, labelled with this process' node id and django-htask version.",
            ("node", "version"),
            registry=registry,
        )
        from django_htask._version import __version__  # noqa: PLC0415

        info.labels(node_id, __version__).set(1)
        self.claims = Counter(
            "django_htask_node_claims",
            "Runs this node claimed and started: a one-off task (kind=task) or a "
            "schedule's occurrence (kind=schedule).",
            ("kind",),
            registry=registry,
        )
        self.started = Counter(
            "django_htask_node_runs_started",
            "Runs this node started, by schedule (or function) name and function.",
            labels,
            registry=registry,
        )
        self.finished = Counter(
            "django_htask_node_runs_finished",
            "Runs this node finished, by name, function and status (succeeded, failed).",
            (*labels, "status"),
            registry=registry,
        )
        self.retries = Counter(
            "django_htask_node_retries",
            "Runs this node started that were a retry (attempt > 1).",
            labels,
            registry=registry,
        )
        self.reaped = Counter(
            "django_htask_node_reaped",
            "Rows (nodes, tasks, runs) held by dead nodes that this node's reaper handed back.",
            registry=registry,
        )
        self.duration = Histogram(
            "django_htask_node_run_duration_seconds",
            "How long the runs this node finished took, by name.",
            ("name",),
            buckets=DURATION_BUCKETS,
            registry=registry,
        )

    def connect(self) -> None:
        run_started.connect(self._on_started, weak=False, dispatch_uid=self._uid)
        run_finished.connect(self._on_finished, weak=False, dispatch_uid=self._uid)
        rows_reaped.connect(self._on_reaped, weak=False, dispatch_uid=self._uid)

    def disconnect(self) -> None:
        run_started.disconnect(dispatch_uid=self._uid)
        run_finished.disconnect(dispatch_uid=self._uid)
        rows_reaped.disconnect(dispatch_uid=self._uid)

    def _on_started(
        self,
        sender: Any,
        *,
        node: str,
        name: str,
        function: str,
        attempt: int,
        task_id: int | None = None,
        **kwargs: Any,
    ) -> None:
        if node != self.node_id:
            return
        self.claims.labels("task" if task_id is not None else "schedule").inc()
        self.started.labels(name, function).inc()
        if attempt > 1:
            self.retries.labels(name, function).inc()

    def _on_reaped(self, sender: Any, *, node: str, rows: int, **kwargs: Any) -> None:
        if node == self.node_id:
            self.reaped.inc(rows)

    def _on_finished(
        self,
        sender: Any,
        *,
        node: str,
        name: str,
        function: str,
        status: str,
        duration: float,
        **kwargs: Any,
    ) -> None:
        if node != self.node_id:
            return
        self.finished.labels(name, function, str(status)).inc()
        self.duration.labels(name).observe(max(0.0, duration))


@dataclass
class MetricsServer:
    """The HTTP server of :func:`serve`: where it listens; :meth:`close` stops it."""

    host: str
    port: int
    node_metrics: NodeMetrics
    _server: Any
    _thread: Any

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self.node_metrics.disconnect()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve(
    port: int,
    addr: str = "127.0.0.1",
    *,
    node_id: str,
    using: str | None = None,
    window: float = WINDOW,
) -> MetricsServer:
    """Serve, on ``addr:port`` (``port`` 0: any free one) in a thread, the metrics of
    the database and the counters of the node ``node_id`` in this process, on a
    private registry. Raises ImproperlyConfigured without prometheus-client, OSError
    when the address cannot be bound."""
    require_prometheus()
    from prometheus_client import CollectorRegistry, start_http_server  # noqa: PLC0415

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(using=using, window=window, refresh_connections=True))
    node_metrics = NodeMetrics(node_id, registry)
    server, thread = start_http_server(port, addr=addr, registry=registry)
    node_metrics.connect()
    host, bound = server.server_address[:2]
    return MetricsServer(str(host), int(bound), node_metrics, server, thread)
