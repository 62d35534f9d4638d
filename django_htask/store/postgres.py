"""What is particular to PostgreSQL: several nodes on one database.

PostgreSQL's own transactions, row locks and LISTEN/NOTIFY do the coordination:

Versions
    A ``BEFORE INSERT OR UPDATE`` trigger sets a schedule's ``version`` from the id of
    the writing transaction (``pg_current_xact_id()``, 64 bits, never wraps) times
    65,536, plus the row's rank among the schedule rows that transaction wrote (so
    versions grow inside a transaction too). Transaction ids are handed out when a
    transaction first writes, so they grow with time, but a
    transaction with a smaller id may commit after one with a larger id. A sync
    therefore reads everything at or above the *horizon* of its last look — the oldest
    transaction still in progress then (``pg_snapshot_xmin``) — never just "above the
    highest version seen". Rows near the horizon may be read twice; placing a schedule
    is idempotent. An update that sets ``version`` itself is left alone.
Notifications
    Statement-level triggers on the schedule, task, node and queue tables ``NOTIFY``
    the channel ``django_htask`` (payload ``schedule``, ``task``, ``node`` or
    ``queue``) on every
    insert, update or delete, whoever makes it: a model ``save()``, ``QuerySet.update()``
    or raw SQL. The nodes' own bookkeeping (claims, fires, results, leases) runs with
    the transaction-local setting ``django_htask.quiet`` on, so a busy cluster does not
    wake itself; what other nodes must see from it (tasks handed back, nodes gone) is
    notified explicitly. ``django_htask.cluster`` listens.
Claims
    A node claims due one-off tasks only as workers take them, and starts them in the
    same statement: ``UPDATE … WHERE id = ANY(ARRAY(SELECT … LIMIT n FOR UPDATE SKIP
    LOCKED))``, so nodes claiming at once take disjoint batches without waiting. An occurrence is
    claimed by the compare-and-set of the generic store.
Locks and limits
    A claim weighs the due tasks with a lock or a limit first (``store/base.py``'s
    ``pick_gated``), then takes a transaction-level advisory lock for each lock,
    function, flow (rate limits and limits per key) and limited queue it would start,
    in one order (so two claims never deadlock), and chooses again: READ COMMITTED
    shows it what a claim that held one of those advisory locks committed (the
    running holders, a rate limit's slots), so two claims never both start a task of
    one lock nor overfill a function, a flow or a window. Writing the end of a task
    that held a place notifies the others (``task``), its bookkeeping being quiet
    otherwise.
Reaping
    Any live node reaps, one at a time (a transaction-level advisory lock): nodes whose
    heartbeat is older than ``NODE_TIMEOUT`` are marked stopped (declared dead), what
    dead nodes held is handed back (a task they had started has used its attempt), and
    the other nodes are told.
Presence
    The connection that registers a node and its heartbeat's hold a session-level
    advisory lock of two ``integer`` s named after the node
    (:mod:`~django_htask.store.presence`); the server releases it when they end, at
    once for a process killed. The others read it in ``pg_locks``
    (:meth:`PostgresStore.absent`).
Fencing
    Every write a node makes locks its own node row ``FOR SHARE`` first and checks that
    it is not declared dead; the reaper marks a node dead with an ``UPDATE`` of that row,
    so the two are ordered: a node declared dead can write nothing more.

:func:`install` (run after every ``migrate`` and when a node starts) creates the
functions and triggers (their text: :mod:`~django_htask.store.pg_triggers`); it is
idempotent. PostgreSQL 13 or later.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import QuerySet

from django_htask.conf import get_settings
from django_htask.engine.clock import from_us
from django_htask.models import (
    KEY_PREDICATE,
    Batch,
    Dependency,
    Node,
    Run,
    RunStatus,
    Schedule,
    Task,
    TaskStatus,
)
from django_htask.querysets import LIVE_NODE_SQL, SPENT_BATCH_SQL
from django_htask.retry import RetryPolicy

from . import rules, values
from .base import Notices, RunOutcome, ScheduleRef, ScheduleRow, StartedTask
from .database import (
    _ROW_FIELDS,
    DatabaseStore,
    FencedAtomic,
    RefReader,
    gate_key,
    schedule_row,
)
from .dialect import (
    Conflict,
    Connected,
    Dialect,
    Fencing,
    Firing,
    OnBatch,
    Pruning,
    RowInsert,
    TaskStore,
    expired_ids,
)
from .listen import CHANNEL, ENDED, Listener, connection_params
from .pg_triggers import FINGERPRINT, PER_XACT, QUIET, STATEMENTS, current
from .presence import PRESENCE_CLASS, presence_key
from .reaping import SharedReaper
from .values import _RUN_COLUMNS, Probe

__all__ = ["CHANNEL", "PostgresDialect", "PostgresStore", "install", "on_conflict"]

logger = logging.getLogger(__name__)

#: The planner settings of a claim's transaction: no sort, so a claim walks the claim
#: index in its order and stops at the rows it takes, whatever the table's statistics
#: say. Left to them, a backlog queued since the last ANALYZE (statistics taken when
#: nothing was pending, then a burst of enqueues) looks like a row or two, and the
#: planner reads every pending task and sorts them to take a few: each claim then
#: costs more the longer the backlog (see tests/integration/test_claim_plan.py).
CLAIM_PLANNER = (("enable_sort", "off"),)
#: ``pg_try_advisory_xact_lock`` key taken by the reaper ("htask" in ASCII).
REAPER_LOCK = 0x6874_6173_6B00
#: The key the pruner takes (install takes ``REAPER_LOCK + 1``).
PRUNER_LOCK = REAPER_LOCK + 2

SCHEDULE = Schedule._meta.db_table
TASK = Task._meta.db_table
NODE = Node._meta.db_table
RUN = Run._meta.db_table
EDGE = Dependency._meta.db_table
BATCH = Batch._meta.db_table

#: The type of each column of a run row (``RunOutcome.columns()``).
_RUN_TYPES = {
    "status": "varchar",
    "function": "varchar",
    "name": "varchar",
    "node": "varchar",
    "attempt": "smallint",
    "scheduled_for": "timestamptz",
    "started_at": "timestamptz",
    "finished_at": "timestamptz",
    "duration": "float8",
    "error": "text",
    "traceback": "text",
    "schedule_id": "bigint",
    "task_id": "bigint",
}
_RUN_TIMES = tuple(name for name in _RUN_COLUMNS if _RUN_TYPES[name] == "timestamptz")
#: Run outcomes as the rows of ``v``, from one JSON parameter and their count (see
#: :func:`_run_rows`), and the insert of the run rows from it. The count, as a LIMIT,
#: tells the planner how many rows there are: it takes a function's for 100, and with
#: so many it read the whole task table to write a few tasks.
_RUN_VALUES = (
    "v AS (SELECT * FROM json_to_recordset(%s::json) AS v("
    + ", ".join(f"{name} {_RUN_TYPES[name]}" for name in _RUN_COLUMNS)
    + ") LIMIT %s)"
)
#: The same for finished tasks, with each one's result (base64; absent: NULL) and
#: whether it writes a run row (absent: it does not, and only the task's fields are
#: given: see :func:`_run_rows`).
_FINISHED_VALUES = _RUN_VALUES.replace(") LIMIT", ", result text, run boolean) LIMIT")
#: The task fields of a finish that writes no run row.
_FINISH_COLUMNS = ("status", "started_at", "finished_at", "error", "traceback", "task_id")
_RUN_INSERT = (
    f"INSERT INTO {RUN} ({', '.join(_RUN_COLUMNS)}) "
    f"SELECT {', '.join(f'v.{name}' for name in _RUN_COLUMNS)} FROM v"
)
#: The presence locks (:mod:`~django_htask.store.presence`) in this database, of the
#: class given as a parameter, in ``pg_locks``.
_PRESENCE_LOCK = (
    "locktype = 'advisory' AND objsubid = 2 AND classid = %s::oid "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
#: Take the node's presence lock unless this session holds it already (class and key
#: twice): a session-level lock counts each taking, and the heartbeat comes every few
#: seconds for as long as the node runs.
_PRESENT = (
    f"CASE WHEN EXISTS (SELECT 1 FROM pg_locks WHERE {_PRESENCE_LOCK} "
    "AND objid = %s::oid AND pid = pg_backend_pid()) "
    "THEN true ELSE pg_try_advisory_lock(%s, %s) END"
)
#: What firing reads of a schedule (the fields of ``ScheduleRow``).
_ROW_SQL = ", ".join(_ROW_FIELDS)


def _run_rows(
    outcomes: list[RunOutcome],
    schedule_id: int | None = None,
    *,
    results: bool = False,
    every_attempt: bool = True,
) -> list[Any]:
    """``outcomes`` as the parameters of ``_RUN_VALUES``: a JSON list of objects keyed
    by column (each outcome's ``columns()``; ``schedule_id`` for every row, if given),
    times in ISO 8601, in the order of ``outcomes``; and their count.

    One parameter, whatever the number of runs: the statement's text and its parameter
    count are the same for every batch. psycopg parses a statement's text for its
    placeholders afresh on every call when it has more than 50 parameters, which a
    ``VALUES`` list of 8 runs (13 parameters each) had: that parsing was a quarter of
    a node's CPU running trivial tasks (a yappi profile).

    With ``results`` (finished tasks, ``_FINISHED_VALUES``), a task's result (bytes)
    is added in base64 (a task that returned None has none), and each end that writes a
    run row (:func:`~django_htask.store.rules.writes_run`, ``every_attempt`` its
    setting) says so; one that writes none gives only the task's fields."""
    rows = []
    for outcome in outcomes:
        if results and not rules.writes_run(outcome, every_attempt):
            columns = {name: getattr(outcome, name) for name in _FINISH_COLUMNS}
            columns["finished_at"] = outcome.finished_at.isoformat()
            begun = outcome.started_at if outcome.start_unwritten else None
            columns["started_at"] = begun.isoformat() if begun is not None else None
        else:
            columns = outcome.columns()
            for name in _RUN_TIMES:
                at = columns[name]
                if at is not None:
                    columns[name] = at.isoformat()
            if results:
                columns["run"] = True
        if schedule_id:
            columns["schedule_id"] = schedule_id
        if results and outcome.result is not None:
            columns["result"] = base64.b64encode(outcome.result).decode("ascii")
        rows.append(columns)
    return [json.dumps(rows), len(rows)]


#: Finished tasks written per statement (a bound on the statement's size).
_FINISH_CHUNK = 1000

#: ``next_run_at`` as microseconds since the epoch: psycopg reads an integer in C,
#: where Django's timestamp loader (a Python subclass) parses each row in Python, most
#: of the cost of loading 100k schedules. Whole seconds and microseconds apart, so it is
#: exact on PostgreSQL 13 too (where extract() gives a ``double``).
_NEXT_RUN_US = (
    "(extract(epoch FROM date_trunc('second', next_run_at AT TIME ZONE 'UTC'))::bigint"
    " * 1000000 + mod(extract(microseconds FROM next_run_at)::bigint, 1000000))"
)
#: Rows fetched at a time when loading every schedule.
_LOAD_CHUNK = 10_000


def install(connection: BaseDatabaseWrapper) -> None:
    """Create (or replace) the version and notify triggers when they are missing or
    outdated, in one transaction.

    Replacing a trigger locks its table against every other statement (an ACCESS
    EXCLUSIVE lock), so nodes already claiming would wait or deadlock: a node starting
    next to running ones finds the triggers current and changes nothing."""
    with connection.cursor() as cursor:
        if current(cursor):
            return
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        # several nodes may start at once: one installs, the others find it done
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [REAPER_LOCK + 1])
        if current(cursor):
            return
        for statement in STATEMENTS:
            cursor.execute(statement)
        cursor.execute(f"COMMENT ON FUNCTION django_htask_notify() IS '{FINGERPRINT}'")
        logger.info("installed the triggers (%s)", FINGERPRINT, extra={"action": "install"})


