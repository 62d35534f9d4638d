"""The store on the Django ORM: everything that works the same on every database.

The class is composed of its parts, one module each (:mod:`.core`: the connection, the
fence and the translation of errors; :mod:`.nodes`; :mod:`.schedules`; :mod:`.tasks`:
claims, starts and ends; :mod:`.putback`); the names other modules use are imported
here, where they always were.
"""

from __future__ import annotations

from typing import Any

from django_htask.store.base import INTERFACE

from .core import _CHUNK as _CHUNK
from .core import (
    FencedAtomic,
    OrmStore,
    _translate,
    check_fence,
    unavailable,
)
from .core import _as_datetime as _as_datetime
from .nodes import NodeRows
from .pruning import PruneRows
from .putback import put_back, supersede
from .schedules import _ROW_FIELDS as _ROW_FIELDS
from .schedules import RefReader, ScheduleRows
from .schedules import schedule_row as schedule_row
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
    "put_back",
    "supersede",
    "unavailable",
]


class DatabaseStore(NodeRows, ScheduleRows, TaskRows, PruneRows, OrmStore):
    """The ORM store over the database alias ``using``. Its public methods, and those
    a subclass defines, raise StoreUnavailable for a database error (:func:`unavailable`)."""

    vendor = ""
    buffers = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # every method of the interface, as the subclass resolves it (its own, and
        # those of a class before DatabaseStore in its bases)
        _translate(cls, INTERFACE)


_translate(DatabaseStore, INTERFACE)  # the methods of its parts
