"""What a database does its own way, behind one short interface that the code the
databases share calls, never asking the database's name. Each vendor module defines one
:class:`Dialect` (its SQL is there), and its store holds it (``OrmStore.dialect``).

The shared code (:mod:`.database`) calls the dialect explicitly, ``self.dialect.x(self,
...)``, handing it the store; a dialect reaches the shared code the same way, by
explicit calls on that store. A vendor's store class implements the public
:class:`~django_htask.store.base.Store` interface where its database has a better way,
and overrides nothing private of the shared code: what differs below that interface is
here."""

from __future__ import annotations

import abc
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet

from django_htask.enums import TaskStatus
from django_htask.models import (
    GATED_PREDICATE,
    Batch,
    Dependency,
    RateSlot,
    Run,
    RunStatus,
    Schedule,
    Task,
)
from django_htask.querysets import EXPIRED_RUN_SQL, PLAIN_TASK_SQL, SPENT_BATCH_SQL, served_task

from . import rules, values
from .base import Listening
from .values import Claim, ListenTo, Occurrence, Probe, RunOutcome, StartedTask, TaskEnd

__all__ = [
    "GUARD",
    "Conflict",
    "Connected",
    "Dialect",
    "Fencing",
    "Firing",
    "OnBatch",
    "Pruning",
    "RowInsert",
    "TaskStore",
    "expired_ids",
    "fenced_in",
]

#: The guard of a task's end written as plain (nothing follows it, as its claim read):
#: a task others came to wait on while it ran is not written so (see
#: ``TaskRows._write_plain_ends``).
GUARD = " AND followed = FALSE"
_TASK = Task._meta.db_table
_RUN = Run._meta.db_table
_EDGE = Dependency._meta.db_table
_SLOT = RateSlot._meta.db_table
_BATCH = Batch._meta.db_table

logger = logging.getLogger(__name__)


class Connected(Protocol):
    """What a dialect reaches of the store it is handed: the store's alias and
    connection (the shared store's parts, :mod:`.database`, each are one; named here,
    not imported, for the shared code imports this module)."""

    using: str

    @property
    def connection(self) -> BaseDatabaseWrapper: ...


class Pruning(Connected, Protocol):
    """The shared pruner's helpers a dialect's deletes call (:mod:`.database.pruning`)."""

    @property
    def _skip_held(self) -> str: ...

    def _delete_ids(
        self, cursor: Any, delete: str, ids: list[Any], params: Sequence[Any] = ()
    ) -> int: ...

    def _batches_of(self, cursor: Any, ids: list[int]) -> list[int]: ...


class Firing(Connected, Protocol):
    """The shared schedule rows' helpers a dialect's claim of an occurrence calls
    (:mod:`.database.schedules`)."""

    def _fenced(self, node_id: str) -> AbstractContextManager[Any]: ...

    def _after_fire(
        self, next_run_at: datetime | None, now: datetime, runs: list[RunOutcome]
    ) -> dict[str, object]: ...

    def _run(self, outcome: RunOutcome, schedule_id: int | None = None) -> Run: ...


class Fencing(Connected, Protocol):
    """The shared store's fence of a node's writes, which a dialect's transaction runs
    first (:mod:`.database.core`)."""

    def _fence(self, node_id: str) -> None: ...


class TaskStore(Connected, Protocol):
    """What a dialect reaches of the shared store's task rows, to claim and end."""

    def _mark_started(
        self, claim: Claim, ids: list[int], claimable: QuerySet[Task], *, buffered: bool = False
    ) -> list[StartedTask]: ...

    def _start_returning(
        self,
        claim: Claim,
        lock: str = "",
        adapt: Callable[[Any], Any] = ...,
        indexed_by: str = "",
        *,
        buffered: bool = False,
    ) -> list[StartedTask]: ...

    def _record_runs(
        self, node_id: str, outcomes: list[RunOutcome], still_running: set[int] | None = None
    ) -> None: ...

    def _refused(self, node_id: str, task_ids: list[int]) -> set[int]: ...

    def _follow_ends(self, task_ids: list[int], now: datetime) -> None: ...


