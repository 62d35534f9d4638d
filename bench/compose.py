"""Tasks composed: how long a task waits to start once the tasks it runs after have
succeeded, against a plain task's wait from its due time.

Run: ``.venv/bin/python bench/compose.py`` (starts its own throw-away PostgreSQL).

Each round starts fresh ``runscheduler`` processes (``--nodes``: 1, then 3; 8 workers
each, the default) on emptied tables and measures, the order of the three taking turns
from round to round:

1. Chains: ``--chains`` chains (4) of ``--length`` trivial steps (50) queued at once;
   each step but the first is a dependent: its start (``started_at``) minus its
   dependency's ``finished_at``.
2. Fan-ins: ``--fanins`` groups (10) of ``--width`` trivial tasks (20), each followed by
   a task receiving their results, the groups due ``--spacing`` apart (0.5 s) so that
   one has ended before the next starts; the fan-in's start minus the latest
   ``finished_at`` of its group.
3. The reference: ``--plain`` trivial tasks (200) queued ahead, each due at its own
   instant, ``--plain-spacing`` apart (25 ms): a task's ``started_at`` minus its due
   time (``run_at``), what a claim costs with no dependency.

Chains and fan-ins run fewer tasks at once than a node has workers: what is measured
is the dependency's hand-over, not a wait for a free worker. Each figure is a p50 and
a p99 over every round's samples pooled, with each round's p50; then the ratio of the
dependents' figures to the plain tasks'. Times are the nodes' clocks (one machine).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cluster import Bench, _stop  # noqa: E402

from tests.pgcluster import PostgresCluster  # noqa: E402

STEP = "tests.cluster.clusterapp.tasks:gstep"

#: Queues the chains (Django code: ``{chains}``, ``{length}``).
CHAINS = """
from django_htask import call, chain
from tests.cluster.clusterapp.tasks import gstep
for c in range({chains}):
    chain(*(call(gstep, 1000 * c + k, 0.0) for k in range({length}))).schedule()
"""

#: Queues the fan-ins, group ``i`` due ``1 + i * spacing`` seconds from now.
FANINS = """
from datetime import timedelta
from django_htask import call, chain, clock, group
from tests.cluster.clusterapp.tasks import gather, gstep
start = clock.now() + timedelta(seconds=1)
for i in range({fanins}):
    at = start + timedelta(seconds=i * {spacing})
    chain(
        group(*(call(gstep, 1000 * i + k, 0.0).using(at=at) for k in range({width}))),
        call(gather).receiving("parts"),
    ).schedule()
"""

#: Queues the plain tasks, task ``i`` due ``1 + i * spacing`` seconds from now.
PLAIN = """
from datetime import timedelta
from django_htask import clock, schedule
from tests.cluster.clusterapp.tasks import gstep
start = clock.now() + timedelta(seconds=1)
for i in range({plain}):
    schedule(gstep, i, 0.0, at=start + timedelta(seconds=i * {spacing}))
