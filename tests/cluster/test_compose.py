"""Tasks composed across real ``runscheduler`` nodes on PostgreSQL (three nodes; the
same test on MariaDB with two: tests/cluster/test_mariadb_compose.py), one killed with
SIGKILL while members and steps run.

A graph (a root, a fan-out to branches, a fan-in receiving the result of each branch's
last step, a chain after it) and two batches (one all succeeding, with siblings added
by a member while it runs; one with a member failing for good and one failing its first
attempt only) run to their end. Then: each step ran to its end once (a second time only
after the killed node's run); no step's run started before each step it runs after had
succeeded (the runs' ``started_at`` against the dependencies' ``finished_at``, and the
steps' own logs); the fan-in received every result; each batch's counts are exact and
each callback was released exactly once (``on_failure`` only for the failure for good),
ran once unless the killed node was running it, and the callbacks not called were
cancelled.

The graph is small unless ``HTASK_COMPOSE_TASKS`` is given: by default a root, a
fan-out of 30 single steps, the fan-in and a chain of 5 (37 tasks); with
``HTASK_COMPOSE_TASKS=N``, a root, a fan-out to 100 branches that are chains of
``round((N - 12) / 100)`` steps, the fan-in and a chain of 10 (1,012 tasks for N =
1000), and the node is killed once about a quarter of the graph's steps have run."""

from __future__ import annotations

import itertools
import os
import signal
from collections import defaultdict

import pytest

from tests.acceptance.conftest import wait_until
from tests.cluster.conftest import MariaDBNodesSite, Site

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

_SIZE = os.environ.get("HTASK_COMPOSE_TASKS")
#: Branches of the fan-out, steps per branch, steps of the chain after the fan-in.
FAN, DEPTH, CHAIN = (
    (30, 1, 5) if _SIZE is None else (100, max(1, round((int(_SIZE) - 12) / 100)), 10)
)
#: The tasks of the graph.
GRAPH = 1 + FAN * DEPTH + 1 + CHAIN
#: How long each step of a branch takes (a short step at full size keeps it a minute).
STEP = 0.3 if _SIZE is None else 0.05
#: The steps' numbers: the root 0, branch b's step j ``b + 1000 * j`` (b from 1), the
#: chain's step k ``TAIL + k``.
TAIL = 100_000
GSTEP = "tests.cluster.clusterapp.tasks:gstep"
GATHER = "tests.cluster.clusterapp.tasks:gather"

WORK = f"""
from django_htask import batch, call, chain, group, schedule
from tests.cluster.clusterapp.tasks import QUICK, batch_cb, bmember, gather, gstep

def step(n, seconds):
    return call(gstep, n, seconds).using(retry=QUICK)

def callbacks(name):
    return {{role: (batch_cb, (f"{{name}}-{{role[3:]}}",), {{}})
            for role in ("on_success", "on_failure", "on_finish")}}

graph = chain(
    step(0, 0.3),
    group(*(chain(*(step(b + 1000 * j, {STEP}) for j in range({DEPTH})))
            for b in range(1, {FAN} + 1))),
    call(gather).using(retry=QUICK).receiving("parts"),
    *(step({TAIL} + k, 0.1) for k in range({CHAIN})),
).schedule()
with batch(name="A", **callbacks("A")) as a:
    for n in range(30):
        schedule(bmember, n, 0.3, siblings=2 if n == 0 else 0, retry=QUICK)
with batch(name="B", **callbacks("B")) as b:
    schedule(bmember, 200, 0.1, fail="always")
    schedule(bmember, 201, 0.3, fail="once", retry=QUICK)
    for n in range(202, 220):
        schedule(bmember, n, 0.3, retry=QUICK)
print(a.id, b.id)
"""


def test_a_graph_and_batches_end_exactly_once_across_nodes_one_killed(site: Site) -> None:
    count = 2 if isinstance(site, MariaDBNodesSite) else 3
    # A killed node is declared dead within 3 s (its session gone, or its heartbeat late).
    env = {"HTASK_CLUSTER_RETRY_BACKOFF": "0.2", "HTASK_CLUSTER_NODE_TIMEOUT": "3"}
    nodes = [site.spawn("--workers", "4", **env) for _ in range(count)]
    for node in nodes:
        node.wait_ready(60)
    a_id, b_id = (int(v) for v in site.django(WORK).split())
    # Each step logs two lines: at full size, about a quarter of the graph has run.
    mid = 20 if _SIZE is None else GRAPH // 2
    wait_until(lambda: len(site.lines()) >= mid, 30, "members and steps running")
    victim = nodes[0]
    victim.send(signal.SIGKILL)
    victim.wait_exit(10)
    killed = victim.process.pid
    wait_until(
        lambda: (
            not site.sql(
                "SELECT 1 FROM django_htask_task WHERE status IN ('pending', 'waiting', 'running')"
            )
        ),
        90 if _SIZE is None else 90 + GRAPH // 5,
        "every task ended",
    )
    lines = site.lines()
    cut_short = [
        line for line in lines if line[0] in ("gstart", "bstart") and int(line[2]) == killed
    ]
    assert cut_short, "the killed node had started none of the work"
    _steps_in_order(lines, killed)
    _runs_after_their_dependencies(site)
    gathered = [line for line in lines if line[0] == "gather"][-1]
    last = [b + 1000 * (DEPTH - 1) for b in range(1, FAN + 1)]
    assert gathered[1:3] == [str(sum(last)), str(FAN)]
    a_total = 30 + sum(1 for line in lines if line[0] == "spawned")  # 2, or more if killed
    _batch_is(site, a_id, total=a_total, succeeded=a_total, failed=0, cancelled=0)
    _batch_is(site, b_id, total=20, succeeded=19, failed=1, cancelled=0)
    calls = _callbacks(lines, killed)
    assert sorted(calls) == ["A-finish", "A-success", "B-failure", "B-finish"], calls
    total = str(a_total)
    assert calls["A-success"][:4] == calls["A-finish"][:4] == [str(a_id), total, total, "0"]
    assert calls["B-finish"][:4] == [str(b_id), "20", "19", "1"]
    assert calls["B-failure"][3] == "1"  # released at the first failure for good
    cancelled = site.sql(
        "SELECT t.last_error FROM django_htask_task t JOIN django_htask_batch b "
        "ON t.id IN (b.on_failure_id, b.on_success_id) WHERE t.status = 'cancelled' "
        "ORDER BY b.id"
    )
    assert [error for (error,) in cancelled] == [
        "cancelled: the batch's on_failure callback is not called: no member failed",
        "cancelled: the batch's on_success callback is not called: 1 of its 20 members "
        "failed, 0 cancelled",
    ]
    assert all(n.process.poll() is None for n in nodes[1:])
    lost = site.one(
        "SELECT count(*) FROM django_htask_run WHERE status = 'failed' AND function IN (%s, %s)",
        GSTEP,
        GATHER,
    )
    print(
        f"{count} nodes, a graph of {GRAPH} tasks, one node killed after it started "
        f"{len(cut_short)} (steps run again: {lost}): callbacks {calls}"
    )


