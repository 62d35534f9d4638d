"""Metrics: the database's (``DatabaseCollector`` through the ``htask/metrics/`` view of
``django_htask.urls``) and a node process' counters (``NodeMetrics``), parsed with
prometheus_client's own parser."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from django_htask.engine import FakeClock
from django_htask.metrics import (
    DURATION_BUCKETS,
    LATENESS_BUCKETS,
    WINDOW,
    DatabaseCollector,
    NodeMetrics,
    render,
)
from django_htask.models import Run, RunStatus, Schedule, Task, TaskStatus
from django_htask.retry import RetryPolicy
from django_htask.signals import rows_pruned, rows_reaped, run_finished, run_started
from django_htask.store import get_store, rules
from tests.integration.node_rows import node_row

ADD = "tests.integration.testapp.tasks:add"
URL = "/htask/metrics/"

db = pytest.mark.django_db

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: Client | None = None) -> tuple[Samples, dict[str, str], str]:
    """GET the view: its samples by (name, sorted labels), the families' types, and
    the content type."""
    response = (client or Client()).get(URL)
    assert response.status_code == 200
    text = response.content.decode()
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, types, response["Content-Type"]


def value(samples: Samples, series: str, /, **labels: str) -> float:
    return samples[(series, tuple(sorted(labels.items())))]


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


def run_row(fake_clock: FakeClock, ago: float, **kw: Any) -> Run:
    started = fake_clock.now() - timedelta(seconds=ago)
    kw.setdefault("name", ADD)
    kw.setdefault("function", ADD)
    kw.setdefault("status", RunStatus.SUCCEEDED)
    return Run.objects.create(started_at=started, finished_at=started, **kw)


def schedule_row(name: str, **kw: Any) -> Schedule:
    row = Schedule(name=name, function=ADD, schedule="@every 45s", **kw)
    row.set_call((1,))
    row.save()
    return row


# -- the view --------------------------------------------------------------------------------
@db
def test_an_empty_database_gives_zeros_and_no_labelled_series(fake_clock: FakeClock) -> None:
    samples, types, content_type = scrape()
    assert content_type.startswith("text/plain; version=")
    assert value(samples, "django_htask_database_up") == 1
    assert value(samples, "django_htask_nodes_live") == 0
    assert value(samples, "django_htask_schedules_due") == 0
    assert value(samples, "django_htask_oldest_due_schedule_age_seconds") == 0
    assert value(samples, "django_htask_recent_window_seconds") == WINDOW
    assert types["django_htask_recent_run_duration_seconds"] == "histogram"
    assert types["django_htask_recent_run_lateness_seconds"] == "histogram"
    assert types["django_htask_tasks_pending"] == "gauge"
    # labelled families are there (HELP, TYPE) without a sample
    for family in ("django_htask_recent_runs", "django_htask_tasks_due", "django_htask_node_up"):
        assert family in types
        assert family not in names(samples)


@db
def test_runs_by_name_function_and_status_in_the_window(fake_clock: FakeClock) -> None:
    run_row(fake_clock, 10, duration=0.2)
    run_row(fake_clock, 20, duration=3.0)
    run_row(fake_clock, 30, status=RunStatus.FAILED, attempt=2, duration=0.04, error="E: x")
    run_row(fake_clock, 40, status=RunStatus.MISSED)
    run_row(fake_clock, WINDOW + 60, duration=1.0)  # before the window: not counted
    run_row(fake_clock, 50, name="nightly", duration=0.5)  # a schedule's run
    samples, _, _ = scrape()
    runs = "django_htask_recent_runs"
    assert value(samples, runs, name=ADD, function=ADD, status="succeeded") == 2
    assert value(samples, runs, name=ADD, function=ADD, status="failed") == 1
    assert value(samples, runs, name=ADD, function=ADD, status="missed") == 1
    assert value(samples, runs, name="nightly", function=ADD, status="succeeded") == 1
    assert value(samples, "django_htask_recent_retries", name=ADD, function=ADD) == 1
    assert value(samples, "django_htask_recent_retries", name="nightly", function=ADD) == 0
    assert value(samples, "django_htask_recent_reaped_runs", name=ADD, function=ADD) == 0

    duration = "django_htask_recent_run_duration_seconds"
    assert value(samples, f"{duration}_count", name=ADD) == 3
    assert value(samples, f"{duration}_sum", name=ADD) == pytest.approx(3.24)
    assert value(samples, f"{duration}_bucket", name=ADD, le="0.05") == 1
    assert value(samples, f"{duration}_bucket", name=ADD, le="0.5") == 2
    assert value(samples, f"{duration}_bucket", name=ADD, le="5.0") == 3
    assert value(samples, f"{duration}_bucket", name=ADD, le="+Inf") == 3
    assert value(samples, f"{duration}_bucket", name="nightly", le="0.1") == 0
    assert value(samples, f"{duration}_bucket", name="nightly", le="0.5") == 1
    buckets = [k for k in samples if k[0] == f"{duration}_bucket" and ("name", ADD) in k[1]]
    assert len(buckets) == len(DURATION_BUCKETS) + 1


@db
def test_lateness_is_from_due_to_started(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    for late in (0.05, 0.7, 4.0, 120.0):
        run_row(fake_clock, 30, scheduled_for=now - timedelta(seconds=30 + late))
    # a missed occurrence did not start: it is not in the lateness
    run_row(fake_clock, 5, status=RunStatus.MISSED, scheduled_for=now - timedelta(seconds=900))
    samples, _, _ = scrape()
    lateness = "django_htask_recent_run_lateness_seconds"
    assert value(samples, f"{lateness}_count", name=ADD) == 4
    assert value(samples, f"{lateness}_sum", name=ADD) == pytest.approx(124.75)
    expected = {"0.1": 1, "0.5": 1, "1.0": 2, "2.0": 2, "5.0": 3, "60.0": 3, "300.0": 4}
    for le, n in expected.items():
        assert value(samples, f"{lateness}_bucket", name=ADD, le=le) == n, le
    assert value(samples, f"{lateness}_bucket", name=ADD, le="+Inf") == 4
    les = {dict(k[1])["le"] for k in samples if k[0] == f"{lateness}_bucket"}
    assert len(les) == len(LATENESS_BUCKETS) + 1


@db
def test_tasks_by_queue_and_the_oldest_due(fake_clock: FakeClock) -> None:
    now = fake_clock.now()

    def task(ago: float, status: str = TaskStatus.PENDING, queue: str = "default") -> None:
        Task.objects.create(
            function=ADD, run_at=now - timedelta(seconds=ago), status=status, queue_name=queue
        )

    task(90)
    task(30)
    task(-600)  # pending, not due yet
    task(5, TaskStatus.RUNNING)
    task(500, TaskStatus.SUCCEEDED)  # finished: not counted
    task(-60, queue="mail")
    task(2, TaskStatus.RUNNING, queue="mail")
    samples, _, _ = scrape()
    assert value(samples, "django_htask_tasks_pending", queue="default") == 3
    assert value(samples, "django_htask_tasks_due", queue="default") == 2
    assert value(samples, "django_htask_tasks_running", queue="default") == 1
    assert value(samples, "django_htask_oldest_due_task_age_seconds", queue="default") == 90
    assert value(samples, "django_htask_tasks_pending", queue="mail") == 1
    assert value(samples, "django_htask_tasks_due", queue="mail") == 0
    assert value(samples, "django_htask_tasks_running", queue="mail") == 1
    assert value(samples, "django_htask_oldest_due_task_age_seconds", queue="mail") == 0


@db
def test_schedules_due_and_broken(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    due = schedule_row("due")
    Schedule.objects.filter(pk=due.pk).update(next_run_at=now - timedelta(seconds=40))
    broken = schedule_row("broken")
    Schedule.objects.filter(pk=broken.pk).update(
        next_run_at=now - timedelta(seconds=900), broken="bad"
    )
    schedule_row("later")
    samples, _, _ = scrape()
    assert value(samples, "django_htask_schedules_due") == 1
    assert value(samples, "django_htask_oldest_due_schedule_age_seconds") == 40
    assert value(samples, "django_htask_schedules_broken") == 1


@db
def test_nodes_live_their_heartbeat_age_and_stuck_threads(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    node_row("n-live", now)
    get_store().heartbeat("n-live", now - timedelta(seconds=5), now, stuck=2)
    node_row("n-silent", now, silent_for=120)  # dead, not yet declared so
    stopped = node_row("n-stopped", now, silent_for=10)
    stopped.stopped_at = now
    stopped.save()
    samples, _, _ = scrape()
    assert value(samples, "django_htask_nodes_live") == 1
    assert value(samples, "django_htask_node_up", node="n-live") == 1
    assert value(samples, "django_htask_node_up", node="n-silent") == 0
    assert value(samples, "django_htask_node_heartbeat_age_seconds", node="n-live") == 5
    assert value(samples, "django_htask_node_heartbeat_age_seconds", node="n-silent") == 120
    assert value(samples, "django_htask_node_stuck_threads", node="n-live") == 2
    assert value(samples, "django_htask_node_stuck_threads", node="n-silent") == 0
    assert ("django_htask_node_up", (("node", "n-stopped"),)) not in samples


@db
def test_queues_paused_and_limited(fake_clock: FakeClock) -> None:
    from django_htask import limit_queue, pause_queue, resume_queue

    pause_queue("slow")
    limit_queue("reports", 3)
    pause_queue("once")
    resume_queue("once")
    samples, types, _ = scrape()
    assert types["django_htask_queue_paused"] == types["django_htask_queue_limit"] == "gauge"
    paused = {k[1][0][1]: v for k, v in samples.items() if k[0] == "django_htask_queue_paused"}
    assert paused == {"slow": 1, "reports": 0, "once": 0}
    assert value(samples, "django_htask_queue_limit", queue="reports") == 3
    assert ("django_htask_queue_limit", (("queue", "slow"),)) not in samples


@db
def test_a_run_the_reaper_failed_counts_as_reaped(fake_clock: FakeClock) -> None:
    now = fake_clock.now()
    store = get_store()
    store.register_node("dead", "host", 1, "0", now)
    Task.objects.create(function=ADD, run_at=now, max_attempts=2)
    assert len(store.start_tasks("dead", now, 10, now + timedelta(seconds=30))) == 1
    later = now + timedelta(seconds=61)
    store.register_node("alive", "host", 2, "0", later)
    fake_clock.advance(61, wait=False)
    store.reap("alive", later, later - timedelta(seconds=60), RetryPolicy(10, 60))
    samples, _, _ = scrape()
    assert value(samples, "django_htask_recent_reaped_runs", name=ADD, function=ADD) == 1
    assert value(samples, "django_htask_recent_runs", name=ADD, function=ADD, status="failed") == 1
    assert value(samples, "django_htask_tasks_pending", queue="default") == 1


@db
def test_reaped_runs_are_counted_whatever_the_reapers_texts_say(
    fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reaped runs are those the store rules' texts mark (store/rules.py): reworded
    there, the metric follows; a failure of the user's own that happens to say "stopped
    answering" is not counted."""
    monkeypatch.setattr(rules, "LOST_TASK", "lost by {holder} at try {attempt}/{max_attempts}.")
    monkeypatch.setattr(rules, "RUN_LOST", "its node went away")
    now = fake_clock.now()
    store = get_store()
    store.register_node("dead", "host", 1, "0", now)
    Task.objects.create(function=ADD, run_at=now, max_attempts=2)
    assert len(store.start_tasks("dead", now, 10, now + timedelta(seconds=30))) == 1
    schedule = Schedule(name="s", function=ADD, schedule="@every 1m")
    schedule.set_call((1,))
    schedule.save()
    Run.objects.create(
        schedule=schedule,
        name="s",
        function=ADD,
        node="dead",
        status=RunStatus.RUNNING,
        started_at=now,
        scheduled_for=now,
    )
    Run.objects.create(
        name=ADD,
        function=ADD,
        node="x",
        status=RunStatus.FAILED,
        started_at=now,
        finished_at=now,
        error="the upstream API stopped answering",
    )
    later = now + timedelta(seconds=61)
    store.register_node("alive", "host", 2, "0", later)
    fake_clock.advance(61, wait=False)
    store.reap("alive", later, later - timedelta(seconds=60), RetryPolicy(10, 60))
    errors = set(Run.objects.filter(node="dead").values_list("error", flat=True))
    assert errors == {"lost by dead at try 1/2.", "its node went away"}
    samples, _, _ = scrape()
    assert value(samples, "django_htask_recent_reaped_runs", name=ADD, function=ADD) == 1
    assert value(samples, "django_htask_recent_reaped_runs", name="s", function=ADD) == 1


