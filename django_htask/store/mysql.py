"""What is particular to MySQL and MariaDB: the version triggers, row locks for the
claims, the reaper and the locks and limits, and the isolation level they need.

MariaDB 10.6 or later, MySQL 8.0 or later (both have ``FOR UPDATE SKIP LOCKED``).
Several nodes may share a database, as on PostgreSQL, but there is no ``LISTEN``: a
node sees an edit, a task handed back or a node gone at its next poll or heartbeat.

Isolation
    The node's connection must run READ COMMITTED, Django's default on MySQL (the
    ``isolation_level`` option): a claim of a lock counts the running holders again
    once it holds the lock's row (below), and only READ COMMITTED lets that read see
    what the claim before it committed. Under REPEATABLE READ the count would come
    from the snapshot of the transaction's first read, taken before the lock: two
    claims could both start a task of one lock. A node refuses to start otherwise
    (:meth:`MySQLStore.check_migrated`). The compare-and-set of an occurrence and the
    claims' ``UPDATE`` re-read the row they lock, at every level.

Versions
    As on SQLite, a schedule's ``version`` comes from a one-row counter table, bumped
    by ``BEFORE INSERT`` and ``BEFORE UPDATE`` triggers on every write of a schedule
    (the ORM's ``save()``, ``QuerySet.update()``, raw SQL); an update that sets
    ``version`` itself is left alone, so never write that column. The counter's row
    stays locked until the writing transaction ends, so versions are committed in the
    order they are handed out and a node may read "above the highest version seen".
    The price: transactions that edit schedules wait for each other. A node's writes
    of last statuses leave the version alone (:data:`STATUS_ONLY`) and skip the rows
    another transaction holds (written later: see
    :meth:`~django_htask.store.dialect.Dialect.record_late`), so a node never deadlocks
    with the admin editing several schedules.
Claims
    Due tasks are read ``FOR UPDATE SKIP LOCKED``, then started by id, in one
    transaction: claims made at once take disjoint tasks without waiting.
Keys
    No partial index: a virtual column holds a pending task's key (NULL otherwise) and
    a unique index on it is the pending-key index. A keyed call is one ``INSERT … ON
    DUPLICATE KEY UPDATE`` a row (no ``RETURNING`` there), which locks the pending row
    it meets as PostgreSQL's ``ON CONFLICT`` does.
Locks and limits
    Row locks of the counter table stand for PostgreSQL's advisory locks: a claim of
    tasks with a lock or a limit locks ``FOR UPDATE`` the rows ``gate:0000`` to
    ``gate:1023`` that its locks, functions, flows (rate limits and limits per key:
    django_htask/flow.py) and limited queues hash to (:data:`GATE_SLOTS`; a
    collision only makes two gates wait for each other), in one statement in key
    order, then counts the holders again. InnoDB releases them at commit or rollback,
    as PostgreSQL's transaction-level advisory locks, and detects a deadlock among
    them (a session's ``GET_LOCK`` would outlive a failed transaction, and a wait
    between it and a row lock is no deadlock InnoDB sees).
Reaping
    One reaper at a time: the reaper locks the counter's ``reaper`` row ``FOR UPDATE
    SKIP LOCKED`` (no row: another node is reaping; see
    :mod:`~django_htask.store.reaping`); a node starting under the id of one that did
    not stop waits for that row instead.
Presence
    The connection that registers a node and its heartbeat's hold a named lock
    (``GET_LOCK``) named after the node and the database (:data:`PRESENCE`,
    :mod:`~django_htask.store.presence`); the server releases it when they end, at
    once for a process killed. The others ask ``IS_USED_LOCK``
    (:meth:`MySQLStore.absent`).
Fencing
    A node's writes read its own node row ``LOCK IN SHARE MODE`` first (both MySQL and
    MariaDB understand it) and check it is not declared dead. The reaper declares a
    node dead with an ``UPDATE`` of that row, which waits for the shared lock: a write
    in flight commits first, and the node's writes after it are refused. InnoDB then
    reads the row again, so a heartbeat committed meanwhile keeps the node alive. The
    heartbeat locks its row ``FOR UPDATE`` at once (no shared lock to upgrade, which
    would deadlock with a reaper waiting on it). A node frozen inside a write would
    hold that row lock while it is frozen: on MariaDB the node's own connections end
    after half ``NODE_TIMEOUT`` idle in a transaction (``idle_transaction_timeout``,
    :class:`_BoundedAtomic`), as on PostgreSQL; MySQL has no such bound, so there the
    reaper waits (``innodb_lock_wait_timeout`` at a time) until the node resumes.

Creating a trigger needs the ``TRIGGER`` privilege; with binary logging on, also
``SUPER`` or ``log_bin_trust_function_creators = 1``. :func:`install` runs after every
``migrate`` and when a node starts; it is idempotent.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import QuerySet

from django_htask.conf import get_settings
from django_htask.db import holds_tables
from django_htask.keys import KEY_MAX_LENGTH
from django_htask.models import (
    GATED_INDEX,
    GATED_PREDICATE,
    KEY_INDEX,
    Node,
    RateSlot,
    Run,
    RunStatus,
    Schedule,
    Task,
    TaskStatus,
)
from django_htask.querysets import (
    CLAIMABLE_SQL,
    EXPIRED_RUN_SQL,
    claimable_params,
    plain_task_sql,
)
from django_htask.retry import RetryPolicy

from . import rules, values
from .base import StartedTask
from .database import (
    STARTED_FIELDS,
    Column,
    DatabaseStore,
    FencedAtomic,
    _as_datetime,
    check_fence,
    gate_key,
    served_sql,
    set_sql,
    started_task,
)
from .dialect import GUARD, Conflict, Connected, Dialect, Fencing, RowInsert, TaskStore
from .reaping import SharedReaper
from .values import Probe, TaskEnd

__all__ = [
    "GATE_SLOTS",
    "MySQLDialect",
    "MySQLStore",
    "add_gated_column",
    "add_pending_key",
    "drop_gated_column",
    "drop_pending_key",
    "install",
    "on_mysql",
]

COUNTER = "django_htask_counter"
SCHEDULE = Schedule._meta.db_table
TASK = Task._meta.db_table
RUN = Run._meta.db_table
NODE = Node._meta.db_table
SLOT = RateSlot._meta.db_table
#: The name of a node's presence lock (:mod:`~django_htask.store.presence`), from its id
#: (the parameter) and the session's database: named locks belong to the whole server.
PRESENCE = "CONCAT('htask-node-', SHA1(CONCAT(DATABASE(), ':', %s)))"
#: Bytes the tasks' ends one statement writes may reach (:meth:`MySQLDialect.write_ends`):
#: well under ``max_allowed_packet`` (16 MiB by default on MariaDB, 64 on MySQL 8),
#: for results go as hex (twice their size) and texts may take 4 bytes a character.
#: An end over it goes alone, as every end did before they were batched.
_ENDS_BYTES = 4 << 20


#: Ends one statement writes at most: each field they differ in is a ``CASE`` on the
#: id, searched in order for each row.
_ENDS_ROWS = 100
#: An end's fields (:meth:`MySQLDialect.write_ends`): the column (the field of
#: :class:`TaskEnd`), and how its value is written (``{}``: the parameter).
_END_COLUMNS = (
    ("status", "{}"),
    ("run_at", "COALESCE({}, run_at)"),
    ("finished_at", "{}"),
    ("last_error", "{}"),
    ("traceback", "{}"),
    ("result", "UNHEX({})"),
    ("started_at", "COALESCE(started_at, {})"),
)


def _end_size(end: TaskEnd) -> int:
    """The most bytes an end (:meth:`MySQLDialect.write_ends`) can take in a statement."""
    return (
        100
        + 4 * (len(end.last_error or "") + len(end.traceback or ""))
        + 2 * len(end.result or b"")
    )


def _batches(ends: list[TaskEnd]) -> list[list[TaskEnd]]:
    """``ends`` in order, cut so that none but a single end passes :data:`_ENDS_BYTES`,
    and none holds more than :data:`_ENDS_ROWS` ends."""
    batches: list[list[TaskEnd]] = []
    size = _ENDS_BYTES
    for end in ends:
        grown = size + _end_size(end)
        if grown > _ENDS_BYTES or len(batches[-1]) >= _ENDS_ROWS:
            batches.append([end])
            size = _end_size(end)
        else:
            batches[-1].append(end)
            size = grown
    return batches


#: The counter's row the reaper locks.
REAPER = "reaper"
#: The counter's row the pruner locks.
PRUNER = "pruner"
#: How many counter rows the locks and functions of claims hash to (``gate:0000`` …).
GATE_SLOTS = 1024
#: The rows :func:`install` makes in the counter table besides the version's.
LOCK_ROWS = (REAPER, PRUNER, *(f"gate:{slot:04d}" for slot in range(GATE_SLOTS)))
#: The isolation level a node's connection must run at (see the module), as the server
#: names it.
ISOLATION = "READ-COMMITTED"


def gate_row(key: str) -> str:
    """The counter's row that claims of the lock or function ``key`` lock."""
    return f"gate:{gate_key(key) % GATE_SLOTS:04d}"


