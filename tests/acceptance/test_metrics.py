"""``manage.py runscheduler --metrics-port``: a real node serving Prometheus metrics,
scraped over HTTP and parsed with prometheus_client's parser."""

from __future__ import annotations

import signal
import socket
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import Scheduler, wait_until

pytestmark = pytest.mark.slow

NOOP = "tests.acceptance.app.tasks:noop"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape(url: str) -> tuple[Samples, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
        content_type = response.headers["Content-Type"]
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, content_type


def get(samples: Samples, series: str, /, **labels: str) -> float | None:
    return samples.get((series, tuple(sorted(labels.items()))))


def test_a_node_serves_its_counters_and_the_database_metrics(
    start_scheduler: Callable[..., Scheduler],
    django_code: Callable[[str], str],
    query: Callable[..., list[tuple[Any, ...]]],
) -> None:
    port = free_port()
    scheduler = start_scheduler(
        "--poll-interval", "0.3", "--node-id", "metrics-node", "--metrics-port", str(port)
    )
    url = f"http://127.0.0.1:{port}/metrics"
    assert f"metrics:   {url}" in scheduler.stdout, scheduler.stdout
    samples, content_type = scrape(url)
    assert content_type.startswith("text/plain; version=")
    assert get(samples, "django_htask_database_up") == 1
    assert get(samples, "django_htask_node_info", node="metrics-node", version=_version()) == 1

    django_code(f"from django_htask import schedule\nschedule('{NOOP}', 'scraped')\n")
    wait_until(
        lambda: query("SELECT 1 FROM django_htask_task WHERE status = 'succeeded'"),
        10,
        "the task",
    )
    succeeded = {"name": NOOP, "function": NOOP, "status": "succeeded"}
    samples = wait_until(
        lambda: (
            (s := scrape(url)[0]) and get(s, "django_htask_recent_runs", **succeeded) == 1 and s
        ),
        10,
        "the run in the metrics",
    )
    assert get(samples, "django_htask_nodes_live") == 1
    assert get(samples, "django_htask_node_up", node="metrics-node") == 1
    age = get(samples, "django_htask_node_heartbeat_age_seconds", node="metrics-node")
    assert age is not None and 0 <= age < 60
    # this node's own counters, from the run signals
    assert get(samples, "django_htask_node_claims_total", kind="task") == 1
    assert get(samples, "django_htask_node_runs_started_total", name=NOOP, function=NOOP) == 1
    assert get(samples, "django_htask_node_runs_finished_total", **succeeded) == 1
    assert get(samples, "django_htask_node_run_duration_seconds_count", name=NOOP) == 1
    assert get(samples, "django_htask_recent_run_duration_seconds_count", name=NOOP) == 1
    assert get(samples, "django_htask_recent_run_lateness_seconds_count", name=NOOP) == 1
    assert get(samples, "django_htask_tasks_pending", queue="default") is None  # none left

    scheduler.send(signal.SIGTERM)
    assert scheduler.wait_exit() == 0, scheduler.stderr


def _version() -> str:
    import django_htask

    return django_htask.__version__


def test_a_metrics_port_in_use_is_an_error_before_the_node_starts(
    db_file: Path, query: Callable[..., list[tuple[Any, ...]]]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        scheduler = Scheduler(db_file, ["--metrics-port", str(port)], {})
        try:
            assert scheduler.wait_exit() == 1
        finally:
            scheduler.kill()
    assert f"cannot serve metrics on 127.0.0.1:{port}" in scheduler.stderr, scheduler.stderr
    assert query("SELECT count(*) FROM django_htask_node") == [(0,)]