class _QuietAtomic(FencedAtomic):
    """``transaction.atomic`` that turns the NOTIFY triggers off for its transaction.

    When it opens the transaction (it is not nested in the caller's), it also bounds
    how long the transaction may sit idle: ``idle_in_transaction_session_timeout`` of
    half ``NODE_TIMEOUT``. A node's writes lock its node row first (the fence), so a
    node frozen inside one (SIGSTOP, a VM paused) would otherwise hold that lock for as
    long as it is frozen, and the other nodes' reaper, which must write that row to
    declare it dead, would wait for it as long: the frozen node would never be
    declared dead. With the bound, PostgreSQL ends the frozen node's session, its
    transaction rolls back, and the reaper goes on; the node, when it resumes, finds
    its connection gone, reconnects, and its fence says it was declared dead.

    ``planner`` settings are set by the same first statement, for the transaction
    (:data:`CLAIM_PLANNER` for a claim's), and, given a ``fence``, that node is fenced
    by it (the node's row read and share-locked, with a ``probe`` answered: see
    :class:`~django_htask.store.database.FencedAtomic`): no round trip is added."""

    def __init__(
        self,
        using: str,
        planner: tuple[tuple[str, str], ...] = (),
        fence: str | None = None,
        probe: Probe | None = None,
    ) -> None:
        super().__init__(using, fence, lock=" FOR SHARE", probe=probe)
        #: Planner settings for the transaction, set by the same first statement.
        self.planner = planner

    def _columns(self, connection: BaseDatabaseWrapper) -> tuple[list[str], list[Any]]:
        settings = [(QUIET, "on")]
        if not connection.in_atomic_block:  # the outermost block: the transaction's own
            idle_ms = round(get_settings().node_timeout * 500)  # 0: no bound
            settings.append(("idle_in_transaction_session_timeout", str(idle_ms)))
        settings += self.planner
        return ["set_config(%s, %s, true)"] * len(settings), [v for s in settings for v in s]