#: A virtual column, the key of a pending task (NULL otherwise), and a unique index on
#: it: MySQL and MariaDB have no partial index, so this is the pending-key index there
#: (named as it is elsewhere, so a clash reads the same). Not a field of the model:
#: migration 0009 adds both (:func:`add_pending_key`), and inserts never name the column.
PENDING_KEY = "htask_pending_key"
#: Generated column, 1 for a pending task with a lock or a limit (or a rate limit), NULL
#: otherwise, indexed in the claim's order: the gated tasks' partial index elsewhere
#: (``GATED_INDEX``, named so here too). Without it, a claim's question "are gated
#: tasks due?" read every pending task, so long that the node's own heartbeat waited
#: behind it. Stored, not virtual: while another transaction has uncommitted changes to
#: rows of an index on a virtual column, InnoDB's consistent reads through that index
#: (MariaDB 10.11) miss its rows: a claim would see no gated task while another node's
#: claim is in flight. Migration 0014 adds it, 0018 redefines it, 0024
#: stores it (:func:`add_gated_column`); inserts never name it.
GATED_COLUMN = "htask_gated"


#: The hint of a statement that finds tasks by id and checks more of their columns
#: (``id IN (…) AND status = …``): without it, MariaDB's optimizer weighs every index on
#: those columns for each statement, and took the holders' index when a node held many
#: tasks, reading them all (0.9 ms a statement against 0.3).
BY_ID = " FORCE INDEX (PRIMARY)"
#: A claim's candidates (:meth:`MySQLDialect.start_in`): so many per task it wants, and
#: so many more, for the claims of other nodes made at the same time.
CANDIDATES = 4
SPARE = 16
#: A task without a lock or a limit (``PLAIN_TASK_SQL``), as MySQL quotes it.
MYSQL_PLAIN = plain_task_sql(lambda name: f"`{name}`")

