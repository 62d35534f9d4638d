"""Several nodes on PostgreSQL and MariaDB: throughput, a large schedule table, notify
latency.

Run: ``.venv/bin/python bench/cluster.py`` (starts its own throw-away PostgreSQL, and
for section 1 a throw-away MariaDB too: ``--database``). Section 1 alone on
PostgreSQL, every engine: ``.venv/bin/python bench/cluster.py --only 1 --database postgres
--tasks 10000 --rounds 3`` (``--oban-python`` if ``python3.12`` is not on the path).

1. One-off throughput: N trivial tasks (``--tasks``, 2000) queued, then 1 or 3
   processes of each engine started: django-htask's ``runscheduler`` (8 workers, its
   default), procrastinate's ``manage.py procrastinate worker --concurrency 4``
   (its Django integration), django-q2's ``qcluster`` (ORM broker, 4 workers, bulk
   4), django-tasks-db's ``db_worker`` and Oban for Python's ``oban start`` (queue
   limit 8); django-htask also with the same function as ``async def`` (``htask
   async``: Oban's jobs are coroutines), and with its 3 processes forked by one command
   once Django is set up (``htask forked``: ``runscheduler --processes 3``; not run
   with 1 process, where it is the plain command); django-htask and Oban also with 20 and 50
   workers per process / as
   their queue's limit (``--widths``, 8 20 50), side by side at each (not in the
   peers' ratios); the peers with persistent connections
   (``tests.cluster.peer_settings``). Oban is not a Django app and needs Python 3.12
   or later: the bench makes it a venv of its own on first use
   (``~/.cache/django-htask-bench/oban-0.7.0``, with ``--oban-python``,
   ``python3.12``; ``pip install oban==0.7.0`` from PyPI), gives it a database of its
   own on the same server (schema by ``oban install``), queues with its client's
   ``enqueue_many`` and starts its CLI with its log at warnings (at info it logs
   every job). Each trial starts on a quiet server: its tables emptied
   (``TRUNCATE``), its tasks queued, then its database's statistics taken (ANALYZE)
   or, for Oban, none (each peer as it runs faster: ``Bench.settle``), a
   ``CHECKPOINT``; autovacuum is off during the section (on MariaDB, InnoDB's purge is
   waited for instead). Rounds interleave the engines (``--rounds``, 4; medians). Per engine
   and size: tasks/s from exec to the last task finished and from the first task
   started to the last finished, commits (``pg_stat_database``) and rows written
   (``pg_stat_user_tables``) of its database per task, the processes' CPU per task
   (and the same after start-up: from the first poll that saw a task done), the
   database server's CPU per task (all its processes, from exec to the last task
   finished), and exec to the first task finished; then django-htask / Oban at each
   width both ran, each round's ratio (tasks/s, the workers' and the server's CPU
   per task): the median and the range. On MariaDB (``--database mariadb`` or
   ``both``, the default; started as tests/mariadbcluster.py does) the same rounds
   run django-htask and ``db_worker`` only (procrastinate and Oban need PostgreSQL;
   django-q2 is left out), rows written come from ``SHOW GLOBAL STATUS``
   (``Handler_write`` + ``_update`` + ``_delete``), and commits are not counted: its
   ``Com_commit`` counts ``COMMIT`` statements only, not a statement in autocommit
   (each a transaction of its own, as PostgreSQL's ``xact_commit`` counts it), so the
   two would not compare. Sections 2 to 6 run on PostgreSQL only.
2. 100k schedules over 3 nodes: start-up to ready, memory (RSS) per node, and the
   transactions per second the idle nodes make (``pg_stat_database``).
3. Notify-to-fire latency: a schedule's ``next_run_at`` set to now by another client;
   how long until its run starts (p50, p99).
4. A node killed: three nodes with django-htask's default settings run 30 schedules
   ``@every 1s``; one node is killed with SIGKILL; for the schedules it was firing, the
   longest gap between two occurrences that ran, and whether any ran twice.
5. Occurrences: 0, then ``--occurrences`` (300 and 1000) schedules ``@every 1s`` on
   1 and 3 nodes with default settings: occurrences, commits, rows written, CPU and
   connections per second over ``--window`` seconds, and per occurrence over idle; then
   the most schedules on 1 node with 2 and 32 workers.
6. Claiming from a backlog: 2,000, 10,000 and 100,000 trivial tasks queued; the time
   of one claim of 8 tasks (``Store.start_tasks``, its transaction included, 200 in a
   row), with the claim index (``htask_task_claim``) on fresh statistics, on stale
   ones (taken before the backlog was queued), on stale ones with the plan left to
   them (``CLAIM_PLANNER`` off: every claim before it), and without the index
   (dropped: every claim before migration 0007), taking turns.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchutil import compile_sources  # noqa: E402

from django_htask.conf import HtaskSettings  # noqa: E402
from tests.cluster.site import ClusterSite, MariaDBSite, process_stats  # noqa: E402
from tests.mariadbcluster import MariaDBServer, connect, database_settings  # noqa: E402
from tests.pgcluster import PostgresCluster  # noqa: E402
from tests.throwaway import ThrowAwayServer  # noqa: E402

SETTINGS = "tests.cluster.bench_settings"
#: django-htask's default ``PREFETCH_WITHIN``.
DEFAULT_PREFETCH = HtaskSettings.prefetch_within
#: django-htask's default ``PREFETCH_PER_WORKER``.
DEFAULT_PER_WORKER = HtaskSettings.prefetch_per_worker
PEER_SETTINGS = "tests.cluster.peer_settings"
NOOP = "tests.cluster.clusterapp.tasks:noop"
#: The same, ``async def`` (Oban's jobs are coroutines).
ANOOP = "tests.cluster.clusterapp.tasks:anoop"


@dataclass(frozen=True)
class Engine:
    """How to queue, run and time trivial tasks with one engine. ``enqueue`` is Django
    code (``{tasks}`` is the count); ``command`` a management command (``{width}`` is
    :attr:`width`); ``times_sql`` returns the first start, the first finish and the
    last finish."""

    name: str
    enqueue: str
    command: tuple[str, ...]
    settings: str
    done_sql: str
    times_sql: str
    #: It runs on MariaDB too (section 1's MariaDB rows).
    mariadb: bool = False
    #: Its workers per process (or its queue's limit); 0 where the peer's is fixed.
    width: int = 0
    #: The name of its rows at other widths (``{width}``); empty: one width only.
    widened: str = ""
    #: django-htask's ``PREFETCH_WITHIN`` (``--prefetch``).
    prefetch: float = DEFAULT_PREFETCH
    #: django-htask's ``PREFETCH_PER_WORKER`` (``--per-worker``).
    per_worker: int = DEFAULT_PER_WORKER
    #: Its processes are one command's (``runscheduler --processes N``), forked once
    #: Django is set up; run with 3 processes only (with 1 it is the plain command).
    forks: bool = False
    #: Its trials start with statistics taken on the queued tasks (an ANALYZE, as
    #: autovacuum takes them on a table that grew); False: with none (a table just
    #: made). Each peer has the one it runs faster with (see :meth:`Bench.settle`).
    analyzed: bool = True

    @property
    def env(self) -> dict[str, str]:
        """The settings of its processes; a peer's name picks its apps."""
        return {
            "DJANGO_SETTINGS_MODULE": self.settings,
            "HTASK_BENCH_PEER": self.name,
            "HTASK_BENCH_PREFETCH_WITHIN": str(self.prefetch),
            "HTASK_BENCH_PREFETCH_PER_WORKER": str(self.per_worker),
        }

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(arg.format(width=self.width) for arg in self.command)

    def wide(self, width: int) -> Engine:
        """The same engine with ``width`` workers per process."""
        return replace(self, name=self.widened.format(width=width), width=width)

    def prepare(self, bench: Bench) -> Bench:
        """The site it runs on: ``bench``'s own (its migrate made the tables)."""
        return bench

    def reset(self, bench: Bench) -> None:
        bench.reset()

    def queue(self, bench: Bench, tasks: int) -> None:
        bench.django(self.enqueue.format(tasks=tasks), env=self.env)

    def start(self, bench: Bench) -> subprocess.Popen[str]:
        return bench.manage(*self.argv, env=self.env)

    def start_all(self, bench: Bench, processes: int) -> list[subprocess.Popen[str]]:
        """``processes`` processes of it: as many commands, or one forking them."""
        if self.forks:
            return [bench.manage(*self.argv, "--processes", str(processes), env=self.env)]
        return [self.start(bench) for _ in range(processes)]


