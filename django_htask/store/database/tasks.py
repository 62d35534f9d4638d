"""The ORM store's one-off tasks, along their path: a claim of due tasks (those with
a lock or a limit weighed first, docs/howto-exactly-one.md), their start, and the
write of how runs ended (tasks and schedules' runs alike)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, Min, QuerySet

from django_htask.conf import get_settings
from django_htask.models import (
    Queue,
    RateSlot,
    Run,
    RunStatus,
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
    Window,
    holders,
    holds_place,
    open_queues,
    pick_gated,
)
from django_htask.store.values import Probe, TaskEnd

from .core import _CHUNK, _TASK, _as_datetime
from .following import FollowRows
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
    "followed",
    *base.RETRY_COLUMNS,
)
#: Candidates with a lock or a limit a claim reads per statement.
_GATED_PAGE = 100
#: What a claim reads of each (:class:`~django_htask.store.base.Gated`).
_GATED_COLUMNS = "id, {lock}, function, max_running, queue_name, per_key, rate_limit, rate_period"
_SLOT = RateSlot._meta.db_table
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


def flow_gate(flow: str) -> int:
    """The 64-bit key of a flow (:func:`~django_htask.flow.flow_key`): its rate slots'
    ``gate``, and what claims of it lock (:func:`gate_key` of ``flow:…``)."""
    return gate_key(f"flow:{flow}")


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


class TaskRows(FollowRows):
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
        wake_at = None
        if not due:
            with self.connection.cursor() as cursor:
                picked, wake_at = self._choose_gated(cursor, now, serving, 1)
            due = bool(picked)
        first: datetime | None = tasks.filter(status=TaskStatus.PENDING, run_at__gt=now).aggregate(
            m=Min("run_at")
        )["m"]
        return due, values.earliest(first, wake_at)

    def _start_tasks(self, claim: values.Claim) -> values.Started:
        probe = self._gated_probe(claim.now, claim.serving) if claim.limit > 0 else None
        running_ids = [o.task_id for o in claim.finished if o.task_id is not None]
        fenced = self._fenced(claim.node_id, claim=True, probe=probe, running_ids=running_ids)
        with fenced:
            # Whether the node still runs the finished tasks, if the fence's statement said.
            if claim.begun:
                self.dialect.mark_begun(self, claim.node_id, claim.begun)
            late = self.dialect.record_in(
                self, claim.node_id, claim.finished, getattr(fenced, "still_running", None)
            )
            if any(o.gated for o in claim.finished):
                self.dialect.notify(self, "task")  # a lock or a limit has room again
            # Whether gated tasks are due, if the fence's statement said (PostgreSQL).
            gated_due: bool | None = getattr(fenced, "gated_due", None)
            started = self._start_gated(claim, gated_due) if claim.limit > 0 else values.Started()
            if claim.limit > len(started):
                started += self.dialect.start_in(
                    self, claim._replace(limit=claim.limit - len(started))
                )
            if claim.buffer > 0:
                buffered = self.dialect.buffer_in(self, claim._replace(limit=claim.buffer))
                started += buffered
                started.buffered = frozenset(task.id for task in buffered)
        self.dialect.record_late(self, late)
        return started

    def queue_states(self) -> QueueStates:
        return Queue.objects.using(self.using).states()

    # -- locks and limits (docs/howto-exactly-one.md) ---------------------------------
    def _holders(self, cursor: Any, now: datetime) -> Holding:
        """The locks of the tasks running with an unexpired lease, and how many such
        tasks each function, queue and flow with a per key has (a few rows: the tasks
        running on every node)."""
        adapt = self.connection.ops.adapt_datetimefield_value
        lock = self.connection.ops.quote_name("lock")
        cursor.execute(
            f"SELECT {lock}, function, queue_name, per_key FROM {_TASK} WHERE {HOLDING_SQL}",
            holding_params(adapt(now)),
        )
        return holders(cursor.fetchall(), now)

    def _read_windows(self, cursor: Any, held: Holding, candidates: list[Gated]) -> None:
        """Read into ``held`` the windows of the rate-limited flows of ``candidates``
        not read yet: the slots of each not expired at ``held.now`` (one short read
        of the slots' index, grouped)."""
        flows = held.unread(candidates)
        if not flows:
            return
        assert held.now is not None
        adapt = self.connection.ops.adapt_datetimefield_value
        gates = {flow_gate(flow): flow for flow in flows}
        cursor.execute(
            f"SELECT gate, COUNT(*), MIN(expires_at), MAX(started_at) FROM {_SLOT} "
            f"WHERE gate IN ({', '.join(['%s'] * len(gates))}) AND expires_at > %s "
            "GROUP BY gate",
            [*gates, adapt(held.now)],
        )
        windows = [
            Window(gates[g], n, _as_datetime(first), _as_datetime(last))
            for g, n, first, last in cursor.fetchall()
        ]
        held.read_windows(flows, windows)

    def _take_slots(self, cursor: Any, now: datetime, started: list[Gated]) -> None:
        """Count the starts of the rate-limited tasks of ``started`` against their
        flows, a slot each until a period from ``now``, and delete their flows'
        expired slots (in the claim's transaction)."""
        if not started:
            return
        adapt = self.connection.ops.adapt_datetimefield_value
        gates = sorted({flow_gate(g.flow) for g in started if g.flow is not None})
        cursor.execute(
            f"DELETE FROM {_SLOT} WHERE gate IN ({', '.join(['%s'] * len(gates))}) "
            "AND expires_at <= %s",
            [*gates, adapt(now)],
        )
        slots = [
            (flow_gate(g.flow), adapt(now), adapt(now + timedelta(seconds=g.rate_period)))
            for g in started
            if g.flow is not None and g.rate_period is not None
        ]
        cursor.execute(
            f"INSERT INTO {_SLOT} (gate, started_at, expires_at) VALUES "
            + ", ".join(["(%s, %s, %s)"] * len(slots)),
            [v for slot in slots for v in slot],
        )

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
            f"SELECT {_GATED_COLUMNS.format(lock=lock)}"
            f" FROM {_TASK}{self.dialect.gated_indexed_by}"
            f" WHERE {self.dialect.gated_predicate} AND {CLAIMABLE_SQL}{served}"
        )
        return Probe(sql, [*claimable_params(adapt(now)), *served_params])

    def _choose_gated(
        self,
        cursor: Any,
        now: datetime,
        serving: base.Serving,
        limit: int,
        gated_due: bool | None = None,
    ) -> tuple[list[Gated], datetime | None]:
        """The due tasks with a lock or a limit a claim of ``limit`` would start now
        (:func:`~django_htask.store.base.pick_gated`), read through their partial index
        page by page, then the other tasks of the limited queues with room; one short
        read when there are none (none when ``gated_due`` already says and no queue is
        limited). With them, the first instant a task held back by its rate limit may
        start (None: none seen)."""
        due, params = self._gated_probe(now, serving)
        if gated_due is None:
            cursor.execute(f"{due} LIMIT 1", params)
            gated_due = cursor.fetchone() is not None
        limits = serving.limits if serving.states.limits else {}
        if not gated_due and not limits:
            return [], None
        held = self._holders(cursor, now)
        picked = self._walk_gated(cursor, due, params, held, limit, limits) if gated_due else []
        for queue, room in open_queues(limits, held):
            if len(picked) >= limit:
                break
            want = min(room, limit - len(picked))
            picked += pick_gated(self._queue_tasks(cursor, now, serving, queue, want), held, want)
        return picked, held.wake_at

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
        locks held and the full queues are left out by the query, and so are, once a
        page shows them, the flows whose tasks wait (the walk then reads again from
        the first, without them and the tasks picked)."""
        skip, extra = "", []
        if 0 < len(held.locks) <= _CHUNK:  # else the walk below skips them
            # Not a flow's: its flow waits behind it, which the walk must see.
            lock = self.connection.ops.quote_name("lock")
            skip = (
                f" AND ({lock} IS NULL OR {lock} NOT IN ({', '.join(['%s'] * len(held.locks))})"
                " OR per_key IS NOT NULL OR rate_limit IS NOT NULL)"
            )
            extra = sorted(held.locks)
        full = sorted(q for q, n in limits.items() if held.queues[q] >= n)
        if full:
            skip += f" AND queue_name NOT IN ({', '.join(['%s'] * len(full))})"
            extra += full
        picked: list[Gated] = []
        waiting: dict[str, tuple[str, str | None]] = {}  # flow -> its function and per key
        offset, left, left_params = 0, "", list[Any]()
        while True:
            cursor.execute(
                f"{due}{skip}{left} ORDER BY priority DESC, run_at, id LIMIT %s OFFSET %s",
                [*params, *extra, *left_params, _GATED_PAGE, offset],
            )
            page = [Gated(*row) for row in cursor.fetchall()]
            self._read_windows(cursor, held, page)
            picked += pick_gated(page, held, limit - len(picked), limits)
            if len(picked) >= limit or len(page) < _GATED_PAGE:
                return picked
            seen = len(waiting)
            for g in page:
                if (flow := g.flow) in held.waiting and flow and len(waiting) < _CHUNK:
                    waiting.setdefault(flow, (g.function, g.per_key))
            offset += _GATED_PAGE
            if len(waiting) > seen:  # read again from the first, the same way to the end
                offset, (left, left_params) = 0, _leave_out(waiting, picked)

    def _queue_tasks(
        self, cursor: Any, now: datetime, serving: base.Serving, queue: str, limit: int
    ) -> list[Gated]:
        """The first ``limit`` due tasks of the limited ``queue`` without a lock or a
        limit of their own, in the claim's order."""
        adapt = self.connection.ops.adapt_datetimefield_value
        served, served_params = served_task_sql(QueueFilter(frozenset([queue])), serving.backend)
        dialect = self.dialect
        cursor.execute(
            f"SELECT id, NULL, function, NULL, queue_name FROM {_TASK}{dialect.claim_indexed_by}"
            f" WHERE {CLAIMABLE_SQL} AND {dialect.plain_predicate}{served}"
            " ORDER BY priority DESC, run_at, id LIMIT %s",
            [*claimable_params(adapt(now)), *served_params, limit],
        )
        return [Gated(*row) for row in cursor.fetchall()]

    def _start_gated(self, claim: values.Claim, gated_due: bool | None) -> values.Started:
        """Claim and start the due tasks with a lock or a limit (their own, or their
        queue's) that may start now, in the caller's transaction: chosen, then (where
        several nodes claim at once) their locks, functions, flows and limited queues
        locked in one order and the holders and windows counted again, so that two
        claims never both start a task of one lock nor overfill a function, a flow or
        a queue, nor a rate limit's window; the starts of the rate-limited ones are
        counted (:meth:`_take_slots`). ``gated_due``: whether any with a lock or a limit
        of their own are due, if known already."""
        now, limit, serving = claim.now, claim.limit, claim.serving
        if gated_due is False and not serving.states.limits:
            return values.Started()
        with self.connection.cursor() as cursor:
            chosen, wake_at = self._choose_gated(cursor, now, serving, limit, gated_due)
            if not chosen:
                return values.Started(wake_at=wake_at)
            limits = serving.limits
            keys = gate_keys(chosen, limits)
            if self.dialect.lock_gates(self, keys):
                chosen, wake_at = self._choose_again(cursor, claim, chosen, keys)
            wanted = len(chosen)
            claimable = Task.objects.using(self.using).claimable(now)
            started = self._mark_started(claim, [g.id for g in chosen], claimable)
            if len(started) < wanted:  # a claim at once took them, or their places:
                wake_at = now  # others may start, which this one did not look at
            ids = {task.id for task in started}
            self._take_slots(
                cursor, now, [g for g in chosen if g.id in ids and g.rate_limit is not None]
            )
        places = {g.id for g in chosen if holds_place(g, limits)}
        gated = (dataclasses.replace(t, gated=t.id in places) for t in started)
        return values.Started(gated, wake_at)

    def _choose_again(
        self,
        cursor: Any,
        claim: values.Claim,
        chosen: list[Gated],
        keys: list[str],
    ) -> tuple[list[Gated], datetime | None]:
        """What a claim holding the gates ``keys`` of its ``chosen`` starts, now that
        no other claim can start a task of them: chosen again from what the claims
        before it committed (READ COMMITTED shows it), when every gate of the new
        choice is among those held (a claim that waited for another took the same
        first candidates: it takes the next ones rather than none); else ``chosen``
        weighed again against the holders and windows counted now, and the node is to
        look again at once for the new choice (``wake_at`` now)."""
        now, limit, limits = claim.now, claim.limit, claim.serving.limits
        fresh, fresh_wake = self._choose_gated(cursor, now, claim.serving, limit, True)
        if set(gate_keys(fresh, limits)) <= set(keys):
            return fresh, fresh_wake
        held = self._holders(cursor, now)
        self._read_windows(cursor, held, chosen)
        return pick_gated(chosen, held, limit, limits), now

    def _mark_started(
        self,
        claim: values.Claim,
        ids: list[int],
        claimable: QuerySet[Task],
        *,
        buffered: bool = False,
    ) -> list[StartedTask]:
        """Start the tasks ``ids`` still ``claimable`` as ``claim``'s (in the caller's
        transaction), and return them; ``buffered``: for the node's buffer, with no
        start time."""
        tasks = Task.objects.using(self.using)
        claimable.filter(id__in=ids).update(
            **rules.claimed_task(
                F("attempts"), claim.node_id, claim.now, claim.lease_until, buffered=buffered
            )
        )
        rows = (
            tasks.filter(id__in=ids, locked_by=claim.node_id, status=TaskStatus.RUNNING)
            .order_by()  # read by id, not sorted: the claim above took them in order
            .values_list(*STARTED_FIELDS)
        )
        return [started_task(row) for row in rows]

    def _start_returning(
        self,
        claim: values.Claim,
        lock: str = "",
        adapt: Callable[[Any], Any] = lambda v: v,
        indexed_by: str = "",
        *,
        buffered: bool = False,
    ) -> list[StartedTask]:
        """Claim and start due tasks without a lock or a limit in one ``UPDATE …
        RETURNING`` statement (in the caller's transaction); ``lock``: how the candidate
        rows are locked, ``adapt``: the database's adapter of timestamps,
        ``indexed_by``: a hint after the table name of the candidates' query;
        ``buffered``: for the node's buffer (:meth:`Store.start_tasks`), tasks never
        handed to a node, with no start time."""
        node_id, now, limit, lease_until = claim.node_id, claim.now, claim.limit, claim.lease_until
        served, served_params = served_sql(claim.serving, plain=True)
        if buffered:
            served += f" AND {rules.NEVER_HANDED_OUT_SQL}"
        sets, set_params = set_sql(
            rules.claimed_task(
                Column("attempts"), node_id, adapt(now), adapt(lease_until), buffered=buffered
            )
        )
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {_TASK} SET {sets} WHERE "
                + self.dialect.id_among(
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
            late = self.dialect.record_in(self, node_id, outcomes)
            if any(o.gated for o in outcomes):
                self.dialect.notify(self, "task")  # a lock or a limit has room again
        self.dialect.record_late(self, late)

    def _still_running(self, node_id: str, task_ids: list[int]) -> set[int]:
        """Which of ``task_ids`` this node still runs (the others were reaped meanwhile:
        their outcome is not written)."""
        running: set[int] = set()
        tasks = Task.objects.using(self.using)
        for i in range(0, len(task_ids), _CHUNK):
            running.update(
                tasks.filter(
                    id__in=task_ids[i : i + _CHUNK], locked_by=node_id, status=TaskStatus.RUNNING
                ).values_list("id", flat=True)
            )
        return running

    def _record_runs(
        self, node_id: str, outcomes: list[RunOutcome], still_running: set[int] | None = None
    ) -> None:
        """Write the runs and tasks of ``outcomes`` (in the caller's transaction): a run
        row for each end that writes one (:func:`~django_htask.store.rules.writes_run`).
        ``still_running``: which of their tasks this node still runs, if known (read otherwise):
        the others were reaped meanwhile, and their outcome is not written."""
        runs = Run.objects.using(self.using)
        task_outcomes = [outcome for outcome in outcomes if outcome.task_id is not None]
        if still_running is None:
            ids = [outcome.task_id for outcome in task_outcomes if outcome.task_id]
            still_running = self._still_running(node_id, ids)
        ended = [outcome for outcome in task_outcomes if outcome.task_id in still_running]
        for outcome in outcomes:
            if outcome.task_id is None and outcome.run_id is not None:
                runs.filter(id=outcome.run_id, status=RunStatus.RUNNING).update(
                    status=outcome.status,
                    finished_at=outcome.finished_at,
                    duration=outcome.duration,
                    error=outcome.error,
                    traceback=outcome.traceback,
                )
        if ended:
            followed = self._end_tasks(node_id, ended)
            self._insert_runs(rules.runs_written(ended, get_settings().record_every_attempt))
            self._follow_ends(followed, max(outcome.finished_at for outcome in ended))

    def _end_tasks(self, node_id: str, outcomes: list[RunOutcome]) -> list[int]:
        """Write the tasks whose attempt ended: finished, or pending again for a retry
        (the dialect's ``write_ends``) or after a snooze (:meth:`_write_snoozes`). Return the
        finished ones whose end is followed up (:meth:`_follow_ends`): those the claim
        said so, and those that became so while they ran (:meth:`_write_plain_ends`)."""
        adapt = self.connection.ops.adapt_datetimefield_value
        plain: list[TaskEnd] = []  # finished, nothing follows as the claim read it
        others: list[TaskEnd] = []
        snoozed = []
        followed = [
            outcome.task_id for outcome in outcomes if outcome.follow and outcome.retry_at is None
        ]
        for outcome in outcomes:
            if outcome.status == RunStatus.SNOOZED:
                snoozed.append(outcome)
                continue
            end = rules.ended_task(outcome)
            row = TaskEnd(
                end["status"],
                adapt(end.get("run_at")),
                adapt(end["finished_at"]),
                end["last_error"],
                end["traceback"],
                end["result"],
                adapt(outcome.started_at) if outcome.start_unwritten else None,
                outcome.task_id,
            )
            (plain if outcome.retry_at is None and not outcome.follow else others).append(row)
        retried = [
            outcome.task_id
            for outcome in outcomes
            if outcome.task_id is not None and outcome.retry_at is not None
        ]
        grown: list[int] = []

        def write() -> int:
            if others:
                self.dialect.write_ends(self, others)
            grown[:] = self._write_plain_ends(node_id, plain) if plain else []
            if snoozed:
                self._write_snoozes(snoozed)
            return len(others) + len(plain) + len(snoozed)

        if not retried:
            write()
        else:
            now = max(outcome.finished_at for outcome in outcomes)
            if put_back(self.using, retried, TaskStatus.RUNNING, now, write)[1]:
                grown += self._ended_followed(retried)  # superseded: cancelled
        return [i for i in followed if i is not None] + grown

    def _write_plain_ends(self, node_id: str, ends: list[TaskEnd]) -> list[int]:
        """Write the finished tasks of ``ends`` whose claim said nothing follows their
        end, guarded by that (``followed`` false, the dialect's ``write_ends``); a task others
        came to wait on while it ran is refused by the guard, then written as the
        followed ones are: return those (no statement more when there are none)."""
        if self.dialect.write_ends(self, ends, guard=True) == len(ends):
            return []
        refused = self._refused(node_id, [end.id for end in ends if end.id is not None])
        self.dialect.write_ends(self, [end for end in ends if end.id in refused])
        return sorted(refused)

    def _refused(self, node_id: str, task_ids: list[int]) -> set[int]:
        """Which of ``task_ids`` (whose end was just written) this node still runs: the
        guard of :meth:`_write_plain_ends` refused them."""
        return self._still_running(node_id, task_ids)

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
                    f"UPDATE {_TASK}{self.dialect.by_id} SET {sets} "
                    f"WHERE id IN ({', '.join(['%s'] * len(ids))}) AND status = %s",
                    [*params, *ids, TaskStatus.RUNNING],
                )

    def count_pending_tasks(self) -> int:
        return Task.objects.using(self.using).filter(status=TaskStatus.PENDING).count()