@db
def test_a_scrape_is_a_fixed_handful_of_queries_and_writes_nothing(fake_clock: FakeClock) -> None:
    node_row("n-1", fake_clock.now())
    for i in range(30):
        run_row(fake_clock, i, name=f"job-{i % 3}", duration=0.1 * i)
        Task.objects.create(function=ADD, run_at=fake_clock.now(), queue_name=f"q{i % 4}")
    with CaptureQueriesContext(connection) as queries:
        scrape()
    sql = [q["sql"] for q in queries.captured_queries]
    assert len(sql) == 8, sql  # the runs: 3, tasks' successes: 1; tasks, schedules, nodes, queues
    assert all(s.lstrip().upper().startswith("SELECT") for s in sql), sql


@db
def test_only_get_and_head(fake_clock: FakeClock) -> None:
    client = Client()
    assert client.post(URL).status_code == 405
    head = client.head(URL)
    assert head.status_code == 200
    assert "no-cache" in head["Cache-Control"]


@db
def test_a_database_that_is_down_is_a_gauge_at_zero(
    fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    error = OperationalError('connection to server at "db.internal" (10.0.0.5) failed')
    with (
        mock.patch.object(connection, "cursor", side_effect=error),
        caplog.at_level(logging.WARNING, logger="django_htask.metrics"),
    ):
        samples, _, _ = scrape()
    assert samples == {("django_htask_database_up", ()): 0.0}
    assert [r.action for r in caplog.records] == ["metrics_database_error"]  # type: ignore[attr-defined]


@pytest.fixture
def without_prometheus() -> Iterator[None]:
    with mock.patch.dict(sys.modules, {"prometheus_client": None}):
        yield


@db
@pytest.mark.usefixtures("without_prometheus")
def test_without_prometheus_client_the_view_names_the_extra() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"pip install django-htask\[metrics\]"):
        render()


