"""What is particular to SQLite: the version trigger and the claim query.

SQLite has no sequences and its BEFORE triggers cannot change the row, so the version
comes from a one-row counter table bumped by AFTER triggers. Every insert and update of
a schedule (the ORM's ``save()``, ``QuerySet.update()``, raw SQL) gets the next value;
an update that sets ``version`` itself is left alone, so never write that column.

Django rebuilds a SQLite table to alter it (and drops its triggers with it), so
:func:`install` runs after every ``migrate`` (``post_migrate``) and when a node starts;
it is idempotent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_htask.models import Task

from . import base
from .base import ScheduleRef, StartedTask
from .database import DatabaseStore

__all__ = ["SQLiteStore", "install"]

COUNTER = "django_htask_counter"
SCHEDULE = "django_htask_schedule"
TASK = Task._meta.db_table

_BUMP = f"""
    UPDATE {COUNTER} SET value = value + 1 WHERE name = 'schedule';
    UPDATE {SCHEDULE} SET version = (SELECT value FROM {COUNTER} WHERE name = 'schedule')
     WHERE id = NEW.id;
"""

STATEMENTS = (
    f"CREATE TABLE IF NOT EXISTS {COUNTER} "
    "(name varchar(40) NOT NULL PRIMARY KEY, value bigint NOT NULL)",
    f"INSERT OR IGNORE INTO {COUNTER} (name, value) "
    f"SELECT 'schedule', COALESCE(MAX(version), 0) FROM {SCHEDULE}",
    f"CREATE TRIGGER IF NOT EXISTS {SCHEDULE}_version_insert AFTER INSERT ON {SCHEDULE} "
    f"BEGIN {_BUMP} END",
    f"CREATE TRIGGER IF NOT EXISTS {SCHEDULE}_version_update AFTER UPDATE ON {SCHEDULE} "
    f"WHEN NEW.version = OLD.version BEGIN {_BUMP} END",
)


def install(connection: BaseDatabaseWrapper) -> None:
    """Create the counter table and the version triggers if they are missing."""
    with connection.cursor() as cursor:
        for statement in STATEMENTS:
            cursor.execute(statement)


class SQLiteStore(DatabaseStore):
    """The embedded single-node default. SQLite serialises writers, so the generic
    claim (select candidates, then a conditional update) is already exclusive."""

    vendor = "sqlite"
    single_host = True  # a SQLite file is shared by the processes of one host

    def install(self) -> None:
        install(self.connection)

    def load_schedules(self) -> tuple[list[ScheduleRef], int]:
        """As the generic one, but reads the timestamps as text and parses them here:
        Django's per-row converters are most of the cost of loading 100k schedules."""
        if not settings.USE_TZ:
            return super().load_schedules()
        sql = (
            f"SELECT id, CAST(next_run_at AS TEXT), version, queue_name FROM {SCHEDULE} "
            "WHERE enabled AND next_run_at IS NOT NULL"
        )
        parse = datetime.fromisoformat
        with transaction.atomic(using=self.using), self.connection.cursor() as cursor:
            top = self._max_version()
            cursor.execute(sql)
            refs = [
                ScheduleRef(i, parse(n).replace(tzinfo=UTC), v, queue=q)
                for i, n, v, q in cursor.fetchall()
            ]
        return refs, top

    def _start_in(self, c: base.Claim) -> list[StartedTask]:
        """As the generic one, in one statement where SQLite has ``RETURNING`` (3.35)."""
        conn = self.connection
        if not conn.features.can_return_columns_from_insert:
            return super()._start_in(c)
        return self._start_returning(c, adapt=conn.ops.adapt_datetimefield_value)

    @contextlib.contextmanager
    def _atomic(self) -> Iterator[None]:
        """A transaction that takes SQLite's write lock at ``BEGIN`` (``IMMEDIATE``).

        A deferred transaction that reads and then writes cannot wait for another
        writer (SQLite answers "database is locked" at once, to avoid a deadlock); one
        that asks for the write lock first waits for it like any other statement.
        """
        conn = self.connection
        if conn.in_atomic_block:
            with transaction.atomic(using=self.using):
                yield
            return
        conn.ensure_connection()  # connecting resets the mode from the settings
        previous = getattr(conn, "transaction_mode", None)
        conn.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]
        try:
            with transaction.atomic(using=self.using):
                conn.transaction_mode = previous  # type: ignore[attr-defined]
                yield
        finally:
            conn.transaction_mode = previous  # type: ignore[attr-defined]
