"""Benchmark of ``runscheduler``'s node on SQLite (one file, like the embedded default).

Measures, in one run:

* **ready**: seconds for a node to load N enabled schedules (default 100k) and be
  firing, against the bare ORM read of the same three columns (reference);
* **memory** per schedule held by the node (tracemalloc, retained after start),
  against a plain ``{id: (next_run_at, version)}`` dict of the same rows;
* **idle CPU** of that node over a few seconds (polling every second);
* **throughput**: 10k one-off tasks made with ``schedule()``, due now, trivial
  function, until all have run and been recorded, against django-tasks' database
  backend (``django-tasks-db``, its ``db_worker --batch``) on the same SQLite file with
  the same function;
* **rows written** per task: a pass of its own with triggers counting each table's
  inserts, updates and deletes (SQLite keeps no counter of them);
* **pick-up latency** of an edit made by another process (``UPDATE`` through the
  ``sqlite3`` module in a child process): from its commit to the run starting.

    python bench/node.py            # 100k schedules, 10k tasks
    python bench/node.py --quick    # 20k schedules, 2k tasks
    python bench/node.py --wal      # the file in WAL mode with synchronous=NORMAL
    python bench/node.py --only tasks writes   # some sections only

SQLite's default journal costs a few milliseconds per commit on most disks; a node
commits once per batch of tasks its workers start (never more than it has free
workers: a task is claimed only when a worker takes it), so the journal mode decides
the one-off throughput. Both schedulers run on the same file with the same mode.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import tracemalloc
from datetime import UTC, datetime, timedelta

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

WORKERS = 4
#: What ``--only`` may name, in the order they run.
SECTIONS = ["schedules", "tasks", "writes", "latency"]


def noop(n: int = 0) -> None:
    """The trivial function both schedulers run."""


def dt_noop(n: int = 0) -> None:
    """The same, wrapped by django-tasks' ``@task`` once Django is set up."""


#: What ``--wal`` adds to the database's OPTIONS (Django runs it on each connection).
WAL = "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"


