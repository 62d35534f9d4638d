"""What is particular to MySQL and MariaDB: the version triggers, the claim's row locks.

MariaDB 10.6 or later, MySQL 8.0 or later (both have ``FOR UPDATE SKIP LOCKED``).
One node a database for now (:attr:`MySQLStore.supports_several_nodes` is False):
there is no ``LISTEN``, so a node sees an edit at its next poll, as on SQLite.

Versions
    As on SQLite, a schedule's ``version`` comes from a one-row counter table, bumped
    by ``BEFORE INSERT`` and ``BEFORE UPDATE`` triggers on every write of a schedule
    (the ORM's ``save()``, ``QuerySet.update()``, raw SQL); an update that sets
    ``version`` itself is left alone, so never write that column. The counter's row
    stays locked until the writing transaction ends, so versions are committed in the
    order they are handed out and a node may read "above the highest version seen".
    The price: transactions that edit schedules wait for each other. A node's writes
    of last statuses leave the version alone (:data:`STATUS_ONLY`) and skip the rows
    another transaction holds (:mod:`~django_htask.store.statuses`), so a node never
    deadlocks with the admin editing several schedules.
Claims
    Due tasks are read ``FOR UPDATE SKIP LOCKED``, then started by id, in one
    transaction: claims made at once take disjoint tasks without waiting.
Keys
    No partial index: a virtual column holds a pending task's key (NULL otherwise) and
    a unique index on it is the pending-key index. A keyed call is one ``INSERT … ON
    DUPLICATE KEY UPDATE`` a row (no ``RETURNING`` there), which locks the pending row
    it meets as PostgreSQL's ``ON CONFLICT`` does.
Fencing
    A node's writes read its own node row ``LOCK IN SHARE MODE`` first (both MySQL and
    MariaDB understand it) and check it is not declared dead.

Creating a trigger needs the ``TRIGGER`` privilege; with binary logging on, also
``SUPER`` or ``log_bin_trust_function_creators = 1``. :func:`install` runs after every
``migrate`` and when a node starts; it is idempotent.
"""

from __future__ import annotations

from datetime import datetime

from django.db.backends.base.base import BaseDatabaseWrapper

from django_htask.keys import KEY_MAX_LENGTH
from django_htask.models import GATED_PREDICATE, KEY_INDEX, Schedule, Task

from . import base
from .base import RunOutcome
from .database import DatabaseStore
from .statuses import LateStatuses

__all__ = ["MySQLStore", "add_pending_key", "drop_pending_key", "install"]

COUNTER = "django_htask_counter"
SCHEDULE = Schedule._meta.db_table
TASK = Task._meta.db_table
#: A virtual column, the key of a pending task (NULL otherwise), and a unique index on
#: it: MySQL and MariaDB have no partial index, so this is the pending-key index there
#: (named as it is elsewhere, so a clash reads the same). Not a field of the model:
#: migration 0009 adds both (:func:`add_pending_key`), and inserts never name the column.
PENDING_KEY = "htask_pending_key"

#: Session variable set while a node writes schedules' last statuses: the update
#: trigger leaves the version alone then (see :meth:`MySQLStore._set_statuses`).
STATUS_ONLY = "@django_htask_status_only"

_BUMP = (
    f"UPDATE {COUNTER} SET value = value + 1 WHERE name = 'schedule'; "
    f"SET NEW.version = (SELECT value FROM {COUNTER} WHERE name = 'schedule');"
)

#: The version triggers by name: what each is created as.
TRIGGERS = {
    f"{SCHEDULE}_version_insert": (f"BEFORE INSERT ON {SCHEDULE} FOR EACH ROW BEGIN {_BUMP} END"),
    f"{SCHEDULE}_version_update": (
        f"BEFORE UPDATE ON {SCHEDULE} FOR EACH ROW "
        f"BEGIN IF NEW.version = OLD.version AND {STATUS_ONLY} IS NULL THEN {_BUMP} END IF; END"
    ),
}


