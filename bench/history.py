"""A year's history: a large table of finished tasks must cost the running system
nothing, and a running node must delete what is past its retention by itself.

Run: ``.venv/bin/python bench/history.py`` (starts its own throw-away PostgreSQL).

Two databases on one server: ``small`` and ``full``. ``full`` holds ``--history``
finished tasks (10,000,000) and the runs of their failures (a success writes none), all
inside their retention (finished from 6.5 days to ``--newest-hours`` ago, 0: now;
``TASK_RETENTION_DAYS`` is 7), loaded by SQL; ``small`` holds ``--small`` (1,000) of
the same over the same span: a page of the admin's lists each (both render 100 rows),
and no more. Rounds
interleave the two (``--rounds``, 3; medians):

1. One node's throughput: ``--tasks`` trivial tasks (10,000) queued, one
   ``runscheduler`` of 8 workers started; tasks/s from exec and from the first task
   started to the last finished.
2. What an operator waits for: the node's start-up (exec to its banner), the admin's
   task and run lists (unfiltered, and filtered to failed ones), the overview page,
   ``htask status``, the health check, a metrics scrape; each timed in one Django
   process, median of 3. The overview and the metrics read the runs of the last 24
   hours and the last hour: with the history up to now they measure its rate
   (10,000,000 over 6.5 days is 1.5 million runs a day), with ``--newest-hours 25``
   the table's size alone.

The ratios full/small are printed for each figure.

3. Pruning: ``--expired`` more finished tasks (2,000,000) and their runs, finished 8
   to 10 days ago (past their retention), are added to ``full``. One node is started
   there and fed rounds of ``--tasks`` trivial tasks until every expired task is gone:
   how long the deletion took, and the node's tasks/s while it deleted against its
   tasks/s in rounds after (the same node, the same table but for the expired rows).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cluster import ENGINES, Bench, Database, Engine, _stop  # noqa: E402

from tests.pgcluster import PostgresCluster  # noqa: E402

#: The function of the history rows (never run: no node needs it registered).
OLD = "bench.history:old"
#: Rows loaded per statement.
CHUNK = 1_000_000

#: One Django process times what an operator waits for (section 2), on the database of
#: ``HTASK_TEST_DATABASE_URL``, with the test settings (the admin installed).
TIMINGS = """
import statistics, time
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.test.utils import setup_test_environment
from django_htask.health import check_health
from django_htask.metrics.database import DatabaseCollector

setup_test_environment()  # the test client's host allowed
user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
    "bench", "bench@example.com", "bench")
client = Client()
client.force_login(user)

def timed(fn):
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)

def page(url):
    def get():
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
    return get

class Sink:
    def write(self, *args, **kwargs):
        pass
    def flush(self):
        pass

figures = {
    "admin task list": timed(page("/admin/django_htask/task/")),
    "admin failed tasks": timed(page("/admin/django_htask/task/?status__exact=failed")),
    "admin run list": timed(page("/admin/django_htask/run/")),
    "admin failed runs": timed(page("/admin/django_htask/run/?status__exact=failed")),
    "admin overview": timed(page("/admin/django_htask/overview/")),
    "htask status": timed(lambda: call_command("htask", "status", stdout=Sink())),
    "health check": timed(lambda: check_health(max_late=60)),
    "metrics scrape": timed(lambda: list(DatabaseCollector().collect())),
}
for name, seconds in figures.items():
    print(f"{name}\\t{seconds}")
