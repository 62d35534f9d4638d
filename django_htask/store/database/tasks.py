"""The ORM store's one-off tasks, along their path: a claim of due tasks (those with
a lock or a limit weighed first, docs/howto-exactly-one.md), their start, and the
write of how runs ended (tasks and schedules' runs alike)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.db.models import F, Min, QuerySet

from django_htask.models import (
    GATED_PREDICATE,
    Queue,
    Run,
    RunStatus,
    Schedule,
    Task,
    TaskStatus,
)
from django_htask.querysets import (
    CLAIMABLE_SQL,
    HOLDING_SQL,
    PLAIN_TASK_SQL,
    claimable_params,
    holding_params,
    served_task,
    served_task_sql,
)
from django_htask.queues import QueueFilter, QueueStates
from django_htask.store import base, rules, values
from django_htask.store.base import (
    Gated,
    Holding,
    RunOutcome,
    StartedTask,
    holders,
    open_queues,
    pick_gated,
)

from .core import _CHUNK, _TASK, OrmStore, Probe, _as_datetime
from .putback import put_back

STARTED_FIELDS = (
    "id",
    "token",
    "function",
    "payload",
    "run_at",
    "attempts",
    "max_attempts",
    "priority",
    "timeout",
    "snoozes",
    "max_snoozes",
    *base.RETRY_COLUMNS,
)
#: Candidates with a lock or a limit a claim reads per statement.
_GATED_PAGE = 100
#: Snoozed tasks one statement writes at most (a ``CASE`` is searched in order).
_SNOOZES_ROWS = 100


def served_sql(serving: base.Serving, *, plain: bool = False) -> tuple[str, list[Any]]:
    """The tasks a claim for ``serving`` may take (:attr:`~base.Serving.claimed`; with
    ``plain``, as plain tasks: :attr:`~base.Serving.plain`), as SQL
    (:func:`~django_htask.querysets.served_task_sql`)."""
    return served_task_sql(serving.plain if plain else serving.claimed, serving.backend)


def gate_key(key: str) -> int:
    """The key of a lock or function (``lock:…``, ``function:…``) that claims lock to
    serialise its claims (PostgreSQL's advisory lock key; MySQL's gate row is chosen
    by it): 64 bits of its BLAKE2b hash, signed as PostgreSQL's ``bigint``. A
    collision only makes two gates wait for each other."""
    digest = hashlib.blake2b(key.encode(), digest_size=8, person=b"htask-gate").digest()
    return int.from_bytes(digest, "big", signed=True)


class Column(str):
    """A column read in a raw statement's ``SET`` (a rule's field may be an expression
    of one: ``Column("attempts") + 1``), or an expression with parameters of its own
    (:meth:`of`)."""

    #: The parameters of its placeholders, in their order.
    params: tuple[Any, ...] = ()

    @classmethod
    def of(cls, sql: str, params: Sequence[Any]) -> Column:
        """The expression ``sql`` with the parameters of its placeholders."""
        expression = cls(sql)
        expression.params = tuple(params)
        return expression

    def __add__(self, other: object) -> Column:
        return Column(f"{self} + {other}")

    def __sub__(self, other: object) -> Column:
        return Column(f"{self} - {other}")


def set_sql(fields: dict[str, Any]) -> tuple[str, list[Any]]:
    """A rule's ``fields`` (:mod:`~django_htask.store.rules`) as an SQL ``SET`` list and
    its parameters: a value as a parameter, a :class:`Column` expression as written
    (with its own parameters)."""
    sets: list[str] = []
    params: list[Any] = []
    for name, value in fields.items():
        if isinstance(value, Column):
            sets.append(f"{name} = {value}")
            params += value.params
        else:
            sets.append(f"{name} = %s")
            params.append(value)
    return ", ".join(sets), params


class TaskRows(OrmStore):
    """Claims, starts and ends of one-off tasks, and the runs' outcomes."""

    def task_outlook(
        self, now: datetime, serving: base.Serving = base.SERVE_ALL
    ) -> tuple[bool, datetime | None]:
        rows = Task.objects.using(self.using)
        tasks = rows.filter(served_task(serving.claimed, serving.backend))
        plain = tasks
        if serving.states.limits:
            plain = rows.filter(served_task(serving.plain, serving.backend))
        due = plain.claimable(now).plain().exists()
        if not due:
            with self.connection.cursor() as cursor:
                due = bool(self._choose_gated(cursor, now, serving, 1))
        first: datetime | None = tasks.filter(status=TaskStatus.PENDING, run_at__gt=now).aggregate(
            m=Min("run_at")
        )["m"]
        return due, first

    def _start_tasks(self, c: values.Claim) -> list[StartedTask]:
        probe = self._gated_probe(c.now, c.serving) if c.limit > 0 else None
        held = [o.task_id for o in c.finished if o.task_id is not None]
        fenced = self._fenced(c.node_id, claim=True, probe=probe, held=held)
        with fenced:
            # Whether the node still runs the finished tasks, if the fence's statement said.
            late = self._record_in(c.node_id, c.finished, getattr(fenced, "held", None))
            if any(o.gated for o in c.finished):
                self._gate_released()
            # Whether gated tasks are due, if the fence's statement said (PostgreSQL).
            gated_due: bool | None = getattr(fenced, "gated_due", None)
            started = self._start_gated(c, gated_due) if c.limit > 0 else []
            if c.limit > len(started):
                started += self._start_in(c._replace(limit=c.limit - len(started)))
        self._record_late(late)
        return started

    def queue_states(self) -> QueueStates:
        return Queue.objects.using(self.using).states()

    # -- locks and limits (docs/howto-exactly-one.md) ---------------------------------
    #: A hint after the table name of the gated candidates' query (SQLite: their
    #: partial index, which it would not choose itself).
    _gated_indexed_by = ""
    #: The same for a limited queue's other candidates (SQLite: the claim index).
    _claim_indexed_by = ""
    #: Which due tasks have a lock or a limit, as SQL (MySQL quotes ``lock`` its way).
    _gated_predicate = GATED_PREDICATE
    #: Which have neither (:data:`~django_htask.querysets.PLAIN_TASK_SQL`), likewise.
    _plain_predicate = PLAIN_TASK_SQL

    def _gate_released(self) -> None:
        """A task with a lock or a limit ended in this transaction: tell the other
        nodes (nothing here: they poll)."""

    def _lock_gates(self, keys: list[str]) -> bool:
        """Serialise the claims of these locks and functions (``lock:…``,
        ``function:…``) until the transaction ends; return whether the holders must be
        counted again. Nothing here: the claim's transaction is the only writer."""
        return False

    def _holders(self, cursor: Any, now: datetime) -> Holding:
        """The locks of the tasks running with an unexpired lease, and how many such
        tasks each function and queue has (a few rows: the tasks running on every
        node)."""
        adapt = self.connection.ops.adapt_datetimefield_value
        lock = self.connection.ops.quote_name("lock")
        cursor.execute(
            f"SELECT {lock}, function, queue_name FROM {_TASK} WHERE {HOLDING_SQL}",
            holding_params(adapt(now)),
        )
        return holders(cursor.fetchall())

    def _gated_probe(self, now: datetime, serving: base.Serving) -> Probe:
        """The due tasks with a lock or a limit that ``serving`` covers, as a query of
        the partial index over them (its columns: ``id``, ``lock``, ``function``,
        ``max_running``) and its parameters. A claim asks first whether it finds any;
        on PostgreSQL that question rides on the claim's first statement (the fence), so
        that a claim with none due costs no round trip more."""
        adapt = self.connection.ops.adapt_datetimefield_value
        served, served_params = served_sql(serving)
        lock = self.connection.ops.quote_name("lock")
        sql = (
            f"SELECT id, {lock}, function, max_running, queue_name"
            f" FROM {_TASK}{self._gated_indexed_by}"
            f" WHERE {self._gated_predicate} AND {CLAIMABLE_SQL}{served}"
        )
        return Probe(sql, [*claimable_params(adapt(now)), *served_params])

    def _choose_gated(
        self,
        cursor: Any,
        now: datetime,
        serving: base.Serving,
        limit: int,
        gated_due: bool | None = None,
    ) -> list[Gated]:
        """The due tasks with a lock or a limit a claim of ``limit`` would start now
        (:func:`~django_htask.store.base.pick_gated`), read through their partial index
        page by page, then the other tasks of the limited queues with room; one short
        read when there are none (none when ``gated_due`` already says and no queue is
        limited)."""
        due, params = self._gated_probe(now, serving)
        if gated_due is None:
            cursor.execute(f"{due} LIMIT 1", params)
            gated_due = cursor.fetchone() is not None
        limits = serving.limits if serving.states.limits else {}
        if not gated_due and not limits:
            return []
        held = self._holders(cursor, now)
        picked = self._walk_gated(cursor, due, params, held, limit, limits) if gated_due else []
        for queue, room in open_queues(limits, held):
            if len(picked) >= limit:
                break
            want = min(room, limit - len(picked))
            picked += pick_gated(self._queue_tasks(cursor, now, serving, queue, want), held, want)
        return picked

    def _walk_gated(
        self,
        cursor: Any,
        due: str,
        params: list[Any],
        held: Holding,
        limit: int,
        limits: dict[str, int],
    ) -> list[Gated]:
        """The tasks with a lock or a limit of ``due`` (the probe's query) that
        :func:`~django_htask.store.base.pick_gated` starts, read page by page; the
        locks held and the full queues are left out by the query."""
        skip, extra = "", []
        if 0 < len(held.locks) <= _CHUNK:  # else the walk below skips them
            lock = self.connection.ops.quote_name("lock")
            skip = f" AND {lock} NOT IN ({', '.join(['%s'] * len(held.locks))})"
            extra = sorted(held.locks)
        full = sorted(q for q, n in limits.items() if held.queues[q] >= n)
        if full:
            skip += f" AND queue_name NOT IN ({', '.join(['%s'] * len(full))})"
            extra += full
        picked: list[Gated] = []
        for offset in itertools.count(0, _GATED_PAGE):
            cursor.execute(
                f"{due}{skip} ORDER BY priority DESC, run_at, id LIMIT %s OFFSET %s",
                [*params, *extra, _GATED_PAGE, offset],
            )
            page = [Gated(*row) for row in cursor.fetchall()]
            picked += pick_gated(page, held, limit - len(picked), limits)
            if len(picked) >= limit or len(page) < _GATED_PAGE:
                break
        return picked

    def _queue_tasks(
        self, cursor: Any, now: datetime, serving: base.Serving, queue: str, limit: int
    ) -> list[Gated]:
        """The first ``limit`` due tasks of the limited ``queue`` without a lock or a
        limit of their own, in the claim's order."""
        adapt = self.connection.ops.adapt_datetimefield_value
        served, served_params = served_task_sql(QueueFilter(frozenset([queue])), serving.backend)
        cursor.execute(
            f"SELECT id, NULL, function, NULL, queue_name FROM {_TASK}{self._claim_indexed_by}"
            f" WHERE {CLAIMABLE_SQL} AND {self._plain_predicate}{served}"
            " ORDER BY priority DESC, run_at, id LIMIT %s",
            [*claimable_params(adapt(now)), *served_params, limit],
        )
        return [Gated(*row) for row in cursor.fetchall()]

    def _start_gated(self, c: values.Claim, gated_due: bool | None) -> list[StartedTask]:
        """Claim and start the due tasks with a lock or a limit (their own, or their
        queue's) that may start now, in the caller's transaction: chosen, then (where
        several nodes claim at once) their locks, functions and limited queues locked
        in one order and the holders counted again, so that two claims never both start
        a task of one lock nor overfill a function or a queue. ``gated_due``: whether
        any with a lock or a limit of their own are due, if known already."""
        now, limit, serving = c.now, c.limit, c.serving
        if gated_due is False and not serving.states.limits:
            return []
        with self.connection.cursor() as cursor:
            chosen = self._choose_gated(cursor, now, serving, limit, gated_due)
            if not chosen:
                return []
            limits = serving.limits
            keys = {f"lock:{g.lock}" for g in chosen if g.lock is not None}
            keys |= {f"function:{g.function}" for g in chosen if g.max_running is not None}
            keys |= {f"queue:{g.queue}" for g in chosen if g.queue in limits}
            if self._lock_gates(sorted(keys)):
                chosen = pick_gated(chosen, self._holders(cursor, now), limit, limits)
        claimable = Task.objects.using(self.using).claimable(now)
        started = self._mark_started(c, [g.id for g in chosen], claimable)
        return [dataclasses.replace(task, gated=True) for task in started]

    def _mark_started(
        self, c: values.Claim, ids: list[int], claimable: QuerySet[Task]
    ) -> list[StartedTask]:
        """Start the tasks ``ids`` still ``claimable`` as claim ``c``'s (in the caller's
        transaction), and return them."""
        tasks = Task.objects.using(self.using)
        claimable.filter(id__in=ids).update(
            **rules.claimed_task(F("attempts"), c.node_id, c.now, c.lease_until)
        )
        rows = (
            tasks.filter(id__in=ids, locked_by=c.node_id, status=TaskStatus.RUNNING)
            .order_by()  # read by id, not sorted: the claim above took them in order
            .values_list(*STARTED_FIELDS)
        )
        return [started_task(row) for row in rows]

    def _start_returning(
        self,
        c: values.Claim,
        lock: str = "",
        adapt: Callable[[Any], Any] = lambda v: v,
        indexed_by: str = "",
    ) -> list[StartedTask]:
        """Claim and start due tasks without a lock or a limit in one ``UPDATE …
        RETURNING`` statement (in the caller's transaction); ``lock``: how the candidate
        rows are locked, ``adapt``: the database's adapter of timestamps,
        ``indexed_by``: a hint after the table name of the candidates' query."""
        node_id, now, limit, lease_until, _finished, serving = c
        served, served_params = served_sql(serving, plain=True)
        sets, set_params = set_sql(
            rules.claimed_task(Column("attempts"), node_id, adapt(now), adapt(lease_until))
        )
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {_TASK} SET {sets} WHERE "
                + self._id_among(
                    f"SELECT id FROM {_TASK}{indexed_by} WHERE {CLAIMABLE_SQL}"
                    f" AND {PLAIN_TASK_SQL}{served}"
                    f" ORDER BY priority DESC, run_at, id LIMIT %s{lock}"
                )
                + f" RETURNING {', '.join(STARTED_FIELDS)}",
                [
                    *set_params,
                    *claimable_params(adapt(now)),
                    *served_params,
                    limit,
                ],
            )
            rows = cursor.fetchall()
        return [started_task(row, _as_datetime) for row in rows]

    #: Lock the candidates of a claim ``FOR UPDATE SKIP LOCKED`` (MySQL, MariaDB), so
    #: claims made at once take disjoint tasks without waiting.
    _skip_locked = False

    def _start_in(self, c: values.Claim) -> list[StartedTask]:
        """Claim and start due tasks without a lock or a limit, in the caller's
        transaction."""
        now, limit, serving = c.now, c.limit, c.serving
        tasks = Task.objects.using(self.using)
        served = served_task(serving.plain, serving.backend)
        claimable = tasks.claimable(now).plain().filter(served)
        candidates = claimable
        if self._skip_locked:
            candidates = candidates.select_for_update(skip_locked=True)
        ids = list(
            candidates.order_by("-priority", "run_at", "id").values_list("id", flat=True)[:limit]
        )
        if not ids:
            return []
        # Rows locked FOR UPDATE by this transaction are still claimable: they are
        # started by id alone. Asked again whether they are claimable, InnoDB could walk
        # a secondary index to the rows another claim holds and wait for them while that
        # claim waits for its own: a deadlock (seen 1 in 20 with four nodes claiming).
        return self._mark_started(c, ids, tasks if self._skip_locked else claimable)

    def aborts(self, node_id: str) -> list[tuple[str, int]]:
        # Both read through their small partial index (abort_requested_at IS NOT NULL).
        tasks = Task.objects.using(self.using).filter(
            locked_by=node_id, abort_requested_at__isnull=False, status=TaskStatus.RUNNING
        )
        runs = Run.objects.using(self.using).filter(
            node=node_id, abort_requested_at__isnull=False, status=RunStatus.RUNNING
        )
        return [("task", i) for i in tasks.values_list("id", flat=True)] + [
            ("run", i) for i in runs.values_list("id", flat=True)
        ]

    def record(self, node_id: str, outcomes: list[RunOutcome]) -> None:
        if not outcomes:
            return
        with self._fenced(node_id):
            late = self._record_in(node_id, outcomes)
            if any(o.gated for o in outcomes):
                self._gate_released()
        self._record_late(late)

    def _record_in(
        self, node_id: str, outcomes: list[RunOutcome], held: set[int] | None = None
    ) -> dict[int, tuple[str, datetime]]:
        """Write ``outcomes`` in the caller's transaction; return the last statuses of
        schedules left to write afterwards, each in a transaction of its own
        (:meth:`_record_late`). ``held``: the tasks of ``outcomes`` this node still
        runs, if known (:meth:`_record_runs`)."""
        self._record_runs(node_id, outcomes, held)
        for schedule_id, (status, when) in values.last_statuses(outcomes).items():
            Schedule.objects.using(self.using).filter(id=schedule_id).update(
                last_status=status, last_run_at=when
            )
        return {}

    def _record_late(self, statuses: dict[int, tuple[str, datetime]]) -> None:
        """Write what :meth:`_record_in` left (nothing here)."""

    def _still_running(self, node_id: str, task_ids: list[int]) -> set[int]:
        """Which of ``task_ids`` this node still runs (the others were reaped meanwhile:
        their outcome is not written)."""
        held: set[int] = set()
        tasks = Task.objects.using(self.using)
        for i in range(0, len(task_ids), _CHUNK):
            held.update(
                tasks.filter(
                    id__in=task_ids[i : i + _CHUNK], locked_by=node_id, status=TaskStatus.RUNNING
                ).values_list("id", flat=True)
            )
        return held

    def _record_runs(
        self, node_id: str, outcomes: list[RunOutcome], held: set[int] | None = None
    ) -> None:
        """Write the runs and tasks of ``outcomes`` (in the caller's transaction).
        ``held``: which of their tasks this node still runs, if known (read otherwise):
        the others were reaped meanwhile, and their outcome is not written."""
        runs = Run.objects.using(self.using)
        task_outcomes = [o for o in outcomes if o.task_id is not None]
        if held is None:
            held = self._still_running(node_id, [o.task_id for o in task_outcomes if o.task_id])
        ended = [o for o in task_outcomes if o.task_id in held]
        for o in outcomes:
            if o.task_id is None and o.run_id is not None:
                runs.filter(id=o.run_id, status=RunStatus.RUNNING).update(
                    status=o.status,
                    finished_at=o.finished_at,
                    duration=o.duration,
                    error=o.error,
                    traceback=o.traceback,
                )
        if ended:
            self._end_tasks(ended)
            self._insert_runs(ended)

    def _end_tasks(self, outcomes: list[RunOutcome]) -> None:
        """Write the tasks whose attempt ended: finished, or pending again for a retry
        (:meth:`_write_ends`) or after a snooze (:meth:`_write_snoozes`)."""
        adapt = self.connection.ops.adapt_datetimefield_value
        ends = []
        snoozed = []
        for o in outcomes:
            if o.status == RunStatus.SNOOZED:
                snoozed.append(o)
                continue
            end = rules.ended_task(o)
            ends.append(
                (
                    end["status"],
                    adapt(end.get("run_at")),
                    adapt(end["finished_at"]),
                    end["last_error"],
                    end["traceback"],
                    end["result"],
                    o.task_id,
                )
            )
        retried = [o.task_id for o in outcomes if o.task_id is not None and o.retry_at is not None]

        def write() -> int:
            if ends:
                self._write_ends(ends)
            if snoozed:
                self._write_snoozes(snoozed)
            return len(ends) + len(snoozed)

        if not retried:
            write()
            return
        now = max(o.finished_at for o in outcomes)
        put_back(self.using, retried, TaskStatus.RUNNING, now, write)

    def _write_ends(self, ends: list[tuple[Any, ...]]) -> None:
        """Write each task of ``ends`` (status, retry time or None, finished_at, error,
        traceback, result, id) if it still runs: one prepared statement for all
        (``executemany``): the ORM's ``update()`` per row costs more than the jobs
        themselves when the jobs are trivial."""
        # rules.ended_task's fields, as SQL of their own: one statement for rows that
        # differ in which fields they set (a retry keeps no run_at from a finish).
        with self.connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {_TASK} SET status = %s, run_at = COALESCE(%s, run_at), "
                "finished_at = %s, locked_by = NULL, lease_expires_at = NULL, "
                "last_error = %s, traceback = %s, result = %s WHERE id = %s AND status = %s",
                [(*end, TaskStatus.RUNNING) for end in ends],
            )

    #: A hint after the table name of a statement that finds tasks by id (MySQL's).
    _by_id = ""

    def _write_snoozes(self, snoozed: list[RunOutcome]) -> None:
        """Write each task of ``snoozed`` (outcomes with the time it runs again) if it
        still runs, as :func:`~django_htask.store.rules.snoozed_task` says: one
        statement per :data:`_SNOOZES_ROWS` tasks, their due times a ``CASE`` on the id
        (the only field they differ in), the same on every database."""
        adapt = self.connection.ops.adapt_datetimefield_value
        for i in range(0, len(snoozed), _SNOOZES_ROWS):
            chunk = snoozed[i : i + _SNOOZES_ROWS]
            ids = [o.task_id for o in chunk]
            whens = " ".join(["WHEN %s THEN %s"] * len(chunk))
            run_at = Column.of(
                f"CASE id {whens} END", [v for o in chunk for v in (o.task_id, adapt(o.retry_at))]
            )
            sets, params = set_sql(
                rules.snoozed_task(run_at, Column("attempts"), Column("snoozes"))
            )
            with self.connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {_TASK}{self._by_id} SET {sets} "
                    f"WHERE id IN ({', '.join(['%s'] * len(ids))}) AND status = %s",
                    [*params, *ids, TaskStatus.RUNNING],
                )

    def count_pending_tasks(self) -> int:
        return Task.objects.using(self.using).filter(status=TaskStatus.PENDING).count()


def started_task(
    row: Sequence[Any], as_datetime: Callable[[Any], datetime] = lambda v: v
) -> StartedTask:
    """The :class:`StartedTask` of the values of :data:`STARTED_FIELDS`."""
    i, t, f, p, r, a, m, pr, to, snoozes, most, *retry = row
    columns = base.RetryColumns(*retry)
    if columns == base.DEFAULT_RETRY:
        columns = base.DEFAULT_RETRY  # one object for the many tasks without a policy
    return StartedTask(
        i, t, f, bytes(p), as_datetime(r), a, m, pr, to, columns, snoozes=snoozes, max_snoozes=most
    )
