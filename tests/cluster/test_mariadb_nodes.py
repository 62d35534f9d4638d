"""Three ``runscheduler`` nodes on one MariaDB: one killed with SIGKILL under a stream
of one-off tasks and ``@every 1s`` schedules (issue 26's "done when"), then the server
restarted.

30 schedules ``@every 1s`` (every occurrence caught up) run for 24 s beside 600
one-off tasks due over the same window; the first node is killed a third of the way
in, and MariaDB is restarted (down for a second) at two thirds. Then: every task ran,
and only tasks the killed node held ran twice; every occurrence in the window has
exactly one row; every schedule fires again within 10 s of the kill (MariaDB has no
LISTEN: the survivors fire the schedules they stand by for a node that missed one,
then learn of its death from the heartbeats and the reaper); the survivors felt the
restart and lived through it, and each node's row says it stopped. And the server down
for 5 s under two nodes firing schedules ``@every 2s`` (test_acceptance.py's restart
test): one row per occurrence, the ones due meanwhile folded, both nodes live on.

It starts a MariaDB server of its own (it restarts it), in the MariaDB pass (``python
-m tests.mariadbcluster -- pytest``), the only pass that runs it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.acceptance.conftest import wait_until
from tests.cluster.conftest import MariaDBNodesSite as Site
from tests.cluster.conftest import _kill_nodes
from tests.cluster.kill_checks import (
    each_occurrence_once,
    each_task_once_but_the_killed_nodes,
    kill_first,
    start_work,
    stop,
)
from tests.cluster.test_occurrences import one_row_per_occurrence_across_a_restart
from tests.mariadbcluster import MariaDBServer, MariaDBUnavailable

pytestmark = [pytest.mark.mariadb, pytest.mark.slow]

SCHEDULES = 30
TASKS = 600
WINDOW = 24.0
#: How soon after the kill every schedule must fire again.
RESUMED_WITHIN = timedelta(seconds=10)


@pytest.fixture(scope="module")
def server() -> Iterator[MariaDBServer]:
    """A MariaDB server of the module's own: the test restarts it."""
    try:
        started = MariaDBServer().start()
    except MariaDBUnavailable as exc:
        pytest.fail(f"MariaDB is needed and did not start: {exc}")
    try:
        yield started
    finally:
        started.destroy()


@pytest.fixture
def site(server: MariaDBServer, tmp_path: Path) -> Iterator[Site]:
    site = Site(server.url, tmp_path / "jobs.log")
    site.django(
        "from django.core.management import call_command\ncall_command('migrate', verbosity=0)"
    )
    yield site
    _kill_nodes(site)


def _now(site: Site, code: str = "") -> datetime:
    """Run ``code`` in a subprocess, then read the clock there."""
    out = site.django(f"{code}\nfrom django_htask import clock\nprint(clock.now().isoformat())")
    return datetime.fromisoformat(out.strip().splitlines()[-1])


def test_three_nodes_a_kill_and_a_restart_lose_nothing_and_run_nothing_twice(
    server: MariaDBServer, site: Site
) -> None:
    start = start_work(site, SCHEDULES, TASKS, WINDOW)
    nodes = [site.node("--workers", "8") for _ in range(3)]
    t0 = time.monotonic()
    try:
        killed_pid, killed_node = kill_first(site, nodes, t0 + WINDOW / 3)
        killed_at = datetime.now(UTC)
        time.sleep(max(0.0, 2 * WINDOW / 3 - (time.monotonic() - t0)))
        server.restart(down_for=1.0)
        time.sleep(max(0.0, WINDOW - (time.monotonic() - t0)))
        end = _now(
            site,
            "from django_htask.models import Schedule\nSchedule.objects.update(enabled=False)",
        )
        wait_until(
            lambda: (
                site.one("SELECT count(*) FROM django_htask_task WHERE status <> 'succeeded'") == 0
            ),
            60,
            "every task to succeed",
        )
        wait_until(
            lambda: site.one("SELECT count(*) FROM django_htask_run WHERE status = 'running'") == 0,
            30,
            "no run left running",
        )
        assert all(n.process.poll() is None for n in nodes[1:]), [n.stderr for n in nodes[1:]]
    finally:
        stop(nodes)
    errors = "".join(n.stderr for n in nodes[1:])
    assert f"node {killed_node} marked dead" in errors
    assert "database unavailable" in errors  # the restart was felt, and survived
    # every node stopped: the killed one declared dead, the others' stops written (on a
    # connection opened after the restart: the one of start is dead since)
    assert site.sql("SELECT id FROM django_htask_node WHERE stopped_at IS NULL") == [], errors
    started = each_occurrence_once(site, SCHEDULES, start, end, killed_node)
    again = [min(t for t in times if t > killed_at) for times in started.values()]
    resumed = max(again) - killed_at
    assert resumed <= RESUMED_WITHIN, f"a schedule fired again only {resumed} after the kill"
    each_task_once_but_the_killed_nodes(site, TASKS, killed_pid, killed_node)


def test_each_occurrence_has_one_row_when_the_database_restarts(
    server: MariaDBServer, site: Site
) -> None:
    """test_acceptance.py's test of the same name on MariaDB: the server down for 5 s
    under two nodes firing schedules ``@every 2s``; one row per occurrence, the ones due
    meanwhile folded, and both nodes go on."""
    one_row_per_occurrence_across_a_restart(site, lambda: server.restart(down_for=5.0))
