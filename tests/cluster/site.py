"""A Django site on a throw-away PostgreSQL (or MariaDB: :class:`MariaDBSite`), driven
from outside: Django code run in a subprocess, SQL on a connection of its own. Shared
by the 3-node acceptance tests and ``bench/cluster.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.pgcluster import PostgresCluster

ROOT = Path(__file__).resolve().parents[2]


class ClusterSite:
    """``settings``: the settings module of the subprocesses; ``log``: the file the
    cluster app's jobs append to (``HTASK_CLUSTER_LOG``)."""

    #: The server's current time in UTC, as SQL.
    NOW_SQL = "now()"
    #: The integers from 1 to ``n`` as a derived table with the column ``i``.
    SERIES_SQL = "(SELECT i FROM generate_series(1, {n}) AS g(i))"
    #: How late a node may hear of an edit made in another process, beyond the time
    #: the edit takes to travel (PostgreSQL: none, ``NOTIFY`` tells it at once).
    HEARD_WITHIN = 0.0

    def ago_sql(self, seconds: float) -> str:
        """``seconds`` before the server's current time, as SQL (the standard's form,
        which PostgreSQL and MariaDB both take)."""
        return f"{self.NOW_SQL} - INTERVAL '{seconds}' SECOND"

    def __init__(self, pg: PostgresCluster, log: Path, settings: str) -> None:
        self.pg = pg
        self.log = log
        #: What a subprocess needs on top of this process's environment.
        self.env = {
            "DJANGO_SETTINGS_MODULE": settings,
            "HTASK_CLUSTER_DB_URL": pg.url,
            "HTASK_CLUSTER_LOG": str(log),
            "PYTHONPATH": str(ROOT),
        }

    def django(self, code: str, timeout: float = 600) -> str:
        """Run ``code`` after ``django.setup()`` in a subprocess; return its stdout."""
        result = subprocess.run(
            [sys.executable, "-c", "import django\ndjango.setup()\n" + code],
            env={**os.environ, **self.env},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode:
            raise RuntimeError(f"the Django code failed:\n{result.stderr}")
        return result.stdout

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run one statement in autocommit; return its rows (none for a statement
        without a result)."""
        import psycopg

        with psycopg.connect(self.pg.url, autocommit=True) as conn:
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def one(self, query: str, *params: Any) -> Any:
        """The first column of the first row."""
        return self.sql(query, *params)[0][0]

    def wait_all_succeeded(self, timeout: float) -> None:
        """Wait until every task has succeeded (AssertionError after ``timeout``)."""
        from tests.acceptance.conftest import wait_until

        wait_until(
            lambda: not self.sql("SELECT 1 FROM django_htask_task WHERE status <> 'succeeded'"),
            timeout,
            "every task succeeded",
        )


class MariaDBSite(ClusterSite):
    """The same on MariaDB (``pg`` has the server's ``mysql://`` URL): SQL through
    mysqlclient, in autocommit. Its ``DATETIME`` columns hold UTC, naive, as Django
    stores them with ``USE_TZ``: :meth:`sql` takes and gives times aware, as on
    PostgreSQL."""

    NOW_SQL = "UTC_TIMESTAMP(6)"
    SERIES_SQL = "(SELECT seq AS i FROM seq_1_to_{n})"

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        from tests.mariadbcluster import connect, database_settings

        conn = connect(database_settings(self.pg.url))
        try:
            cursor = conn.cursor()
            cursor.execute(query, tuple(_naive_utc(p) for p in params) or None)
            rows = cursor.fetchall() if cursor.description else ()
        finally:
            conn.close()
        return [tuple(_aware(v) for v in row) for row in rows]


def process_stats() -> dict[int, list[str]]:
    """Every process's fields of ``/proc/PID/stat`` after its command (which may hold
    spaces): state, ppid, ... (one that ends meanwhile is left out)."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stats[int(entry.name)] = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
    return stats


def _naive_utc(value: Any) -> Any:
    """An aware time as a ``DATETIME`` column holds it (strict mode refuses an offset)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def _aware(value: Any) -> Any:
    """A ``DATETIME`` read back (naive, UTC), aware."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value
