"""Benchmark of the admin's scheduler overview and schedule list on a large SQLite file.

Fills one SQLite file (bulk inserts through one cursor, a few seconds per million
rows) with N schedules (default 100k, over 100 distinct schedule texts, 90 % enabled;
the ``@every`` ones with ``next_run_at`` spread over ten minutes, the worst case for
the timeline's grouping) and M runs (default 1M, spread over the last D days, default
30, ``RUN_RETENTION_DAYS``'s default; ~90 % succeeded), then times, with Django's
test client as a logged-in superuser:

1. the overview page (``/admin/django_htask/overview/``): the whole request, then each
   part of :func:`django_htask.admin.overview.data.read_overview` alone;
2. the schedule list (first page, 100 rows, each with its strip of 20 runs), and one
   schedule's change page;
3. the number of queries of each page, and SQLite's plan of the strip query (does it
   use the index ``htask_run_recent``?).

    python bench/overview.py                 # 100k schedules, 1M runs over 30 days
    python bench/overview.py --days 1        # the same runs all within the last day
    python bench/overview.py --quick         # 10k schedules, 100k runs
    python bench/overview.py --db /tmp/o.sqlite3 --keep   # reuse the file next time

Each timing is the median of ``--repeat`` requests (5) after one warm-up, with the
fastest and slowest in brackets.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

FUNCTION = "bench.overview:noop"
#: Django's SQLite form of a timestamp (naive, UTC).
STAMP = "%Y-%m-%d %H:%M:%S.%f"
BATCH = 50_000


def noop() -> None:
    """The function the schedules name (never called here)."""


def configure(db: str) -> None:
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="bench",
        DEBUG=False,
        USE_TZ=True,
        TIME_ZONE="UTC",
        ALLOWED_HOSTS=["testserver"],
        INSTALLED_APPS=[
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "django_htask",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.common.CommonMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        ROOT_URLCONF="bench_overview_urls",
        STATIC_URL="static/",
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": db,
                "OPTIONS": {"timeout": 30},
            }
        },
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        HTASK={"AUTODISCOVER": False},
        LOGGING_CONFIG=None,
    )
    import types

    urls = types.ModuleType("bench_overview_urls")
    sys.modules["bench_overview_urls"] = urls
    django.setup()
    from django.contrib import admin
    from django.urls import path

    urls.urlpatterns = [path("admin/", admin.site.urls)]  # type: ignore[attr-defined]
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


# -- filling the file ----------------------------------------------------------------------
def schedule_texts() -> list[str]:
    """100 distinct schedule texts: 60 cron expressions, 40 intervals."""
    crons = [f"{m} * * * *" for m in range(0, 60, 3)]  # 20 hourly, at various minutes
    crons += [f"*/{n} * * * *" for n in (1, 2, 5, 10, 15, 20, 30)]
    crons += [f"{m} {h} * * *" for m, h in zip(range(0, 60, 2), range(24), strict=False)]
    crons += [f"0 9 * * {d}" for d in ("MON", "TUE", "WED")]
    intervals = [f"@every {n}m" for n in range(1, 41)]
    return (crons[:60] + intervals)[:100]


def fill(schedules: int, runs: int, days: float, now: datetime) -> None:
    from django.db import connection, transaction

    from django_htask.engine import encode_call, parse_schedule

    texts = schedule_texts()
    payload = encode_call(FUNCTION, [], {})
    stamp = now.strftime(STAMP)
    firsts = {text: parse_schedule(text).next_after(now) for text in texts}
    rng = random.Random(17)
    t0 = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        rows: list[tuple[Any, ...]] = []
        for i in range(schedules):
            text = texts[i % len(texts)]
            first = firsts[text]
            assert first is not None
            if text.startswith("@every"):
                first = now + timedelta(seconds=rng.randrange(1, 600))
            enabled = i % 10 != 9
            rows.append(
                (
                    f"bench-{i:06d}",
                    FUNCTION,
                    text,
                    "UTC",
                    payload,
                    enabled,
                    first.strftime(STAMP) if enabled else None,
                    stamp,
                    stamp,
                )
            )
            if len(rows) == BATCH or i == schedules - 1:
                cursor.executemany(
                    "INSERT INTO django_htask_schedule (name, function, schedule, timezone, "
                    "payload, enabled, next_run_at, last_status, catch_up, overlap, "
                    "queue_name, max_attempts, retry_backoff, origin, orphaned, version, "
                    "broken, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, '', "
                    "'latest', 'skip', 'default', 1, 10.0, 'admin', 0, 0, '', %s, %s)",
                    rows,
                )
                rows = []
    made_schedules = time.perf_counter() - t0
    statuses = ["succeeded"] * 90 + ["failed"] * 6 + ["missed"] * 2 + ["skipped"] * 2
    span = days * 86400
    t0 = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        rows = []
        for i in range(runs):
            schedule_id = rng.randrange(1, schedules + 1)
            started = now - timedelta(seconds=rng.random() * span)
            late = rng.expovariate(2.0)  # seconds, mean 0.5
            status = statuses[rng.randrange(100)]
            rows.append(
                (
                    schedule_id,
                    f"bench-{schedule_id - 1:06d}",
                    FUNCTION,
                    "bench-node",
                    (started - timedelta(seconds=late)).strftime(STAMP),
                    started.strftime(STAMP),
                    (started + timedelta(seconds=0.01)).strftime(STAMP),
                    status,
                    "RuntimeError: bench" if status == "failed" else "",
                    0.01,
                )
            )
            if len(rows) == BATCH or i == runs - 1:
                cursor.executemany(
                    "INSERT INTO django_htask_run (schedule_id, name, function, node, "
                    "attempt, scheduled_for, started_at, finished_at, status, error, "
                    "traceback, duration) VALUES (%s, %s, %s, %s, 1, %s, %s, %s, %s, %s, "
                    "'', %s)",
                    rows,
                )
                rows = []
        cursor.execute("ANALYZE")
    made_runs = time.perf_counter() - t0
    print(
        f"filled: {schedules:,} schedules in {made_schedules:.1f} s, {runs:,} runs over "
        f"{days:g} days in {made_runs:.1f} s"
    )


# -- timing --------------------------------------------------------------------------------
def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, float]:
    """Median, fastest and slowest seconds of ``repeat`` calls after one warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def show(label: str, result: tuple[float, float, float], extra: str = "") -> None:
    median, low, high = result
    print(f"  {label:34s} {median * 1000:8.1f} ms  ({low * 1000:.1f}-{high * 1000:.1f}){extra}")