def gate_keys(chosen: list[Gated], limits: dict[str, int]) -> list[str]:
    """What a claim of ``chosen`` locks (sorted): their locks, their functions with a
    limit, their flows with a per-key limit or a rate limit, their limited queues."""
    keys = {f"lock:{g.lock}" for g in chosen if g.lock is not None}
    keys |= {f"function:{g.function}" for g in chosen if g.max_running is not None}
    keys |= {
        f"flow:{g.flow}"
        for g in chosen
        if g.flow is not None and (g.rate_limit is not None or g.max_running is not None)
    }
    keys |= {f"queue:{g.queue}" for g in chosen if g.queue in limits}
    return sorted(keys)


def _leave_out(
    flows: dict[str, tuple[str, str | None]], picked: list[Gated]
) -> tuple[str, list[Any]]:
    """A gated walk's condition that leaves out the tasks of ``flows`` (each its
    function and per key) and those ``picked``, and its parameters."""
    sql, params = "", list[Any]()
    for function, per in flows.values():
        if per is None:  # a rate limit of the whole function
            sql += " AND (function <> %s OR per_key IS NOT NULL OR rate_limit IS NULL)"
            params.append(function)
        else:
            sql += " AND (function <> %s OR per_key IS NULL OR per_key <> %s)"
            params += [function, per]
    if picked and flows:
        sql += f" AND id NOT IN ({', '.join(['%s'] * len(picked))})"
        params += [g.id for g in picked]
    return sql, params


def started_task(
    row: Sequence[Any], as_datetime: Callable[[Any], datetime] = lambda v: v
) -> StartedTask:
    """The :class:`StartedTask` of the values of :data:`STARTED_FIELDS`."""
    (
        task_id,
        token,
        function,
        payload,
        run_at,
        attempts,
        max_attempts,
        priority,
        timeout,
        snoozes,
        max_snoozes,
        followed,
        *retry,
    ) = row
    columns = base.RetryColumns(*retry)
    if columns == base.DEFAULT_RETRY:
        columns = base.DEFAULT_RETRY  # one object for the many tasks without a policy
    return StartedTask(
        task_id,
        token,
        function,
        bytes(payload),
        as_datetime(run_at),
        attempts,
        max_attempts,
        priority,
        timeout,
        columns,
        snoozes=snoozes,
        max_snoozes=max_snoozes,
        follow=bool(followed),
    )
