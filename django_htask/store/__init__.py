"""Where a node keeps its state: the database, through one :class:`Store` interface."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from . import base
from .base import *  # noqa: F403 - the store's interface and values

__all__ = [*base.__all__, "get_store", "install"]  # noqa: PLE0604


def get_store(using: str = "default") -> base.Store:
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
