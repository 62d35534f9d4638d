"""A queue paused, limited and resumed under real ``runscheduler`` processes on
PostgreSQL (heard through ``NOTIFY``: the nodes poll every 5 s here). The queue's row
is written by another client's SQL, so the time from the write to each node's log
line is what a node takes to hear it. tests/cluster/test_mariadb_queue_control.py runs
the same on MariaDB, where the nodes hear it at their poll (0.5 s there)."""

from __future__ import annotations

import itertools
import re
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.acceptance.conftest import Scheduler, wait_until
from tests.cluster.conftest import Site
from tests.cluster.test_locks import most_at_once, spans

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: A node hears a queue change within this (the brief's bound).
HEARD = 1.0
Q = "partner"


def queued(site: Site) -> list[int]:
    """The numbers of the ``slow`` tasks started, in the order they started."""
    return [n for n, _pid, _start, _end in spans(site, "start", "end")]


def change(site: Site, nodes: list[Scheduler], said: str, sql: str, *params: object) -> float:
    """Write the queue's row by ``sql`` and return the seconds until every node of
    ``nodes`` logged ``said``."""
    counts = [n.stderr.count(said) for n in nodes]
    written = time.monotonic()
    site.sql(sql, *params)
    wait_until(
        lambda: all(n.stderr.count(said) > c for n, c in zip(nodes, counts, strict=True)),
        30,
        f"every node logged {said!r}",
    )
    return time.monotonic() - written


def test_every_node_hears_a_pause_a_limit_and_a_resume_and_a_new_one_starts_paused(
    site: Site,
) -> None:
    nodes = [site.spawn("--workers", "3") for _ in range(3)]  # started side by side
    for node in nodes:
        node.wait_ready(60)
    tick = site.schedule("tick", "@every 1s", "tests.cluster.clusterapp.tasks:tick",
                         queue_name=Q)  # fmt: skip
    wait_until(lambda: site.one("SELECT count(*) FROM django_htask_run"), 10, "a tick ran")
    now = datetime.now(UTC)
    took = change(
        site,
        nodes,
        f"queue {Q} paused",
        "INSERT INTO django_htask_queue (name, paused, paused_at, updated_at) "
        "VALUES (%s, TRUE, %s, %s)",
        Q, now, now,
    )  # fmt: skip
    assert took < HEARD, took
    heard = [took]
    paused_at = datetime.now(UTC)
    site.django(
        "from django_htask import schedule\n"
        "from tests.cluster.clusterapp.tasks import slow\n"
        f"for n in range(6):\n    schedule(slow, n, 0.5, queue_name={Q!r})\n"
        "schedule(slow, 99, 0)\n"  # another queue's task
    )
    wait_until(lambda: queued(site) == [99], 10, "the other queue's task")
    late = site.node("--workers", "3")  # started while paused: starts paused
    assert f"paused {Q}" in late.stdout
    nodes.append(late)
    time.sleep(2 * HEARD)
    assert queued(site) == [99]  # none of the paused queue's tasks started
    took = change(
        site, nodes, f"queue {Q} limited to 2", "UPDATE django_htask_queue SET max_running = 2"
    )
    assert took < HEARD, took
    heard.append(took)
    took = change(
        site,
        nodes,
        f"queue {Q} resumed",
        "UPDATE django_htask_queue SET paused = FALSE, paused_at = NULL",
    )
    assert took < HEARD, took
    heard.append(took)
    wait_until(lambda: len(queued(site)) == 7, 30, "the queue's tasks started")
    wait_until(lambda: all(e for *_x, e in spans(site, "start", "end")), 30, "and ended")
    runs = [run for run in spans(site, "start", "end") if run[0] != 99]
    # 12 workers free; the limit holds whichever node claims (tests/integration/
    # store_checks.py races four claims at a barrier on the limit).
    assert most_at_once([(s, e or s) for _n, _p, s, e in runs]) == 2
    # Every occurrence of the paused schedule has one row: run, or folded into the run
    # of the latest (catch_up="latest") at the resume.
    rows = site.sql(
        "SELECT scheduled_for, status FROM django_htask_run WHERE schedule_id = %s "
        "ORDER BY scheduled_for",
        tick,
    )
    times = [when for when, _status in rows]
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(times)), times
    during = [status for when, status in rows if when > paused_at + timedelta(seconds=1)]
    assert "skipped" in during, rows
    assert all(n.process.poll() is None for n in nodes)
    assert not [n for n in nodes if re.search(r"Traceback", n.stderr)]
    print("every node heard the pause, the limit, the resume after", heard, "s")
