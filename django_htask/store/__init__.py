"""Where a node keeps its state: the database, through one :class:`Store` interface."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections

from django_htask.db import holds_tables, scheduler_alias
from django_htask.exceptions import NotMigrated

from . import base
from .base import *  # noqa: F403 - the store's interface and values

__all__ = [  # noqa: PLE0604
    *base.__all__,
    "DJANGO_CONNECTIONS",
    "get_store",
    "install",
    "not_migrated",
    "notify_nodes",
]

#: What a node's threads do with Django's connections (a node's default,
#: :class:`~django_htask.store.values.ThreadConnections`): those a task's call left
#: unusable or too old are dropped before and after it, as around a request; a thread
#: closes all of its own as it ends.
DJANGO_CONNECTIONS = base.ThreadConnections(
    refresh=close_old_connections, close=connections.close_all
)


def get_store(using: str | None = None) -> base.Store:
    """The store for the database alias ``using`` (default: the scheduler's database,
    django_htask.db), chosen by its vendor."""
    using = using or scheduler_alias()
    vendor = connections[using].vendor
    if vendor == "sqlite":
        from .sqlite import SQLiteStore  # noqa: PLC0415

        return SQLiteStore(using)
    if vendor == "postgresql":
        from .postgres import PostgresStore  # noqa: PLC0415

        return PostgresStore(using)
    if vendor == "mysql":
        from .mysql import MySQLStore  # noqa: PLC0415

        return MySQLStore(using)
    raise ImproperlyConfigured(
        f"django-htask has no store for the {vendor!r} database of alias {using!r} "
        "(SQLite, PostgreSQL, MySQL and MariaDB are supported)"
    )


def install(using: str | None = None) -> None:
    """Create the database objects migrations cannot keep (triggers), if missing, on
    ``using`` (default: the scheduler's database).

    An alias the routers keep the scheduler's tables out of is left alone (``migrate
    --database default`` when the tables live elsewhere), and so are databases without
    a store yet (the migrations still apply)."""
    using = using or scheduler_alias()
    if not holds_tables(using):
        return
    try:
        store = get_store(using)
    except ImproperlyConfigured:
        return
    store.install()


def notify_nodes(using: str | None = None) -> None:
    """Wake the nodes of the other processes now, in the caller's transaction (they
    hear it when it commits): the store of ``using`` says how
    (:meth:`~django_htask.store.base.Store.notify_nodes`)."""
    get_store(using).notify_nodes()


def not_migrated(exc: Exception, using: str | None = None) -> NotMigrated | None:
    """The :class:`NotMigrated` that ``exc``, an error of the database ``using``, means
    when it says one of django_htask's tables does not exist; None otherwise (and on a
    database without a store).

    Reads the error only, no query: the failed statement may have aborted the
    transaction, and the callers (``schedule()``, the commands) pay nothing until a
    statement fails."""
    from .database.core import _TABLES, OrmStore  # noqa: PLC0415

    try:
        store = get_store(using)
    except ImproperlyConfigured:
        return None
    if not isinstance(store, OrmStore):
        return None
    table = store.missing_table(exc)
    if table not in _TABLES:
        return None
    return store._not_migrated(f"table {table}")
