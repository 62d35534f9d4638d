"""The process pool against the thread pool, on PostgreSQL (docs/timeouts.md).

Run: ``.venv/bin/python bench/pool.py`` (starts its own throw-away PostgreSQL).
Each figure is the median of ``--rounds`` (3) rounds, each a fresh ``runscheduler``
process (and its worker processes), the cases interleaved; the spread of each ratio is
its lowest and highest round.

1. Trivial tasks: ``--tasks`` (10,000) queued, then one node with 8 workers: the
   thread pool (the reference: the same node, the calls in its threads), the process
   pool, and django-q2's ``qcluster`` (ORM broker, 4 worker processes: the peer people
   use whose workers are processes). Tasks/s from exec (the worker processes' start-up
   included) and from the first task started; the ratio process / thread pool (the
   target: at least 0.6).
2. CPU-bound tasks: ``--cpu-tasks`` (200) tasks of 50 ms of pure Python each (they hold
   the GIL), on the process pool with 1 worker (the reference) and 2, and on the
   thread pool with 2. Tasks/s from the first task started; the ratio to the
   reference (the target for 2 worker processes: at least 1.7 on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cluster import ENGINES, PEER_SETTINGS, Bench, Engine, Throughput  # noqa: E402

from tests.pgcluster import PostgresCluster  # noqa: E402

BURN = "tests.cluster.clusterapp.tasks:burn"
HTASK = ENGINES[0]
THREADS = replace(HTASK, name="thread pool", command=("runscheduler", "--workers", "8"))
PROCESSES = replace(
    HTASK, name="process pool", command=("runscheduler", "--workers", "8", "--pool", "process")
)
DJANGO_Q2 = next(e for e in ENGINES if e.name == "django-q2")


def burning(name: str, workers: int, pool: str) -> Engine:
    """``--workers`` and ``--pool`` running 50 ms CPU-bound tasks."""
    enqueue = (
        "from django_htask import clock\nfrom django_htask.engine import registry\n"
        "from django_htask.models import Task\nnow = clock.now()\n"
        f"Task.objects.bulk_create(Task(function='{BURN}', run_at=now, "
        f"payload=registry.check_call('{BURN}', (50,), {{{{}}}})) for n in range({{tasks}}))"
    )
    command = ("runscheduler", "--workers", str(workers), "--pool", pool)
    return replace(HTASK, name=name, enqueue=enqueue, command=command)


CPU_REFERENCE = burning("1 worker process", 1, "process")
CPU_CASES = (
    CPU_REFERENCE,
    burning("2 worker processes", 2, "process"),
    burning("2 threads", 2, "thread"),
)


def _median(results: list[Throughput], field: str) -> float:
    return float(statistics.median(getattr(r, field) for r in results))


def _ratio(ours: list[Throughput], reference: list[Throughput], field: str) -> str:
    """The median ratio, and its lowest and highest round."""
    ratios = [getattr(a, field) / getattr(b, field) for a, b in zip(ours, reference, strict=True)]
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--cpu-tasks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", type=int, choices=(1, 2), help="run one section")
    args = parser.parse_args()
    wanted = {args.only} if args.only else {1, 2}
    with PostgresCluster() as pg:
        bench = Bench(pg, pg.root / "jobs.log")
        bench.django(
            "from django.core.management import call_command\ncall_command('migrate', verbosity=0)",
            env={"DJANGO_SETTINGS_MODULE": PEER_SETTINGS, "HTASK_BENCH_PEER": "all"},
        )
        print(f"PostgreSQL {pg.bin_dir.parent.name}, {os.cpu_count()} CPUs")
        if 1 in wanted:
            print(
                f"1. {args.tasks} trivial tasks, one node of 8 workers; median of "
                f"{args.rounds} rounds"
            )
            _section(bench, (THREADS, PROCESSES, DJANGO_Q2), args.tasks, args.rounds)
        if 2 in wanted:
            print(
                f"2. {args.cpu_tasks} tasks of 50 ms of pure Python each; median of "
                f"{args.rounds} rounds"
            )
            _section(bench, CPU_CASES, args.cpu_tasks, args.rounds)


def _section(bench: Bench, engines: tuple[Engine, ...], tasks: int, rounds: int) -> None:
    results: dict[str, list[Throughput]] = {e.name: [] for e in engines}
    for n in range(rounds):
        order = engines[n % len(engines) :] + engines[: n % len(engines)]
        for engine in order:
            results[engine.name].append(bench.throughput(engine, tasks, 1))
    reference = results[engines[0].name]
    print(
        f"  {'':<20} {'tasks/s from exec':>17} {'from 1st task':>13} "
        f"{'CPU ms/task':>11}   ratio to {engines[0].name} (from exec; from 1st task)"
    )
    for engine in engines:
        got = results[engine.name]
        ratio = (
            "reference"
            if got is reference
            else f"{_ratio(got, reference, 'from_start')}; {_ratio(got, reference, 'from_first')}"
        )
        print(
            f"  {engine.name:<20} {_median(got, 'from_start'):>17.0f} "
            f"{_median(got, 'from_first'):>13.1f} {_median(got, 'cpu_ms'):>11.2f}   {ratio}"
        )


if __name__ == "__main__":
    main()
