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
    The price: transactions that write schedules wait for each other, and two that
    each write several schedules in different orders can deadlock (InnoDB then rolls
    one back, and the node retries).
Claims
    Due tasks are read ``FOR UPDATE SKIP LOCKED``, then started by id, in one
    transaction: claims made at once take disjoint tasks without waiting.
Fencing
    A node's writes read its own node row ``LOCK IN SHARE MODE`` first (both MySQL and
    MariaDB understand it) and check it is not declared dead.

Creating a trigger needs the ``TRIGGER`` privilege; with binary logging on, also
``SUPER`` or ``log_bin_trust_function_creators = 1``. :func:`install` runs after every
``migrate`` and when a node starts; it is idempotent.
"""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

from django_htask.models import Schedule

from .database import DatabaseStore

__all__ = ["MySQLStore", "install"]

COUNTER = "django_htask_counter"
SCHEDULE = Schedule._meta.db_table

_BUMP = (
    f"UPDATE {COUNTER} SET value = value + 1 WHERE name = 'schedule'; "
    f"SET NEW.version = (SELECT value FROM {COUNTER} WHERE name = 'schedule');"
)

#: The version triggers by name: what each is created as.
TRIGGERS = {
    f"{SCHEDULE}_version_insert": (f"BEFORE INSERT ON {SCHEDULE} FOR EACH ROW BEGIN {_BUMP} END"),
    f"{SCHEDULE}_version_update": (
        f"BEFORE UPDATE ON {SCHEDULE} FOR EACH ROW "
        f"BEGIN IF NEW.version = OLD.version THEN {_BUMP} END IF; END"
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


class MySQLStore(DatabaseStore):
    """One node on MySQL or MariaDB: the ORM store, with the version triggers above and
    claims that skip the rows another transaction is claiming."""

    vendor = "mysql"
    nodes_note = (
        "one node on MySQL/MariaDB for now: run one runscheduler per database "
        "(several nodes need PostgreSQL)"
    )
    _fence_lock = " LOCK IN SHARE MODE"
    _skip_locked = True

    def install(self) -> None:
        install(self.connection)
