"""Inserting tasks (``schedule()``, ``schedule_many()``): one statement per batch of
rows prepared here, keys settled by the database's conflict clause. Used by
:mod:`django_htask.api`; the stores' own writes are :mod:`.database`."""

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
from django_htask.models import KEY_PREDICATE, Task, TaskStatus, new_token
from django_htask.retry import RETRY_COLUMNS

from .database import _CHUNK

__all__ = ["Inserted", "TaskCall", "insert_tasks"]

#: The fields of a task :func:`insert_tasks` sets row by row, in the order of its rows
#: (with ``key`` last when any call has one).
_VARYING = ("token", "function", "payload", "timeout", "lock", "max_running", "per_key")
_KEYED = (*_VARYING, "key")
#: Where a keyed row holds its key.
_KEY_AT = len(_VARYING)
#: Their types in :func:`_insert_unnest`'s arrays (a payload goes as hex text).
_ARRAY_TYPES = {
    "token": "varchar[]",
    "function": "varchar[]",
    "payload": "text[]",
    "timeout": "float8[]",
    "lock": "varchar[]",
    "max_running": "integer[]",
    "per_key": "varchar[]",
    "key": "varchar[]",
}
#: What :func:`_insert_unnest` selects for a column of its arrays, if not the column.
_FROM_ARRAY = {"payload": "decode(v.payload, 'hex')"}
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


class Inserted(NamedTuple):
    """What :func:`insert_tasks` returns: a task for each call, in the order of the
    calls (calls sharing a key share one), and the ids of the pending tasks that were
    returned as they were (``on_conflict="ignore"``): nothing was written to them."""

    tasks: list[Task]
    kept: frozenset[int]


#: What :func:`_insert_rows` hands each batch to: its rows, and the rows its statement
#: returned.
OnBatch = Callable[[list[tuple[Any, ...]], list[tuple[Any, ...]]], None]

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
    (``INSERT … ON CONFLICT … DO UPDATE … RETURNING``), so concurrent callers cannot
    both insert; calls of this batch with the same key are resolved first, as if made
    one after another (ignore: the first stands; replace: the last; raise: raises).

    One ``INSERT … VALUES … RETURNING`` per batch of values prepared here: the ORM's
    ``bulk_create`` prepares each field of each row through the query compiler, which
    takes several times as long as the database for a task (``bench/enqueue.py``).
    Where the database cannot return the ids of a multi-row insert (MySQL),
    ``bulk_create``, then the ids are read back by token."""
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
        _read_ids(using, tasks)  # bulk_create could not set them (MySQL)
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
    tail: str = "",
) -> None:
    """Insert ``rows`` (the ``varying`` fields of each, the others from ``values``),
    ``tail`` after each statement's rows (a conflict clause); each batch of rows and
    the rows its statement returns (``(id, token)``, and ``key`` with keys) go to
    ``on_batch``, in order."""
    # Each field's value as the database takes it: once for the common ones.
    fixed = {
        f.attname: f.get_db_prep_save(values[f.attname], connection)
        for f in fields
        if f.attname not in varying
    }
    qn = connection.ops.quote_name
    returned_columns = ("id", "token", "key") if "key" in varying else ("id", "token")
    returning = f" RETURNING {', '.join(qn(name) for name in returned_columns)}"
    if connection.vendor == "mysql" and tail:
        on_batch(
            rows, _insert_each(connection, fields, fixed, rows, varying, tail, returned_columns)
        )
        return
    if connection.vendor == "postgresql":
        _insert_unnest(
            connection, fields, fixed, rows, min(batch_size, len(rows)), varying,
            tail + returning, on_batch,
        )  # fmt: skip
        return
    params_of = _row_params(connection, fields, fixed, varying)
    per_statement = max(1, min(batch_size, connection.ops.bulk_batch_size(fields, rows)))
    columns = ", ".join(qn(f.attname if f.column is None else f.column) for f in fields)
    head = f"INSERT INTO {qn(Task._meta.db_table)} ({columns}) VALUES "
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            batch = rows[start : start + per_statement]
            params: list[Any] = []
            for row in batch:
                params += params_of(row)
            cursor.execute(head + ", ".join([one] * len(batch)) + tail + returning, params)
            on_batch(batch, cursor.fetchall())


def _row_params(
    connection: BaseDatabaseWrapper,
    fields: list[Any],
    fixed: dict[str, Any],
    varying: tuple[str, ...],
) -> Callable[[tuple[Any, ...]], list[Any]]:
    """The parameters of one row of a ``VALUES`` list, in the order of ``fields``: the
    prepared common values of ``fixed``, and a row's ``varying`` fields prepared."""
    index = {name: i for i, name in enumerate(varying)}
    prep = {f.attname: f.get_db_prep_save for f in fields if f.attname in index}

    def params_of(row: tuple[Any, ...]) -> list[Any]:
        return [
            fixed[f.attname]
            if (i := index.get(f.attname)) is None
            else prep[f.attname](row[i], connection)
            for f in fields
        ]

    return params_of