@contextmanager
def fenced_in(atomic: AbstractContextManager[Any], store: Fencing, node_id: str) -> Iterator[None]:
    """``atomic``, whose first statement is the fence of node ``node_id``."""
    with atomic:
        store._fence(node_id)
        yield


#: What an insert hands each batch to: its rows, and the rows its statement returned.
OnBatch = Callable[[list[tuple[Any, ...]], list[tuple[Any, ...]]], None]


def expired_ids(condition: str) -> str:
    """The query of the ids of at most ``%s`` tasks of one range of the pruner's index,
    oldest first. Ordered in the index's order: PostgreSQL takes ``retention IS NULL``
    for no equality, so ordering by ``finished_at`` alone read and sorted every
    matching row."""
    return (
        f"SELECT id FROM {_TASK} WHERE {condition} ORDER BY retention, status, finished_at LIMIT %s"
    )


@dataclass(frozen=True)
class Conflict:
    """What an insert does to the pending task that holds a new row's key (the
    pending-key index, ``KEY_PREDICATE``): the columns it takes from the new row
    (``copied``) and those it sets to an SQL value (``reset``). With neither, the
    pending row is left as it is, and returned in place of the new one."""

    copied: tuple[str, ...] = ()
    reset: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RowInsert:
    """Rows to insert into ``table``, as the shared code prepares them: ``fields``, the
    columns in order; ``fixed``, the value of each field not in ``varying`` as the
    database takes it; ``rows``, the ``varying`` fields of each row, not yet prepared;
    at most ``batch_size`` rows a statement; ``conflict``, the dialect's conflict clause
    (``''``: none); ``returned``, the columns returned for each row. Each batch and the
    rows returned for it go to ``on_batch``, in order."""

    connection: BaseDatabaseWrapper
    table: str
    fields: list[Any]
    fixed: dict[str, Any]
    varying: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    batch_size: int
    conflict: str
    returned: tuple[str, ...]
    on_batch: OnBatch

    def head(self) -> str:
        """``INSERT INTO table (columns)``."""
        qn = self.connection.ops.quote_name
        return f"INSERT INTO {qn(self.table)} ({', '.join(qn(f.column) for f in self.fields)})"

    def returning(self) -> str:
        qn = self.connection.ops.quote_name
        return f" RETURNING {', '.join(qn(name) for name in self.returned)}"

    def params_of(self) -> Callable[[tuple[Any, ...]], list[Any]]:
        """The parameters of one row of a ``VALUES`` list, in the order of ``fields``:
        the values of ``fixed``, and the row's ``varying`` fields prepared."""
        connection, fixed = self.connection, self.fixed
        index = {name: i for i, name in enumerate(self.varying)}
        prep = {f.attname: f.get_db_prep_save for f in self.fields if f.attname in index}
        fields = self.fields

        def params_of(row: tuple[Any, ...]) -> list[Any]:
            return [
                fixed[f.attname]
                if (i := index.get(f.attname)) is None
                else prep[f.attname](row[i], connection)
                for f in fields
            ]

        return params_of


