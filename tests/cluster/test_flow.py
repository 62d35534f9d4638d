"""Rate limits and limits per key across real ``runscheduler`` processes on PostgreSQL
(docs/howto-exactly-one.md, "Limits per key and rate limits"); the same on MariaDB in
tests/cluster/test_mariadb_flow.py, with two nodes.

The rate limit's check is the claim instants the database recorded: each task's
``started_at`` (its last attempt's), and for an attempt cut short by a kill, the
start its failed run keeps. No account may start more than its limit in any interval
of the period (the sliding window the docs define), and while its tasks wait the
limit is used: to at least 90 % in the run the docs quote (``HTASK_FLOW_TASKS=2000``).
The share is a measure of speed, which the machine's load moves (on MariaDB's two
nodes, one left after the kill, 77-95 % in the suite's short run beside other test
runs): the short run (300 tasks unless ``HTASK_FLOW_TASKS`` says otherwise) asks
only half, which a flow stalled after the kill would miss. That a held task starts
when its window has room, by the node's timer, is tests/unit/node/test_flow.py's,
on the fake clock."""

from __future__ import annotations

import os
import signal
from collections import defaultdict
from datetime import datetime, timedelta

import pytest

from tests.acceptance.conftest import wait_until
from tests.cluster.conftest import Site
from tests.cluster.site import ClusterSite
from tests.cluster.test_locks import most_at_once, spans

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

METERED = "tests.cluster.clusterapp.tasks:metered"
ACCOUNTS = 5
RATE, PERIOD = 20, timedelta(seconds=1)
TASKS = int(os.environ.get("HTASK_FLOW_TASKS", "300"))
#: Each account's tasks must use its limit to this share while they wait (see above).
USED = 0.9 if TASKS >= 2000 else 0.5
#: Each key must run at least so many tasks at once on average while its tasks wait
#: (3 at most: the rest is an end's hand-over to the next task, some 50-150 ms).
RUNNING = 2.5
#: The nodes' environment: a killed node's attempts are retried soon after.
RETRY = {"HTASK_CLUSTER_RETRY_BACKOFF": "0.2"}


@pytest.fixture
def flow_nodes() -> int:
    """How many nodes share the work (the MariaDB twin runs two)."""
    return 3


def starts(site: ClusterSite) -> tuple[dict[str, list[datetime]], dict[str, datetime]]:
    """Each account's starts, sorted (every attempt's claim instant), and the start of
    the last of its tasks' first attempts (until then, some of its tasks were due and
    waiting: all were queued due at once)."""
    tasks = site.sql(
        "SELECT id, per_key, started_at, attempts FROM django_htask_task WHERE function = %s",
        METERED,
    )
    cut = site.sql(
        "SELECT r.task_id, r.started_at, r.attempt FROM django_htask_run r "
        "JOIN django_htask_task t ON t.id = r.task_id "
        "WHERE t.function = %s AND r.status = 'failed'",
        METERED,
    )
    account = {pk: key for pk, key, _at, _n in tasks}
    first = {pk: at for pk, _key, at, n in tasks if n == 1}
    found: dict[str, list[datetime]] = defaultdict(list)
    for _pk, key, at, _n in tasks:
        found[key].append(at)
    for pk, at, attempt in cut:
        found[account[pk]].append(at)
        if attempt == 1:
            first[pk] = at
    last_first: dict[str, datetime] = {}
    for pk, at in first.items():
        key = account[pk]
        last_first[key] = max(at, last_first.get(key, at))
    return {key: sorted(times) for key, times in found.items()}, last_first


def over_the_limit(times: list[datetime]) -> list[tuple[datetime, datetime]]:
    """The intervals shorter than the period holding more than the limit's starts."""
    return [
        (times[i], times[i + RATE])
        for i in range(len(times) - RATE)
        if times[i + RATE] - times[i] < PERIOD
    ]


def used(times: list[datetime], first: datetime, end: datetime) -> float:
    """The share of the limit ``times`` used in the windows of the period that lie in
    ``first`` to ``end``: their starts counted in each window, over the limit, averaged
    over every window's place (a window holds at most the limit: at most 1)."""
    a, b = first, end - PERIOD
    inside = timedelta(0)
    for t in times:  # a start is in the windows beginning from its time less a period to it
        inside += max(timedelta(0), min(b, t) - max(a, t - PERIOD))
    return inside / (RATE * (b - a))