def _steps_in_order(lines: list[list[str]], killed: int) -> None:
    """Each step ran to its end once (a second run only after the killed node's), and
    none started before each step it runs after had ended."""
    starts: dict[int, list[float]] = defaultdict(list)
    ends: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for line in lines:
        if line[0] in ("gstart", "gend"):
            n, pid, at = int(line[1]), int(line[2]), float(line[3])
            if line[0] == "gstart":
                starts[n].append(at)
            else:
                ends[n].append((at, pid))
    branches = [[b + 1000 * j for j in range(DEPTH)] for b in range(1, FAN + 1)]
    tail = [TAIL + k for k in range(CHAIN)]
    steps = [0, *(n for branch in branches for n in branch), *tail]
    assert sorted(ends) == sorted(steps)
    for n in steps:
        assert [pid for _at, pid in ends[n]][:-1] in ([], [killed]), (n, ends[n])
    done = {n: max(at for at, _pid in ends[n]) for n in steps}
    gathered = max(float(line[4]) for line in lines if line[0] == "gather")
    for branch in branches:
        assert min(starts[branch[0]]) >= done[0]
        for before, n in itertools.pairwise(branch):
            assert min(starts[n]) >= done[before], (n, before)
    assert min(starts[tail[0]]) >= gathered >= max(done[branch[-1]] for branch in branches)
    for before, n in itertools.pairwise(tail):
        assert min(starts[n]) >= done[before], (n, before)


def _runs_after_their_dependencies(site: Site) -> None:
    """As the database recorded it: every task of the graph succeeded with one run
    succeeded, and no run of a task started before a task it runs after had
    finished."""
    edges = site.one("SELECT count(*) FROM django_htask_dependency")
    assert edges == FAN * DEPTH + FAN + CHAIN
    # Each attempt of a dependent started after its dependency ended: its failed ones
    # by their run rows, its last by its row (a success writes no run row).
    early = site.sql(
        "SELECT d.task_id, d.after_id, s.started_at, a.finished_at "
        "FROM django_htask_dependency d "
        "JOIN django_htask_task a ON a.id = d.after_id "
        "JOIN (SELECT task_id, started_at FROM django_htask_run "
        "UNION ALL SELECT id, started_at FROM django_htask_task) s ON s.task_id = d.task_id "
        "WHERE a.status <> 'succeeded' OR s.started_at < a.finished_at"
    )
    assert early == []
    ended = site.sql(
        "SELECT t.id, t.status, t.attempts, count(r.id) FROM django_htask_task t "
        "LEFT JOIN django_htask_run r ON r.task_id = t.id "
        "WHERE t.function IN (%s, %s) GROUP BY t.id, t.status, t.attempts",
        GSTEP,
        GATHER,
    )
    assert len(ended) == GRAPH
    # succeeded, with a run row for each attempt before the last (a node killed)
    assert [row for row in ended if row[1] != "succeeded" or row[3] != row[2] - 1] == []


def _batch_is(site: Site, batch_id: int, **counts: int) -> None:
    [row] = site.sql(
        "SELECT total, succeeded, failed, cancelled, finished_at FROM django_htask_batch "
        "WHERE id = %s",
        batch_id,
    )
    assert dict(zip(counts, row[:4], strict=True)) == counts
    assert row[4] is not None


def _callbacks(lines: list[list[str]], killed: int) -> dict[str, list[str]]:
    """Each callback's counts as it logged them (its role, then id, total, succeeded,
    failed, cancelled); each ran once, or twice when the killed node ran it first."""
    runs: dict[str, list[list[str]]] = defaultdict(list)
    for line in lines:
        if line[0] == "cb":
            runs[line[1]].append(line[2:])
    for role, each in runs.items():
        pids = [int(run[-1]) for run in each]
        assert pids[:-1] in ([], [killed]), (role, each)
    return {role: each[-1] for role, each in runs.items()}