# -- the dialect: inserting tasks ------------------------------------------------------
#: The PostgreSQL type of the array :meth:`PostgresDialect.insert_rows` passes for each
#: field a task's rows vary in (a payload goes as hex text).
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
#: What :meth:`PostgresDialect.insert_rows` selects for a column of its arrays, if not
#: the column.
_FROM_ARRAY = {"payload": "decode(v.payload, 'hex')"}


class PostgresDialect(Dialect):
    """What PostgreSQL does its own way (:mod:`.dialect`)."""

    def conflict_clause(self, connection: BaseDatabaseWrapper, conflict: Conflict) -> str:
        return on_conflict(connection, conflict)

    def notify(self, store: Connected, payload: str) -> None:
        """``pg_notify`` on the nodes' channel: sent when the transaction commits."""
        with store.connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, payload])

    # -- transactions and the fence -----------------------------------------------------
    fence_lock = " FOR SHARE"

    def atomic(self, store: Connected) -> transaction.Atomic:
        return _QuietAtomic(store.using)

    def fenced(
        self,
        store: Fencing,
        node_id: str,
        *,
        claim: bool = False,
        probe: Probe | None = None,
        running_ids: Iterable[int] = (),
    ) -> _QuietAtomic:
        planner = CLAIM_PLANNER if claim else ()
        return _QuietAtomic(store.using, planner, fence=node_id, probe=probe)

    # -- the claim -----------------------------------------------------------------------
    def lock_gates(self, store: Connected, keys: list[str]) -> bool:
        """Take a transaction-level advisory lock for each of ``keys``, in the order of
        their 64-bit hashes (every claim takes them in that order: no deadlock)."""
        hashes = sorted({gate_key(key) for key in keys})
        with store.connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_advisory_xact_lock(k)) FROM unnest(%s::bigint[]) AS k", [hashes]
            )
        return True

    def start_in(self, store: TaskStore, claim: values.Claim) -> list[StartedTask]:
        """As the generic one, in one statement; rows another node is claiming are
        skipped (``FOR UPDATE SKIP LOCKED``), so nodes starting at once never wait."""
        return store._start_returning(claim, lock=" FOR UPDATE SKIP LOCKED")

    def buffer_in(self, store: TaskStore, claim: values.Claim) -> list[StartedTask]:
        """As :meth:`start_in`, for the node's buffer: no start time written."""
        return store._start_returning(claim, lock=" FOR UPDATE SKIP LOCKED", buffered=True)

    def record_in(
        self,
        store: TaskStore,
        node_id: str,
        outcomes: list[RunOutcome],
        still_running: set[int] | None = None,
    ) -> dict[int, tuple[str, datetime]]:
        """As the generic one, with finished tasks written in one statement, and the
        schedules' last statuses written only where no other transaction holds the row
        (the others are returned, for :meth:`record_late`)."""
        finished = [o for o in outcomes if o.task_id is not None and o.retry_at is None]
        others = [o for o in outcomes if o.task_id is None or o.retry_at is not None]
        plain = [o for o in finished if not o.follow]
        followed = [o for o in finished if o.follow]
        for i in range(0, len(plain), _FINISH_CHUNK):
            chunk = plain[i : i + _FINISH_CHUNK]
            if self._finish_tasks(store, node_id, chunk, guard=True) < len(chunk):
                refused = store._refused(node_id, [o.task_id for o in chunk if o.task_id])
                followed += [o for o in chunk if o.task_id in refused]
        for i in range(0, len(followed), _FINISH_CHUNK):
            self._finish_tasks(store, node_id, followed[i : i + _FINISH_CHUNK])
        store._record_runs(node_id, others, still_running)
        if followed:
            ids = [o.task_id for o in followed if o.task_id is not None]
            store._follow_ends(ids, max(o.finished_at for o in followed))
        statuses = values.last_statuses(outcomes)
        busy = self.set_statuses(store, statuses, wait=False)
        return {schedule_id: statuses[schedule_id] for schedule_id in busy}

    def set_statuses(
        self, store: Connected, statuses: dict[int, tuple[str, datetime]], *, wait: bool
    ) -> list[int]:
        """In one statement: the rows locked (``SKIP LOCKED`` unless ``wait``), then
        written where no later run wrote them (see :meth:`Dialect.record_late
        <django_htask.store.dialect.Dialect.record_late>`)."""
        if not statuses:
            return []
        ids = list(statuses)
        names = [statuses[i][0] for i in ids]
        times = [statuses[i][1] for i in ids]
        lock = "FOR UPDATE" if wait else "FOR UPDATE SKIP LOCKED"
        with store.connection.cursor() as cursor:
            cursor.execute(
                "WITH v(id, status, at) AS ("
                " SELECT * FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[])"
                f"), locked AS (SELECT id FROM {SCHEDULE} WHERE id = ANY(%s::bigint[]) "
                f"ORDER BY id {lock}"
                f"), written AS (UPDATE {SCHEDULE} AS s SET last_status = v.status, "
                "last_run_at = v.at FROM v, locked WHERE s.id = v.id AND s.id = locked.id "
                "AND (s.last_run_at IS NULL OR s.last_run_at <= v.at) RETURNING s.id"
                ") SELECT id FROM locked",
                [ids, names, times, ids],
            )
            done = {row[0] for row in cursor.fetchall()}
        return [] if wait else [i for i in ids if i not in done]

    def _finish_tasks(
        self, store: TaskStore, node_id: str, outcomes: list[RunOutcome], *, guard: bool = False
    ) -> int:
        """Write the finished tasks this node still runs (and, with ``guard``, whose end
        nothing follows: ``followed`` false, see ``TaskRows._write_plain_ends``), and a run
        row for each that writes one (:func:`~django_htask.store.rules.writes_run`),
        in one statement; return how many. The outcomes are the rows of ``v`` (one JSON
        parameter), the task update returns the ids it wrote, and the run rows are
        inserted for those ids only. (The ORM's ``bulk_create`` of the run rows cost
        more CPU than the trivial jobs they record, on the control thread every claim
        waits for.)

        The tasks are found by id only: whether this node still runs one is checked
        with ``IS NOT DISTINCT FROM``, which no index serves. Written with ``=``, the
        planner may read them through an index that begins with the status instead, every
        task marked running since the last vacuum, when stale statistics make those
        look like a row or two (see :data:`CLAIM_PLANNER`)."""
        every_attempt = get_settings().record_every_attempt
        runs = ""
        if every_attempt or any(rules.writes_run(o, every_attempt) for o in outcomes):
            runs = f", runs AS ({_RUN_INSERT} JOIN done ON done.id = v.task_id WHERE v.run)"
        # rules.ended_task's fields of a finish, as SQL of their own (one statement).
        with store.connection.cursor() as cursor:
            cursor.execute(
                f"WITH {_FINISHED_VALUES}, done AS ("
                f"UPDATE {TASK} AS t SET status = v.status, finished_at = v.finished_at, "
                "locked_by = NULL, lease_expires_at = NULL, last_error = v.error, "
                "traceback = v.traceback, result = decode(v.result, 'base64'), "
                # A task that waited in the node's buffer has its start written here.
                "started_at = COALESCE(t.started_at, v.started_at) FROM v "
                "WHERE t.id = v.task_id "
                "AND (t.status, t.locked_by) IS NOT DISTINCT FROM (%s, %s)"
                f"{' AND NOT t.followed' if guard else ''} RETURNING t.id"
                f"){runs} SELECT count(*) FROM done",
                [
                    *_run_rows(outcomes, results=True, every_attempt=every_attempt),
                    TaskStatus.RUNNING,
                    node_id,
                ],
            )
            row = cursor.fetchone()
        return int(row[0]) if row else 0

    def insert_rows(self, insert: RowInsert) -> None:
        """The varying columns as arrays, ``unnest`` into rows: a statement of a few
        parameters whatever its rows (psycopg parses a query's placeholders in Python,
        which a 20,000-parameter ``VALUES`` list spends most of its time on)."""
        connection, rows, varying = insert.connection, insert.rows, insert.varying
        select = ", ".join(
            _FROM_ARRAY.get(f.attname, f"v.{f.attname}") if f.attname in varying else "%s"
            for f in insert.fields
        )
        arrays = ", ".join(f"%s::{_ARRAY_TYPES[name]}" for name in varying)
        sql = (
            f"{insert.head()} SELECT {select} FROM unnest({arrays}) AS v({', '.join(varying)})"
            f"{insert.conflict}{insert.returning()}"
        )
        constants = [insert.fixed[f.attname] for f in insert.fields if f.attname not in varying]
        literal_of = [_LITERALS[_ARRAY_TYPES[name]] for name in varying]

        def params_of(batch: list[tuple[Any, ...]]) -> list[Any]:
            columns = zip(*batch, strict=True)
            return [*constants, *(make(c) for make, c in zip(literal_of, columns, strict=True))]

        step = min(insert.batch_size, len(rows))
        batches = [rows[start : start + step] for start in range(0, len(rows), step)]
        with connection.cursor() as cursor:
            pg = cursor.cursor.connection
            if len(batches) == 1 or not _pipelined(connection, pg):
                for batch in batches:
                    cursor.execute(sql, params_of(batch))
                    insert.on_batch(batch, cursor.fetchall())
                return
            _insert_pipelined(connection, pg, sql, batches, params_of, insert.on_batch)

    # -- pruning -------------------------------------------------------------------------
    def try_lock_pruner(self, store: Connected) -> bool:
        return self._try_lock(store, PRUNER_LOCK)

    def id_among(self, select: str) -> str:
        """As an array the sub-select fills once (an InitPlan). As ``id IN
        (select)``, the planner may rescan the sub-select for each row of the outer
        table (stale statistics make that table look like a row), and each rescan of a
        ``… LIMIT n FOR UPDATE SKIP LOCKED`` skips the rows the statement already wrote
        and takes n more: a claim of 2 started 5 tasks
        (tests/integration/test_batch_limits.py)."""
        return f"id = ANY(ARRAY({select}))"

    def delete_expired(
        self, store: Pruning, cursor: Any, condition: str, params: list[Any], limit: int
    ) -> tuple[int, int]:
        """As the generic one, in one statement: the tasks deleted return their ids and
        their runs and edges are deleted by them (the ids as one array: read by the
        index on ``task_id``, whatever the planner guesses of their number); then
        their batches, if spent, in a statement of their own (there are batches)."""
        doomed_ids = "ARRAY(SELECT id FROM doomed)"
        cursor.execute(
            f"WITH doomed AS (DELETE FROM {TASK} WHERE "
            + self.id_among(f"{expired_ids(condition)} FOR UPDATE SKIP LOCKED")
            + " AND finished_at IS NOT NULL RETURNING id, batch_id), "
            f"runs AS (DELETE FROM {RUN} WHERE task_id = ANY({doomed_ids}) RETURNING 1), "
            f"edges AS (DELETE FROM {EDGE} WHERE task_id = ANY({doomed_ids})) "
            "SELECT (SELECT count(*) FROM doomed), (SELECT count(*) FROM runs), "
            "ARRAY(SELECT DISTINCT batch_id FROM doomed WHERE batch_id IS NOT NULL)",
            [*params, limit],
        )
        row = cursor.fetchone()
        assert row is not None
        if row[2]:
            cursor.execute(
                f"DELETE FROM {BATCH} WHERE {SPENT_BATCH_SQL} AND id = ANY(%s::bigint[])",
                [list(row[2])],
            )
        return int(row[0]), int(row[1])

    def _try_lock(self, store: Connected, key: int) -> bool:
        """Take the advisory lock ``key`` until the transaction ends, without waiting;
        whether it was taken."""
        with store.connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [key])
            row = cursor.fetchone()
        return row is not None and bool(row[0])

    # -- nodes and reaping ---------------------------------------------------------------
    def hold_presence(self, store: Connected, node_id: str) -> None:
        key = presence_key(node_id)
        with store.connection.cursor() as cursor:
            cursor.execute(f"SELECT {_PRESENT}", [PRESENCE_CLASS, key, PRESENCE_CLASS, key])

    def lock_reaper(self, store: Connected) -> None:
        with store.connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [REAPER_LOCK])

    def try_lock_reaper(self, store: Connected) -> bool:
        return self._try_lock(store, REAPER_LOCK)

    def reaped(self, store: Connected, count: int, dead: list[str]) -> None:
        """Tell the other nodes of the tasks handed back and the nodes gone."""
        if count > len(dead):
            self.notify(store, "task")
        if dead:
            self.notify(store, "node")

    # -- missing tables ------------------------------------------------------------------
    no_such_table = re.compile(r'relation "(?:\w+\.)?(\w+)" does not exist')

    # -- schedules and notices -----------------------------------------------------------
    def horizon(self, cursor: CursorWrapper) -> int:
        """Every transaction below this id has ended: its versions are all visible."""
        cursor.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        row = cursor.fetchone()
        assert row is not None
        return int(row[0]) * PER_XACT - 1

    def claim_occurrence(self, store: Firing, occurrence: values.Occurrence) -> list[int] | None:
        """The compare-and-set and the run rows in one statement: the runs are inserted
        only if the schedule's update took its row."""
        node_id, row, next_run_at, now, runs = occurrence
        sets = "next_run_at = %s"
        params: list[Any] = [next_run_at]
        if runs:
            sets += ", last_run_at = %s, last_status = %s"
            params += [now, runs[-1].status]
        claim = (
            f"UPDATE {SCHEDULE} SET {sets} WHERE id = %s AND next_run_at = %s "
            "AND version = %s AND enabled RETURNING id"
        )
        params += [row.id, row.next_run_at, row.version]
        with store._fenced(node_id), store.connection.cursor() as cursor:
            if not runs:
                cursor.execute(claim, params)
                return [] if cursor.fetchall() else None
            cursor.execute(
                f"WITH claimed AS ({claim}), {_RUN_VALUES} "
                f"{_RUN_INSERT} CROSS JOIN claimed RETURNING id",
                [*params, *_run_rows(runs, schedule_id=row.id)],
            )
            # Ids are drawn in the order the rows are inserted: the order of ``runs``.
            ids = sorted(r[0] for r in cursor.fetchall())
        return ids or None

    def listen(self, store: Connected, to: values.ListenTo) -> Listener:
        """A started :class:`~django_htask.store.listen.Listener` on the channel the
        triggers notify, with a connection of its own."""
        on_notify, on_reconnect, retry, retry_max, name = to
        params = connection_params(store.using)

        def connect() -> Any:
            import psycopg  # noqa: PLC0415

            return psycopg.connect(**params, autocommit=True)

        listener = Listener(
            connect,
            on_notify,
            on_reconnect=on_reconnect,
            retry=retry,
            retry_max=retry_max,
            name=name,
        )
        listener.start()
        return listener


