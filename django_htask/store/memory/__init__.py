"""The whole store interface in memory: a node's logic without a database.

:class:`InMemoryStore` keeps nodes, schedules, tasks and runs in dictionaries under one
lock (each method is one atomic step, as each database method is one transaction), and
behaves as the database stores do: versions that only grow, the compare-and-set that
fires an occurrence once, claims of what workers take, fencing, reaping, abandoning.
The same contract tests run on it and on SQLite and PostgreSQL
(``tests/contract/``). Several nodes may share one (it supports several nodes, and
notifies its listeners as PostgreSQL does).

It is for tests, the node's own and users': see :mod:`django_htask.testing`. An outage
of the database is :meth:`InMemoryStore.outage`: every method of the interface raises
:class:`~django_htask.exceptions.StoreUnavailable` until it ends, as a database store's
do when its database is away.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django_htask.conf import get_settings
from django_htask.enums import RunStatus, TaskStatus
from django_htask.exceptions import StoreUnavailable
from django_htask.querysets import (
    batch_is_spent,
    run_is_expired,
    task_is_claimable,
    task_is_expired,
    task_is_holding,
    task_is_served,
)
from django_htask.queues import QueueFilter, QueueStates
from django_htask.retention import Cutoffs
from django_htask.store import base, rules, values
from django_htask.store.base import (
    Gated,
    Pruned,
    RunOutcome,
    ScheduleRef,
    ScheduleRow,
    StartedTask,
    Store,
    Window,
    holders,
    holds_place,
    open_queues,
    pick_gated,
)

from .nodes import MemoryNodes
from .outside import OutsideWrites
from .records import MemoryTables, NodeRecord, ScheduleRecord, TaskRecord, _Listener, _set

__all__ = ["InMemoryStore", "NodeRecord", "ScheduleRecord", "TaskRecord"]


class InMemoryStore(OutsideWrites, MemoryNodes, MemoryTables, Store):
    """A store in memory (see the module). ``clock`` gives "now" to the helpers that add
    rows (:meth:`add_schedule`)."""

    vendor = "memory"
    supports_several_nodes = True

    @contextmanager
    def outage(self, reason: str = "connection refused") -> Iterator[None]:
        """The database away for the block: every method of the store interface raises
        :class:`~django_htask.exceptions.StoreUnavailable` (its cause a
        ``ConnectionError(reason)``), but for :meth:`close` and :meth:`refresh` (a
        connection dropped needs no database). The helpers for tests
        (:meth:`add_task`, :meth:`runs_of` ...) go on working: they are the outside."""
        if self.away is not None:
            raise RuntimeError(f"the store is in an outage already ({self.away})")
        self.away = reason
        try:
            yield
        finally:
            self.away = None

    def aborts(self, node_id: str) -> list[tuple[str, int]]:
        with self._lock:
            tasks = [
                ("task", t.id)
                for t in self.tasks.values()
                if t.abort_requested_at is not None
                and t.locked_by == node_id
                and t.status == TaskStatus.RUNNING
            ]
            runs = [
                ("run", i)
                for i in sorted(self.run_aborts)
                if self.runs[i].node == node_id and self.runs[i].status == RunStatus.RUNNING
            ]
            return tasks + runs

    # -- the store -------------------------------------------------------------------
    def _listen(self, to: values.ListenTo) -> _Listener:
        on_notify, on_reconnect = to.on_notify, to.on_reconnect
        listener = _Listener(self, (on_notify, on_reconnect))
        self._listeners.add(listener)
        return listener

    def check_migrated(self) -> None:
        pass

    def install(self) -> None:
        pass

    def notify_nodes(self) -> None:
        pass  # one process: its node is woken by the caller

    def describe(self) -> str:
        return "memory (django_htask.testing.InMemoryStore)"

    def close(self) -> None:
        pass

    def refresh(self) -> None:
        pass

    # -- schedules -------------------------------------------------------------------
    def load_schedules(self) -> tuple[list[ScheduleRef], int]:
        with self._lock:
            refs = [
                ScheduleRef(s.id, s.next_run_at, s.version, queue=s.queue_name)
                for s in self.schedules.values()
                if s.enabled and s.next_run_at is not None
            ]
            return refs, self._top()

    def _top(self) -> int:
        return max((s.version for s in self.schedules.values()), default=0)

    def changed_schedules(self, since: int) -> tuple[list[ScheduleRef], int]:
        with self._lock:
            changed = sorted(
                (s for s in self.schedules.values() if s.version > since), key=lambda s: s.version
            )
            refs = [
                ScheduleRef(s.id, s.next_run_at, s.version, s.enabled, s.queue_name)
                for s in changed
            ]
            return refs, max([since, *(r.version for r in refs)])

    def get_schedule(self, schedule_id: int) -> ScheduleRow | None:
        with self._lock:
            record = self.schedules.get(schedule_id)
            if record is None:
                return None
            return ScheduleRow(
                record.id,
                record.name,
                record.function,
                record.schedule,
                record.timezone,
                record.payload,
                record.enabled,
                record.next_run_at,
                record.grace,
                record.catch_up,
                record.overlap,
                record.max_attempts,
                record.retry_backoff,
                record.version,
                record.queue_name,
                record.timeout,
                record.retry,
            )

    def running_elsewhere(self, schedule_id: int, node_id: str, dead_before: datetime) -> list[str]:
        with self._lock:
            live = self._live(dead_before)
            return sorted(
                {
                    r.node
                    for r in self.runs.values()
                    if r.schedule_id == schedule_id
                    and r.status == RunStatus.RUNNING
                    and r.node != node_id
                    and r.node in live
                }
            )

    def _claim_occurrence(self, occurrence: values.Occurrence) -> list[int] | None:
        node_id, row, next_run_at, now, runs = occurrence
        with self._lock:
            self._fence(node_id)
            record = self.schedules.get(row.id)
            if (
                record is None
                or not record.enabled
                or (record.next_run_at, record.version) != (row.next_run_at, row.version)
            ):
                return None
            record.next_run_at = next_run_at
            if runs:
                record.last_run_at, record.last_status = now, runs[-1].status
            record.version = next(self._versions)
            return [self._run(run, schedule_id=row.id) for run in runs]

    def _mark_broken(self, breakage: values.Breakage) -> bool:
        node_id, schedule_id, version, reason, run = breakage
        with self._lock:
            self._fence(node_id)
            record = self.schedules.get(schedule_id)
            if record is None or (version is not None and record.version != version):
                return False
            record.next_run_at, record.broken = None, rules.broken_reason(reason)
            record.last_status, record.last_run_at = run.status, run.finished_at
            record.version = next(self._versions)
            self._run(run, schedule_id=schedule_id)
            return True

    def start_schedule_run(self, node_id: str, outcome: RunOutcome) -> int:
        with self._lock:
            self._fence(node_id)
            return self._run(outcome)

    # -- one-off tasks ---------------------------------------------------------------
    @staticmethod
    def _served(task: TaskRecord, serving: base.Serving, queues: QueueFilter) -> bool:
        return task_is_served(task.queue_name, task.backend, queues, serving.backend)

    @staticmethod
    def _claimable(task: TaskRecord, now: datetime) -> bool:
        return task_is_claimable(
            task.status, task.run_at, task.locked_by, task.lease_expires_at, now
        )

    def task_outlook(
        self, now: datetime, serving: base.Serving = base.SERVE_ALL
    ) -> tuple[bool, datetime | None]:
        with self._lock:
            claimed, plain = serving.claimed, serving.plain
            served = [t for t in self.tasks.values() if self._served(t, serving, claimed)]
            due = any(
                self._claimable(t, now) and not t.gated and self._served(t, serving, plain)
                for t in served
            )
            wake_at = None
            if not due:
                picked, wake_at = self._choose_gated(self._due(now, serving), now, 1, serving)
                due = bool(picked)
            later = [t.run_at for t in served if t.status == TaskStatus.PENDING and t.run_at > now]
            return due, values.earliest(min(later, default=None), wake_at)

    def _due(self, now: datetime, serving: base.Serving) -> list[TaskRecord]:
        """The tasks a claim may take, in its order, with the lock held."""
        claimed = serving.claimed
        return sorted(
            (
                t
                for t in self.tasks.values()
                if self._claimable(t, now) and self._served(t, serving, claimed)
            ),
            key=lambda t: (-t.priority, t.run_at, t.id),
        )

    def _choose_gated(
        self, due: list[TaskRecord], now: datetime, limit: int, serving: base.Serving
    ) -> tuple[list[Gated], datetime | None]:
        """The tasks among ``due`` with a lock or a limit (their own, or their queue's)
        a claim of ``limit`` starts (as the database stores pick them:
        :func:`~django_htask.store.base.pick_gated`, then
        :func:`~django_htask.store.base.open_queues`), and the first instant a task
        held back by its rate limit may start, with the lock held."""
        limits = serving.limits
        running = [
            (t.lock, t.function, t.queue_name, t.per_key)
            for t in self.tasks.values()
            if task_is_holding(t.status, t.lease_expires_at, now)
        ]
        held = holders(running, now)
        gated = [t.as_gated() for t in due if t.gated]
        flows = held.unread(gated)
        held.read_windows(flows, self._windows(flows, now))
        picked = pick_gated(gated, held, limit, limits)
        for queue, room in open_queues(limits, held):
            want = min(room, limit - len(picked))
            others = [
                Gated(t.id, None, t.function, None, queue)
                for t in due
                if t.queue_name == queue and not t.gated
            ]
            picked += pick_gated(others, held, want)
        return picked, held.wake_at

    def _windows(self, flows: list[str], now: datetime) -> list[Window]:
        """The windows of ``flows`` at ``now``: their slots not expired, with the lock
        held."""
        found: dict[str, list[tuple[datetime, datetime]]] = {}
        wanted = set(flows)
        for flow, started_at, expires_at in self.slots:
            if flow in wanted and expires_at > now:
                found.setdefault(flow, []).append((expires_at, started_at))
        return [
            Window(flow, len(s), min(e for e, _s in s), max(st for _e, st in s))
            for flow, s in found.items()
        ]

    def _take_slots(self, now: datetime, started: list[Gated]) -> None:
        """Count the starts of the rate-limited ``started`` against their flows, and
        let their flows' expired slots go, with the lock held."""
        flows = {g.flow for g in started}
        self.slots = [slot for slot in self.slots if slot[0] not in flows or slot[2] > now]
        self.slots += [
            (g.flow, now, now + timedelta(seconds=g.rate_period))
            for g in started
            if g.flow is not None and g.rate_period is not None
        ]

    def _start_tasks(self, claim: values.Claim) -> values.Started:
        node_id, now, limit, lease_until = claim.node_id, claim.now, claim.limit, claim.lease_until
        finished, serving = claim.finished, claim.serving
        with self._lock:
            self._fence(node_id)
            released = self._record(node_id, finished)
            due = self._due(now, serving)
            chosen, wake_at = self._choose_gated(due, now, limit, serving)
            self._take_slots(now, [g for g in chosen if g.rate_limit is not None])
            picked = {g.id for g in chosen}
            places = {g.id for g in chosen if holds_place(g, serving.limits)}
            limited = serving.limits
            plain = [t for t in due if not t.gated and t.queue_name not in limited]
            started = values.Started(wake_at=wake_at)
            for task in [t for t in due if t.id in picked] + plain[: limit - len(picked)]:
                _set(task, rules.claimed_task(task.attempts, node_id, now, lease_until))
                started.append(
                    StartedTask(
                        task.id,
                        task.token,
                        task.function,
                        task.payload,
                        task.run_at,
                        task.attempts,
                        task.max_attempts,
                        task.priority,
                        task.timeout,
                        task.retry,
                        task.id in places,
                        task.snoozes,
                        task.max_snoozes,
                        task.followed,
                    )
                )
        if released:
            self._notify("task")
        return started

    def record(self, node_id: str, outcomes: list[RunOutcome]) -> None:
        if not outcomes:
            return
        with self._lock:
            self._fence(node_id)
            released = self._record(node_id, outcomes)
        if released:
            self._notify("task")

    def _record(self, node_id: str, outcomes: list[RunOutcome]) -> bool:
        """Write ``outcomes``, with the lock held; return whether a task with a lock or
        a limit ended, or a waiting task was released (the others are told, as
        PostgreSQL's store does)."""
        released = False
        for outcome in outcomes:
            if outcome.task_id is not None:
                task = self.tasks.get(outcome.task_id)
                if task is None or task.locked_by != node_id or task.status != TaskStatus.RUNNING:
                    continue  # reaped meanwhile: the survivors' record stands
                released = released or outcome.gated
                if outcome.status == RunStatus.SNOOZED:
                    changes = rules.snoozed_task(outcome.retry_at, task.attempts, task.snoozes)
                else:
                    changes = rules.ended_task(outcome)
                self._write(task, changes, outcome.finished_at)
                if rules.writes_run(outcome, get_settings().record_every_attempt):
                    self._run(outcome)
            elif outcome.run_id is not None:
                run = self.runs.get(outcome.run_id)
                if run is not None and run.status == RunStatus.RUNNING:
                    run.status, run.finished_at, run.duration = (
                        outcome.status,
                        outcome.finished_at,
                        outcome.duration,
                    )
                    run.error, run.traceback = outcome.error, outcome.traceback
        if self._ended:  # what follows the ends, in the same step
            released = (
                self._follow_ended(max(outcome.finished_at for outcome in outcomes)) or released
            )
        for schedule_id, (status, when) in values.last_statuses(outcomes).items():
            s = self.schedules.get(schedule_id)
            if s is not None and (s.last_run_at is None or s.last_run_at <= when):
                s.last_status, s.last_run_at = status, when
        return released

    def count_pending_tasks(self) -> int:
        with self._lock:
            return sum(1 for t in self.tasks.values() if t.status == TaskStatus.PENDING)

    def queue_states(self) -> QueueStates:
        with self._lock:
            return QueueStates.of((q.name, q.paused, q.max_running) for q in self.queues.values())

    # -- maintenance -----------------------------------------------------------------
    def prune(self, node_id: str, cutoffs: Cutoffs, limit: int) -> Pruned | None:
        with self._lock:
            tasks = self._expired_tasks(cutoffs)[:limit]
            doomed = set(tasks)
            runs = [i for i, r in self.runs.items() if r.task_id in doomed]
            more = len(tasks) >= limit
            if not more:
                left = limit - len(tasks)
                old = [i for i in self._expired_runs(cutoffs) if i not in set(runs)][:left]
                runs += old
                more = len(old) >= left
            nodes: list[str] = []
            if not more and cutoffs.runs is not None:
                cutoff = cutoffs.runs
                nodes = [
                    n.id
                    for n in self.nodes.values()
                    if n.stopped_at is not None and n.stopped_at < cutoff
                ]
            batches = {self.tasks[i].batch_id for i in tasks} - {None}
            self.edges = [e for e in self.edges if e.task_id not in doomed]
            for task_id in tasks:
                del self.tasks[task_id]
            for batch_id in batches:
                self._drop_if_spent(batch_id)
            for run_id in runs:
                del self.runs[run_id]
                self.run_aborts.discard(run_id)
            for gone in nodes:
                del self.nodes[gone]
            if not more:  # the expired slots of rate limits, at most ``limit``
                expired = [i for i, slot in enumerate(self.slots) if slot[2] <= cutoffs.now]
                dropped = set(expired[:limit])
                self.slots = [slot for i, slot in enumerate(self.slots) if i not in dropped]
                more = len(dropped) >= limit
            pruned = Pruned(len(tasks), len(runs), len(nodes), more)
            node = self.nodes.get(node_id)
            if node is not None and pruned.rows:
                node.pruned_tasks += pruned.tasks
                node.pruned_runs += pruned.runs
                node.pruned_at = cutoffs.now
            return pruned

    def _drop_if_spent(self, batch_id: int | None) -> None:
        """Delete batch ``batch_id``'s row if it is spent (:func:`batch_is_spent`)."""
        batch = self.batches.get(batch_id or 0)
        if batch is not None:
            left = sum(1 for t in self.tasks.values() if t.batch_id == batch.id)
            if batch_is_spent(batch.finished_at, left):
                del self.batches[batch.id]

    def expired(self, cutoffs: Cutoffs) -> Pruned:
        with self._lock:
            tasks = set(self._expired_tasks(cutoffs))
            runs = set(self._expired_runs(cutoffs))
            runs |= {i for i, r in self.runs.items() if r.task_id in tasks}
            nodes = 0
            if cutoffs.runs is not None:
                cutoff = cutoffs.runs
                nodes = sum(
                    1 for n in self.nodes.values() if n.stopped_at and n.stopped_at < cutoff
                )
            return Pruned(len(tasks), len(runs), nodes)

    def _expired_tasks(self, cutoffs: Cutoffs) -> list[int]:
        """The tasks past their retention, the oldest first."""
        expired = [
            t
            for t in self.tasks.values()
            if task_is_expired(t.status, t.finished_at, t.retention, cutoffs)
        ]
        return [t.id for t in sorted(expired, key=lambda t: (t.finished_at, t.id))]

    def _expired_runs(self, cutoffs: Cutoffs) -> list[int]:
        """The runs past ``RUN_RETENTION_DAYS``, the oldest first."""
        old = [
            (r.started_at, i)
            for i, r in self.runs.items()
            if run_is_expired(r.status, r.started_at, cutoffs.runs)
        ]
        return [i for _started, i in sorted(old)]


#: What an outage leaves working (:meth:`InMemoryStore.outage`).
_LOCAL = frozenset({"close", "refresh"})


def _away_check(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def checked(store: InMemoryStore, *args: Any, **kwargs: Any) -> Any:
        reason = store.away
        if reason is not None:
            raise StoreUnavailable(reason) from ConnectionError(reason)
        return method(store, *args, **kwargs)

    return checked


for _name in base.INTERFACE - _LOCAL:
    setattr(InMemoryStore, _name, _away_check(getattr(InMemoryStore, _name)))
