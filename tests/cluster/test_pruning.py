"""Pruning with real ``runscheduler`` processes (docs/operating.md, "Operating for the
long run"): three nodes on one database, one of them prunes, and when it is killed
with SIGKILL in the middle of a prune, the next one takes the turn; nothing is half
deleted. On PostgreSQL here, on MariaDB in test_mariadb_pruning.py."""

from __future__ import annotations

import pytest

from tests.acceptance.conftest import wait_until
from tests.cluster.conftest import Site

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: Finished tasks past their retention, each with a run: 30 batches of PRUNE_BATCH,
#: each followed by a pause of 50 ms at least, so that the kill falls inside the round.
EXPIRED = 6_000
YOUNG = 50
NOOP = "tests.cluster.clusterapp.tasks:noop"


def fill(site: Site, count: int, days_ago: float, prefix: str) -> None:
    """``count`` tasks that succeeded ``days_ago`` days ago, each with a run."""
    ended = site.ago_sql(days_ago * 86400)
    site.sql(
        "INSERT INTO django_htask_task (token, function, payload, run_at, status, attempts, "
        "max_attempts, priority, last_error, traceback, created_at, finished_at, started_at, "
        "backend, queue_name, give_up_on, retry_jitter, retry_kind, retry_on) "
        f"SELECT CONCAT('{prefix}', i), '{NOOP}', '', {ended}, 'succeeded', 1, 1, 0, '', '', "
        f"{ended}, {ended}, {ended}, '', 'default', '', 'none', 'exponential', '' "
        f"FROM {site.SERIES_SQL.format(n=count)} AS s"
    )
    site.sql(
        "INSERT INTO django_htask_run (name, function, node, attempt, scheduled_for, "
        "started_at, finished_at, status, error, traceback, task_id) "
        "SELECT function, function, 'gone', 1, run_at, started_at, finished_at, status, '', "
        "'', id FROM django_htask_task WHERE token LIKE %s",
        f"{prefix}%",
    )


def count(site: Site, prefix: str) -> int:
    return int(site.one("SELECT count(*) FROM django_htask_task WHERE token LIKE %s", f"{prefix}%"))


def pruned_by(site: Site) -> dict[str, int]:
    rows = site.sql("SELECT id, pruned_tasks FROM django_htask_node ORDER BY id")
    return {node: int(tasks) for node, tasks in rows}


def test_one_node_prunes_and_a_kill_mid_prune_hands_the_turn_on(site: Site) -> None:
    fill(site, EXPIRED, 8, "old-")
    fill(site, YOUNG, 1, "young-")
    # A round every 5 s, the first 5 s after a node's start: the three are up by then.
    env = {"HTASK_CLUSTER_PRUNE": "5", "HTASK_CLUSTER_PRUNE_BATCH": "200"}
    nodes = [site.spawn("--node-id", f"prune-{n}", **env) for n in "abc"]
    for node in nodes:
        node.wait_ready(60)
    wait_until(lambda: count(site, "old-") < EXPIRED, 60, "the first node to prune")
    nodes[0].kill()  # SIGKILL, within its round
    left = count(site, "old-")
    assert 0 < left < EXPIRED, "the kill fell after the round: more rows are needed"
    # The dead node is live to the others until NODE_TIMEOUT (6 s here); the next in id
    # order takes the turn at its next round after that (PRUNE_INTERVAL, 5 s here).
    wait_until(lambda: count(site, "old-") < left, 30, "the next node to take the turn")
    wait_until(lambda: count(site, "old-") == 0, 120, "the next node to prune the rest")
    assert count(site, "young-") == YOUNG
    runs = site.one("SELECT count(*) FROM django_htask_run")
    assert runs == YOUNG  # each deleted task's run went with it, in its batch
    by_node = pruned_by(site)
    # Every deleted row is counted once: the killed node's last batch rolled back with
    # its count; the node after it in id order took the turn, the third never pruned.
    assert sum(by_node.values()) == EXPIRED
    assert by_node["prune-a"] > 0 and by_node["prune-b"] > 0
    assert by_node["prune-c"] == 0