def bench(repeat: int) -> None:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client

    from django_htask import clock
    from django_htask.admin.overview import data as overview
    from django_htask.admin.strip import recent_runs
    from django_htask.models import Run, Schedule

    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", "bench@example.com", "pw"
    )
    client = Client()
    client.force_login(user)
    now = clock.now()
    schedules = Schedule.objects.count()
    runs = Run.objects.count()
    print(f"\n{schedules:,} schedules, {runs:,} runs (SQLite, one file)")

    executed = [0]

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        executed[0] += 1
        return execute(sql, params, many, context)

    def get(url: str) -> Callable[[], Any]:
        def fetch() -> Any:
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)
            return response

        return fetch

    pages = {
        "overview page": "/admin/django_htask/overview/",
        "schedule list (100 rows + strips)": "/admin/django_htask/schedule/",
        "schedule change page": "/admin/django_htask/schedule/1/change/",
    }
    print("\n1-2. pages (whole request, rendered)")
    for label, url in pages.items():
        executed[0] = 0
        with connection.execute_wrapper(count):
            get(url)()
        show(label, timed(get(url), repeat), f"  {executed[0]} queries")

    print("\n1. the overview's parts")
    hours: Any = None

    def last() -> None:
        nonlocal hours
        hours = overview.last_hours(now)

    show("nodes", timed(lambda: overview.nodes(now), repeat))
    show("last 24 h: per hour + lateness", timed(last, repeat))
    in_window = sum(h.total for h in hours[0])
    print(f"  {'':34s} ({in_window:,} runs in the window, lateness sampled: {hours[1]})")
    show("schedules failing most", timed(lambda: overview.failing_most(now), repeat))
    timeline: Any = None

    def upcoming() -> None:
        nonlocal timeline
        timeline = overview.next_hours(now)

    show("next 24 h: timeline", timed(upcoming, repeat))
    print(
        f"  {'':34s} ({timeline.total:,} occurrences of {timeline.schedules:,} schedules; "
        f"partial: {timeline.partial})"
    )
    ids = list(Schedule.objects.order_by("name").values_list("pk", flat=True)[:100])
    show("strips of 100 schedules", timed(lambda: recent_runs(ids), repeat))

    print("\n3. plan of the strip query (one schedule's part)")
    query = Run.objects.filter(schedule_id=ids[0]).order_by("-started_at", "-id").values("id")[:20]
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        for row in cursor.fetchall():
            print(f"  {row[-1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--days", type=float, default=30.0, help="runs spread over (30)")
    parser.add_argument("--quick", action="store_true", help="10k schedules, 100k runs")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--db", default=None, help="the SQLite file (a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the file; reuse it if full")
    args = parser.parse_args()
    if args.quick:
        args.schedules, args.runs = 10_000, 100_000
    db = args.db or os.path.join(tempfile.mkdtemp(prefix="htask-overview-"), "bench.sqlite3")
    existed = os.path.exists(db)
    configure(db)
    from django_htask import clock
    from django_htask.models import Schedule

    print(f"django-htask admin overview, SQLite file {db}")
    if not (existed and Schedule.objects.exists()):
        fill(args.schedules, args.runs, args.days, clock.now().astimezone(UTC))
    try:
        bench(args.repeat)
    finally:
        if not args.keep:
            os.remove(db)


if __name__ == "__main__":
    main()
