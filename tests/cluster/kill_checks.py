"""What the 3-node kill -9 acceptance tests check, on PostgreSQL
(tests/cluster/test_acceptance.py) and on MariaDB (tests/cluster/test_mariadb_nodes.py):
schedules ``tick-…`` firing ``@every 1s`` with every occurrence caught up, one-off
``job`` tasks numbered from 0 that log their number and process (``site.log``)."""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from pathlib import Path

from tests.acceptance.conftest import Scheduler
from tests.cluster.site import ClusterSite

__all__ = [
    "each_occurrence_once",
    "each_task_once_but_the_killed_nodes",
    "kill_first",
    "start_work",
    "stop",
]

TICK = "tests.cluster.clusterapp.tasks:tick"
JOB = "tests.cluster.clusterapp.tasks:job"


def start_work(site: ClusterSite, schedules: int, tasks: int, window: float) -> datetime:
    """Save ``schedules`` schedules ``tick-…`` firing ``@every 1s`` (every occurrence
    caught up) and ``tasks`` one-off ``job`` tasks due evenly over the next ``window``
    seconds; return the time then (aware)."""
    out = site.django(
        f"""
from datetime import timedelta
from django_htask import clock
from django_htask.engine import registry
from django_htask.models import Schedule, Task
for i in range({schedules}):
    Schedule(name=f"tick-{{i}}", function="{TICK}", schedule="@every 1s",
             overlap="allow", catch_up="all", grace=None).save()
now = clock.now()
Task.objects.bulk_create(
    Task(function="{JOB}", payload=registry.check_call("{JOB}", (n,), {{}}),
         run_at=now + timedelta(seconds={window} * n / {tasks}), max_attempts=3)
    for n in range({tasks})
)
print(now.isoformat())
"""
    )
    return datetime.fromisoformat(out.strip())


def kill_first(site: ClusterSite, nodes: list[Scheduler], at: float) -> tuple[int, str]:
    """Kill the first of ``nodes`` with SIGKILL at ``at`` (``time.monotonic()``);
    return its process id and its node id."""
    time.sleep(max(0.0, at - time.monotonic()))
    victim = nodes[0]
    victim.send(signal.SIGKILL)
    victim.wait_exit(10)
    pid = victim.process.pid
    return pid, site.sql("SELECT id FROM django_htask_node WHERE pid = %s", pid)[0][0]


def stop(nodes: list[Scheduler]) -> None:
    """Stop the nodes still running (SIGTERM, then wait), and close every node's pipes."""
    running = [node for node in nodes if node.process.poll() is None]
    for node in running:
        node.send(signal.SIGTERM)
    for node in running:
        node.wait_exit(30)
    keep = os.environ.get("HTASK_TEST_KEEP_LOGS")  # a directory: each node's log, by pid
    for node in nodes:
        if keep:
            Path(keep, f"{node.process.pid}.log").write_text(node.stderr)
        for stream in (node.process.stdout, node.process.stderr):
            if stream is not None:
                stream.close()


def each_occurrence_once(
    site: ClusterSite, schedules: int, start: datetime, end: datetime, killed_node: str
) -> dict[int, list[datetime]]:
    """Every occurrence of the ``schedules`` from ``start`` to ``end`` has one row, a
    second apart, and only the killed node's runs failed (cut short). Returns each
    schedule's runs' start times."""
    runs = site.sql(
        "SELECT r.schedule_id, r.scheduled_for, r.started_at, r.status, r.node, r.error "
        "FROM django_htask_run r JOIN django_htask_schedule s ON s.id = r.schedule_id "
        "WHERE s.name LIKE 'tick-%%'"
    )
    occurrences: dict[int, list[datetime]] = defaultdict(list)
    started: dict[int, list[datetime]] = defaultdict(list)
    for schedule_id, scheduled_for, started_at, status, node, error in runs:
        occurrences[schedule_id].append(scheduled_for)
        started[schedule_id].append(started_at)
        assert status in ("succeeded", "failed"), (status, error)
        if status == "failed":  # only runs cut short by the kill
            assert "stopped answering" in error and node == killed_node, (node, killed_node)
    assert len(occurrences) == schedules
    for schedule_id, times in occurrences.items():
        times.sort()
        assert len(set(times)) == len(times), f"schedule {schedule_id} ran twice"
        gaps = {b - a for a, b in itertools.pairwise(times)}
        assert gaps == {timedelta(seconds=1)}, f"schedule {schedule_id} missed: {gaps}"
        assert times[0] <= start + timedelta(seconds=1)
        # fires lag a little under load
        assert times[-1] >= end - timedelta(seconds=5), (schedule_id, times[-1], end)
    return started


def each_task_once_but_the_killed_nodes(
    site: ClusterSite, tasks: int, killed_pid: int, killed_node: str
) -> None:
    """Each of the ``tasks`` ran at least once; one ran twice only if the killed
    node's process ran it first, and then succeeded on another node; each succeeded
    (on its row: a success writes no run row), and each run row of these tasks is an
    attempt the kill cut short."""
    executions: dict[int, list[int]] = defaultdict(list)
    for line in site.log.read_text().splitlines():
        n, pid = line.split()
        executions[int(n)].append(int(pid))
    assert sorted(executions) == list(range(tasks))
    again = {n: pids for n, pids in executions.items() if len(pids) > 1}
    assert all(pids[:-1] == [killed_pid] * (len(pids) - 1) for pids in again.values()), again
    # Queued in their numbers' order (start_work): the n-th by id is job n.
    rows = site.sql(
        f"SELECT status, node FROM django_htask_task WHERE function = '{JOB}' ORDER BY id"
    )
    assert Counter(status for status, _node in rows) == {"succeeded": tasks}
    # Run by the killed node's process, then again: its success is another node's.
    assert [n for n in again if rows[n][1] == killed_node] == [], again
    runs = site.sql(
        "SELECT r.status, r.node, r.error FROM django_htask_run r "
        f"JOIN django_htask_task t ON t.id = r.task_id WHERE t.function = '{JOB}'"
    )
    for status, node, error in runs:  # none for a success: only attempts cut short
        assert (status, node) == ("failed", killed_node) and "stopped answering" in error