#: Oban for Python's release the bench installs in its own venv.
OBAN_VERSION = "0.7.0"
OBAN_WORKER = "bench.peers.oban_jobs.ObanNoop"
#: Queued by Oban's own client, in its venv (``OBAN_DSN`` names its database).
OBAN_ENQUEUE = """
import asyncio
from oban import Oban
from bench.peers.oban_jobs import ObanNoop

async def main():
    pool = await Oban.create_pool()
    try:
        await Oban(pool=pool).enqueue_many(ObanNoop.new({{"n": n}}) for n in range({tasks}))
    finally:
        await pool.close()

asyncio.run(main())
"""


@dataclass(frozen=True)
class ObanEngine(Engine):
    """Oban for Python, not a Django app: its own venv (it needs Python 3.12 or later),
    made with :attr:`python` on first use; its own database on the bench's server, its
    schema installed by its CLI; its tasks queued by its client (``enqueue_many``) and
    run by ``oban start`` with the queue's limit at :attr:`width`. Its log is set to
    warnings, as quiet as the other engines' (at its default, info, it logs every job)."""

    #: The interpreter its venv is made with.
    python: str = "python3.12"
    database: str = "oban"

    @property
    def venv(self) -> Path:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return cache / "django-htask-bench" / f"oban-{OBAN_VERSION}"

    def prepare(self, bench: Bench) -> Bench:
        """Its venv and its database, made if missing, its schema installed: a site on
        that database."""
        if not (self.venv / "bin" / "oban").exists():
            _make_venv(self.python, self.venv, f"oban=={OBAN_VERSION}")
        compile_sources(ROOT, str(self.venv / "bin" / "python"))  # its jobs' module
        if not bench.sql("SELECT 1 FROM pg_database WHERE datname = %s", self.database):
            bench.sql(f"CREATE DATABASE {self.database}")
        assert isinstance(bench.server, PostgresCluster)
        site = Bench(Database(bench.server, self.database), bench.log)  # type: ignore[arg-type]
        self._run(site, str(self.venv / "bin" / "oban"), "install")
        return site

    def reset(self, bench: Bench) -> None:
        bench.sql("TRUNCATE oban_jobs, oban_producers, oban_leaders")

    def queue(self, bench: Bench, tasks: int) -> None:
        self._run(bench, str(self.venv / "bin" / "python"), "-c", self.enqueue.format(tasks=tasks))

    def start(self, bench: Bench) -> subprocess.Popen[str]:
        return bench.spawn([str(self.venv / "bin" / "oban"), *self.argv], self._env(bench))

    def _env(self, bench: Bench) -> dict[str, str]:
        return {"OBAN_DSN": bench.pg.url}

    def _run(self, bench: Bench, *argv: str) -> None:
        result = subprocess.run(
            argv,
            env={**os.environ, **bench.env, **self._env(bench)},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if result.returncode:
            raise RuntimeError(f"{argv[0]} {argv[1]} failed:\n{result.stderr}")


def _make_venv(python: str, venv: Path, requirement: str) -> None:
    """A virtualenv at ``venv`` made with ``python``, ``requirement`` installed from the
    package index."""
    print(f"(making {venv} with {python}: pip install {requirement})")
    try:
        subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True)
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", requirement],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        stderr = getattr(exc, "stderr", b"") or b""
        raise SystemExit(
            f"could not make {venv} with {python!r} ({exc}; Oban needs Python 3.12 or "
            f"later: --oban-python):\n{stderr.decode(errors='replace')[-2000:]}"
        ) from exc