def _insert_each(
    connection: BaseDatabaseWrapper,
    fields: list[Any],
    fixed: dict[str, Any],
    rows: list[tuple[Any, ...]],
    varying: tuple[str, ...],
    tail: str,
    returned_columns: tuple[str, ...],
) -> list[tuple[Any, ...]]:
    """:func:`_insert_rows` on MySQL and MariaDB with a conflict clause: there is no
    ``RETURNING`` after ``ON DUPLICATE KEY UPDATE``, so one row a statement, each
    giving the id of the row it inserted or of the pending row it met
    (``LAST_INSERT_ID(id)`` in the clause), then the rows are read back by id."""
    params_of = _row_params(connection, fields, fixed, varying)
    qn = connection.ops.quote_name
    columns = ", ".join(qn(f.column) for f in fields)
    sql = (
        f"INSERT INTO {qn(Task._meta.db_table)} ({columns}) VALUES "
        f"({', '.join(['%s'] * len(fields))}){tail}"
    )
    ids: list[int] = []
    with connection.cursor() as cursor:
        for row in rows:
            cursor.execute(sql, params_of(row))
            ids.append(cursor.lastrowid)
    found = Task.objects.using(connection.alias).filter(id__in=ids).order_by()
    return list(found.values_list(*returned_columns))


