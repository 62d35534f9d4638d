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
3. One call's cost: ``--calls`` (3,000) trivial calls one after another, made in the
   calling thread (``execute``, the reference) and in one worker process
   (``ProcessPool.execute``): wall time and CPU per call, the worker process's CPU
   apart (no database: Django on a SQLite file the calls do not touch); and the worker
   process's start-up to ready and its resident memory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cluster import ENGINES, PEER_SETTINGS, Bench, Engine, Throughput, _ratio  # noqa: E402

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


#: Section 3, run in a process of its own (Django set up on a SQLite file).
ONE_CALL = """
import os, sys, time
import django
django.setup()
from django_htask.engine import RunGuard, SystemClock, registry
from django_htask.node.execution import Call, execute
from django_htask.node.processes import ProcessPool
NOOP = "tests.acceptance.app.tasks:noop"
call = Call(registry.check_call(NOOP, ("x",), {{}}), NOOP, "noop", "bench", 1, None)
clock = SystemClock()
def cpu(pid):
    fields = open(f"/proc/{{pid}}/stat").read().split(") ")[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
n = {calls}
t, c = time.perf_counter(), time.process_time()
for i in range(n):
    execute(call, clock=clock, guard=RunGuard())
print("thread", (time.perf_counter() - t) / n, (time.process_time() - c) / n, 0.0)
t = time.perf_counter()
pool = ProcessPool("bench", clock, 1)
pool.start()
pid = pool._idle[0].pid
rss = {{k: v for k, v in (l.split(":", 1) for l in open(f"/proc/{{pid}}/status"))}}["VmRSS"]
print("start", time.perf_counter() - t, rss.split()[0], 0.0)
pool.execute(("task", 0), call, RunGuard())
t, c, w = time.perf_counter(), time.process_time(), cpu(pid)
for i in range(n):
    pool.execute(("task", i), call, RunGuard())
print("process", (time.perf_counter() - t) / n, (time.process_time() - c) / n, (cpu(pid) - w) / n)
pool.close()
"""


def one_call(calls: int, db: Path) -> None:
    """Section 3 (see the module)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.acceptance.settings",
        "HTASK_ACCEPTANCE_DB": str(db),
        "PYTHONPATH": str(ROOT),
    }
    out = subprocess.run(
        [sys.executable, "-c", ONE_CALL.format(calls=calls)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    print(f"  {'':<22} {'wall us/call':>12} {'CPU us/call':>11} {'of which the worker':>19}")
    for line in out.splitlines():
        where, wall, caller, worker = line.split()
        if where == "start":  # its start-up and memory, Django set up
            started = f"{float(wall):.2f} s to ready, {int(caller) / 1024:.0f} MiB resident"
            continue
        total = float(caller) + float(worker)
        label = "in the thread" if where == "thread" else "in a worker process"
        print(
            f"  {label:<22} {float(wall) * 1e6:>12.0f} {total * 1e6:>11.0f} "
            f"{float(worker) * 1e6:>19.0f}"
        )
    print(f"  a worker process (the acceptance tests' settings): {started}")


def _median(results: list[Throughput], field: str) -> float:
    return float(statistics.median(getattr(r, field) for r in results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--cpu-tasks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3_000, help="section 3's calls")
    parser.add_argument("--only", type=int, choices=(1, 2, 3), help="run one section")
    args = parser.parse_args()
    wanted = {args.only} if args.only else {1, 2, 3}
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
        if 3 in wanted:
            print(f"3. one trivial call's cost, {args.calls} calls one after another")
            one_call(args.calls, pg.root / "calls.sqlite3")


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