def _htask(name: str, function: str, widened: str) -> Engine:
    """django-htask's ``runscheduler`` running ``function``."""
    return Engine(
        name,
        "from django_htask import clock\nfrom django_htask.engine import registry\n"
        "from django_htask.models import Task\nnow = clock.now()\n"
        f"Task.objects.bulk_create(Task(function='{function}', run_at=now, "
        f"payload=registry.check_call('{function}', (n,), {{{{}}}})) for n in range({{tasks}}))",
        ("runscheduler", "--workers", "{width}"),
        SETTINGS,
        "SELECT count(*) FROM django_htask_task WHERE status = 'succeeded'",
        "SELECT min(started_at), min(finished_at), max(finished_at) FROM django_htask_task",
        mariadb=True,
        width=8,
        widened=widened,
    )


ENGINES = (
    _htask("django-htask", NOOP, "htask -w {width}"),
    Engine(
        "procrastinate",
        "from bench.peers.tasks import p_noop\n"
        "p_noop.batch_defer(*({{'n': n}} for n in range({tasks})))",
        ("procrastinate", "worker", "--concurrency", "4"),
        PEER_SETTINGS,
        "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
        "SELECT min(at) FILTER (WHERE type = 'started'), min(at) FILTER (WHERE type = "
        "'succeeded'), max(at) FILTER (WHERE type = 'succeeded') FROM procrastinate_events",
    ),
    Engine(
        "django-q2",
        "from django.db import transaction\nfrom django_q.tasks import async_task\n"
        "with transaction.atomic():\n    for n in range({tasks}):\n"
        "        async_task('bench.peers.qtasks.q_noop', n)",
        ("qcluster",),
        PEER_SETTINGS,
        "SELECT count(*) FROM django_q_task WHERE success",
        # django-q2's `started` is when the task was queued: its first stop stands in
        # for its first start (a trivial task runs in well under a millisecond).
        "SELECT min(stopped), min(stopped), max(stopped) FROM django_q_task",
    ),
    Engine(
        "db_worker",
        "from tests.cluster.clusterapp.dtasks import dt_noop\n"
        "for n in range({tasks}):\n    dt_noop.enqueue(n)",
        ("db_worker", "--no-startup-delay", "--interval", "0.05"),
        PEER_SETTINGS,
        "SELECT count(*) FROM django_tasks_database_dbtaskresult WHERE status = 'SUCCESSFUL'",
        "SELECT min(started_at), min(finished_at), max(finished_at) "
        "FROM django_tasks_database_dbtaskresult",
        mariadb=True,
    ),
    ObanEngine(
        "oban",
        OBAN_ENQUEUE,
        ("start", "--queues", "default:{width}", "--log-level", "WARNING",
         "--cron-modules", "bench.peers.oban_jobs"),
        "",
        "SELECT count(*) FROM oban_jobs WHERE state = 'completed'",
        # Oban's times are naive, in UTC; attempted_at is when a job was claimed.
        "SELECT min(attempted_at) AT TIME ZONE 'UTC', min(completed_at) AT TIME ZONE "
        "'UTC', max(completed_at) AT TIME ZONE 'UTC' FROM oban_jobs",
        width=8,
        widened="oban -l {width}",
        analyzed=False,
    ),
    _htask("htask async", ANOOP, "htask async -w {width}"),
    replace(_htask("htask forked", NOOP, "htask forked -w {width}"), forks=True),
)  # fmt: skip


PEERS = tuple(e.name for e in ENGINES if e.settings != SETTINGS)

#: Section 6: the claim index as migration 0007 makes it, and a node's claims timed.
CLAIM_INDEX_SQL = (
    "CREATE INDEX IF NOT EXISTS htask_task_claim ON django_htask_task "
    "(status, priority DESC, run_at, id)"
)
#: Section 6's cases: the claim as shipped on fresh statistics, on stale ones (taken
#: before the backlog was queued), on stale ones with the plan left to them, and on
#: fresh statistics without the claim index (every claim before migration 0007).
CLAIM_CASES = ("fresh", "stale", "stale, unpinned", "no index")
CLAIM_TIMING = """
import time
from datetime import timedelta
from django_htask import clock
from django_htask.store import get_store, postgres
if {unpinned}:  # the claim's plan left to the statistics, as before CLAIM_PLANNER
    postgres.CLAIM_PLANNER = ()
store = get_store()
store.register_node("bench", "host", 1, "0", clock.now())
t0 = time.perf_counter()
for _ in range({claims}):
    now = clock.now()
    assert len(store.start_tasks("bench", now, 8, now + timedelta(minutes=5))) == 8
print((time.perf_counter() - t0) / {claims})
"""