def _conflict_clause(connection: BaseDatabaseWrapper, on_conflict: OnConflict) -> str:
    """``ON CONFLICT`` on the pending-key index: a replace moves the pending row to the
    new call; otherwise a no-op update, which returns the pending row (and, on
    PostgreSQL, locks it until the caller commits, so it stays pending meanwhile)."""
    qn = connection.ops.quote_name
    mysql = connection.vendor == "mysql"
    if on_conflict is OnConflict.REPLACE:
        new = "VALUES({})" if mysql else "EXCLUDED.{}"
        sets = [f"{qn(name)} = {new.format(qn(name))}" for name in _REPLACED]
        sets += [
            f"{qn('attempts')} = 0",
            f"{qn('snoozes')} = 0",
            f"{qn('locked_by')} = NULL",
            f"{qn('lease_expires_at')} = NULL",
            f"{qn('last_error')} = ''",
            f"{qn('traceback')} = ''",
        ]
    else:
        sets = [] if mysql else [f"{qn('key')} = EXCLUDED.{qn('key')}"]
    if mysql:  # the pending row's id, for cursor.lastrowid (see _insert_each)
        sets.insert(0, f"{qn('id')} = LAST_INSERT_ID({qn('id')})")
        return f" ON DUPLICATE KEY UPDATE {', '.join(sets)}"
    return f" ON CONFLICT ({qn('key')}) WHERE {KEY_PREDICATE} DO UPDATE SET {', '.join(sets)}"


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
    if connection.vendor not in ("postgresql", "sqlite", "mysql") or not (
        connection.vendor == "mysql" or connection.features.can_return_rows_from_bulk_insert
    ):
        raise NotSupportedError(
            f"keys need INSERT … ON CONFLICT … RETURNING (PostgreSQL, or SQLite 3.35 or "
            f"later) or INSERT … ON DUPLICATE KEY UPDATE (MySQL, MariaDB): the database "
            f"{connection.alias!r} is {connection.vendor}"
        )
    stands_for = resolve_keys(keys, on_conflict)  # call i's task is the row of call j
    source = {j: j for j in stands_for}  # the call whose values row j takes
    if on_conflict is OnConflict.REPLACE:
        for i, j in enumerate(stands_for):
            source[j] = i  # the last call with the key
    rows = {j: (new_token(), *calls[i], keys[j]) for j, i in source.items()}
    tail = _conflict_clause(connection, on_conflict)
    returned: list[tuple[Any, ...]] = []
    _insert_rows(
        connection, fields, values, list(rows.values()), _KEYED, batch_size,
        lambda _batch, got: returned.extend(got), tail,
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


def _insert_unnest(
    connection: BaseDatabaseWrapper,
    fields: list[Any],
    fixed: dict[str, Any],
    rows: list[tuple[Any, ...]],
    per_statement: int,
    varying: tuple[str, ...],
    tail: str,
    on_batch: OnBatch,
) -> None:
    """PostgreSQL: the varying columns as arrays, ``unnest`` into rows: a statement of a
    few parameters whatever its rows (psycopg parses a query's placeholders in Python,
    which a 20,000-parameter ``VALUES`` list spends most of its time on)."""
    qn = connection.ops.quote_name
    select = ", ".join(
        _FROM_ARRAY.get(f.attname, f"v.{f.attname}") if f.attname in varying else "%s"
        for f in fields
    )
    columns = ", ".join(qn(f.column) for f in fields)
    arrays = ", ".join(f"%s::{_ARRAY_TYPES[name]}" for name in varying)
    sql = (
        f"INSERT INTO {qn(Task._meta.db_table)} ({columns}) SELECT {select} "
        f"FROM unnest({arrays}) AS v({', '.join(varying)}){tail}"
    )
    constants = [fixed[f.attname] for f in fields if f.attname not in varying]
    literal_of = [_LITERALS[_ARRAY_TYPES[name]] for name in varying]

    def params_of(batch: list[tuple[Any, ...]]) -> list[Any]:
        columns = zip(*batch, strict=True)
        return [*constants, *(make(c) for make, c in zip(literal_of, columns, strict=True))]

    batches = [rows[start : start + per_statement] for start in range(0, len(rows), per_statement)]
    with connection.cursor() as cursor:
        pg = cursor.cursor.connection
        if len(batches) == 1 or not _pipelined(connection, pg):
            for batch in batches:
                cursor.execute(sql, params_of(batch))
                on_batch(batch, cursor.fetchall())
            return
        # psycopg's pipeline: a batch is sent before the rows of the one before are made
        # into tasks, and its literals are made before the one before is fetched, so that
        # the caller and the server work at once (a fifth more tasks a second).
        with connection.wrap_database_errors, pg.pipeline():
            sent = None
            for batch in batches:
                params = params_of(batch)  # while the server inserts the batch before
                if sent is not None:
                    done = sent[1].fetchall()
                statement = pg.cursor()
                statement.execute(sql, params)
                if sent is not None:
                    on_batch(sent[0], done)  # while the server inserts this one
                sent = (batch, statement)
            assert sent is not None
            on_batch(sent[0], sent[1].fetchall())


def _pipelined(connection: BaseDatabaseWrapper, pg: Any) -> bool:
    """Whether :func:`_insert_unnest` sends its statements in psycopg's pipeline mode:
    psycopg 3 on a libpq that has it, and no one watching the queries (Django's query
    log, with DEBUG or in tests, and ``execute_wrappers``: the pipeline's statements go
    past Django's cursor, so those would not see them)."""
    try:
        import psycopg  # noqa: PLC0415 - psycopg 3; Django takes psycopg2 too
    except ImportError:
        return False
    return (
        isinstance(pg, getattr(psycopg, "Connection", ()))
        and psycopg.Pipeline.is_supported()
        and not connection.queries_logged
        and not connection.execute_wrappers
    )


# -- PostgreSQL's array literals ---------------------------------------------------------
# Made here, one string an array: psycopg's dumper of a list checks and quotes each
# element in Python (a regular expression each), a third of schedule_many's time a task.


def _text_array(values: tuple[str | None, ...]) -> str:
    """``{"a","b",NULL}``: each element quoted, its backslashes and quotes escaped."""
    return (
        "{"
        + ",".join(
            "NULL" if v is None else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
            for v in values
        )
        + "}"
    )


def _hex_array(values: tuple[bytes, ...]) -> str:
    """``{"0a0b",...}``: each byte string as hex (``decode(…, 'hex')`` reads it)."""
    return '{"' + '","'.join(v.hex() for v in values) + '"}'


def _number_array(values: tuple[float | int | None, ...]) -> str:
    """``{1.5,NULL}``: each number as Python writes it (finite: checked before)."""
    return "{" + ",".join("NULL" if v is None else repr(v) for v in values) + "}"


_LITERALS: dict[str, Callable[[Any], str]] = {
    "varchar[]": _text_array,
    "text[]": _hex_array,
    "float8[]": _number_array,
    "integer[]": _number_array,
}