@pytest.mark.usefixtures("without_prometheus")
def test_without_prometheus_client_runscheduler_names_the_extra() -> None:
    with pytest.raises(CommandError, match=r"--metrics-port: .*pip install django-htask\[metrics"):
        call_command("runscheduler", "--metrics-port", "0")


def test_a_bad_metrics_port_is_refused() -> None:
    with pytest.raises(CommandError, match="--metrics-port must be 0 to 65535, got 70000"):
        call_command("runscheduler", "--metrics-port", "70000")


def test_the_collector_refuses_an_empty_window() -> None:
    with pytest.raises(ValueError, match="window must be > 0"):
        DatabaseCollector(window=0)


# -- a node's counters -------------------------------------------------------------------------
@pytest.fixture
def node_metrics() -> Iterator[tuple[NodeMetrics, CollectorRegistry]]:
    registry = CollectorRegistry()
    metrics = NodeMetrics("me", registry)
    metrics.connect()
    yield metrics, registry
    metrics.disconnect()


def _run(node: str, *, status: str = "succeeded", attempt: int = 1, **info: Any) -> None:
    info = {
        "name": ADD,
        "function": ADD,
        "node": node,
        "schedule_id": None,
        "task_id": 7,
        "scheduled_for": None,
        "attempt": attempt,
        **info,
    }
    run_started.send_robust(sender=Run, **info)
    run_finished.send_robust(sender=Run, status=status, error="", duration=0.3, **info)


