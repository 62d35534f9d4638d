"""What is particular to SQLite: the version and timestamp triggers and the claim query.

SQLite has no sequences and its BEFORE triggers cannot change the row, so the version
comes from a one-row counter table bumped by AFTER triggers. Every insert and update of
a schedule (the ORM's ``save()``, ``QuerySet.update()``, raw SQL) gets the next value;
an update that sets ``version`` itself is left alone, so never write that column.

SQLite has no timestamp type: Django writes a UTC time as the text
``YYYY-MM-DD HH:MM:SS[.ffffff]`` and compares such texts, so a row written in another
form (``2026-11-23T10:00:00Z``, as most tools write) would be compared as text and never
match. AFTER triggers on the timestamps a producer writes (:data:`TIMESTAMPS`) rewrite
any ISO 8601 form (``T`` or a space, ``Z``, ``+HH:MM``, ``+HHMM``, ``+HH`` or no offset,
up to 9 fractional digits, minutes or a date alone) as that exact UTC text, keeping
the microseconds, and refuse (``RAISE(ABORT)``) a value they cannot read.

Django rebuilds a SQLite table to alter it (and drops its triggers with it), so
:func:`install` runs after every ``migrate`` (``post_migrate``) and when a node starts;
it is idempotent.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime

from django.conf import settings
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_htask.models import CLAIM_INDEX, GATED_INDEX, Task

from . import values
from .base import ScheduleRef, StartedTask
from .database import DatabaseStore, RefReader
from .dialect import Conflict, Connected, Dialect, TaskStore
from .postgres import on_conflict

__all__ = ["TIMESTAMPS", "SQLiteDialect", "SQLiteStore", "install", "is_utc_text", "utc_text"]

COUNTER = "django_htask_counter"
SCHEDULE = "django_htask_schedule"
TASK = Task._meta.db_table

_BUMP = f"""
    UPDATE {COUNTER} SET value = value + 1 WHERE name = 'schedule';
    UPDATE {SCHEDULE} SET version = (SELECT value FROM {COUNTER} WHERE name = 'schedule')
     WHERE id = NEW.id;
"""

STATEMENTS: tuple[str, ...] = (
    f"CREATE TABLE IF NOT EXISTS {COUNTER} "
    "(name varchar(40) NOT NULL PRIMARY KEY, value bigint NOT NULL)",
    f"INSERT OR IGNORE INTO {COUNTER} (name, value) "
    f"SELECT 'schedule', COALESCE(MAX(version), 0) FROM {SCHEDULE}",
    f"CREATE TRIGGER IF NOT EXISTS {SCHEDULE}_version_insert AFTER INSERT ON {SCHEDULE} "
    f"BEGIN {_BUMP} END",
    f"CREATE TRIGGER IF NOT EXISTS {SCHEDULE}_version_update AFTER UPDATE ON {SCHEDULE} "
    f"WHEN NEW.version = OLD.version BEGIN {_BUMP} END",
)


#: The timestamps a producer writes (raw SQL, another language), by table.
TIMESTAMPS = {
    SCHEDULE: ("next_run_at", "last_run_at", "created_at", "updated_at"),
    TASK: ("run_at", "created_at"),
}


def utc_text(value: str) -> str:
    """An SQL expression: the text ``value`` (an SQL expression) as Django writes a UTC
    time (``YYYY-MM-DD HH:MM:SS``, ``.ffffff`` when the microseconds are not 0), or NULL
    when it is not an ISO 8601 time (see the module)."""
    v = (  # a date alone is midnight; HH:MM is HH:MM:00
        f"(CASE WHEN length({value}) = 10 THEN {value} || ' 00:00:00' "
        f"WHEN substr({value}, 17, 1) IN ('', 'Z', 'z', '+', '-') "
        f"THEN substr({value}, 1, 16) || ':00' || substr({value}, 17) ELSE {value} END)"
    )
    micro = "substr(substr(frac, 2) || '000000', 1, 6)"  # 1 to 9 digits: 6, truncated
    return (
        "(SELECT CASE WHEN sep IN (' ', 'T', 't') AND zone IS NOT NULL "
        "AND (frac = '' OR (frac GLOB '.[0-9]*' AND length(frac) <= 10 "
        "AND substr(frac, 2) NOT GLOB '*[^0-9]*')) "
        "AND base > '0001' AND datetime(base, '+0 seconds') IS base "  # a real date
        f"THEN datetime(base || zone) || CASE WHEN {micro} = '000000' THEN '' "
        f"ELSE '.' || {micro} END END "
        "FROM (SELECT base, sep, substr(rest, 1, at - 1) AS frac, "
        "CASE WHEN substr(rest, at) IN ('', 'Z', 'z') THEN '' "
        "WHEN substr(rest, at) GLOB '[+-][0-9][0-9]:[0-9][0-9]' THEN substr(rest, at) "
        "WHEN substr(rest, at) GLOB '[+-][0-9][0-9][0-9][0-9]' "
        "THEN substr(rest, at, 3) || ':' || substr(rest, at + 3) "
        "WHEN substr(rest, at) GLOB '[+-][0-9][0-9]' THEN substr(rest, at) || ':00' "
        "END AS zone "
        "FROM (SELECT base, sep, rest, coalesce(nullif(instr(rest, '+'), 0), "
        "nullif(instr(rest, '-'), 0), nullif(instr(upper(rest), 'Z'), 0), "
        "length(rest) + 1) AS at "
        "FROM (SELECT substr(v, 1, 10) || ' ' || substr(v, 12, 8) AS base, "
        f"substr(v, 11, 1) AS sep, substr(v, 20) AS rest FROM (SELECT {v} AS v)))))"
    )


def is_utc_text(value: str) -> str:
    """An SQL expression: whether the text ``value`` is already as Django writes a UTC
    time (what :func:`utc_text` returns): cheap, so a trigger tests it first."""
    head = f"substr({value}, 1, 19)"
    return (
        f"({head} GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] "
        f"[0-9][0-9]:[0-9][0-9]:[0-9][0-9]' AND (length({value}) = 19 "
        f"OR (length({value}) = 26 AND substr({value}, 20) GLOB '.[0-9][0-9][0-9][0-9][0-9][0-9]' "
        f"AND substr({value}, 21) <> '000000')) AND {value} >= '0001' "
        f"AND datetime({head}, '+0 seconds') = {head})"
    )


def _utc_triggers(table: str, column: str) -> list[str]:
    utc = utc_text(f"NEW.{column}")
    message = (
        f"{table}.{column} is not a time django-htask can read: write UTC as "
        "YYYY-MM-DD HH:MM:SS[.ffffff], or ISO 8601 with T, Z or an offset such as +02:00"
    )
    body = (
        f"WHEN NEW.{column} IS NOT NULL AND NOT {is_utc_text(f'NEW.{column}')} BEGIN "
        f"SELECT RAISE(ABORT, '{message}') WHERE {utc} IS NULL; "
        f"UPDATE {table} SET {column} = {utc} WHERE id = NEW.id; END"
    )
    return [
        f"CREATE TRIGGER IF NOT EXISTS {table}_{column}_utc_insert AFTER INSERT ON {table} " + body,
        f"CREATE TRIGGER IF NOT EXISTS {table}_{column}_utc_update "
        f"AFTER UPDATE OF {column} ON {table} " + body,
    ]


STATEMENTS += tuple(
    trigger
    for table, columns in TIMESTAMPS.items()
    for column in columns
    for trigger in _utc_triggers(table, column)
)


def install(connection: BaseDatabaseWrapper) -> None:
    """Create the counter table, the version and the timestamp triggers if they are
    missing."""
    with connection.cursor() as cursor:
        for statement in STATEMENTS:
            cursor.execute(statement)


def _utc(text: str) -> datetime:
    """A UTC time as SQLite stores it (see the module), as an aware datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


