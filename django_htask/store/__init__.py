"""Where a node keeps its state: the database, through one :class:`Store` interface."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from .base import (
    SERVE_ALL,
    Abandoned,
    RunOutcome,
    ScheduleRef,
    ScheduleRow,
    Serving,
    StartedTask,
    Store,
)

__all__ = [
    "SERVE_ALL",
    "Abandoned",
    "RunOutcome",
    "ScheduleRef",
    "ScheduleRow",
    "Serving",
    "StartedTask",
    "Store",
    "get_store",
    "install",
]


def get_store(using: str = "default") -> Store:
    """The store for the database alias ``using``, chosen by its vendor."""
    vendor = connections[using].vendor
    if vendor == "sqlite":
        from .sqlite import SQLiteStore  # noqa: PLC0415

        return SQLiteStore(using)
    if vendor == "postgresql":
        from .postgres import PostgresStore  # noqa: PLC0415

        return PostgresStore(using)
    raise ImproperlyConfigured(
        f"django-htask has no store for the {vendor!r} database of alias {using!r} "
        "(SQLite and PostgreSQL are supported)"
    )


def install(using: str = "default") -> None:
    """Create the database objects migrations cannot keep (triggers), if missing.

    Databases without a store yet are left alone (the migrations still apply)."""
    if connections[using].vendor in ("sqlite", "postgresql"):
        get_store(using).install()