def test_a_node_counts_its_own_claims_runs_and_retries(
    node_metrics: tuple[NodeMetrics, CollectorRegistry],
) -> None:
    metrics, registry = node_metrics
    _run("me")
    _run("me", status="failed", attempt=2)
    _run("me", name="nightly", schedule_id=3, task_id=None)
    _run("someone-else")  # another node in this process: not this one's
    get = registry.get_sample_value
    assert get("django_htask_node_claims_total", {"kind": "task"}) == 2
    assert get("django_htask_node_claims_total", {"kind": "schedule"}) == 1
    assert get("django_htask_node_runs_started_total", {"name": ADD, "function": ADD}) == 2
    finished = "django_htask_node_runs_finished_total"
    assert get(finished, {"name": ADD, "function": ADD, "status": "succeeded"}) == 1
    assert get(finished, {"name": ADD, "function": ADD, "status": "failed"}) == 1
    assert get("django_htask_node_retries_total", {"name": ADD, "function": ADD}) == 1
    assert get("django_htask_node_run_duration_seconds_count", {"name": ADD}) == 2
    assert get("django_htask_node_run_duration_seconds_sum", {"name": ADD}) == pytest.approx(0.6)
    info = [s for m in registry.collect() for s in m.samples if s.name == "django_htask_node_info"]
    assert [(s.labels["node"], s.value) for s in info] == [("me", 1.0)]
    metrics.disconnect()
    _run("me")  # unwired: no longer counted
    assert get("django_htask_node_claims_total", {"kind": "task"}) == 2
    metrics.connect()


def test_a_node_counts_what_its_reaper_handed_back_from_the_signal_not_the_log(
    node_metrics: tuple[NodeMetrics, CollectorRegistry],
) -> None:
    _, registry = node_metrics
    from django_htask.models import Node

    rows_reaped.send(sender=Node, node="me", rows=3)
    rows_reaped.send(sender=Node, node="someone else", rows=5)
    # The reaper's log record (worded as it may be) counts nothing.
    reaper = logging.getLogger("django_htask.node.liveness")
    reaper.warning("%d rows held by dead nodes handed back", 7, extra={"action": "reaped"})
    assert registry.get_sample_value("django_htask_node_reaped_total") == 3


def test_a_node_counts_what_its_pruner_deleted_by_table(
    node_metrics: tuple[NodeMetrics, CollectorRegistry],
) -> None:
    _, registry = node_metrics
    from django_htask.models import Node

    rows_pruned.send(sender=Node, node="me", tasks=5000, runs=7000, nodes=2)
    rows_pruned.send(sender=Node, node="me", tasks=1, runs=0, nodes=0)
    rows_pruned.send(sender=Node, node="someone else", tasks=9, runs=9, nodes=9)
    pruned = {
        table: registry.get_sample_value("django_htask_node_pruned_total", {"table": table})
        for table in ("task", "run", "node")
    }
    assert pruned == {"task": 5001, "run": 7000, "node": 2}
