"""Several nodes on PostgreSQL: throughput, a large schedule table, notify latency.

Run: ``.venv/bin/python bench/cluster.py`` (starts its own throw-away PostgreSQL).

1. One-off throughput (claim, run, record) of trivial tasks with 1 and 3
   ``runscheduler`` nodes, against django-tasks' database backend ``db_worker`` with 1
   and 3 processes, on the same server, in the same run: tasks/s from the processes'
   start (tasks already queued) to the last task recorded.
2. 100k schedules over 3 nodes: start-up to ready, memory (RSS) per node, and the
   transactions per second the idle nodes make (``pg_stat_database``).
3. Notify-to-fire latency: a schedule's ``next_run_at`` set to now by another client;
   how long until its run starts (p50, p99).
4. A node killed: three nodes with django-htask's default settings run 30 schedules
   ``@every 1s``; one node is killed with SIGKILL; for the schedules it was firing, the
   longest gap between two occurrences that ran, and whether any ran twice.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.site import ClusterSite  # noqa: E402
from tests.pgcluster import PostgresCluster  # noqa: E402

SETTINGS = "tests.cluster.bench_settings"
NOOP = "tests.cluster.clusterapp.tasks:noop"


class Bench(ClusterSite):
    def __init__(self, pg: PostgresCluster, log: Path) -> None:
        super().__init__(pg, log, SETTINGS)

    def manage(
        self, *args: str, banner: bool = False, env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start a management command; with ``banner``, its stdout is a pipe to read
        the banner from (read no further: nothing else is printed there)."""
        return subprocess.Popen(
            [sys.executable, "-m", "django", *args],
            env={**os.environ, **self.env, **(env or {})},
            cwd=ROOT,
            stdout=subprocess.PIPE if banner else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def reset(self) -> None:
        self.sql(
            "TRUNCATE django_htask_run, django_htask_task, django_htask_schedule, "
            "django_htask_node, django_tasks_database_dbtaskresult CASCADE"
        )

    # -- 1. throughput ---------------------------------------------------------------
    def htask_throughput(self, tasks: int, nodes: int) -> float:
        self.reset()
        self.django(
            "from django_htask import clock\nfrom django_htask.engine import registry\n"
            "from django_htask.models import Task\nnow = clock.now()\n"
            f"Task.objects.bulk_create(Task(function='{NOOP}', run_at=now, "
            f"payload=registry.check_call('{NOOP}', (n,), {{}})) for n in range({tasks}))"
        )
        t0 = time.perf_counter()
        procs = [self.manage("runscheduler", "--workers", "8") for _ in range(nodes)]
        while self.one("SELECT count(*) FROM django_htask_task WHERE status = 'succeeded'") < (
            tasks
        ):
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
        return tasks / elapsed

    def db_worker_throughput(self, tasks: int, workers: int) -> float:
        self.reset()
        self.django(
            "from tests.cluster.clusterapp.dtasks import dt_noop\n"
            f"for n in range({tasks}):\n    dt_noop.enqueue(n)"
        )
        t0 = time.perf_counter()
        procs = [
            self.manage("db_worker", "--batch", "--no-startup-delay", "--interval", "0.05")
            for _ in range(workers)
        ]
        for proc in procs:
            proc.wait(600)
        elapsed = time.perf_counter() - t0
        done = self.one(
            "SELECT count(*) FROM django_tasks_database_dbtaskresult WHERE status = 'SUCCESSFUL'"
        )
        assert done == tasks, f"db_worker ran {done} of {tasks}"
        return tasks / elapsed

    # -- 2. many schedules -----------------------------------------------------------
    def many_schedules(self, count: int, nodes: int, idle: float) -> dict[str, float]:
        self.reset()
        self.sql(
            "INSERT INTO django_htask_schedule (name, function, schedule, timezone, payload, "
            "enabled, next_run_at, grace, catch_up, overlap, max_attempts, retry_backoff, "
            "origin, orphaned, version, created_at, updated_at, last_status) "
            "SELECT 's' || i, %s, '@every 1h', 'UTC', '', true, "
            "now() + (i %% 3600) * interval '1 second' + interval '1 hour', NULL, 'latest', "
            "'skip', 1, 10, 'admin', false, 0, now(), now(), '' "
            "FROM generate_series(1, %s) AS i",
            NOOP,
            count,
        )
        self.sql("ANALYZE")
        t0 = time.perf_counter()
        procs = [self.manage("runscheduler", "--workers", "2", banner=True) for _ in range(nodes)]
        for proc in procs:
            assert proc.stdout is not None
            for line in proc.stdout:
                if "stop:" in line:
                    break
        ready = time.perf_counter() - t0
        time.sleep(15)  # a heartbeat or two: membership settled, shares handed over
        rss = [_rss_mb(p.pid) for p in procs]
        before = self._transactions()
        time.sleep(idle)
        tps = (self._transactions() - before) / idle
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
        return {"ready_s": ready, "rss_mb_max": max(rss), "rss_mb_min": min(rss), "tps": tps}

    def _transactions(self) -> int:
        self.sql("SELECT pg_stat_clear_snapshot()")
        return int(
            self.one(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database "
                "WHERE datname = current_database()"
            )
        )

    # -- 3. notify to fire -----------------------------------------------------------
    def notify_latency(self, samples: int) -> tuple[float, float]:
        self.reset()
        self.django(
            "from django_htask.models import Schedule\n"
            "for i in range(3):\n"
            f"    s = Schedule(name=f'edit-{{i}}', function='{NOOP}', schedule='@every 1h')\n"
            "    s.set_call((i,))\n    s.save()"
        )
        procs = [self.manage("runscheduler", "--workers", "2", banner=True) for _ in range(3)]
        for proc in procs:
            assert proc.stdout is not None
            for line in proc.stdout:
                if "stop:" in line:
                    break
        time.sleep(3)
        ids = [r[0] for r in self.sql("SELECT id FROM django_htask_schedule ORDER BY id")]
        latencies = []
        for n in range(samples):
            sid = ids[n % len(ids)]
            edited = self.one(
                "UPDATE django_htask_schedule SET next_run_at = clock_timestamp() "
                "WHERE id = %s RETURNING next_run_at",
                sid,
            )
            deadline = time.monotonic() + 10
            while True:
                rows = self.sql(
                    "SELECT started_at FROM django_htask_run WHERE schedule_id = %s "
                    "AND scheduled_for = %s",
                    sid,
                    edited,
                )
                if rows or time.monotonic() > deadline:
                    break
                time.sleep(0.005)
            if rows:
                latencies.append((rows[0][0] - edited).total_seconds())
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
        latencies.sort()
        if len(latencies) < samples:
            print(f"  ({samples - len(latencies)} edits did not fire within 10 s)")
        p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
        return statistics.median(latencies), p99

    # -- 4. a node killed -------------------------------------------------------------
    def kill_gap(self, schedules: int, after: float) -> dict[str, float]:
        """Seconds of the longest gap, over the schedules the killed node fired, between
        two consecutive occurrences that ran; and the occurrences that ran twice."""
        self.reset()
        self.django(
            "from django_htask.models import Schedule\n"
            f"for i in range({schedules}):\n"
            f"    s = Schedule(name=f'tick-{{i}}', function='{NOOP}', schedule='@every 1s')\n"
            "    s.set_call((i,))\n    s.save()"
        )
        defaults = {"HTASK_CLUSTER_DEFAULTS": "1"}
        procs = [self.manage("runscheduler", banner=True, env=defaults) for _ in range(3)]
        ids = {}
        for proc in procs:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.strip().startswith("node:"):
                    ids[proc] = line.split()[-1]
                if "stop:" in line:
                    break
        time.sleep(8)  # the members settle, every schedule fires a few times
        victim = procs[0]
        fired = {
            sid
            for (sid,) in self.sql(
                "SELECT DISTINCT schedule_id FROM django_htask_run WHERE node = %s "
                "AND scheduled_for > now() - interval '2 seconds'",
                ids[victim],
            )
        }
        killed_at = self.one("SELECT now()")
        victim.kill()
        victim.wait(10)
        time.sleep(after)
        rows = self.sql(
            "SELECT schedule_id, scheduled_for FROM django_htask_run WHERE status IN "
            "('succeeded', 'running') AND scheduled_for > %s - interval '3 seconds' "
            "ORDER BY schedule_id, scheduled_for",
            killed_at,
        )
        by_schedule: dict[int, list[object]] = {}
        for sid, when in rows:
            by_schedule.setdefault(sid, []).append(when)
        gaps = []
        twice = 0
        for sid in fired:
            times = by_schedule.get(sid, [])
            twice += len(times) - len(set(times))
            gaps += [
                (b - a).total_seconds()  # type: ignore[operator]
                for a, b in itertools.pairwise(times)
            ]
        for proc in procs[1:]:
            proc.terminate()
        for proc in procs[1:]:
            proc.wait(60)
        return {
            "schedules": len(fired),
            "max_gap_s": max(gaps) if gaps else float("nan"),
            "median_gap_s": statistics.median(gaps) if gaps else float("nan"),
            "twice": twice,
        }


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000)
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds to count idle tps")
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument(
        "--only", type=int, choices=(1, 2, 3, 4), help="run one section (default: all)"
    )
    args = parser.parse_args()
    with PostgresCluster() as pg:
        bench = Bench(pg, pg.root / "jobs.log")
        bench.django(
            "from django.core.management import call_command\ncall_command('migrate', verbosity=0)"
        )
        print(f"PostgreSQL {pg.bin_dir.parent.name}, {os.cpu_count()} CPUs")
        wanted = {args.only} if args.only else {1, 2, 3, 4}
        if 1 in wanted:
            print(f"1. one-off throughput, {args.tasks} trivial tasks (tasks/s)")
            for size in (1, 3):
                ours = bench.htask_throughput(args.tasks, size)
                theirs = bench.db_worker_throughput(args.tasks, size)
                print(
                    f"  {size} process(es): htask {ours:8.0f}   db_worker {theirs:8.0f}   "
                    f"ratio {ours / theirs:5.1f}x"
                )
        if 2 in wanted:
            print(f"2. {args.schedules} schedules over 3 nodes")
            many = bench.many_schedules(args.schedules, 3, args.idle)
            print(
                f"  start-up to ready {many['ready_s']:.1f} s; RSS per node "
                f"{many['rss_mb_min']:.0f}-{many['rss_mb_max']:.0f} MB; idle "
                f"{many['tps']:.1f} transactions/s (all 3 nodes)"
            )
        if 3 in wanted:
            print(f"3. notify-to-fire latency over {args.samples} edits, 3 nodes")
            p50, p99 = bench.notify_latency(args.samples)
            print(f"  p50 {p50 * 1000:.0f} ms   p99 {p99 * 1000:.0f} ms")
        if 4 in wanted:
            print("4. a node killed (SIGKILL), 3 nodes, default settings, 30 schedules @every 1s")
            kill = bench.kill_gap(30, after=15.0)
            print(
                f"  the {kill['schedules']:.0f} schedules it fired: longest gap "
                f"{kill['max_gap_s']:.2f} s, median {kill['median_gap_s']:.2f} s in the 15 s "
                f"after the kill; occurrences run twice: {kill['twice']:.0f}"
            )


if __name__ == "__main__":
    main()
