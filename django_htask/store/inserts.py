"""Inserting tasks (``schedule()``, ``schedule_many()``): the rows prepared here, written
as the database's dialect writes them (:mod:`.dialect`: a statement per batch of rows
where it can), keys settled by its conflict clause. Used by :mod:`django_htask.api`;
the stores' own writes are :mod:`.database`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from django.db import NotSupportedError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.utils import timezone

from django_htask.exceptions import DuplicateKey
from django_htask.keys import OnConflict, resolve_keys
from django_htask.models import Task, TaskStatus, new_token
from django_htask.retry import RETRY_COLUMNS

from . import get_store
from .database import _CHUNK
from .database.core import OrmStore
from .dialect import Conflict, Dialect, OnBatch, RowInsert

__all__ = ["Inserted", "TaskCall", "insert_tasks"]

#: The fields of a task :func:`insert_tasks` sets row by row, in the order of its rows
#: (with ``key`` last when any call has one).
_VARYING = ("token", "function", "payload", "timeout", "lock", "max_running", "per_key")
_KEYED = (*_VARYING, "key")
#: Where a keyed row holds its key.
_KEY_AT = len(_VARYING)
#: What ``on_conflict="replace"`` moves to the new call (attempts and snoozes start
#: again from 0).
_REPLACED = (
    "function",
    "payload",
    "run_at",
    "max_attempts",
    "timeout",
    "queue_name",
    "priority",
    "lock",
    "max_running",
    "per_key",
    "rate_limit",
    "rate_period",
    "retention",
    "max_snoozes",
    *RETRY_COLUMNS,
)
#: What it sets again, to an SQL value each.
_RESET = (
    ("attempts", "0"),
    ("snoozes", "0"),
    ("locked_by", "NULL"),
    ("lease_expires_at", "NULL"),
    ("last_error", "''"),
    ("traceback", "''"),
)


class Inserted(NamedTuple):
    """What :func:`insert_tasks` returns: a task for each call, in the order of the
    calls (calls sharing a key share one), and the ids of the pending tasks that were
    returned as they were (``on_conflict="ignore"``): nothing was written to them."""

    tasks: list[Task]
    kept: frozenset[int]


#: A call as :func:`insert_tasks` stores it: ``(function, payload, timeout, lock,
#: max_running, per_key)``.
TaskCall = tuple[str, bytes, float | None, str | None, int | None, str | None]


def insert_tasks(
    using: str,
    calls: list[TaskCall],
    common: dict[str, Any],
    batch_size: int,
    keys: list[str | None] | None = None,
    on_conflict: OnConflict = OnConflict.IGNORE,
) -> Inserted:
    """Insert a new pending task for each ``(function, payload, timeout, lock,
    max_running, per_key)`` of ``calls``,
    with the field values of ``common`` (``run_at``, ``max_attempts``, ``queue_name``;
    ``status``: ``waiting`` for tasks that wait for others) and every other field's
    default, ``batch_size`` rows a statement at most (fewer
    where the database takes fewer parameters); return them, saved, in order.

    ``keys``: a key or None for each call. A call whose key a pending task holds does
    what ``on_conflict`` says (see :mod:`django_htask.keys`), decided by the database
    (the dialect's conflict clause), so concurrent callers cannot both insert; calls
    of this batch with the same key are resolved first, as if made one after another
    (ignore: the first stands; replace: the last; raise: raises).

    The values are prepared here and the dialect writes them (one ``INSERT … RETURNING``
    per batch where it can): the ORM's ``bulk_create`` prepares each field of each row
    through the query compiler, which takes several times as long as the database for
    a task (``bench/enqueue.py``). Where the database cannot return the ids of a
    multi-row insert, ``bulk_create``, then the ids are read back by token."""
    connection = connections[using]
    fields = [f for f in Task._meta.concrete_fields if not f.primary_key]
    now = timezone.now()  # created_at, as auto_now_add sets it
    values: dict[str, Any] = {
        f.attname: f.get_default() if f.has_default() else None for f in fields
    }
    values.update({"status": TaskStatus.PENDING, **common}, created_at=now)
    if keys is not None and any(key is not None for key in keys):
        return _insert_keyed(connection, fields, values, calls, keys, on_conflict, batch_size)
    tasks: list[Task] = []
    if not connection.features.can_return_rows_from_bulk_insert:
        tasks += [
            Task(**{**values, **dict(zip(_VARYING, (new_token(), *call), strict=True))})
            for call in calls
        ]
        Task.objects.using(using).bulk_create(tasks, batch_size=batch_size)
        _read_ids(using, tasks)  # bulk_create could not set them
        return Inserted(tasks, frozenset())
    rows = [(new_token(), *call) for call in calls]
    task_of = _task_maker(using, values)

    def made(batch: list[tuple[Any, ...]], returned: list[tuple[Any, ...]]) -> None:
        ids = {token: pk for pk, token, *_key in returned}
        tasks.extend(task_of(row, ids[row[0]]) for row in batch)

    _insert_rows(connection, fields, values, rows, _VARYING, batch_size, made)
    return Inserted(tasks, frozenset())


def _task_maker(using: str, values: dict[str, Any]) -> Callable[[tuple[Any, ...], int], Task]:
    """Make the Tasks just inserted with the field values of ``values``: called with
    a row (its varying fields, in the order of ``_KEYED``) and its id.

    What ``Task.from_db`` makes, without ``Model.__init__``'s work per field (a third of
    ``schedule_many``'s time per task, ``bench/enqueue.py``): the values set directly,
    as ``__init__`` would set them (no field of Task has a descriptor that
    converts), unless something listens to Task's ``pre_init`` or ``post_init``
    signals, which then get the usual ``from_db`` (looked up once per insert)."""
    order = [f.attname for f in Task._meta.concrete_fields]
    listened = pre_init.has_listeners(Task) or post_init.has_listeners(Task)

    def task_of(row: tuple[Any, ...], pk: int) -> Task:
        row_values = {**values, "id": pk}
        row_values.update(zip(_KEYED, row, strict=False))  # without a key: all but the key
        if listened:
            return Task.from_db(using, order, [row_values[name] for name in order])
        task = Task.__new__(Task)
        state = ModelState()
        state.adding, state.db = False, using
        row_values["_state"] = state
        task.__dict__.update(row_values)
        return task

    return task_of


def _insert_rows(
    connection: BaseDatabaseWrapper,
    fields: list[Any],
    values: dict[str, Any],
    rows: list[tuple[Any, ...]],
    varying: tuple[str, ...],
    batch_size: int,
    on_batch: OnBatch,
    conflict: Conflict | None = None,
) -> None:
    """Insert ``rows`` (the ``varying`` fields of each, the others from ``values``) as
    the database's dialect does, with its clause for ``conflict`` if any; each batch of
    rows and the rows its statement returns (``(id, token)``, and ``key`` with keys) go
    to ``on_batch``, in order."""
    dialect = _dialect(connection)
    # Each field's value as the database takes it: once for the common ones.
    fixed = {
        f.attname: f.get_db_prep_save(values[f.attname], connection)
        for f in fields
        if f.attname not in varying
    }
    dialect.insert_rows(
        RowInsert(
            connection,
            Task._meta.db_table,
            fields,
            fixed,
            varying,
            rows,
            batch_size,
            "" if conflict is None else dialect.conflict_clause(connection, conflict),
            ("id", "token", "key") if "key" in varying else ("id", "token"),
            on_batch,
        )
    )


def _dialect(connection: BaseDatabaseWrapper) -> Dialect:
    """The dialect of ``connection``'s database, held by its store (found once per
    backend: a ``schedule()`` call would otherwise make a store to ask)."""
    dialect = _DIALECTS.get(type(connection))
    if dialect is None:
        store = get_store(connection.alias)
        assert isinstance(store, OrmStore)
        dialect = _DIALECTS[type(connection)] = store.dialect
    return dialect


#: The dialect of each backend's connections (:func:`_dialect`).
_DIALECTS: dict[type[BaseDatabaseWrapper], Dialect] = {}


def _conflict(on_conflict: OnConflict) -> Conflict:
    """What an insert does to the pending task holding a key: a replace moves it to the
    new call (attempts and snoozes start again); otherwise it stays as it is."""
    if on_conflict is OnConflict.REPLACE:
        return Conflict(_REPLACED, _RESET)
    return Conflict()


def _insert_keyed(
    connection: BaseDatabaseWrapper,
    fields: list[Any],
    values: dict[str, Any],
    calls: list[TaskCall],
    keys: list[str | None],
    on_conflict: OnConflict,
    batch_size: int,
) -> Inserted:
    """:func:`insert_tasks` when some calls have a key."""
    if not _dialect(connection).settles_keys(connection):
        version = ".".join(map(str, connection.get_database_version()))
        raise NotSupportedError(
            f"keys need an insert that returns the row it wrote or met for each row "
            f"(INSERT … RETURNING), which the database {connection.alias!r} "
            f"({connection.display_name} {version}) cannot make"
        )
    stands_for = resolve_keys(keys, on_conflict)  # call i's task is the row of call j
    source = {j: j for j in stands_for}  # the call whose values row j takes
    if on_conflict is OnConflict.REPLACE:
        for i, j in enumerate(stands_for):
            source[j] = i  # the last call with the key
    rows = {j: (new_token(), *calls[i], keys[j]) for j, i in source.items()}
    returned: list[tuple[Any, ...]] = []
    _insert_rows(
        connection, fields, values, list(rows.values()), _KEYED, batch_size,
        lambda _batch, got: returned.extend(got), _conflict(on_conflict),
    )  # fmt: skip
    mine = {row[0] for row in rows.values()}
    pending = {key: (pk, token) for pk, token, key in returned if token not in mine}
    if pending and on_conflict is OnConflict.RAISE:  # named: the first call's key taken
        key = next(k for k in keys if k is not None and k in pending)
        raise DuplicateKey(key, pending[key][1])
    using = connection.alias
    found = Task.objects.using(using).in_bulk([pk for pk, _token in pending.values()])
    inserted = {token: pk for pk, token, _key in returned if token in mine}
    task_of = _task_maker(using, values)
    task_at = {
        j: found[pending[row[_KEY_AT]][0]]
        if row[_KEY_AT] in pending
        else task_of(row, inserted[row[0]])
        for j, row in rows.items()
    }
    kept = frozenset(found) if on_conflict is OnConflict.IGNORE else frozenset()
    return Inserted([task_at[j] for j in stands_for], kept)


def _read_ids(using: str, tasks: list[Task]) -> None:
    """Set the ids of ``tasks``, just inserted, from their rows (found by token)."""
    by_token = {t.token: t for t in tasks}
    tokens = list(by_token)
    rows = Task.objects.using(using).order_by()
    for start in range(0, len(tokens), _CHUNK):
        chunk = tokens[start : start + _CHUNK]
        for token, pk in rows.filter(token__in=chunk).values_list("token", "id"):
            by_token[token].pk = pk
