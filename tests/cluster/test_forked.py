"""``runscheduler --processes N`` on PostgreSQL, as a user runs it: one command, N nodes
in processes forked from it; a node process killed with SIGKILL is replaced and the
work goes on; SIGTERM to the command stops them all; with ``--batch`` each ends when
nothing is due and the command with them."""

from __future__ import annotations

import os
import signal

import pytest

from tests.acceptance.conftest import wait_until
from tests.cluster.conftest import Site
from tests.cluster.site import process_stats

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

NOOP = "tests.cluster.clusterapp.tasks:noop"
LIVE = "SELECT pid FROM django_htask_node WHERE stopped_at IS NULL"
SUCCEEDED = "SELECT count(*) FROM django_htask_task WHERE status = 'succeeded'"


def children(parent: int) -> set[int]:
    """The processes whose parent is ``parent``, zombies left out."""
    return {
        pid
        for pid, (state, ppid, *_rest) in process_stats().items()
        if int(ppid) == parent and state != "Z"
    }


def queue(site: Site, count: int) -> None:
    site.django(
        f"from django_htask import schedule\nfor n in range({count}):\n    schedule({NOOP!r}, n)\n"
    )


def test_one_command_runs_n_nodes_and_replaces_one_killed(site: Site) -> None:
    group = site.spawn("--processes", "2")
    parent = group.process.pid
    wait_until(lambda: len(site.sql(LIVE)) == 2, 60, "two nodes")
    pids = {pid for (pid,) in site.sql(LIVE)}
    assert pids == children(parent)
    wait_until(lambda: group.stdout.count("  stop:      Ctrl-C") == 2, 30, "both banners")
    (line,) = [x for x in group.stdout.splitlines() if x.startswith("2 nodes, in processes ")]
    named = line.removeprefix("2 nodes, in processes ").partition(" forked from ")[0]
    assert {int(pid) for pid in named.split(", ")} == pids
    assert line.endswith(f"stop: Ctrl-C or SIGTERM to {parent} (a second one ends them at once)")
    queue(site, 20)
    wait_until(lambda: site.one(SUCCEEDED) == 20, 60, "the 20 tasks")

    victim = min(pids)
    os.kill(victim, signal.SIGKILL)

    def replaced() -> bool:
        now = children(parent)  # once: the victim may die between two reads
        return len(now) == 2 and victim not in now

    wait_until(replaced, 30, "another node process in its place")
    (new,) = children(parent) - pids
    wait_until(lambda: new in {pid for (pid,) in site.sql(LIVE)}, 60, "its node")
    queue(site, 20)
    wait_until(lambda: site.one(SUCCEEDED) == 40, 60, "20 more tasks")

    group.send(signal.SIGTERM)
    assert group.wait_exit(30) == 0, group.stderr
    assert group.stdout.rstrip().endswith("stopped."), group.stdout
    stopped = {pid for (pid,) in site.sql(LIVE.replace("IS NULL", "IS NOT NULL"))}
    assert stopped >= (pids - {victim}) | {new}


def test_with_batch_each_node_ends_when_nothing_is_due_and_the_command_with_them(
    site: Site,
) -> None:
    queue(site, 30)
    group = site.spawn("--processes", "2", "--batch")
    assert group.wait_exit(60) == 0, group.stderr
    assert site.one(SUCCEEDED) == 30
    assert group.stdout.count("nothing is due any more (--batch).") == 2, group.stdout
    assert len(site.sql("SELECT id FROM django_htask_node WHERE stopped_at IS NOT NULL")) == 2