@dataclass(frozen=True)
class Counters:
    """``pg_stat_database`` commits (NaN where not counted: MariaDB), rows written
    (``pg_stat_user_tables``), and how many statements this process had sent when they
    were read."""

    commits: float
    rows: int
    statements: int


@dataclass(frozen=True)
class Throughput:
    tasks: int
    from_start: float  # tasks/s from the processes' exec to the last task finished
    from_first: float  # tasks/s from the first task started to the last finished
    first_done_s: float  # from exec to the first task finished
    commits: float  # per task (NaN: not counted, on MariaDB)
    rows: float  # rows inserted, updated or deleted, per task
    cpu_ms: float  # the worker processes' user + system CPU, per task
    #: The same, from the first poll that found a task finished (start-up behind) to
    #: the end, per task finished in between.
    cpu_ms_after: float
    #: The database server's CPU (all its processes) from exec to the last task
    #: finished, per task.
    server_cpu_ms: float


class Database:
    """One database of the bench's PostgreSQL, as :class:`Bench` takes a server: its
    URL, and the server's data directory."""

    def __init__(self, server: PostgresCluster, name: str) -> None:
        self.server = server
        self.name = name
        self.url = server.url.rsplit("/", 1)[0] + f"/{name}"
        self.data_dir = server.data_dir