"""

#: Each dependent task: how many tasks it ran after, and its start minus the latest
#: end of those (seconds).
DEPENDENT_SQL = (
    "SELECT count(*), extract(epoch FROM t.started_at - max(a.finished_at)) "
    "FROM django_htask_dependency d JOIN django_htask_task a ON a.id = d.after_id "
    "JOIN django_htask_task t ON t.id = d.task_id GROUP BY t.id, t.started_at"
)
PLAIN_SQL = "SELECT 1, extract(epoch FROM started_at - run_at) FROM django_htask_task"


class Site(Bench):
    """The bench's site: django-htask's tables only (the nodes' rows stay: a running
    node must find its own)."""

    def migrate(self) -> None:
        self.django("from django.core.management import call_command\ncall_command('migrate')")

    def reset(self) -> None:
        for table in ("run", "dependency", "task", "batch"):
            self.sql(f"DELETE FROM django_htask_{table}")  # no lock a running node waits on

    def queued(self, code: str) -> None:
        """Run ``code`` (it queues tasks) and wait until every task has succeeded."""
        self.django(code)
        deadline = time.monotonic() + 300
        while left := self.one(
            "SELECT count(*) FROM django_htask_task WHERE status <> 'succeeded'"
        ):
            bad = self.sql(
                "SELECT status, last_error FROM django_htask_task "
                "WHERE status IN ('failed', 'cancelled') LIMIT 1"
            )
            if bad or time.monotonic() > deadline:
                raise RuntimeError(f"{left} tasks not done: {bad}")
            time.sleep(0.1)

    def samples(self, code: str, sql: str) -> list[tuple[int, float]]:
        """Queue with ``code``, wait, and return the rows of ``sql`` (how many tasks
        waited for, seconds); then empty the tables."""
        self.queued(code)
        rows = [(int(n), float(seconds)) for n, seconds in self.sql(sql)]
        self.reset()
        return rows


def nodes_started(site: Site, count: int) -> list[subprocess.Popen[str]]:
    """``count`` fresh nodes, each past its banner."""
    procs = [site.manage("runscheduler", banner=True) for _ in range(count)]
    for proc in procs:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "stop:" in line:
                break
    time.sleep(1)  # behind them: each node's first heartbeat and claim
    return procs


def one_round(
    site: Site, nodes: int, turn: int, args: argparse.Namespace
) -> dict[str, list[float]]:
    """One round on ``nodes`` fresh nodes: each kind's samples (seconds)."""
    site.reset()
    procs = nodes_started(site, nodes)
    got: dict[str, list[float]] = defaultdict(list)
    try:
        phases = [
            ("chain", CHAINS.format(chains=args.chains, length=args.length)),
            ("fan-in", FANINS.format(fanins=args.fanins, width=args.width, spacing=args.spacing)),
            ("plain", PLAIN.format(plain=args.plain, spacing=args.plain_spacing)),
        ]
        for kind, code in phases[turn % 3 :] + phases[: turn % 3]:
            sql = PLAIN_SQL if kind == "plain" else DEPENDENT_SQL
            for n, seconds in site.samples(code, sql):
                if kind != "fan-in" or n > 1:  # the fan-in, not a step of its group
                    got[kind].append(seconds)
    finally:
        _stop(procs)
    return got


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values``: the nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(rounds: list[dict[str, list[float]]]) -> None:
    """Each kind's p50 and p99 over all rounds, each round's p50, and the ratios of the
    dependents' to the plain tasks'."""
    labels = {
        "chain": "a chain's step after the one before",
        "fan-in": "a fan-in after the last of its group",
        "dependent": "every dependent (both)",
        "plain": "a plain task from its due time",
    }
    for got in rounds:
        got["dependent"] = got["chain"] + got["fan-in"]
    figures: dict[str, tuple[float, float]] = {}
    for kind, label in labels.items():
        pooled = [s for got in rounds for s in got[kind]]
        figures[kind] = (percentile(pooled, 0.5), percentile(pooled, 0.99))
        each = ", ".join(f"{percentile(got[kind], 0.5) * 1000:.1f}" for got in rounds)
        top = "p99" if len(pooled) >= 100 else "max"  # fewer: the p99 is the largest
        print(
            f"  {label:<40} n={len(pooled):<5} p50 {figures[kind][0] * 1000:6.1f} ms   "
            f"{top} {figures[kind][1] * 1000:6.1f} ms   (p50 per round: {each})"
        )
    (d50, d99), (p50, p99) = figures["dependent"], figures["plain"]
    print(f"  dependents / plain: p50 {d50 / p50:.2f}x, p99 {d99 / p99:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--fanins", type=int, default=10)
    parser.add_argument("--width", type=int, default=20)
    parser.add_argument("--spacing", type=float, default=0.5, help="between fan-ins (s)")
    parser.add_argument("--plain", type=int, default=200)
    parser.add_argument(
        "--plain-spacing", type=float, default=0.025, help="between plain tasks (s)"
    )
    args = parser.parse_args()
    results: dict[int, list[dict[str, list[float]]]] = defaultdict(list)
    with PostgresCluster() as server:
        site = Site(server, server.root / "jobs.log")
        site.migrate()
        print(
            f"{site.label()}, {os.cpu_count()} CPUs; {args.rounds} rounds, fresh nodes "
            f"of 8 workers each: {args.chains} chains of {args.length}, {args.fanins} "
            f"fan-ins of {args.width}, {args.plain} plain tasks"
        )
        for turn in range(args.rounds):
            for nodes in args.nodes:
                results[nodes].append(one_round(site, nodes, turn, args))
                print(f"  round {turn + 1}, {nodes} node(s) done", flush=True)
    for nodes in args.nodes:
        print(f"{nodes} node(s): start minus the end it waited for (or its due time)")
        report(results[nodes])


if __name__ == "__main__":
    main()