class Dialect(abc.ABC):
    """What a database does its own way (see the module)."""

    def settles_keys(self, connection: BaseDatabaseWrapper) -> bool:
        """Whether an insert with a conflict clause can return the row it inserted or
        met, for each row (what a task's key needs)."""
        return bool(connection.features.can_return_rows_from_bulk_insert)

    @abc.abstractmethod
    def conflict_clause(self, connection: BaseDatabaseWrapper, conflict: Conflict) -> str:
        """The clause after an insert's rows that does ``conflict`` to the pending task
        holding a new row's key, its rows returned as the others are."""

    # -- transactions and the fence -----------------------------------------------------
    #: Appended to the fencing read of a node's row: how the row is locked for the
    #: transaction (nothing where write transactions are exclusive already).
    fence_lock = ""

    def atomic(self, store: Connected) -> AbstractContextManager[Any]:
        """A transaction of the store's writes."""
        return transaction.atomic(using=store.using)

    def fenced(
        self,
        store: Fencing,
        node_id: str,
        *,
        claim: bool = False,
        probe: Probe | None = None,
        running_ids: Iterable[int] = (),
    ) -> AbstractContextManager[Any]:
        """A write transaction of node ``node_id``, which first checks that the node is
        registered and not declared dead (``store._fence``). ``claim``: a claim's
        (finished tasks written, due ones started), whose plans a database may pin;
        ``probe`` and ``running_ids``: what the fence may answer in the same statement,
        as ``gated_due`` and ``still_running`` of the context manager (``FencedAtomic``;
        ignored here)."""
        return fenced_in(self.atomic(store), store, node_id)

    # -- the claim -----------------------------------------------------------------------
    #: A hint after the table name of the gated candidates' query.
    gated_indexed_by = ""
    #: The same for a limited queue's other candidates.
    claim_indexed_by = ""
    #: Which due tasks have a lock or a limit, as SQL.
    gated_predicate = GATED_PREDICATE
    #: Which have neither (:data:`~django_htask.querysets.PLAIN_TASK_SQL`), likewise.
    plain_predicate = PLAIN_TASK_SQL
    #: A hint after the task table's name of a statement that finds tasks by id.
    by_id = ""

    def start_in(self, store: TaskStore, claim: Claim) -> list[StartedTask]:
        """Claim and start due tasks without a lock or a limit, in the caller's
        transaction: the candidates read, then started if still claimable."""
        return self._claim_plain(store, claim, buffered=False)

    def buffer_in(self, store: TaskStore, claim: Claim) -> list[StartedTask]:
        """As :meth:`start_in`, for the node's buffer (:meth:`Store.start_tasks
        <django_htask.store.base.Store.start_tasks>`): only tasks never handed to a
        node, and no start time written."""
        return self._claim_plain(store, claim, buffered=True)

    @staticmethod
    def _claim_plain(store: TaskStore, claim: Claim, *, buffered: bool) -> list[StartedTask]:
        tasks = Task.objects.using(store.using)
        served = served_task(claim.serving.plain, claim.serving.backend)
        claimable = tasks.claimable(claim.now).plain().filter(served)
        if buffered:
            claimable = claimable.filter(node__isnull=True)  # rules.NEVER_HANDED_OUT_SQL
        ids = list(
            claimable.order_by("-priority", "run_at", "id").values_list("id", flat=True)[
                : claim.limit
            ]
        )
        if not ids:
            return []
        return store._mark_started(claim, ids, claimable, buffered=buffered)

    def mark_begun(
        self, store: Connected, node_id: str, begun: Sequence[tuple[int, datetime]]
    ) -> None:
        """Write the start of the buffered tasks ``begun`` (id, when) that this node
        still runs, in the caller's transaction: from then on, a node that dies has
        used their attempt."""
        adapt = store.connection.ops.adapt_datetimefield_value
        with store.connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {_TASK} SET started_at = %s WHERE id = %s AND locked_by = %s "
                "AND status = %s AND started_at IS NULL",
                [(adapt(at), task_id, node_id, TaskStatus.RUNNING) for task_id, at in begun],
            )

    def lock_gates(self, store: Connected, keys: list[str]) -> bool:
        """Serialise the claims of these locks and functions (``lock:…``,
        ``function:…``) until the transaction ends; return whether the holders must be
        counted again. Nothing here: the claim's transaction is the only writer."""
        return False

    # -- the ends of attempts ------------------------------------------------------------
    def record_in(
        self,
        store: TaskStore,
        node_id: str,
        outcomes: list[RunOutcome],
        still_running: set[int] | None = None,
    ) -> dict[int, tuple[str, datetime]]:
        """Write ``outcomes`` in the caller's transaction (``still_running``: the tasks
        of ``outcomes`` this node still runs, if known: ``store._record_runs``), and the
        schedules' last statuses, waiting for no row; return those skipped, to be
        written afterwards (:meth:`record_late`)."""
        store._record_runs(node_id, outcomes, still_running)
        statuses = values.last_statuses(outcomes)
        busy = self.set_statuses(store, statuses, wait=False)
        return {schedule_id: statuses[schedule_id] for schedule_id in busy}

    def record_late(self, store: Connected, statuses: dict[int, tuple[str, datetime]]) -> None:
        """The last statuses :meth:`record_in` skipped, one schedule per transaction.

        A transaction that locks several schedule rows and waits for one more can
        deadlock with any other that does (``Schedule.objects.update(...)`` in the
        admin): so the batch written with the runs never waits, and the rows it skipped
        are written here, each in a transaction that holds nothing else while it
        waits."""
        for schedule_id, status in statuses.items():
            try:
                with self.atomic(store):
                    self.set_statuses(store, {schedule_id: status}, wait=True)
            except DatabaseError as exc:  # the runs are written: only the summary is late
                logger.warning(
                    "could not write the last status of schedule %s: %s",
                    schedule_id,
                    exc,
                    extra={"action": "status_unrecorded"},
                )
                return

    def set_statuses(
        self, store: Connected, statuses: dict[int, tuple[str, datetime]], *, wait: bool
    ) -> list[int]:
        """Write each schedule's last status and run time, unless a later run already
        did. With ``wait`` false, a database where writers wait for each other's rows
        skips the rows another transaction holds, and returns their ids; here, one
        writer at a time, none is skipped."""
        for schedule_id, (status, when) in statuses.items():
            Schedule.objects.using(store.using).filter(
                rules.status_not_older(when), id=schedule_id
            ).update(last_status=status, last_run_at=when)
        return []

    def write_ends(self, store: Connected, ends: list[TaskEnd], *, guard: bool = False) -> int:
        """Write each task of ``ends`` if it still runs (and, with ``guard``, if nothing
        follows its end: ``followed`` false); return how many were written. One
        prepared statement for all (``executemany``): the ORM's ``update()`` per row
        costs more than the jobs themselves when the jobs are trivial."""
        # rules.ended_task's fields, as SQL of their own: one statement for rows that
        # differ in which fields they set (a retry keeps no run_at from a finish).
        with store.connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {_TASK} SET status = %s, run_at = COALESCE(%s, run_at), "
                "finished_at = %s, locked_by = NULL, lease_expires_at = NULL, "
                "last_error = %s, traceback = %s, result = %s, "
                "started_at = COALESCE(started_at, %s) WHERE id = %s AND status = %s"
                f"{GUARD if guard else ''}",
                [(*end, TaskStatus.RUNNING) for end in ends],
            )
            return max(int(cursor.rowcount), 0)

    # -- inserts -------------------------------------------------------------------------
    def insert_rows(self, insert: RowInsert) -> None:
        """Insert the rows of ``insert``: ``VALUES`` lists of as many rows as the
        database takes parameters for, each statement returning its rows."""
        connection, rows = insert.connection, insert.rows
        params_of = insert.params_of()
        per_statement = connection.ops.bulk_batch_size(insert.fields, rows)
        per_statement = max(1, min(insert.batch_size, per_statement))
        head = insert.head() + " VALUES "
        one = "(" + ", ".join(["%s"] * len(insert.fields)) + ")"
        tail = insert.conflict + insert.returning()
        with connection.cursor() as cursor:
            for start in range(0, len(rows), per_statement):
                batch = rows[start : start + per_statement]
                params: list[Any] = []
                for row in batch:
                    params += params_of(row)
                cursor.execute(head + ", ".join([one] * len(batch)) + tail, params)
                insert.on_batch(batch, cursor.fetchall())

    # -- notices -------------------------------------------------------------------------
    def notify(self, store: Connected, payload: str) -> None:
        """Tell the nodes listening that ``payload`` (``task``, ``schedule``, ``node``)
        changed, when the current transaction commits; nothing where the nodes poll."""
        return

    # -- pruning -------------------------------------------------------------------------
    def try_lock_pruner(self, store: Connected) -> bool:
        """Take the pruner's lock until the transaction ends, without waiting; whether
        it was taken (False: another node prunes). Nothing here: a SQLite write
        transaction is exclusive already."""
        return True

    def id_among(self, select: str) -> str:
        """The condition that a row's id is one of those ``select`` picks (a
        sub-select of ids ``… LIMIT n``, maybe locking them): evaluated once for the
        statement, however it is planned."""
        return f"id IN ({select})"

    def delete_expired(
        self, store: Pruning, cursor: Any, condition: str, params: list[Any], limit: int
    ) -> tuple[int, int]:
        """Delete at most ``limit`` tasks of one range of the pruner's index
        (``condition``), the oldest first, and their runs; how many of each. The ids
        are read first, the rows they name locked (those another transaction holds are
        left for the next batch), then the runs and the tasks deleted by id."""
        cursor.execute(f"{expired_ids(condition)}{store._skip_held}", [*params, limit])
        ids = [row[0] for row in cursor.fetchall()]
        runs = store._delete_ids(cursor, f"DELETE FROM {_RUN} WHERE task_id", ids)
        store._delete_ids(cursor, f"DELETE FROM {_EDGE} WHERE task_id", ids)
        batches = store._batches_of(cursor, ids)
        tasks = store._delete_ids(
            cursor, f"DELETE FROM {_TASK} WHERE finished_at IS NOT NULL AND id", ids
        )
        store._delete_ids(cursor, f"DELETE FROM {_BATCH} WHERE {SPENT_BATCH_SQL} AND id", batches)
        return tasks, runs

    def delete_runs(self, store: Connected, cursor: Any, cutoff: Any, limit: int) -> int:
        """Delete at most ``limit`` runs past ``RUN_RETENTION_DAYS``, the oldest first."""
        cursor.execute(
            f"DELETE FROM {_RUN} WHERE "
            + self.id_among(
                f"SELECT id FROM {_RUN} WHERE {EXPIRED_RUN_SQL} ORDER BY started_at LIMIT %s"
            ),
            [cutoff, RunStatus.RUNNING, limit],
        )
        return int(cursor.rowcount)

    def delete_slots(self, store: Connected, cursor: Any, now: Any, limit: int) -> int:
        """Delete at most ``limit`` expired slots of rate limits (a claim deletes those
        of the flows it starts; these are of flows no claim started since)."""
        cursor.execute(
            f"DELETE FROM {_SLOT} WHERE "
            + self.id_among(f"SELECT id FROM {_SLOT} WHERE expires_at <= %s LIMIT %s"),
            [now, limit],
        )
        return int(cursor.rowcount)

    # -- nodes and reaping ---------------------------------------------------------------
    def hold_presence(self, store: Connected, node_id: str) -> None:
        """Hold the node's presence on the store's connection, from its registration
        (the thread that starts a node keeps its connection) and at each heartbeat
        (see ``Store.absent``): nothing here."""
        return

    def lock_reaper(self, store: Connected) -> None:
        """Keep other reapers out until the transaction ends (one database: nothing)."""
        return

    def try_lock_reaper(self, store: Connected) -> bool:
        """Take the reaper's lock until the transaction ends, without waiting; return
        whether it was taken (False: another node is reaping). Nothing here: a SQLite
        write transaction is exclusive already."""
        return True

    def reaped(self, store: Connected, count: int, dead: list[str]) -> None:
        """What a reap did, in its transaction: ``count`` rows, ``dead`` nodes
        declared dead (nothing here: PostgreSQL tells the other nodes)."""
        return

    # -- missing tables ------------------------------------------------------------------
    #: How this database says a statement's table does not exist (the table's name
    #: its first group); each vendor's dialect has its own.
    no_such_table: re.Pattern[str] | None = None

    # -- schedules and notices -----------------------------------------------------------
    def claim_occurrence(self, store: Firing, occurrence: Occurrence) -> list[int] | None:
        """``Store.claim_occurrence``: the compare-and-set of the schedule's row, then
        its run rows, in one fenced transaction."""
        node_id, row, next_run_at, now, runs = occurrence
        with store._fenced(node_id):
            claimed = (
                Schedule.objects.using(store.using)
                .filter(id=row.id, next_run_at=row.next_run_at, version=row.version, enabled=True)
                .update(**store._after_fire(next_run_at, now, runs))
            )
            if not claimed:
                return None
            created = Run.objects.using(store.using).bulk_create(
                [store._run(run, schedule_id=row.id) for run in runs]
            )
        return [r.pk for r in created]

    def listen(self, store: Connected, to: ListenTo) -> Listening | None:
        """``Store.listen``: None, where the nodes poll."""
        return None
