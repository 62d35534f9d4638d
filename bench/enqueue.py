"""Queuing many tasks at once on PostgreSQL: ``schedule_many`` against a loop of
``schedule()``, the leanest insert there is, and procrastinate's ``batch_defer``.

Run: ``.venv/bin/python bench/enqueue.py`` (starts its own throw-away PostgreSQL).

Each case queues trivial tasks (a function of one int argument) in a fresh Django
process, timed from the list of calls in hand to the commit; ``--rounds`` (3) rounds,
the cases interleaved; printed: the median tasks/s, its spread over the rounds, and the
ratio to ``schedule_many``.

- ``schedule_many``: ``--tasks`` (50,000) calls checked (signature, msgpack payload),
  then inserted 1,000 rows a statement, in one transaction;
- ``schedule() loop``: ``--loop`` (2,000) calls of ``schedule()``, each its own
  transaction (as a view queuing one task does);
- ``schedule() loop, atomic``: the same inside one ``transaction.atomic()``;
- ``COPY (reference)``: the same rows, payloads encoded beforehand, written by
  PostgreSQL's ``COPY`` on a psycopg connection (no check, no model: what the database
  takes at best);
- ``procrastinate batch_defer``: the peer's bulk queuing of ``--tasks`` jobs.

The target (issue 25): ``schedule_many`` at least 20,000 tasks/s, and at least 10x the
``schedule()`` loop.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cluster import PEER_SETTINGS, Bench  # noqa: E402

from tests.pgcluster import PostgresCluster  # noqa: E402

NOOP = "tests.cluster.clusterapp.tasks:noop"
PEER_ENV = {"DJANGO_SETTINGS_MODULE": PEER_SETTINGS, "HTASK_BENCH_PEER": "all"}

#: Each case: Django code that prints the seconds its queuing took, for ``{n}`` tasks.
CASES = {
    "schedule_many": (
        "import time\nfrom django_htask import schedule_many\n"
        "from tests.cluster.clusterapp.tasks import noop\n"
        "calls = [(noop, (i,), {{}}) for i in range({n})]\n"
        "t = time.perf_counter()\nschedule_many(calls)\nprint(time.perf_counter() - t)\n"
    ),
    "schedule() loop": (
        "import time\nfrom django_htask import schedule\n"
        "from tests.cluster.clusterapp.tasks import noop\n"
        "t = time.perf_counter()\nfor i in range({n}):\n    schedule(noop, i)\n"
        "print(time.perf_counter() - t)\n"
    ),
    "schedule() loop, atomic": (
        "import time\nfrom django.db import transaction\nfrom django_htask import schedule\n"
        "from tests.cluster.clusterapp.tasks import noop\n"
        "t = time.perf_counter()\nwith transaction.atomic():\n"
        "    for i in range({n}):\n        schedule(noop, i)\n"
        "print(time.perf_counter() - t)\n"
    ),
    "COPY (reference)": (
        "import time\nfrom django.db import connection\nfrom django_htask import clock\n"
        "from django_htask.engine import registry\nfrom django_htask.models import new_token\n"
        "now = clock.now()\n"
        f"rows = [(new_token(), {NOOP!r}, registry.check_call({NOOP!r}, (i,), {{{{}}}}), now, "
        "'pending', 0, 1, 'default', '', '', now) for i in range({n})]\n"
        "t = time.perf_counter()\n"
        "with connection.cursor() as c:\n"
        "    with c.cursor.copy('COPY django_htask_task (token, function, payload, run_at, "
        "status, attempts, max_attempts, queue_name, last_error, traceback, created_at) "
        "FROM STDIN') as copy:\n"
        "        for row in rows:\n            copy.write_row(row)\n"
        "print(time.perf_counter() - t)\n"
    ),
    "procrastinate batch_defer": (
        "import time\nfrom bench.peers.tasks import p_noop\n"
        "jobs = [{{'n': i}} for i in range({n})]\n"
        "t = time.perf_counter()\np_noop.batch_defer(*jobs)\nprint(time.perf_counter() - t)\n"
    ),
}
LOOPS = ("schedule() loop", "schedule() loop, atomic")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--loop", type=int, default=2_000, help="calls of the schedule() loops")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with PostgresCluster() as pg:
        bench = Bench(pg, pg.root / "jobs.log")
        bench.django(
            "from django.core.management import call_command\ncall_command('migrate', verbosity=0)",
            env=PEER_ENV,
        )
        print(
            f"PostgreSQL {pg.bin_dir.parent.name}, {os.cpu_count()} CPUs; {args.tasks} tasks "
            f"({args.loop} for the schedule() loops), median of {args.rounds} rounds"
        )
        rates: dict[str, list[float]] = {name: [] for name in CASES}
        names = list(CASES)
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                bench.reset()
                n = args.loop if name in LOOPS else args.tasks
                seconds = float(bench.django(CASES[name].format(n=n), env=PEER_ENV))
                rates[name].append(n / seconds)
        ours = statistics.median(rates["schedule_many"])
        print(f"  {'':<27} {'tasks/s':>9} {'spread':>7}   schedule_many / it")
        for name, got in rates.items():
            median = statistics.median(got)
            spread = (max(got) - min(got)) / median * 100
            ratio = "" if name == "schedule_many" else f"{ours / median:.1f}x"
            print(f"  {name:<27} {median:>9,.0f} {spread:>6.0f}%   {ratio}")


if __name__ == "__main__":
    main()