class SQLiteDialect(Dialect):
    """What SQLite does its own way (:mod:`.dialect`): its inserts are the generic
    ``VALUES`` lists, with ``RETURNING`` from SQLite 3.35."""

    def conflict_clause(self, connection: BaseDatabaseWrapper, conflict: Conflict) -> str:
        return on_conflict(connection, conflict)  # SQLite's upsert is PostgreSQL's syntax

    # Named, the partial indexes: SQLite would not choose them itself.
    gated_indexed_by = f" INDEXED BY {GATED_INDEX}"
    claim_indexed_by = f" INDEXED BY {CLAIM_INDEX}"

    @contextlib.contextmanager
    def atomic(self, store: Connected) -> Iterator[None]:
        """A transaction that takes SQLite's write lock at ``BEGIN`` (``IMMEDIATE``).

        A deferred transaction that reads and then writes cannot wait for another
        writer (SQLite answers "database is locked" at once, to avoid a deadlock); one
        that asks for the write lock first waits for it like any other statement.
        """
        conn = store.connection
        if conn.in_atomic_block:
            with transaction.atomic(using=store.using):
                yield
            return
        conn.ensure_connection()  # connecting resets the mode from the settings
        previous = getattr(conn, "transaction_mode", None)
        conn.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]
        try:
            with transaction.atomic(using=store.using):
                conn.transaction_mode = previous  # type: ignore[attr-defined]
                yield
        finally:
            conn.transaction_mode = previous  # type: ignore[attr-defined]

    def start_in(self, store: TaskStore, claim: values.Claim) -> list[StartedTask]:
        """As the generic one, in one statement where SQLite has ``RETURNING`` (3.35).

        The candidates are read through the claim index, named: left to choose, SQLite
        may take the due-time index and sort every pending task to keep a few. Named so,
        a partial index must have its condition implied by the statement's own text,
        which states the status of a claimable task as it is (``CLAIMABLE_SQL``)."""
        conn = store.connection
        if not conn.features.can_return_columns_from_insert:
            return super().start_in(store, claim)
        return store._start_returning(
            claim, adapt=conn.ops.adapt_datetimefield_value, indexed_by=self.claim_indexed_by
        )

    def buffer_in(self, store: TaskStore, claim: values.Claim) -> list[StartedTask]:
        """As :meth:`start_in`, for the node's buffer."""
        conn = store.connection
        if not conn.features.can_return_columns_from_insert:
            return super().buffer_in(store, claim)
        return store._start_returning(
            claim,
            adapt=conn.ops.adapt_datetimefield_value,
            indexed_by=self.claim_indexed_by,
            buffered=True,
        )

    # -- missing tables ------------------------------------------------------------------
    no_such_table = re.compile(r"no such table: (?:\w+\.)?(\w+)")


class SQLiteStore(DatabaseStore):
    """The embedded single-node default. SQLite serialises writers, so the generic
    claim (select candidates, then a conditional update) is already exclusive."""

    vendor = "sqlite"
    dialect = SQLiteDialect()
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
        with transaction.atomic(using=self.using), self.connection.cursor() as cursor:
            top = self._max_version()
            cursor.execute(sql)
            refs = RefReader(_utc).loaded(cursor.fetchall())
        return refs, top