"""


class Site(Bench):
    """The bench's site on one database; this run's tasks are those with an id above
    :attr:`first_id` (the history below it stays)."""

    def __init__(self, database: Database, log: Path) -> None:
        super().__init__(database, log)  # type: ignore[arg-type]
        self.database = database
        self.first_id = 0

    @property
    def engine(self) -> Engine:
        """django-htask's engine of bench/cluster.py, counting this run's tasks only."""
        mine = f"django_htask_task WHERE id > {self.first_id}"
        return replace(
            ENGINES[0],
            done_sql=f"SELECT count(*) FROM {mine} AND status = 'succeeded'",
            times_sql=f"SELECT min(started_at), min(finished_at), max(finished_at) FROM {mine}",
        )

    def reset(self) -> None:
        """This run's tasks, their runs and the nodes go; the history stays."""
        self.sql(
            "DELETE FROM django_htask_run WHERE task_id > %s OR task_id IS NULL", self.first_id
        )
        self.sql("DELETE FROM django_htask_task WHERE id > %s", self.first_id)
        self.sql("DELETE FROM django_htask_node")
        self.sql("VACUUM ANALYZE django_htask_task, django_htask_run")

    def migrate(self) -> None:
        self.server_sql(f"CREATE DATABASE {self.database.name}")
        self.django_tests(
            "from django.core.management import call_command\ncall_command('migrate', verbosity=0)"
        )

    def server_sql(self, query: str) -> None:
        import psycopg

        with psycopg.connect(self.database.server.url, autocommit=True) as conn:
            conn.execute(query)

    def django_tests(self, code: str) -> str:
        """Run ``code`` with the test settings (the admin installed) on this database."""
        env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "HTASK_TEST_DATABASE_URL": self.pg.url}
        return self.django(code, env=env)

    # -- the history -----------------------------------------------------------------
    def load(self, count: int, newest_days: float, oldest_days: float) -> None:
        """Add ``count`` finished tasks, finished from ``oldest_days`` to ``newest_days``
        ago in id order (2% failed with a run, 2% cancelled without, the rest succeeded,
        on their rows: a success writes no run row), in statements of :data:`CHUNK`."""
        start = self.one("SELECT coalesce(max(id), 0) FROM django_htask_task")
        span = oldest_days - newest_days
        t0 = time.perf_counter()
        with self._indexes_built_after():
            self._insert(count, start, oldest_days, span, t0)
        print(f"    indexes built ({time.perf_counter() - t0:.0f} s)", flush=True)
        self.sql("VACUUM ANALYZE django_htask_task, django_htask_run")
        self.first_id = self.one("SELECT coalesce(max(id), 0) FROM django_htask_task")

    @contextmanager
    def _indexes_built_after(self) -> Iterator[None]:
        """The tables' indexes (but their primary keys) dropped for the block and built
        again after it: a bulk load into them costs several times as long."""
        tables = ("django_htask_task", "django_htask_run")
        self.sql(f"ALTER DATABASE {self.database.name} SET maintenance_work_mem = '512MB'")
        constraints = self.sql(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
            "FROM pg_constraint WHERE contype = 'u' AND conrelid::regclass::text = ANY(%s)",
            list(tables),
        )
        indexes = self.sql(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s) "
            "AND indexname NOT LIKE '%%_pkey' AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint)",
            list(tables),
        )
        for table, name, _definition in constraints:
            self.sql(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        for name, _definition in indexes:
            self.sql(f"DROP INDEX {name}")
        try:
            yield
        finally:
            for _name, definition in indexes:
                self.sql(definition)
            for table, name, definition in constraints:
                self.sql(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")

    def _insert(self, count: int, start: int, oldest_days: float, span: float, t0: float) -> None:
        for first in range(0, count, CHUNK):
            last = min(first + CHUNK, count)
            before = self.one("SELECT coalesce(max(id), 0) FROM django_htask_task")
            self.sql(
                "INSERT INTO django_htask_task (token, function, payload, run_at, status, "
                "attempts, max_attempts, priority, last_error, traceback, created_at, "
                "finished_at, started_at, backend, queue_name, give_up_on, retry_jitter, "
                "retry_kind, retry_on, node) "
                "SELECT md5(%s || ':' || i), %s, '\\x93a0a080'::bytea, t, "
                "CASE i %% 50 WHEN 0 THEN 'failed' WHEN 1 THEN 'cancelled' ELSE 'succeeded' END, "
                "CASE i %% 50 WHEN 1 THEN 0 ELSE 1 END, 1, 0, "
                "CASE i %% 50 WHEN 0 THEN 'ValueError: the partner API said no' ELSE '' END, "
                "'', t, t + interval '3 ms', t, '', 'default', '', 'none', 'exponential', '', "
                "CASE i %% 50 WHEN 1 THEN NULL ELSE 'bench-history' END "
                "FROM (SELECT i, now() - make_interval(secs => 86400 * "
                "(%s - %s * i::float8 / %s)) AS t "
                "FROM generate_series(%s::bigint, %s::bigint) AS i) AS g",
                f"h{start}",
                OLD,
                oldest_days,
                span,
                count,
                first,
                last - 1,
            )
            self.sql(
                "INSERT INTO django_htask_run (name, function, node, attempt, scheduled_for, "
                "started_at, finished_at, status, error, traceback, duration, task_id) "
                "SELECT function, function, 'bench-history', 1, run_at, started_at, "
                "finished_at, status, last_error, '', 0.003, id FROM django_htask_task "
                "WHERE id > %s AND status = 'failed'",
                before,
            )
            print(f"    {last:,} of {count:,} ({time.perf_counter() - t0:.0f} s)", flush=True)

    def size(self) -> str:
        return str(
            self.one(
                "SELECT pg_size_pretty(pg_total_relation_size('django_htask_task') "
                "+ pg_total_relation_size('django_htask_run'))"
            )
        )

    # -- 1 and 2 ---------------------------------------------------------------------
    def rate(self, tasks: int) -> tuple[float, float]:
        """Tasks/s of one node from exec and from the first task."""
        result = self.throughput(self.engine, tasks, 1)
        return result.from_start, result.from_first

    def start_up(self) -> float:
        """Seconds from a node's exec to its banner's last line."""
        self.reset()
        t0 = time.perf_counter()
        proc = self.manage("runscheduler", "--workers", "8", banner=True, env=self.engine.env)
        assert proc.stdout is not None
        for line in proc.stdout:
            if "stop:" in line:
                break
        ready = time.perf_counter() - t0
        _stop([proc])
        return ready

    def timings(self) -> dict[str, float]:
        out = self.django_tests(TIMINGS)
        return {
            name: float(seconds)
            for name, seconds in (line.split("\t") for line in out.strip().splitlines())
        }


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _spread(values: list[float]) -> str:
    """Max over min, minus 1, as a percentage."""
    return f"{(max(values) / min(values) - 1) * 100:.0f}%" if min(values) > 0 else "-"


def compare(small: Site, full: Site, args: argparse.Namespace) -> None:
    """Sections 1 and 2, rounds taking turns between the two databases."""
    figures: dict[str, dict[str, list[float]]] = {"small": {}, "full": {}}
    for n in range(args.rounds):
        for label, site in (("small", small), ("full", full)):
            own = figures[label]
            from_start, from_first = site.rate(args.tasks)
            own.setdefault("tasks/s from exec", []).append(from_start)
            own.setdefault("tasks/s from the first task", []).append(from_first)
            own.setdefault("node start-up (s)", []).append(site.start_up())
            for name, seconds in site.timings().items():
                own.setdefault(f"{name} (s)", []).append(seconds)
            print(
                f"  round {n + 1} {label}: {from_first:,.0f} tasks/s from the first task",
                flush=True,
            )
    print(f"\n  {'figure':<34}{'small':>10}{'full':>10}{'full/small':>12}   spread s/f")
    for name in figures["small"]:
        e, f = figures["small"][name], figures["full"][name]
        digits = 0 if "tasks/s" in name else 3
        print(
            f"  {name:<34}{_median(e):>10,.{digits}f}{_median(f):>10,.{digits}f}"
            f"{_median(f) / _median(e):>11.2f}x   {_spread(e)}/{_spread(f)}"
        )


def prune(full: Site, args: argparse.Namespace) -> None:
    """Section 3: a node deletes the expired tasks while it serves new ones."""
    print(f"\n3. {args.expired:,} tasks past their retention (finished 8 to 10 days ago)")
    full.reset()
    history = full.first_id
    full.load(args.expired, 8.0, 10.0)
    expired_sql = (
        "SELECT count(*) FROM django_htask_task WHERE id <= %s AND finished_at < now() - "
        "interval '7 days'"
    )
    left = full.one(expired_sql, full.first_id)
    print(f"  loaded: {left:,} expired, {history:,} inside retention; {full.size()}")
    # One node for the whole section: it prunes as it runs.
    proc = full.manage("runscheduler", "--workers", "8", env=full.engine.env)
    t0 = time.monotonic()
    during: list[float] = []
    gone_at = None
    try:
        while True:
            rate = _fed(full, args.tasks)
            left = full.one(expired_sql, full.first_id)
            elapsed = time.monotonic() - t0
            print(f"    {elapsed:6.0f} s: {rate:,.0f} tasks/s, {left:,} expired left", flush=True)
            if left == 0:
                gone_at = elapsed
                break
            during.append(rate)
            if elapsed > args.prune_limit:
                break
        after = [_fed(full, args.tasks) for _ in range(args.rounds)]
    finally:
        _stop([proc])
    if gone_at is None:
        print(f"  NOT all deleted within {args.prune_limit:.0f} s: {left:,} left")
        return
    print(f"  every expired task deleted {gone_at:.0f} s after the node started")
    if during:
        ratio = _median(during) / _median(after)
        print(
            f"  tasks/s while deleting {_median(during):,.0f} (spread {_spread(during)}), "
            f"after {_median(after):,.0f} (spread {_spread(after)}): {ratio:.2f}x"
        )


def _fed(site: Site, tasks: int) -> float:
    """Queue ``tasks`` trivial tasks for the running node; its tasks/s over them."""
    before = site.one("SELECT coalesce(max(id), 0) FROM django_htask_task")
    site.django(site.engine.enqueue.format(tasks=tasks), env=site.engine.env)
    mine = f"django_htask_task WHERE id > {before}"
    while site.one(f"SELECT count(*) FROM {mine} AND status = 'succeeded'") < tasks:
        time.sleep(0.2)
    first, last = site.sql(f"SELECT min(started_at), max(finished_at) FROM {mine}")[0]
    site.sql(f"DELETE FROM django_htask_run WHERE task_id > {before}")
    site.sql(f"DELETE FROM {mine}")
    return float(tasks / (last - first).total_seconds())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=10_000_000)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument(
        "--newest-hours", type=float, default=0.0, help="the history ends this long ago"
    )
    parser.add_argument("--expired", type=int, default=2_000_000)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--prune-limit", type=float, default=900, help="section 3 gives up after (s)"
    )
    parser.add_argument("--only", type=int, nargs="+", choices=(1, 3), default=(1, 3))
    args = parser.parse_args()
    with PostgresCluster() as server, tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp, "jobs.log")
        small = Site(Database(server, "htask_small"), log)
        full = Site(Database(server, "htask_full"), log)
        for site in (small, full):
            site.migrate()
        newest = args.newest_hours / 24
        print(
            f"{server.bin_dir.parent.name}: loading {args.history:,} finished tasks "
            f"({args.small:,} for small), finished from 6.5 days to "
            f"{args.newest_hours:g} hours ago"
        )
        small.load(args.small, newest, 6.5)
        full.load(args.history, newest, 6.5)
        print(f"  full: {full.size()}")
        if 1 in args.only:
            print("\n1, 2. small against full")
            compare(small, full, args)
        if 3 in args.only:
            prune(full, args)


if __name__ == "__main__":
    main()