def on_conflict(connection: BaseDatabaseWrapper, conflict: Conflict) -> str:
    """``ON CONFLICT`` on the pending-key index doing ``conflict``; with nothing to
    change, a no-op update, which returns the pending row (and locks it until the
    caller commits, so it stays pending meanwhile)."""
    qn = connection.ops.quote_name
    sets = [f"{qn(name)} = EXCLUDED.{qn(name)}" for name in conflict.copied]
    sets += [f"{qn(name)} = {value}" for name, value in conflict.reset]
    sets = sets or [f"{qn('key')} = EXCLUDED.{qn('key')}"]
    return f" ON CONFLICT ({qn('key')}) WHERE {KEY_PREDICATE} DO UPDATE SET {', '.join(sets)}"


def _insert_pipelined(
    connection: BaseDatabaseWrapper,
    pg: Any,
    sql: str,
    batches: list[list[tuple[Any, ...]]],
    params_of: Callable[[list[tuple[Any, ...]]], list[Any]],
    on_batch: OnBatch,
) -> None:
    """Execute ``sql`` for each of ``batches`` in psycopg's pipeline: a batch is sent
    before the rows of the one before are made into tasks, and its literals are made
    before the one before is fetched, so that the caller and the server work at once
    (a fifth more tasks a second)."""
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
    """Whether :meth:`PostgresDialect.insert_rows` sends its statements in psycopg's
    pipeline mode: psycopg 3 on a libpq that has it, and no one watching the queries
    (Django's query log, with DEBUG or in tests, and ``execute_wrappers``: the
    pipeline's statements go past Django's cursor, so those would not see them)."""
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