def install(connection: BaseDatabaseWrapper) -> None:
    """Create the counter table and the version triggers if they are missing.

    MySQL 8.0 has no ``CREATE TRIGGER IF NOT EXISTS`` before 8.0.29: the triggers are
    looked up first."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {COUNTER} "
            "(name varchar(40) NOT NULL PRIMARY KEY, value bigint NOT NULL)"
        )
        cursor.execute(
            f"INSERT IGNORE INTO {COUNTER} (name, value) "
            f"SELECT 'schedule', COALESCE(MAX(version), 0) FROM {SCHEDULE}"
        )
        cursor.execute(
            "SELECT trigger_name FROM information_schema.triggers "
            "WHERE trigger_schema = DATABASE() AND event_object_table = %s",
            [SCHEDULE],
        )
        present = {name for (name,) in cursor.fetchall()}
        for name, definition in TRIGGERS.items():
            if name not in present:
                cursor.execute(f"CREATE TRIGGER {name} {definition}")


def add_pending_key(connection: BaseDatabaseWrapper) -> None:
    """Add :data:`PENDING_KEY` and its unique index (migration 0009, with ``key``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {TASK} ADD COLUMN {PENDING_KEY} varchar({KEY_MAX_LENGTH})"
            f" AS (IF(status = 'pending', `key`, NULL)) VIRTUAL,"
            f" ADD UNIQUE INDEX {KEY_INDEX} ({PENDING_KEY})"
        )


def drop_pending_key(connection: BaseDatabaseWrapper) -> None:
    """Undo :func:`add_pending_key` (migration 0009 unapplied)."""
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {TASK} DROP INDEX {KEY_INDEX}, DROP COLUMN {PENDING_KEY}")


class MySQLStore(LateStatuses, DatabaseStore):
    """One node on MySQL or MariaDB: the ORM store, with the version triggers above and
    claims that skip the rows another transaction is claiming."""

    vendor = "mysql"
    nodes_note = (
        "one node on MySQL/MariaDB for now: run one runscheduler per database "
        "(several nodes need PostgreSQL)"
    )
    _fence_lock = " LOCK IN SHARE MODE"
    _gated_predicate = GATED_PREDICATE.replace("lock IS", "`lock` IS")
    _skip_locked = True

    def install(self) -> None:
        install(self.connection)

    def _record_in(
        self, node_id: str, outcomes: list[RunOutcome]
    ) -> dict[int, tuple[str, datetime]]:
        """As the generic one, with the schedules' last statuses written only where no
        other transaction holds the row (the others are returned, for
        :meth:`_record_late`): see :mod:`~django_htask.store.statuses`."""
        self._record_runs(node_id, outcomes)
        statuses = base.last_statuses(outcomes)
        busy = self._set_statuses(statuses, wait=False)
        return {schedule_id: statuses[schedule_id] for schedule_id in busy}

    def _set_statuses(self, statuses: dict[int, tuple[str, datetime]], *, wait: bool) -> list[int]:
        """Lock the rows (``SKIP LOCKED`` unless ``wait``), then write them with the
        version left alone: a status is no edit a node must see, and bumping the version
        would queue the write behind every other writer of schedules (the counter)."""
        if not statuses:
            return []
        ids = sorted(statuses)
        adapt = self.connection.ops.adapt_datetimefield_value
        lock = "FOR UPDATE" if wait else "FOR UPDATE SKIP LOCKED"
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {SCHEDULE} WHERE id IN ({', '.join(['%s'] * len(ids))}) "
                f"ORDER BY id {lock}",
                ids,
            )
            locked = [row[0] for row in cursor.fetchall()]
            cursor.execute(f"SET {STATUS_ONLY} = 1")
            try:
                cursor.executemany(
                    f"UPDATE {SCHEDULE} SET last_status = %s, last_run_at = %s WHERE id = %s "
                    "AND (last_run_at IS NULL OR last_run_at <= %s)",
                    [
                        (statuses[i][0], adapt(statuses[i][1]), i, adapt(statuses[i][1]))
                        for i in locked
                    ],
                )
            finally:
                cursor.execute(f"SET {STATUS_ONLY} = NULL")
        return [] if wait else [i for i in ids if i not in set(locked)]