class Bench(ClusterSite):
    """The bench's site on PostgreSQL."""

    def __init__(self, server: ThrowAwayServer, log: Path) -> None:
        super().__init__(server, log, SETTINGS)  # type: ignore[arg-type]
        self.server = server
        #: Statements sent through ``sql`` (each one a transaction of its own).
        self.statements = 0

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        self.statements += 1
        return super().sql(query, *params)

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Autovacuum off meanwhile: each trial's tables are new (``TRUNCATE``), and
        their statistics are set by :meth:`settle` at the same point of every trial,
        not by an ANALYZE at whatever point of a trial autovacuum's nap ends."""
        self.sql("ALTER SYSTEM SET autovacuum = off")
        self.sql("SELECT pg_reload_conf()")
        try:
            yield
        finally:
            self.sql("ALTER SYSTEM RESET autovacuum")
            self.sql("SELECT pg_reload_conf()")

    def settle(self, analyzed: bool) -> None:
        """Make the statistics of this database's tables those of ``analyzed`` (see
        :attr:`Engine.analyzed`), whatever a previous trial left (a ``TRUNCATE`` keeps
        them), then write the server's dirty pages out now rather than during the
        trial. No one state is neutral: statistics taken on a backlog slow Oban's
        statements, and their absence slows procrastinate's and ``db_worker``'s
        (docs/cluster.md, "Beside Oban for Python", has the figures)."""
        self.sql(
            "DELETE FROM pg_statistic WHERE starelid IN (SELECT c.oid FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public')"
        )
        if analyzed:
            self.sql("ANALYZE")
        self.sql("CHECKPOINT")

    def django(self, code: str, timeout: float = 600, env: dict[str, str] | None = None) -> str:
        """Run ``code`` after ``django.setup()`` in a subprocess, with ``env`` on top of
        the site's environment; return its stdout."""
        site = self.env
        self.env = {**site, **(env or {})}
        try:
            return super().django(code, timeout)
        finally:
            self.env = site

    def manage(
        self, *args: str, banner: bool = False, env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start a management command; with ``banner``, its stdout is a pipe to read
        the banner from (read no further: nothing else is printed there)."""
        return self.spawn([sys.executable, "-m", "django", *args], env, banner)

    def spawn(
        self, argv: list[str], env: dict[str, str] | None = None, banner: bool = False
    ) -> subprocess.Popen[str]:
        """Start ``argv`` with the site's environment and ``env`` on top (``banner``:
        see :meth:`manage`)."""
        return subprocess.Popen(
            argv,
            env={**os.environ, **self.env, **(env or {})},
            cwd=ROOT,
            stdout=subprocess.PIPE if banner else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # its own process group: _stop can end all of it
        )

    def label(self) -> str:
        """The server, as the report's first line names it."""
        assert isinstance(self.server, PostgresCluster)
        return f"PostgreSQL {self.server.bin_dir.parent.name}"

    def server_pid(self) -> int:
        """The database server's first process (PostgreSQL's postmaster: its backends
        are its children)."""
        assert isinstance(self.server, PostgresCluster | Database)
        return int((self.server.data_dir / "postmaster.pid").read_text().split()[0])

    def migrate(self) -> None:
        """Every engine's tables (Django's)."""
        self.django(
            "from django.core.management import call_command\ncall_command('migrate', verbosity=0)",
            env={"DJANGO_SETTINGS_MODULE": PEER_SETTINGS, "HTASK_BENCH_PEER": "all"},
        )

    def reset(self) -> None:
        self.sql(
            "TRUNCATE django_htask_run, django_htask_task, django_htask_schedule, "
            "django_htask_node, django_tasks_database_dbtaskresult, procrastinate_jobs, "
            "procrastinate_workers, django_q_ormq, django_q_task CASCADE"
        )

    def _counters(self) -> Counters:
        statements = self.statements + 1  # this read's commit counts in the next one
        commits, rows = self.sql(
            "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = "
            "current_database()), (SELECT sum(n_tup_ins + n_tup_upd + n_tup_del) "
            "FROM pg_stat_user_tables)"
        )[0]
        return Counters(int(commits), int(rows), statements)

    # -- 1. throughput ---------------------------------------------------------------
    def throughput(self, engine: Engine, tasks: int, processes: int) -> Throughput:
        """Queue ``tasks`` trivial tasks, settle the server (:meth:`settle`), start
        ``processes`` workers of ``engine``, wait until all are done; times come from
        the rows each engine writes. ``engine`` runs on this site (see
        :meth:`Engine.prepare`)."""
        engine.reset(self)
        engine.queue(self, tasks)
        self.settle(engine.analyzed)
        time.sleep(0.3)  # the enqueuing backend's statistics flushed at its exit
        before = self._counters()
        server = _tree_cpu(self.server_pid())
        t0 = time.time()
        procs = engine.start_all(self, processes)
        deadline = time.monotonic() + 600
        early: tuple[int, float] | None = None  # tasks done and CPU at the first done
        while (done := self.one(engine.done_sql)) < tasks:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{engine.name} did not finish {tasks} tasks in 600 s")
            if done and early is None:
                early = (done, sum(_tree_cpu(p.pid) for p in procs))
            time.sleep(0.1)
        cpu = sum(_tree_cpu(p.pid) for p in procs)
        server = _tree_cpu(self.server_pid()) - server
        done_early, cpu_early = early or (0, 0.0)  # all done at the first look
        first_started, first_finished, last_finished = self.sql(engine.times_sql)[0]
        _stop(procs)
        time.sleep(0.3)
        after = self._counters()
        own = self.statements - before.statements  # this process's polls
        return Throughput(
            tasks=tasks,
            from_start=tasks / (last_finished.timestamp() - t0),
            from_first=tasks / (last_finished - first_started).total_seconds(),
            first_done_s=first_finished.timestamp() - t0,
            commits=(after.commits - before.commits - own) / tasks,
            rows=(after.rows - before.rows) / tasks,
            cpu_ms=cpu * 1000 / tasks,
            cpu_ms_after=(cpu - cpu_early) * 1000 / max(tasks - done_early, 1),
            server_cpu_ms=server * 1000 / tasks,
        )

    # -- 5. occurrences --------------------------------------------------------------
    def occurrences(
        self, schedules: int, nodes: int, window: float, workers: int = 8
    ) -> dict[str, float]:
        """``schedules`` schedules ``@every 1s`` on ``nodes`` nodes with django-htask's
        default settings: over ``window`` seconds (after 10 s to settle), the
        occurrences started, the commits and the rows written, per second."""
        self.reset()
        self.django(
            "from django_htask.models import Schedule\n"
            f"for i in range({schedules}):\n"
            f"    s = Schedule(name=f'tick-{{i}}', function='{NOOP}', schedule='@every 1s')\n"
            "    s.set_call((i,))\n    s.save()"
        )
        defaults = {"HTASK_CLUSTER_DEFAULTS": "1"}
        procs = [
            self.manage("runscheduler", "--workers", str(workers), env=defaults)
            for _ in range(nodes)
        ]
        time.sleep(10)
        start = self.one("SELECT now()")
        before = self._counters()
        cpu0 = sum(_tree_cpu(p.pid) for p in procs)
        connections = 0
        for _ in range(4):
            time.sleep(window / 4)
            connections = max(
                connections,
                self.one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                    "current_database() AND pid <> pg_backend_pid()"
                ),
            )
        cpu = sum(_tree_cpu(p.pid) for p in procs) - cpu0
        after = self._counters()
        end = self.one("SELECT now()")
        started = self.one(
            "SELECT count(*) FROM django_htask_run WHERE started_at >= %s AND started_at < %s",
            start,
            end,
        )
        _stop(procs)
        seconds = (end - start).total_seconds()
        own = self.statements - before.statements - 2  # not the last two reads
        return {
            "occurrences": started / seconds,
            "commits": (after.commits - before.commits - own) / seconds,
            "rows": (after.rows - before.rows) / seconds,
            "cpu": cpu / seconds,
            "connections": connections / nodes,
        }

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

    # -- 6. claiming from a backlog --------------------------------------------------
    def claim_cost(self, backlog: int, claims: int, rounds: int) -> dict[str, float]:
        """The median ms one claim of 8 tasks takes with ``backlog`` tasks queued, for
        each of :data:`CLAIM_CASES` (``rounds`` of each, taking turns)."""
        timed: dict[str, list[float]] = {case: [] for case in CLAIM_CASES}
        for _ in range(rounds):
            for case in CLAIM_CASES:
                self.reset()
                self.sql(CLAIM_INDEX_SQL if case != "no index" else "DROP INDEX htask_task_claim")
                stale = case.startswith("stale")
                if stale:  # statistics taken when the table held as many tasks, all done
                    self.django(ENGINES[0].enqueue.format(tasks=backlog))
                    self.sql("UPDATE django_htask_task SET status = 'succeeded'")
                    self.sql("ANALYZE django_htask_task")
                self.django(ENGINES[0].enqueue.format(tasks=backlog))
                if not stale:
                    self.sql("ANALYZE django_htask_task")
                unpinned = case in ("stale, unpinned", "no index")
                out = self.django(CLAIM_TIMING.format(claims=claims, unpinned=unpinned))
                timed[case].append(float(out.split()[-1]) * 1000)
        self.sql(CLAIM_INDEX_SQL)
        return {case: statistics.median(times) for case, times in timed.items()}

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