#: Session variable set while a node writes schedules' last statuses: the update
#: trigger leaves the version alone then (see :meth:`MySQLDialect.set_statuses`).
STATUS_ONLY = "@django_htask_status_only"

_BUMP = (
    f"UPDATE {COUNTER} SET value = value + 1 WHERE name = 'schedule'; "
    f"SET NEW.version = (SELECT value FROM {COUNTER} WHERE name = 'schedule');"
)

#: The version triggers by name: what each is created as.
TRIGGERS = {
    f"{SCHEDULE}_version_insert": (f"BEFORE INSERT ON {SCHEDULE} FOR EACH ROW BEGIN {_BUMP} END"),
    f"{SCHEDULE}_version_update": (
        f"BEFORE UPDATE ON {SCHEDULE} FOR EACH ROW "
        f"BEGIN IF NEW.version = OLD.version AND {STATUS_ONLY} IS NULL THEN {_BUMP} END IF; END"
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
        # Counted first: an INSERT IGNORE meeting a row a claim holds waits for it.
        cursor.execute(
            f"SELECT COUNT(*) FROM {COUNTER} WHERE name IN (%s, %s) OR name LIKE %s",
            [REAPER, PRUNER, "gate:%"],
        )
        row = cursor.fetchone()
        if row is None or row[0] < len(LOCK_ROWS):
            cursor.execute(
                f"INSERT IGNORE INTO {COUNTER} (name, value) VALUES "
                + ", ".join(["(%s, 0)"] * len(LOCK_ROWS)),
                list(LOCK_ROWS),
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


def on_mysql(
    schema_editor: BaseDatabaseSchemaEditor, step: Callable[[BaseDatabaseWrapper], None]
) -> None:
    """A migration's MySQL/MariaDB step (:func:`add_pending_key`,
    :func:`add_gated_column` and their undoing) on the schema editor's connection: only
    on MySQL/MariaDB, and only where the scheduler's tables are (the routers say)."""
    connection = schema_editor.connection
    if connection.vendor == "mysql" and holds_tables(connection.alias):
        step(connection)


def add_pending_key(connection: BaseDatabaseWrapper) -> None:
    """Add :data:`PENDING_KEY` and its unique index (migration 0009, with ``key``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {TASK} ADD COLUMN {PENDING_KEY} varchar({KEY_MAX_LENGTH})"
            f" AS (IF(status = 'pending', `key`, NULL)) VIRTUAL,"
            f" ADD UNIQUE INDEX {KEY_INDEX} ({PENDING_KEY})"
        )


def drop_pending_key(connection: BaseDatabaseWrapper) -> None:
    """Undo :func:`add_pending_key` (migration 0009 unapplied)."""
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {TASK} DROP INDEX {KEY_INDEX}, DROP COLUMN {PENDING_KEY}")


def add_gated_column(
    connection: BaseDatabaseWrapper, predicate: str = GATED_PREDICATE, *, stored: bool = True
) -> None:
    """Add :data:`GATED_COLUMN`, 1 where ``predicate`` (SQL over the task table, as
    :data:`~django_htask.models.GATED_PREDICATE` writes it: each migration passes the
    one of its time) holds, and its index in place of the one Django made of the
    partial ``htask_task_gated``, its condition dropped (migrations 0014, 0018: virtual,
    as they were applied; 0024: ``stored``)."""
    mysql_predicate = predicate.replace("lock IS", "`lock` IS")
    kind = "STORED" if stored else "VIRTUAL"
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {TASK} DROP INDEX {GATED_INDEX},"
            f" ADD COLUMN {GATED_COLUMN} tinyint AS (IF({mysql_predicate}, 1, NULL)) {kind},"
            f" ADD INDEX {GATED_INDEX} ({GATED_COLUMN}, priority, run_at, id)"
        )


def drop_gated_column(connection: BaseDatabaseWrapper) -> None:
    """Undo :func:`add_gated_column`: Django's index again."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {TASK} DROP INDEX {GATED_INDEX}, DROP COLUMN {GATED_COLUMN},"
            f" ADD INDEX {GATED_INDEX} (priority DESC, run_at, id)"
        )


def bound_idle(connection: BaseDatabaseWrapper) -> None:
    """On MariaDB, have the server end this session if it sits idle inside a
    transaction for half ``NODE_TIMEOUT`` (``idle_transaction_timeout``, whole seconds):
    see :class:`_BoundedAtomic`. Set once per connection (a session variable): the
    connections it is set on are the node's own threads', which run no job. MySQL has
    no such variable (see the module)."""
    if not getattr(connection, "mysql_is_mariadb", False):  # the MySQL backend's
        return
    seconds = math.ceil(get_settings().node_timeout / 2)  # 0: no bound
    connection.ensure_connection()
    raw = connection.connection
    if getattr(raw, "_htask_idle_bound", None) == seconds:
        return
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION idle_transaction_timeout = %s", [seconds])
    raw._htask_idle_bound = seconds


class _BoundedAtomic(FencedAtomic):
    """The store's transactions on MySQL/MariaDB. When one is the outermost (not
    nested in the caller's), its session is bounded first (:func:`bound_idle`), as
    PostgreSQL's are with ``idle_in_transaction_session_timeout``: a node's writes
    share-lock its node row first (the fence), so a node frozen inside one (SIGSTOP, a
    VM paused) would hold that lock as long as it is frozen, and the reaper, whose
    ``UPDATE`` of that row must wait for it, could never declare the node dead. With
    the bound, MariaDB ends the frozen node's session, its transaction rolls back, and
    the reaper goes on; the node, when it resumes, finds its connection gone,
    reconnects, and its fence says it was declared dead."""

    def _columns(self, connection: BaseDatabaseWrapper) -> tuple[list[str], list[Any]]:
        if not connection.in_atomic_block:
            bound_idle(connection)
        return [], []


def _claim_order(row: Any) -> tuple[Any, ...]:
    """A row of :data:`STARTED_FIELDS` by the claim's order (higher priority first, then
    the older, then the lower id)."""
    return (-row[_PRIORITY], row[_RUN_AT], row[0])


_PRIORITY = STARTED_FIELDS.index("priority")
_RUN_AT = STARTED_FIELDS.index("run_at")


class MySQLDialect(Dialect):
    """What MySQL and MariaDB do their own way (:mod:`.dialect`)."""

    def settles_keys(self, connection: BaseDatabaseWrapper) -> bool:
        return True  # one row a statement (insert_rows), whatever the version

    def conflict_clause(self, connection: BaseDatabaseWrapper, conflict: Conflict) -> str:
        """``ON DUPLICATE KEY UPDATE`` on the pending-key column doing ``conflict``,
        which also makes the id of the pending row met the statement's
        ``LAST_INSERT_ID`` (for ``cursor.lastrowid``, :meth:`insert_rows`)."""
        qn = connection.ops.quote_name
        sets = [f"{qn('id')} = LAST_INSERT_ID({qn('id')})"]
        sets += [f"{qn(name)} = VALUES({qn(name)})" for name in conflict.copied]
        sets += [f"{qn(name)} = {value}" for name, value in conflict.reset]
        return f" ON DUPLICATE KEY UPDATE {', '.join(sets)}"

    def insert_rows(self, insert: RowInsert) -> None:
        """With a conflict clause, one row a statement: there is no ``RETURNING`` after
        ``ON DUPLICATE KEY UPDATE``, so each gives the id of the row it inserted or of
        the pending row it met, then the rows are read back by id. Without, the
        generic ``VALUES`` lists (MariaDB returns their rows)."""
        if not insert.conflict:
            super().insert_rows(insert)
            return
        params_of = insert.params_of()
        sql = f"{insert.head()} VALUES ({', '.join(['%s'] * len(insert.fields))}){insert.conflict}"
        ids: list[int] = []
        with insert.connection.cursor() as cursor:
            for row in insert.rows:
                cursor.execute(sql, params_of(row))
                ids.append(cursor.lastrowid)
        found = Task.objects.using(insert.connection.alias).filter(id__in=ids).order_by()
        insert.on_batch(insert.rows, list(found.values_list(*insert.returned)))

    # -- transactions and the fence -----------------------------------------------------
    fence_lock = " LOCK IN SHARE MODE"

    # -- the claim -----------------------------------------------------------------------
    gated_predicate = f"{GATED_COLUMN} = 1"
    plain_predicate = MYSQL_PLAIN
    # The optimizer, on a small table or stale statistics, sometimes reads the whole
    # table instead (1 run in 6 of the plan's test): the index is named, as on SQLite.
    gated_indexed_by = f" FORCE INDEX ({GATED_INDEX})"
    by_id = BY_ID

    def atomic(self, store: Connected) -> FencedAtomic:
        return _BoundedAtomic(store.using)

    def fenced(
        self,
        store: Fencing,
        node_id: str,
        *,
        claim: bool = False,
        probe: Probe | None = None,
        running_ids: Iterable[int] = (),
    ) -> FencedAtomic:
        """The fence, the probe and the still-running check in one statement
        (:class:`~django_htask.store.database.FencedAtomic`): a claim's round trips
        are most of its time here."""
        return _BoundedAtomic(
            store.using,
            node_id,
            lock=self.fence_lock,
            probe=probe,
            running_ids=running_ids,
            by_id=BY_ID,
        )

    def start_in(self, store: TaskStore, claim: values.Claim) -> list[StartedTask]:
        """Claim and start due tasks without a lock or a limit: their rows read and
        locked ``FOR UPDATE SKIP LOCKED`` (claims made at once take disjoint tasks
        without waiting), then started by id. No ``UPDATE … RETURNING`` here: the
        started task is the row read, with the claim's fields
        (:func:`~django_htask.store.rules.claimed_task`) applied to it.

        The candidates are found by a plain read (:data:`CANDIDATES` per task wanted,
        and :data:`SPARE`), then locked by id; when other claims hold too many of them,
        the next page of candidates is read the same way. The claim index is never read
        with a lock. Such a read must look at each entry a claim left there (a task
        started moves in that index, and InnoDB purges the old entry later), where a
        plain read skips them: with a backlog, the single locking read took 0.5 ms at
        first and over 3 ms after a few hundred claims; the two reads, 0.5 to 0.7 ms
        throughout. And InnoDB keeps the lock it took on an index entry whose row it
        then skips as locked: the claim holding that row, starting it, must move the
        entry, and waits for the reader, which may wait for it (a deadlock)."""
        return self._claim(store, claim)

    def buffer_in(self, store: TaskStore, claim: values.Claim) -> list[StartedTask]:
        """As :meth:`start_in`, for the node's buffer."""
        return self._claim(store, claim, buffered=True)

    def _claim(
        self, store: TaskStore, claim: values.Claim, *, buffered: bool = False
    ) -> list[StartedTask]:
        node_id, now, limit, lease_until = claim.node_id, claim.now, claim.limit, claim.lease_until
        adapt = store.connection.ops.adapt_datetimefield_value
        served, served_params = served_sql(claim.serving, plain=True)
        if buffered:
            served += f" AND {rules.NEVER_HANDED_OUT_SQL}"
        due = f"{CLAIMABLE_SQL} AND {MYSQL_PLAIN}{served}"
        due_params = [*claimable_params(adapt(now)), *served_params]
        order = "ORDER BY priority DESC, run_at, id LIMIT %s"
        started = f"SELECT {', '.join(STARTED_FIELDS)} FROM {TASK}"
        page = CANDIDATES * limit + SPARE
        rows: list[Any] = []
        seen: list[int] = []
        with store.connection.cursor() as cursor:
            # Each page is read past the candidates already tried, so the pages end:
            # other claims hold at most what they were asked for.
            while True:
                past = f" AND id NOT IN ({', '.join(['%s'] * len(seen))})" if seen else ""
                cursor.execute(
                    f"SELECT id FROM {TASK} WHERE {due}{past} {order}",
                    [*due_params, *seen, page],
                )
                ids = [row[0] for row in cursor.fetchall()]
                if ids:
                    cursor.execute(
                        f"{started}{BY_ID} WHERE id IN ({', '.join(['%s'] * len(ids))}) "
                        f"AND {due} {order} FOR UPDATE SKIP LOCKED",
                        [*ids, *due_params, limit - len(rows)],
                    )
                    rows += cursor.fetchall()
                if len(rows) >= limit or len(ids) < page:
                    break
                seen += ids  # held by other claims meanwhile; more may be due
            if seen:
                rows.sort(key=_claim_order)  # the pages' rows, in the claim's order
            if not rows:
                return []
            # Started by id alone: asked again whether they are claimable, InnoDB could
            # walk a secondary index to the rows another claim holds and wait for them
            # while that claim waits for its own (a deadlock, 1 in 20 with four nodes).
            sets, params = set_sql(
                rules.claimed_task(
                    Column("attempts"), node_id, adapt(now), adapt(lease_until), buffered=buffered
                )
            )
            cursor.execute(
                f"UPDATE {TASK} SET {sets} WHERE id IN ({', '.join(['%s'] * len(rows))})",
                [*params, *(row[0] for row in rows)],
            )
        attempts = STARTED_FIELDS.index("attempts")
        tasks = []
        for row in rows:
            claimed = rules.claimed_task(row[attempts], node_id, now, lease_until)
            fields = list(row)
            fields[attempts] = claimed["attempts"]
            tasks.append(started_task(fields, _as_datetime))
        return tasks

    def lock_gates(self, store: Connected, keys: list[str]) -> bool:
        """Lock the counter rows of ``keys`` until the transaction ends, in their order
        (every claim takes them in that order: no deadlock)."""
        rows = sorted({gate_row(key) for key in keys})
        with store.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT name FROM {COUNTER} WHERE name IN ({', '.join(['%s'] * len(rows))}) "
                "ORDER BY name FOR UPDATE",
                rows,
            )
        return True

    def write_ends(self, store: Connected, ends: list[TaskEnd], *, guard: bool = False) -> int:
        """As the generic one, in one statement: a field the ends share is one
        parameter, a field they differ in a ``CASE`` on the id (their finish times). MySQL's
        driver sends an ``executemany`` of an ``UPDATE`` as one statement per row, and a
        join of the table to the rows (``UNION ALL`` or ``JSON_TABLE``) took MariaDB
        twice the time of the ``CASE``. A result goes as hex, read by ``UNHEX``: bytes
        in an expression are read in the connection's character set, where most byte
        strings are not valid. Cut by size and count (:func:`_batches`): a batch of
        large results in one statement would pass ``max_allowed_packet``, and a
        ``CASE`` is searched in order."""
        # rules.ended_task's fields, as SQL of their own (one statement, as above).
        written = 0
        for chunk in _batches(ends):
            fields = dict(zip(TaskEnd._fields, zip(*chunk, strict=True), strict=True))
            ids = list(fields["id"])
            sets: list[str] = []
            params: list[Any] = []
            for column, form in _END_COLUMNS:
                values = list(fields[column])
                if column == "result":
                    values = [None if v is None else v.hex() for v in values]
                if all(v == values[0] for v in values):
                    if column in ("run_at", "started_at") and values[0] is None:
                        continue  # the column stays
                    sets.append(f"{column} = {form.format('%s')}")
                    params.append(values[0])
                    continue
                whens = " ".join([f"WHEN %s THEN {form.format('%s')}"] * len(chunk))
                sets.append(f"{column} = CASE id {whens} END")
                params += [v for pair in zip(ids, values, strict=True) for v in pair]
            with store.connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {TASK}{BY_ID} SET {', '.join(sets)}, locked_by = NULL, "
                    f"lease_expires_at = NULL WHERE id IN ({', '.join(['%s'] * len(ids))}) "
                    f"AND status = %s{GUARD if guard else ''}",
                    [*params, *ids, TaskStatus.RUNNING],
                )
                written += max(int(cursor.rowcount), 0)
        return written

    def set_statuses(
        self, store: Connected, statuses: dict[int, tuple[str, datetime]], *, wait: bool
    ) -> list[int]:
        """Lock the rows (``SKIP LOCKED`` unless ``wait``), then write them with the
        version left alone: a status is no edit a node must see, and bumping the version
        would queue the write behind every other writer of schedules (the counter)."""
        if not statuses:
            return []
        ids = sorted(statuses)
        adapt = store.connection.ops.adapt_datetimefield_value
        lock = "FOR UPDATE" if wait else "FOR UPDATE SKIP LOCKED"
        with store.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {SCHEDULE} WHERE id IN ({', '.join(['%s'] * len(ids))}) "
                f"ORDER BY id {lock}",
                ids,
            )
            locked = [row[0] for row in cursor.fetchall()]
            cursor.execute(f"SET {STATUS_ONLY} = 1")
            try:
                cursor.executemany(
                    f"UPDATE {SCHEDULE} SET last_status = %s, last_run_at = %s WHERE id = %s "
                    "AND (last_run_at IS NULL OR last_run_at <= %s)",
                    [
                        (statuses[i][0], adapt(statuses[i][1]), i, adapt(statuses[i][1]))
                        for i in locked
                    ],
                )
            finally:
                cursor.execute(f"SET {STATUS_ONLY} = NULL")
        return [] if wait else [i for i in ids if i not in set(locked)]

    # -- pruning -------------------------------------------------------------------------
    def try_lock_pruner(self, store: Connected) -> bool:
        return self._try_lock(store, PRUNER)

    def delete_runs(self, store: Connected, cursor: Any, cutoff: Any, limit: int) -> int:
        """As the generic one, in MySQL's form: a subquery of an ``IN`` takes no
        ``LIMIT`` there, a single-table ``DELETE`` does."""
        cursor.execute(
            f"DELETE FROM {RUN} WHERE {EXPIRED_RUN_SQL} ORDER BY started_at LIMIT %s",
            [cutoff, RunStatus.RUNNING, limit],
        )
        return int(cursor.rowcount)

    def delete_slots(self, store: Connected, cursor: Any, now: Any, limit: int) -> int:
        """As the generic one, in MySQL's single-table ``DELETE … LIMIT``."""
        cursor.execute(f"DELETE FROM {SLOT} WHERE expires_at <= %s LIMIT %s", [now, limit])
        return int(cursor.rowcount)

    def _try_lock(self, store: Connected, row: str) -> bool:
        """Lock the counter's ``row`` until the transaction ends, without waiting;
        whether it was taken."""
        with store.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT name FROM {COUNTER} WHERE name = %s FOR UPDATE SKIP LOCKED", [row]
            )
            return cursor.fetchone() is not None

    # -- nodes and reaping ---------------------------------------------------------------
    def hold_presence(self, store: Connected, node_id: str) -> None:
        """Its named lock (:data:`PRESENCE`), taken only if this session lacks it:
        named locks are counted per taking."""
        with store.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT IF(IS_USED_LOCK({PRESENCE}) <=> CONNECTION_ID(), 1, "
                f"GET_LOCK({PRESENCE}, 0))",
                [node_id, node_id],
            )

    def lock_reaper(self, store: Connected) -> None:
        with store.connection.cursor() as cursor:
            cursor.execute(f"SELECT name FROM {COUNTER} WHERE name = %s FOR UPDATE", [REAPER])

    def try_lock_reaper(self, store: Connected) -> bool:
        return self._try_lock(store, REAPER)

    # -- missing tables ------------------------------------------------------------------
    no_such_table = re.compile(r"Table '(?:[^'.]+\.)?(\w+)' doesn't exist")