def test_no_account_starts_more_than_its_rate_limit_in_any_window_through_a_kill(
    site: Site, flow_nodes: int
) -> None:
    nodes = [site.spawn("--workers", "24", **RETRY) for _ in range(flow_nodes)]
    for node in nodes:
        node.wait_ready(60)
    site.django(
        "from django_htask import schedule_many\n"
        "from tests.cluster.clusterapp.tasks import metered\n"
        f"schedule_many([(metered, (n, n % {ACCOUNTS}, 0.05), {{}}) for n in range({TASKS})],"
        " max_attempts=3)\n"
    )
    started = "SELECT count(*) FROM django_htask_task WHERE started_at IS NOT NULL"
    wait_until(lambda: site.one(started) >= TASKS // 2, 60, "half the tasks started")
    # The node killed is one seen running two tasks or more: the rest of the tasks
    # take a second or two, too short to wait for a node chosen beforehand to be busy.
    busy = (
        "SELECT n.pid FROM django_htask_task t JOIN django_htask_node n ON n.id = t.locked_by "
        "WHERE t.status = 'running' AND t.function = %s GROUP BY n.pid HAVING count(*) >= 2"
    )
    pids = wait_until(lambda: site.sql(busy, METERED), 60, "a node running two tasks")
    [victim] = [node for node in nodes if node.process.pid == pids[0][0]]
    victim.send(signal.SIGKILL)
    victim.wait_exit(10)
    site.wait_all_succeeded(TASKS / (RATE * ACCOUNTS) + 60)
    by_account, last_first = starts(site)
    assert sorted(by_account) == [str(a) for a in range(ACCOUNTS)]
    attempts = sum(len(times) for times in by_account.values())
    assert attempts > TASKS  # the killed node's were cut short, and ran again
    shares = {}
    for key, times in by_account.items():
        assert over_the_limit(times) == [], key
        shares[key] = used(times, times[0], last_first[key])
        if os.environ.get("HTASK_FLOW_DEBUG"):
            print(key, [round((t - times[0]).total_seconds(), 3) for t in times])
    assert min(shares.values()) >= USED, shares
    print(
        f"{TASKS} tasks, {attempts} starts, {flow_nodes} nodes (one killed): "
        f"the limit used to {min(shares.values()):.1%}-{max(shares.values()):.1%} "
        "while the tasks waited, never over it in any window of the period"
    )
    assert all(node.process.poll() is None for node in nodes if node is not victim)


def mean_running(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """How many of ``intervals`` ran at once on average from ``start`` to ``end``."""
    total = sum(max(0.0, min(e, end) - max(s, start)) for s, e in intervals)
    return total / (end - start)


def test_a_key_never_runs_more_than_max_running_and_runs_that_many_while_work_waits(
    site: Site, flow_nodes: int
) -> None:
    nodes = [site.spawn("--workers", "5") for _ in range(flow_nodes)]  # 9 run at most
    for node in nodes:
        node.wait_ready(60)
    site.django(
        "from django_htask import schedule_many\n"
        "from tests.cluster.clusterapp.tasks import keyed\n"
        "schedule_many([(keyed, (n, n % 3, 2.0), {}) for n in range(27)])\n"
    )
    site.wait_all_succeeded(60)
    runs = spans(site, "kstart", "kend")
    assert sorted(n for n, _p, _s, _e in runs) == list(range(27))
    busy = []
    for key in range(3):
        mine = [(s, e or s) for n, _p, s, e in runs if n % 3 == key]
        assert most_at_once(mine) == 3, key
        begins = sorted(s for s, _e in mine)  # from its third start to its last, some of
        busy.append(mean_running(mine, begins[2], begins[-1]))  # its tasks waited
    assert min(busy) >= RUNNING, busy  # 3 running, but for an end's hand-over
    print(f"each key ran {min(busy):.2f}-{max(busy):.2f} tasks at once on average (limit 3)")
    assert len({pid for _n, pid, _s, _e in runs}) > 1
    assert all(node.process.poll() is None for node in nodes)