class MariaDBBench(Bench, MariaDBSite):
    """The bench's site on MariaDB (section 1, the engines marked ``mariadb``)."""

    #: The tables of the engines that run on MariaDB.
    TABLES = (
        "django_htask_run",
        "django_htask_task",
        "django_htask_schedule",
        "django_htask_node",
        "django_tasks_database_dbtaskresult",
    )

    def label(self) -> str:
        assert isinstance(self.server, MariaDBServer)
        return f"MariaDB {self.server.version()}"

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Nothing to turn off (InnoDB's purge is waited for by :meth:`settle`)."""
        yield

    def settle(self, analyzed: bool) -> None:
        """Wait until InnoDB has purged the row versions the last trial left. (InnoDB
        keeps statistics of its own, recalculated as a table changes.)"""
        self.sql("SET GLOBAL innodb_max_purge_lag_wait = 0")

    def server_pid(self) -> int:
        assert isinstance(self.server, MariaDBServer)
        return int((self.server.root / "mariadbd.pid").read_text().split()[0])

    def migrate(self) -> None:
        """django-htask's tables and django-tasks-db's (procrastinate's migrations are
        PostgreSQL's SQL, so not every peer's apps at once)."""
        code = (
            "from django.core.management import call_command\ncall_command('migrate', verbosity=0)"
        )
        self.django(code)
        self.django(
            code, env={"DJANGO_SETTINGS_MODULE": PEER_SETTINGS, "HTASK_BENCH_PEER": "db_worker"}
        )

    def reset(self) -> None:
        """Empty :data:`TABLES`: ``TRUNCATE`` one at a time, on one connection with the
        foreign keys unchecked (InnoDB truncates no table another one references)."""
        conn = connect(database_settings(self.pg.url))
        try:
            cursor = conn.cursor()
            cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
            for table in self.TABLES:
                cursor.execute(f"TRUNCATE {table}")
        finally:
            conn.close()

    def _counters(self) -> Counters:
        """Rows written from the server's handler counters; no commits (see the module)."""
        statements = self.statements + 1
        status = dict(
            self.sql(
                "SHOW GLOBAL STATUS WHERE Variable_name IN "
                "('Handler_write', 'Handler_update', 'Handler_delete')"
            )
        )
        return Counters(float("nan"), sum(int(v) for v in status.values()), statements)


#: Section 1's databases: the server to start and the bench's site on it.
DATABASES: dict[str, tuple[Callable[[], ThrowAwayServer], type[Bench]]] = {
    "postgres": (PostgresCluster, Bench),
    "mariadb": (MariaDBServer, MariaDBBench),
}


@contextmanager
def _bench(database: str) -> Iterator[Bench]:
    """A throw-away server of ``database`` with every engine's tables, and the bench's
    site on it."""
    make, site = DATABASES[database]
    with make() as server:
        bench = site(server, server.root / "jobs.log")
        bench.migrate()
        print(f"{bench.label()}, {os.cpu_count()} CPUs")
        yield bench


def _tree_cpu(pid: int) -> float:
    """Seconds of user + system CPU used by ``pid`` and its descendants (those alive, and
    those that ended and were waited for), from ``/proc``."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats = process_stats()
    for proc, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(proc)
    total, todo = 0, [pid]
    while todo:
        proc = todo.pop()
        if proc in stats:  # utime, stime, cutime, cstime
            total += sum(int(f) for f in stats[proc][11:15])
        todo += children.get(proc, [])
    return total / ticks


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _print_throughput(results: dict[tuple[str, int], list[Throughput]], names: list[str]) -> None:
    def median(name: str, size: int, field: str) -> float:
        return float(statistics.median(getattr(r, field) for r in results[name, size]))

    def spread(name: str, size: int, field: str) -> float:
        """(max - min) / median over the rounds, in per cent."""
        values: list[float] = [getattr(r, field) for r in results[name, size]]
        return (max(values) - min(values)) / median(name, size, field) * 100

    print(
        f"  {'engine':<14} {'procs':>5} {'tasks/s from exec':>17} {'from 1st task':>13} "
        f"{'spread':>6} {'commits/task':>12} {'rows/task':>9} {'CPU ms/task':>11} "
        f"{'after start':>11} {'server CPU':>10} {'exec to 1st done':>16}"
    )
    for size in (1, 3):
        for name in names:
            if (name, size) not in results:
                continue  # forked: 3 processes only
            print(
                f"  {name:<14} {size:>5} {median(name, size, 'from_start'):>17.0f} "
                f"{median(name, size, 'from_first'):>13.0f} "
                f"{spread(name, size, 'from_first'):>5.0f}% "
                f"{median(name, size, 'commits'):>12.2f} {median(name, size, 'rows'):>9.2f} "
                f"{median(name, size, 'cpu_ms'):>11.2f} "
                f"{median(name, size, 'cpu_ms_after'):>11.2f} "
                f"{median(name, size, 'server_cpu_ms'):>10.2f} "
                f"{median(name, size, 'first_done_s'):>14.2f} s"
            )
    print("  (spread: (max - min) / median of the tasks/s from the 1st task over the rounds;")
    print("   CPU ms/task: the engine's processes; after start: the same from the first poll")
    print("   that saw a task done, per task after it; server CPU: the database server's")
    print("   processes from exec to the last task finished, per task, the bench's polls,")
    print("   10 a second on a connection each, included)")
    ours, peers = ENGINES[0].name, [n for n in names if n in PEERS]
    if ours in names:
        print(
            "  django-htask, CPU ms per task, 3 processes / 1 process: "
            f"{median(ours, 3, 'cpu_ms') / median(ours, 1, 'cpu_ms'):.2f}x; after start "
            f"{median(ours, 3, 'cpu_ms_after') / median(ours, 1, 'cpu_ms_after'):.2f}x"
        )
    if not peers or ours not in names:
        return
    for size in (1, 3):
        parts = []
        for field, label in (("from_start", "from exec"), ("from_first", "from 1st task")):
            best = max(peers, key=lambda p: median(p, size, field))
            ratio = median(ours, size, field) / median(best, size, field)
            parts.append(f"{label} {ratio:.1f}x (best peer {best})")
        print(f"  {size} process(es), django-htask / best peer: " + ", ".join(parts))
    for size in (1, 3):
        each = ", ".join(
            f"{p} {median(ours, size, 'from_first') / median(p, size, 'from_first'):.1f}x / "
            f"{median(ours, size, 'from_start') / median(p, size, 'from_start'):.1f}x"
            for p in peers
        )
        print(f"  {size} process(es), django-htask / each (from 1st task / from exec): {each}")


def _ratio(ours: list[Throughput], reference: list[Throughput], *fields: str) -> str:
    """The median of the rounds' ratios (of the sum of ``fields``), and the lowest and
    the highest."""

    def total(run: Throughput) -> float:
        return float(sum(getattr(run, field) for field in fields))

    ratios = [total(a) / total(b) for a, b in zip(ours, reference, strict=True)]
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def _print_equal_widths(
    results: dict[tuple[str, int], list[Throughput]], engines: list[Engine]
) -> None:
    """django-htask / Oban where one's workers per process equal the other's queue
    limit, each round's ratio against the same round's."""
    ours = [e for e in engines if e.settings == SETTINGS]
    oban = {e.width: e.name for e in engines if isinstance(e, ObanEngine)}
    if not {e.width for e in ours} & oban.keys():
        return
    print("  django-htask / Oban at equal concurrency (median of the rounds' ratios, range):")
    for size in (1, 3):
        for engine in sorted(
            ours, key=lambda e: (e.width, e.forks, e.widened, e.prefetch, e.per_worker)
        ):
            if engine.width not in oban or (engine.name, size) not in results:
                continue
            width = engine.width
            got, ref = results[engine.name, size], results[oban[width], size]
            buffer = "" if engine.prefetch == DEFAULT_PREFETCH else f" prefetch {engine.prefetch:g}"
            if engine.per_worker != DEFAULT_PER_WORKER:
                buffer += f" {engine.per_worker} per worker"
            tasks = " async" if engine.widened.startswith("htask async") else ""
            tasks += " forked" if engine.forks else ""
            print(
                f"  {size} process(es), {width} workers{tasks}{buffer} / limit {width}: "
                "tasks/s from exec "
                f"{_ratio(got, ref, 'from_start')}, from 1st task "
                f"{_ratio(got, ref, 'from_first')}; CPU per task, workers "
                f"{_ratio(got, ref, 'cpu_ms')}, PostgreSQL {_ratio(got, ref, 'server_cpu_ms')}, "
                f"both {_ratio(got, ref, 'cpu_ms', 'server_cpu_ms')}"
            )


def _print_occurrences(
    size: int, count: int, occ: dict[str, float], idle: dict[str, float]
) -> None:
    print(
        f"  {size} node(s), {count:>5} schedules: {occ['occurrences']:6.1f} occurrences, "
        f"{occ['commits']:6.1f} commits, {occ['rows']:6.1f} rows written, "
        f"{occ['cpu'] * 100:4.0f}% of a CPU, {occ['connections']:.0f} connections a node"
    )
    if count:
        per = occ["occurrences"] or float("nan")
        print(
            f"    per occurrence, over idle: {(occ['commits'] - idle['commits']) / per:.2f} "
            f"commits, {(occ['rows'] - idle['rows']) / per:.2f} rows written, "
            f"{(occ['cpu'] - idle['cpu']) * 1000 / per:.2f} CPU ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=4, help="section 1's rounds")
    parser.add_argument(
        "--engines",
        nargs="+",
        default=[e.name for e in ENGINES],
        choices=[e.name for e in ENGINES],
        help="section 1's engines (default: all)",
    )
    parser.add_argument(
        "--widths",
        type=int,
        nargs="+",
        default=[8, 20, 50],
        help="section 1: django-htask's workers per process and Oban's queue limit, a row "
        "each (default: 8 20 50; 8, django-htask's default, is the row the peers are put beside)",
    )
    parser.add_argument(
        "--prefetch",
        type=float,
        nargs="+",
        default=[DEFAULT_PREFETCH],
        help="section 1: django-htask's PREFETCH_WITHIN setting (seconds), a row each at each "
        f"width (default: {DEFAULT_PREFETCH:g}, the setting's; a row with another S is named "
        "'... -p S', 0 claims no task ahead)",
    )
    parser.add_argument(
        "--per-worker",
        type=int,
        nargs="+",
        default=[DEFAULT_PER_WORKER],
        help="section 1: django-htask's PREFETCH_PER_WORKER setting, a row each at each width "
        f"and --prefetch (default: {DEFAULT_PER_WORKER}, the setting's; a row with another K "
        "is named '... -k K')",
    )
    parser.add_argument(
        "--oban-python",
        default="python3.12",
        help="the Python (3.12 or later) Oban's venv is made with, on first use",
    )
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds to count idle tps")
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument(
        "--occurrences",
        type=int,
        nargs="+",
        default=[300, 1000],
        help="section 5's numbers of schedules @every 1s",
    )
    parser.add_argument("--window", type=float, default=20.0, help="section 5's window (s)")
    parser.add_argument(
        "--only", type=int, choices=(1, 2, 3, 4, 5, 6), help="run one section (default: all)"
    )
    parser.add_argument(
        "--database",
        choices=("postgres", "mariadb", "both"),
        default="both",
        help="section 1's databases, one server each (sections 2-6: PostgreSQL only)",
    )
    args = parser.parse_args()
    wanted = {args.only} if args.only else {1, 2, 3, 4, 5, 6}
    databases = ["postgres", "mariadb"] if args.database == "both" else [args.database]
    if args.database == "mariadb" and wanted - {1}:
        print("(sections 2-6 run on PostgreSQL only: section 1 alone on MariaDB)")
    for database in databases:
        if 1 not in wanted and database != "postgres":
            continue
        with _bench(database) as bench:
            if 1 in wanted:
                _throughput(bench, args)
            if database == "postgres":
                _postgres_sections(bench, args, wanted)


def _buffer_suffix(prefetch: float, per_worker: int) -> str:
    """What a django-htask row's name adds for buffer settings other than the defaults."""
    suffix = "" if prefetch == DEFAULT_PREFETCH else f" -p {prefetch:g}"
    return suffix + ("" if per_worker == DEFAULT_PER_WORKER else f" -k {per_worker}")


def _throughput(bench: Bench, args: argparse.Namespace) -> None:
    """Section 1: the engines named ``args.engines`` that run on ``bench``'s database,
    each at its widths, take turns, ``args.rounds`` times, on ``args.tasks`` tasks with
    1 and 3 processes."""
    mariadb = isinstance(bench, MariaDBBench)
    engines: list[Engine] = []
    for named in ENGINES:
        if named.name not in args.engines or not (named.mariadb or not mariadb):
            continue
        engine = replace(named, python=args.oban_python) if isinstance(named, ObanEngine) else named
        widths = [engine]
        if engine.widened:
            widths += [engine.wide(w) for w in args.widths if w != engine.width]
        if engine.name == ENGINES[0].name:
            widths = [
                replace(e, name=e.name + _buffer_suffix(p, k), prefetch=p, per_worker=k)
                for e in widths
                for p in args.prefetch
                for k in args.per_worker
            ]
        engines += widths
    compile_sources(ROOT)
    sites = {e.name: e.prepare(bench) for e in engines}
    print(
        f"1. one-off throughput: {args.tasks} trivial tasks queued, then 1 or 3 "
        f"processes started; median of {args.rounds} interleaved rounds"
    )
    results: dict[tuple[str, int], list[Throughput]] = {}
    with bench.quiet():
        for n in range(args.rounds):
            order = engines[n % len(engines) :] + engines[: n % len(engines)]
            for size in (1, 3):
                for engine in order:
                    if engine.forks and size == 1:
                        continue
                    got = sites[engine.name].throughput(engine, args.tasks, size)
                    results.setdefault((engine.name, size), []).append(got)
    _print_throughput(results, [e.name for e in engines])
    _print_equal_widths(results, engines)
    if mariadb:
        print("  (MariaDB: commits not counted; rows written: Handler_write + _update + _delete)")


def _postgres_sections(bench: Bench, args: argparse.Namespace, wanted: set[int]) -> None:
    """Sections 2 to 6, those in ``wanted``."""
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

    if 5 in wanted:
        counts = ", ".join(str(c) for c in args.occurrences)
        print(
            f"5. occurrences: 0, then {counts} schedules @every 1s, default settings, "
            f"{args.window:.0f} s window (per second, all nodes)"
        )
        idle_one: dict[str, float] = {}
        for size in (1, 3):
            idle = bench.occurrences(0, size, args.window)
            idle_one = idle_one or idle
            _print_occurrences(size, 0, idle, idle)
            for count in args.occurrences:
                busy = bench.occurrences(count, size, args.window)
                _print_occurrences(size, count, busy, idle)
        count = max(args.occurrences)
        for workers in (2, 32):
            busy = bench.occurrences(count, 1, args.window, workers=workers)
            print(f"  with --workers {workers} (default 8):")
            _print_occurrences(1, count, busy, idle_one)
    if 6 in wanted:
        print(
            "6. claiming from a backlog: ms per claim of 8 tasks (Store.start_tasks, "
            "200 in a row), median of 3 rounds each"
        )
        print(
            "   statistics: fresh (ANALYZE after queueing) or stale (taken when the "
            "table held as many tasks, all done);\n   unpinned: the plan left to the "
            "statistics (CLAIM_PLANNER off), as before it; no index: so too, and the "
            "claim index dropped, as before migration 0007"
        )
        print("  " + f"{'backlog':>8}" + "".join(f"{case:>17}" for case in CLAIM_CASES))
        for backlog in (2_000, 10_000, 100_000):
            cost = bench.claim_cost(backlog, 200, 3)
            print(f"  {backlog:>8,}" + "".join(f"{cost[case]:>14.2f} ms" for case in CLAIM_CASES))


if __name__ == "__main__":
    main()
