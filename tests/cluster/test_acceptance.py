"""Three ``runscheduler`` nodes on one PostgreSQL: a node killed, the server restarted.

200 schedules ``@every 1s`` run for 30 s beside 2,000 one-off tasks due over the same
window; one node is killed with SIGKILL a third of the way in, and PostgreSQL is
restarted at two thirds. Then, from the ``Run`` table: every occurrence ran exactly
once, every task at least once, and only tasks the killed node held ran twice. And an
edit saved in another process is acted on in under a second.

This test starts its own PostgreSQL cluster (it restarts it), so it runs once, in the
PostgreSQL pass of the suite.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.acceptance.conftest import Scheduler, wait_until
from tests.cluster.kill_checks import (
    TICK,
    each_occurrence_once,
    each_task_once_but_the_killed_nodes,
    kill_first,
    start_work,
    stop,
)
from tests.cluster.site import ClusterSite
from tests.cluster.test_occurrences import one_row_per_occurrence_across_a_restart
from tests.pgcluster import PostgresCluster, PostgresUnavailable

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SETTINGS = "tests.cluster.settings"
SCHEDULES = 200
TASKS = 2_000
WINDOW = 30.0
EDITED_RUNS = (
    "SELECT r.started_at FROM django_htask_run r "
    "JOIN django_htask_schedule s ON s.id = r.schedule_id "
    "WHERE s.name = 'edited' AND r.started_at >= %s"
)


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresCluster]:
    try:
        cluster = PostgresCluster().start()
    except PostgresUnavailable as exc:
        pytest.fail(f"PostgreSQL is needed and did not start: {exc}")
    try:
        yield cluster
    finally:
        cluster.destroy()


class Site(ClusterSite):
    """The test's view of the site: env for subprocesses, SQL, Django snippets."""

    def __init__(self, pg: PostgresCluster, log: Path) -> None:
        super().__init__(pg, log, SETTINGS)

    def node(self, *args: str) -> Scheduler:
        scheduler = Scheduler(Path("unused"), ["--workers", "8", *args], self.env)
        scheduler.wait_ready(60)
        return scheduler


@pytest.fixture
def site(pg: PostgresCluster, tmp_path: Path) -> Site:
    site = Site(pg, tmp_path / "jobs.log")
    site.django(
        "from django.core.management import call_command\ncall_command('migrate', verbosity=0)"
    )
    return site


def test_three_nodes_a_kill_and_a_restart(site: Site) -> None:
    start = start_work(site, SCHEDULES, TASKS, WINDOW)
    nodes = [site.node() for _ in range(3)]
    t0 = time.monotonic()
    try:
        killed_pid, killed_node = kill_first(site, nodes, t0 + WINDOW / 3)
        time.sleep(max(0.0, 2 * WINDOW / 3 - (time.monotonic() - t0)))
        site.pg.restart(down_for=1.0)
        time.sleep(max(0.0, WINDOW - (time.monotonic() - t0)))
        end = datetime.fromisoformat(
            site.django(
                "from django_htask import clock\nfrom django_htask.models import Schedule\n"
                "Schedule.objects.update(enabled=False)\nprint(clock.now().isoformat())"
            ).strip()
        )
        # every task done, every run finished (the killed node's by the reaper)
        try:
            wait_until(
                lambda: (
                    site.sql("SELECT count(*) FROM django_htask_task WHERE status <> 'succeeded'")[
                        0
                    ][0]
                    == 0
                ),
                60,
                "every task to succeed",
            )
        except AssertionError as exc:
            left = site.sql(
                "SELECT status, locked_by, attempts, run_at, lease_expires_at, last_error "
                "FROM django_htask_task WHERE status <> 'succeeded' LIMIT 20"
            )
            nodes_now = site.sql(
                "SELECT id, pid, last_heartbeat, stopped_at FROM django_htask_node"
            )
            logs = [n.stderr[-4000:] for n in nodes[1:]]
            raise AssertionError(f"{exc}\nleft: {left}\nnodes: {nodes_now}\nlogs: {logs}") from None
        wait_until(
            lambda: (
                site.sql("SELECT count(*) FROM django_htask_run WHERE status = 'running'")[0][0]
                == 0
            ),
            60,
            "no run left running",
        )
        survivors_ok = all(n.process.poll() is None for n in nodes[1:])
        assert survivors_ok, [n.stderr[-3000:] for n in nodes[1:]]
        _edits_are_acted_on_within_a_second(site)
    finally:
        stop(nodes)
    errors = "".join(n.stderr for n in nodes[1:])
    assert "database unavailable" in errors  # the restart was felt, and survived
    assert "marked dead" in errors
    # every node stopped: the killed one declared dead, the others' stops written (on a
    # connection opened after the restart: the one of start is dead since)
    assert site.sql("SELECT id FROM django_htask_node WHERE stopped_at IS NULL") == [], errors

    # -- schedules: each occurrence in the window exactly once -------------------------
    started = each_occurrence_once(site, SCHEDULES, start, end, killed_node)
    assert sum(len(t) for t in started.values()) >= SCHEDULES * (WINDOW - 5)
    # -- tasks: each at least once, twice only if the killed node held it ---------------
    each_task_once_but_the_killed_nodes(site, TASKS, killed_pid, killed_node)


def _edits_are_acted_on_within_a_second(site: Site) -> None:
    """An edit saved in another process (as the admin does) fires on time: it is seen
    through NOTIFY, as the safety-net poll is every 5 s."""
    site.django(
        f"""
from django_htask.models import Schedule
Schedule(name="edited", function="{TICK}", schedule="@every 1h").save()
"""
    )
    for attempt in range(3):
        saved = datetime.fromisoformat(
            site.django(
                """
from datetime import timedelta
from django_htask import clock
from django_htask.models import Schedule
s = Schedule.objects.get(name="edited")
due = clock.now() + timedelta(seconds=0.3)
s.schedule = f"@once {due.isoformat()}"
s.save()
print(clock.now().isoformat())
"""
            ).strip()
        )
        row = wait_until(
            lambda saved=saved: site.sql(EDITED_RUNS, saved),
            10,
            f"the edited schedule to fire (attempt {attempt + 1})",
        )
        assert (row[0][0] - saved).total_seconds() < 1.0


def test_each_occurrence_has_one_row_when_the_database_restarts(site: Site) -> None:
    """The database down for 5 s (a restart, a failover) under two nodes, schedules
    ``@every 2s`` with the default overlap and catch-up (``catch_up="latest"``: the
    occurrences due meanwhile are folded into one run, each with its row): none is
    without a row or has two, and both nodes go on (issue 28)."""
    one_row_per_occurrence_across_a_restart(site, lambda: site.pg.restart(down_for=5.0))
