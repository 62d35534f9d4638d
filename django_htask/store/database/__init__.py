"""The store on the Django ORM: everything that works the same on every database.

The class is composed of its parts, one module each (:mod:`.core`: the connection, the
fence and the translation of errors; :mod:`.nodes`; :mod:`.schedules`; :mod:`.tasks`:
claims, starts and ends; :mod:`.putback`); the names other modules use are imported
here, where they always were.
"""

from __future__ import annotations

from typing import Any

from django_htask.exceptions import NotMigrated
from django_htask.store.base import INTERFACE

from .core import _CHUNK as _CHUNK
from .core import (
    _TABLES,
    FencedAtomic,
    OrmStore,
    _translate,
    check_fence,
    unavailable,
)
from .core import Probe as Probe
from .core import _as_datetime as _as_datetime
from .nodes import NodeRows
from .pruning import PruneRows
from .putback import put_back, supersede
from .schedules import _ROW_FIELDS as _ROW_FIELDS
from .schedules import RefReader, ScheduleRows
from .schedules import schedule_row as schedule_row
from .tasks import _GUARD as _GUARD
from .tasks import STARTED_FIELDS as STARTED_FIELDS
from .tasks import Column as Column
from .tasks import TaskRows
from .tasks import gate_key as gate_key
from .tasks import served_sql as served_sql
from .tasks import set_sql as set_sql
from .tasks import started_task as started_task

__all__ = [
    "DatabaseStore",
    "FencedAtomic",
    "RefReader",
    "check_fence",
    "not_migrated",
    "put_back",
    "supersede",
    "unavailable",
]


class DatabaseStore(NodeRows, ScheduleRows, TaskRows, PruneRows, OrmStore):
    """The ORM store over the database alias ``using``. Its public methods, and those
    a subclass defines, raise StoreUnavailable for a database error (:func:`unavailable`)."""

    vendor = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # every method of the interface, as the subclass resolves it: its own, and
        # those of a mixin before DatabaseStore in its bases (SharedReaper.reap)
        _translate(cls, INTERFACE)


_translate(DatabaseStore, INTERFACE)  # the methods of its parts


def not_migrated(exc: Exception, using: str | None = None) -> NotMigrated | None:
    """The :class:`NotMigrated` that ``exc``, an error of the database ``using``, means
    when it says one of django_htask's tables does not exist; None otherwise (and on a
    database without a store).

    Reads the error only, no query: the failed statement may have aborted the
    transaction, and the callers (``schedule()``, the commands) pay nothing until a
    statement fails."""
    from django.core.exceptions import ImproperlyConfigured  # noqa: PLC0415

    from django_htask.store import get_store  # noqa: PLC0415 - the package imports this one

    try:
        store = get_store(using)
    except ImproperlyConfigured:
        return None
    if not isinstance(store, OrmStore) or store.missing_table(exc) not in _TABLES:
        return None
    table = store.missing_table(exc)
    return store._not_migrated(f"table {table}")