class MySQLStore(DatabaseStore):
    """Several nodes on MySQL or MariaDB: the ORM store, with the version triggers
    above, claims that skip the rows another transaction is claiming, and row locks of
    the counter table for the reaper and the locks and limits (see the module)."""

    vendor = "mysql"
    dialect = MySQLDialect()
    supports_several_nodes = True

    def install(self) -> None:
        install(self.connection)

    def check_migrated(self) -> None:
        """As the generic check, and the connection's isolation level must be READ
        COMMITTED (see the module): ImproperlyConfigured, naming the level, otherwise."""
        super().check_migrated()
        mariadb = getattr(self.connection, "mysql_is_mariadb", False)  # the MySQL backend's
        variable = "tx_isolation" if mariadb else "transaction_isolation"
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT @@SESSION.{variable}")
            row = cursor.fetchone()
        level = str(row[0]) if row else "?"
        if level.upper() != ISOLATION:
            raise ImproperlyConfigured(
                f"the database {self.describe()!r} runs transactions at {level}: "
                "django-htask needs READ COMMITTED on MySQL/MariaDB (a claim of a lock "
                "must see what the claim before it committed); set "
                f"DATABASES[{self.using!r}]['OPTIONS']['isolation_level'] to "
                "'read committed' (Django's default) or remove it"
            )

    # -- several nodes: row locks of the counter table ----------------------------------
    @functools.cached_property
    def _reaper(self) -> SharedReaper:
        return SharedReaper()

    def reap(self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy) -> int:
        """One node at a time (the counter's ``reaper`` row), after a pause when this
        node's own heartbeat came late (:mod:`~django_htask.store.reaping`)."""
        return self._reaper.reap(self, node_id, now, dead_before, retry)

    def estimate_rows(self, rows: QuerySet[Any]) -> int | None:
        """The optimizer's estimate of the rows of ``rows`` (``EXPLAIN``: its first
        table's rows, times the share its filter keeps; nothing read)."""
        sql, params = rows.query.sql_with_params()
        with self.connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {sql}", params)
            names = [column[0].lower() for column in cursor.description]
            first = cursor.fetchone()
        if first is None:
            return None
        plan = dict(zip(names, first, strict=False))
        try:
            kept = float(plan.get("filtered") or 100.0) / 100.0
            return round(int(plan["rows"]) * kept)
        except (TypeError, LookupError, ValueError):
            return None

    # -- presence: named locks (GET_LOCK), released when their session ends ------------
    def absent(self, node_ids: list[str]) -> list[str]:
        """The nodes whose named lock (:data:`PRESENCE`) no session of the server
        holds."""
        if not node_ids:
            return []
        held = ", ".join([f"IS_USED_LOCK({PRESENCE})"] * len(node_ids))
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT {held}", node_ids)
            holders = cursor.fetchone() or ()
        return sorted(n for n, holder in zip(node_ids, holders, strict=True) if holder is None)

    def heartbeat(
        self,
        node_id: str,
        now: datetime,
        lease_until: datetime,
        stuck: int = 0,
        renew_below: datetime | None = None,
    ) -> int:
        """Record the heartbeat and renew this node's leases, and hold the node's
        presence on this connection (its named lock, taken once: see
        :mod:`~django_htask.store.presence`). The node's row is locked ``FOR UPDATE``
        at once (the fence: see the module); a node declared dead stays dead
        (NodeFenced)."""
        adapt = self.connection.ops.adapt_datetimefield_value
        with self._atomic(), self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT stopped_at, last_heartbeat FROM {NODE} WHERE id = %s FOR UPDATE",
                [node_id],
            )
            row = cursor.fetchone()
            check_fence(node_id, row)
            assert row is not None
            cursor.execute(
                f"UPDATE {NODE} SET last_heartbeat = %s, stuck_threads = %s WHERE id = %s",
                [adapt(now), stuck, node_id],
            )
            self.dialect.hold_presence(self, node_id)
            renewed = self._renew_leases(node_id, lease_until, renew_below)
        last: datetime = row[1]
        self._reaper.heartbeat_after(now - (last if last.tzinfo else last.replace(tzinfo=UTC)))
        return renewed