def configure(db: str, wal: bool = False, prefetch: float = 0.1, per_worker: int = 8) -> None:
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="bench",
        USE_TZ=True,
        TIME_ZONE="UTC",
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "django_htask",
            "django_tasks_db",
        ],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": db,
                "OPTIONS": {"timeout": 30, **({"init_command": WAL} if wal else {})},
            }
        },
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        TASKS={"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}},
        HTASK={
            "WORKERS": WORKERS,
            "AUTODISCOVER": False,
            "RUN_RETENTION_DAYS": 0,
            "PREFETCH_WITHIN": prefetch,
            "PREFETCH_PER_WORKER": per_worker,
        },
        LOGGING_CONFIG=None,
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# -- schedules: ready time, memory, idle CPU ------------------------------------------
def make_schedules(count: int, function: str) -> None:
    from django.db import transaction

    from django_htask.engine import encode_call
    from django_htask.models import Schedule

    payload = encode_call(function, [], {})
    base = datetime.now(UTC) + timedelta(hours=1)
    with transaction.atomic():
        Schedule.objects.bulk_create(
            (
                Schedule(
                    name=f"s{i}",
                    function=function,
                    schedule="@every 1h",
                    payload=payload,
                    next_run_at=base + timedelta(seconds=i % 3600),
                )
                for i in range(count)
            ),
            batch_size=5000,
        )


def bench_schedules(count: int, function: str) -> dict[str, float]:
    from django.db import connection

    from django_htask.models import Schedule
    from django_htask.node import Node

    make_schedules(count, function)
    connection.close()

    t0 = time.perf_counter()
    rows = list(
        Schedule.objects.filter(enabled=True, next_run_at__isnull=False)
        .order_by()
        .values_list("id", "next_run_at", "version")
        .iterator(chunk_size=10_000)
    )
    reference_s = time.perf_counter() - t0
    assert len(rows) == count
    del rows
    connection.close()

    gc.collect()
    t0 = time.perf_counter()
    node = Node(node_id="bench-ready", poll_interval=1.0)
    stats = node.start()
    ready_s = time.perf_counter() - t0
    assert stats.schedules == count, stats
    assert len(node.placed_schedules()) == count

    # Idle: nothing is due for an hour; the node polls every second.
    idle_for = 5.0
    time.sleep(1.0)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(idle_for)
    idle_cpu = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    node.stop(timeout=5)
    del node
    connection.close()

    # Memory retained by a started node, and by the plainest dict of the same rows.
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    plain = {
        i: (n, v)
        for i, n, v in Schedule.objects.order_by().values_list("id", "next_run_at", "version")
    }
    gc.collect()
    plain_bytes = tracemalloc.get_traced_memory()[0] - base
    del plain
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    node = Node(node_id="bench-memory", poll_interval=3600.0)
    node.start()
    gc.collect()
    node_bytes = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    node.stop(timeout=5)
    return {
        "ready_s": ready_s,
        "reference_s": reference_s,
        "idle_cpu": idle_cpu,
        "node_bytes": node_bytes / count,
        "plain_bytes": plain_bytes / count,
    }


# -- one-off tasks: throughput against django-tasks-db --------------------------------
def bench_htask_tasks(count: int) -> dict[str, float]:
    from django.db import connection

    from django_htask import schedule
    from django_htask.models import Task, TaskStatus
    from django_htask.node import Node

    t0 = time.perf_counter()
    for i in range(count):
        schedule(noop, i)
    enqueue_s = time.perf_counter() - t0
    connection.close()

    t0 = time.perf_counter()
    node = Node(node_id="bench-tasks", poll_interval=1.0)
    node.start()
    # A success writes no run row (RECORD_EVERY_ATTEMPT off): its task row says it all.
    done = Task.objects.filter(status=TaskStatus.SUCCEEDED)
    while done.count() < count:
        time.sleep(0.05)
    run_s = time.perf_counter() - t0
    node.stop(timeout=5)
    connection.close()
    return {"enqueue_s": enqueue_s, "run_s": run_s}


#: Counts every row inserted, updated or deleted in django-htask's tables.
WRITES = "bench_writes"


def count_writes() -> list[str]:
    """Triggers adding one to :data:`WRITES` per row each of django-htask's tables
    inserts, updates or deletes (SQLite keeps no such counter, as PostgreSQL's
    ``pg_stat_user_tables`` does); the tables counted."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {WRITES} (tbl TEXT PRIMARY KEY, n INTEGER NOT NULL)")
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'django_htask_%'"
        )
        tables = [name for (name,) in cursor.fetchall()]
        for table in tables:
            cursor.execute(f"INSERT INTO {WRITES} VALUES (%s, 0)", [table])
            for event in ("INSERT", "UPDATE", "DELETE"):
                cursor.execute(
                    f"CREATE TRIGGER bench_{table}_{event.lower()} AFTER {event} ON {table} "
                    f"BEGIN UPDATE {WRITES} SET n = n + 1 WHERE tbl = '{table}'; END"
                )
    return tables


def bench_htask_writes(count: int) -> dict[str, float]:
    """Rows written per task by a node running ``count`` trivial tasks queued
    beforehand, by table (the queueing not counted); a pass of its own, as the triggers
    that count cost writes too."""
    from django.db import connection

    from django_htask import schedule_many
    from django_htask.models import Task, TaskStatus
    from django_htask.node import Node

    Task.objects.all().delete()
    schedule_many([(noop, (i,), {}) for i in range(count)])
    count_writes()
    connection.close()
    node = Node(node_id="bench-writes", poll_interval=1.0)
    node.start()
    done = Task.objects.filter(status=TaskStatus.SUCCEEDED)
    while done.count() < count:
        time.sleep(0.05)
    node.stop(timeout=5)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tbl, n FROM {WRITES} WHERE n > 0 ORDER BY tbl")
        return {table: n / count for table, n in cursor.fetchall()}


def bench_django_tasks(count: int) -> dict[str, float]:
    from django.core.management import call_command
    from django.db import connection
    from django_tasks import task
    from django_tasks_db.models import DBTaskResult

    noop_task = task()(dt_noop)
    globals()["dt_noop"] = noop_task  # django-tasks finds it by its dotted path
    t0 = time.perf_counter()
    for i in range(count):
        noop_task.enqueue(i)
    enqueue_s = time.perf_counter() - t0
    connection.close()

    t0 = time.perf_counter()
    call_command(
        "db_worker", "--batch", "--no-startup-delay", "--interval", "0", "--no-reload", verbosity=0
    )
    run_s = time.perf_counter() - t0
    succeeded = DBTaskResult.objects.filter(status="SUCCESSFUL").count()
    assert succeeded == count, succeeded
    return {"enqueue_s": enqueue_s, "run_s": run_s}


# -- pick-up latency of an edit made by another process -------------------------------
EDITOR = textwrap.dedent(
    """
    import sqlite3, sys, time
    from datetime import datetime, timezone
    db, pk = sys.argv[1], int(sys.argv[2])
    con = sqlite3.connect(db, timeout=30)
    due = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    con.execute("UPDATE django_htask_schedule SET next_run_at = ? WHERE id = ?", (due, pk))
    con.commit()
    print(time.time())
    """
)


def bench_latency(db: str, function: str, poll: float, samples: int) -> list[float]:
    from django.db import connection

    from django_htask.models import Run, Schedule
    from django_htask.node import Node

    Schedule.objects.all().delete()
    Run.objects.all().delete()
    row = Schedule(name="edited", function=function, schedule="@every 1d")
    row.save()
    connection.close()
    node = Node(node_id="bench-latency", poll_interval=poll)
    node.start()
    latencies = []
    try:
        for i in range(samples):
            time.sleep(poll * (0.25 + 0.5 * (i % 3)))  # land at different points of a poll
            out = subprocess.run(
                [sys.executable, "-c", EDITOR, db, str(row.pk)],
                capture_output=True,
                text=True,
                check=True,
            )
            committed = float(out.stdout)
            runs = Run.objects.filter(schedule_id=row.pk, started_at__isnull=False)
            while runs.count() <= i:
                time.sleep(0.005)
            started = runs.order_by("-id").values_list("started_at", flat=True)[0]
            assert started is not None
            latencies.append(started.timestamp() - committed)
    finally:
        node.stop(timeout=5)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k schedules, 2k tasks")
    parser.add_argument("--wal", action="store_true", help="WAL journal, synchronous=NORMAL")
    parser.add_argument(
        "--prefetch",
        type=float,
        default=0.1,
        help="the node's PREFETCH_WITHIN (seconds; 0: it claims no task ahead)",
    )
    parser.add_argument(
        "--per-worker",
        type=int,
        default=8,
        help="the node's PREFETCH_PER_WORKER (the most tasks it claims ahead per worker)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        default=SECTIONS,
        help="the sections to run (default: all)",
    )
    options = parser.parse_args()
    schedules, tasks = (20_000, 2_000) if options.quick else (100_000, 10_000)

    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bench.sqlite3")
        configure(db, wal=options.wal, prefetch=options.prefetch, per_worker=options.per_worker)
        from django_htask.engine import registry

        registry.register(noop)
        function = registry.name_of(noop)

        journal = "WAL, synchronous=NORMAL" if options.wal else "default journal"
        print(
            f"django-htask node on SQLite ({journal}), {WORKERS} workers, "
            f"PREFETCH_WITHIN {options.prefetch:g}, PREFETCH_PER_WORKER {options.per_worker}, "
            f"{os.cpu_count()} cores"
        )
        if "schedules" in options.only:
            s = bench_schedules(schedules, function)
            print(f"\n{schedules:,} enabled schedules")
            print(
                f"  ready:        {s['ready_s']:.2f} s   (bare ORM read of the same rows: "
                f"{s['reference_s']:.2f} s, ratio {s['ready_s'] / s['reference_s']:.1f}x)"
            )
            print(
                f"  memory:       {s['node_bytes']:.0f} B per schedule held   "
                f"(plain dict of the rows: {s['plain_bytes']:.0f} B, "
                f"ratio {s['node_bytes'] / s['plain_bytes']:.1f}x)"
            )
            print(f"  idle CPU:     {s['idle_cpu'] * 100:.2f} % of one core (polling every 1 s)")

        if "tasks" in options.only:
            h = bench_htask_tasks(tasks)
            d = bench_django_tasks(tasks)
            h_rate, d_rate = tasks / h["run_s"], tasks / d["run_s"]
            print(f"\n{tasks:,} one-off tasks due now, trivial function, same SQLite file")
            print(
                f"  django-htask: {h_rate:8.0f} tasks/s  (run {h['run_s']:.2f} s; "
                f"schedule() {tasks / h['enqueue_s']:.0f}/s)"
            )
            print(
                f"  django-tasks-db db_worker: {d_rate:8.0f} tasks/s  (run {d['run_s']:.2f} s; "
                f"enqueue() {tasks / d['enqueue_s']:.0f}/s)"
            )
            print(f"  ratio:        {h_rate / d_rate:.1f}x")

        if "writes" in options.only:
            per_task = bench_htask_writes(tasks)
            by_table = ", ".join(
                f"{t.removeprefix('django_htask_')} {n:.2f}" for t, n in per_task.items()
            )
            print(f"\n{tasks:,} tasks queued, then run by a node: rows written per task")
            print(f"  {sum(per_task.values()):.2f} ({by_table}; counted by triggers)")

        if "latency" in options.only:
            poll = 1.0
            lat = bench_latency(db, function, poll, samples=9 if not options.quick else 5)
            print(f"\npick-up of an edit by another process (poll interval {poll:g} s)")
            print(
                f"  median {statistics.median(lat) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms "
                f"(target: <= {(poll + 0.1) * 1000:.0f} ms)"
            )


if __name__ == "__main__":
    # Import under the package name, so the functions are "bench.node:noop" for both.
    import importlib

    importlib.import_module("bench.node").main()