# Array literals, made here, one string an array: psycopg's dumper of a list checks and
# quotes each element in Python (a regular expression each), a third of schedule_many's
# time a task.


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


class _EndNotices:
    """The ``NOTIFY`` of one task's end, heard on a connection that ``LISTEN``s on
    :data:`~django_htask.store.listen.ENDED` (psycopg 3: notices that come during a
    query are kept for the next wait)."""

    def __init__(self, pg: Any, token: str, wrapper: BaseDatabaseWrapper) -> None:
        self._pg = pg
        self._token = token
        self._wrapper = wrapper

    def clear(self) -> None:
        """Drop the notices heard so far."""
        with self._wrapper.wrap_database_errors:
            for _notice in self._pg.notifies(timeout=0):
                pass

    def wait(self, timeout: float) -> bool:
        """Whether the task's end was announced within ``timeout`` seconds."""
        with self._wrapper.wrap_database_errors:
            for notice in self._pg.notifies(timeout=timeout):
                if notice.payload == self._token:
                    return True
        return False


class PostgresStore(DatabaseStore):
    """The store for several nodes on one PostgreSQL database (see the module)."""

    vendor = "postgresql"
    dialect = PostgresDialect()
    supports_several_nodes = True

    def notify_nodes(self) -> None:
        """``NOTIFY`` on the channel the nodes listen to."""
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, 'task')", [CHANNEL])

    def install(self) -> None:
        install(self.connection)

    @contextlib.contextmanager
    def watch_end(self, token: str) -> Iterator[Notices | None]:
        """The notices of the task's end, heard on the caller's own connection (it
        ``LISTEN``s on :data:`~django_htask.store.listen.ENDED` for the time of the
        ``with``), once the task is marked ``waited`` (the mark is quiet: no node wakes
        for it). The caller reads the task after this: an end committed before the
        mark is seen by that read, one after it is announced. None with a driver that
        cannot wait for a notice (psycopg 2): the caller reads at intervals."""
        self.connection.ensure_connection()
        pg = self.connection.connection
        if not callable(getattr(pg, "notifies", None)):
            yield None
            return
        with self.connection.cursor() as cursor:
            cursor.execute(f"LISTEN {ENDED}")
        notices = _EndNotices(pg, token, self.connection)
        try:
            with self._atomic():
                Task.objects.using(self.using).filter(token=token, waited=False).update(waited=True)
            yield notices
        finally:
            with contextlib.suppress(DatabaseError), self.connection.cursor() as cursor:
                cursor.execute(f"UNLISTEN {ENDED}")
            with contextlib.suppress(DatabaseError):
                notices.clear()  # none left for the connection's next user

    def estimate_rows(self, rows: QuerySet[Any]) -> int | None:
        """The planner's estimate of the rows of ``rows`` (``EXPLAIN``: nothing read)."""
        sql, params = rows.query.sql_with_params()
        with self.connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            row = cursor.fetchone()
        plan = row[0] if row is not None else None
        if isinstance(plan, str):
            plan = json.loads(plan)
        try:
            return int(plan[0]["Plan"]["Plan Rows"])  # type: ignore[index]
        except (TypeError, LookupError, ValueError):
            return None

    # -- versions --------------------------------------------------------------------
    def load_schedules(self) -> tuple[list[ScheduleRef], int]:
        """Every enabled schedule with a next run, read in chunks (a server-side cursor,
        unless ``DISABLE_SERVER_SIDE_CURSORS``), and the horizon seen before reading."""
        with self.connection.cursor() as cursor:
            since = self.dialect.horizon(cursor)
        conn = self.connection
        chunked = not conn.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS")
        reader = RefReader(from_us)
        refs: list[ScheduleRef] = []
        # one snapshot; reads only
        with (
            transaction.atomic(using=self.using),
            conn.chunked_cursor() if chunked else conn.cursor() as cursor,
        ):
            cursor.execute(
                f"SELECT id, {_NEXT_RUN_US}, version, queue_name FROM {SCHEDULE} "
                "WHERE enabled AND next_run_at IS NOT NULL"
            )
            while rows := cursor.fetchmany(_LOAD_CHUNK):
                refs += reader.loaded(rows)
        return refs, since

    def changed_schedules(self, since: int) -> tuple[list[ScheduleRef], int]:
        """Schedules whose version is above ``since``; the value returned is the horizon
        seen before reading, so a transaction still open now is read again next time."""
        with self.connection.cursor() as cursor:
            horizon = self.dialect.horizon(cursor)
            cursor.execute(
                f"SELECT id, {_NEXT_RUN_US}, version, enabled, queue_name FROM {SCHEDULE} "
                "WHERE version > %s ORDER BY version",
                [since],
            )
            refs = RefReader(from_us).changed(cursor.fetchall())
        return refs, max(since, horizon)

    # -- nodes -----------------------------------------------------------------------

    def heartbeat(
        self,
        node_id: str,
        now: datetime,
        lease_until: datetime,
        stuck: int = 0,
        renew_below: datetime | None = None,
    ) -> int:
        """Record the heartbeat and renew this node's leases, and hold the node's
        presence on this connection (a session-level advisory lock, taken once: see
        :mod:`~django_htask.store.presence`). A node declared dead stays dead:
        NodeFenced (its work was handed to the others)."""
        key = presence_key(node_id)
        with self._atomic(), self.connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {NODE} AS n SET last_heartbeat = %s, stuck_threads = %s FROM ("
                f" SELECT id, last_heartbeat FROM {NODE} WHERE id = %s FOR UPDATE"
                ") AS o WHERE n.id = o.id AND n.stopped_at IS NULL "
                f"RETURNING o.last_heartbeat, {_PRESENT}",
                [now, stuck, node_id, PRESENCE_CLASS, key, PRESENCE_CLASS, key],
            )
            row = cursor.fetchone()
            if row is None:
                self._fence(node_id)  # raises: declared dead, or gone
            renewed = self._renew_leases(node_id, lease_until, renew_below)
        assert row is not None
        self._reaper.heartbeat_after(now - row[0])
        return renewed

    def absent(self, node_ids: list[str]) -> list[str]:
        """The nodes whose presence lock no session of this database holds."""
        if not node_ids:
            return []
        keys = {presence_key(node_id): node_id for node_id in node_ids}
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT objid::bigint FROM pg_locks WHERE {_PRESENCE_LOCK} AND granted "
                "AND objid = ANY(%s::bigint[]::oid[])",
                [PRESENCE_CLASS, list(keys)],
            )
            held = {int(key) for (key,) in cursor.fetchall()}
        return sorted(node_id for key, node_id in keys.items() if key not in held)

    @functools.cached_property
    def _reaper(self) -> SharedReaper:
        return SharedReaper()

    def reap(self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy) -> int:
        """One node at a time (an advisory lock), after a pause when this node's own
        heartbeat came late (:mod:`~django_htask.store.reaping`); the other nodes are
        told."""
        return self._reaper.reap(self, node_id, now, dead_before, retry)

    # -- firing ------------------------------------------------------------------------
    # A fire reads the schedule, may ask whether its runs go on elsewhere, and claims the
    # occurrence: each in one statement of SQL here, where the ORM's building of the
    # queries cost more CPU than the database's work (about 2 ms an occurrence).
    def get_schedule(self, schedule_id: int) -> ScheduleRow | None:
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT {_ROW_SQL} FROM {SCHEDULE} WHERE id = %s", [schedule_id])
            values = cursor.fetchone()
        return schedule_row(values)

    def running_elsewhere(self, schedule_id: int, node_id: str, dead_before: datetime) -> list[str]:
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT DISTINCT node FROM {RUN} WHERE schedule_id = %s AND status = %s "
                f"AND node <> %s AND node IN (SELECT id FROM {NODE} WHERE {LIVE_NODE_SQL}) "
                "ORDER BY node",
                [schedule_id, RunStatus.RUNNING, node_id, dead_before],
            )
            return [node for (node,) in cursor.fetchall()]
