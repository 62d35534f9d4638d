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

import dataclasses
import functools
import itertools
import secrets
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django_htask.engine import Clock, SystemClock, encode_call, parse_schedule
from django_htask.enums import RunStatus, TaskStatus
from django_htask.exceptions import DuplicateKey, NodeFenced, StoreUnavailable
from django_htask.keys import OnConflict, check_key, check_lock, superseded_reason
from django_htask.querysets import (
    node_is_live,
    node_is_silent,
    task_is_claimable,
    task_is_lost,
)
from django_htask.queues import DEFAULT_QUEUE, QueueFilter
from django_htask.retry import RetryPolicy

from . import base, rules, values
from .base import (
    DEFAULT_RETRY,
    Gated,
    RetryColumns,
    RunOutcome,
    ScheduleRef,
    ScheduleRow,
    StartedTask,
    Store,
    pick_gated,
)

__all__ = ["InMemoryStore", "NodeRecord", "ScheduleRecord", "TaskRecord"]


def _set(row: Any, changes: dict[str, Any]) -> None:
    """Write ``changes`` (a rule's, :mod:`~django_htask.store.rules`) on a record."""
    for name, value in changes.items():
        setattr(row, name, value)


@dataclass
class NodeRecord:
    id: str
    hostname: str
    pid: int
    version: str
    started_at: datetime
    last_heartbeat: datetime
    queues: str = "*"
    stopped_at: datetime | None = None


@dataclass
class ScheduleRecord:
    id: int
    name: str
    function: str
    schedule: str
    timezone: str = "UTC"
    payload: bytes = b""
    enabled: bool = True
    next_run_at: datetime | None = None
    grace: float | None = None
    catch_up: str = "latest"
    overlap: str = "skip"
    max_attempts: int = 1
    retry_backoff: float = 10.0
    version: int = 0
    queue_name: str = DEFAULT_QUEUE
    timeout: float | None = None
    retry: RetryColumns = DEFAULT_RETRY
    last_run_at: datetime | None = None
    last_status: str = ""
    broken: str = ""


@dataclass
class TaskRecord:
    id: int
    function: str
    payload: bytes
    run_at: datetime
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    status: str = TaskStatus.PENDING
    attempts: int = 0
    max_attempts: int = 1
    priority: int = 0
    queue_name: str = DEFAULT_QUEUE
    backend: str = ""
    timeout: float | None = None
    retry: RetryColumns = DEFAULT_RETRY
    locked_by: str | None = None
    lease_expires_at: datetime | None = None
    abort_requested_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_error: str = ""
    traceback: str = ""
    result: bytes | None = None
    key: str | None = None
    lock: str | None = None
    max_running: int | None = None

    @property
    def gated(self) -> bool:
        """It has a lock or a limit."""
        return self.lock is not None or self.max_running is not None


class _Listener:
    """What :meth:`InMemoryStore.listen` returns: it is listening at once."""

    def __init__(self, store: InMemoryStore, callbacks: tuple[Callable[..., None], ...]) -> None:
        self._store = store
        self.callbacks = callbacks
        self.listening = threading.Event()
        self.listening.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._store._listeners.discard(self)
        self.listening.clear()


class InMemoryStore(Store):
    """A store in memory (see the module). ``clock`` gives "now" to the helpers that add
    rows (:meth:`add_schedule`) and to :meth:`prune_runs`."""

    vendor = "memory"
    supports_several_nodes = True

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.RLock()
        self.nodes: dict[str, NodeRecord] = {}
        self.schedules: dict[int, ScheduleRecord] = {}
        self.tasks: dict[int, TaskRecord] = {}
        #: The runs, by id (``run_id``), as :class:`RunOutcome` s.
        self.runs: dict[int, RunOutcome] = {}
        self.run_aborts: set[int] = set()  # runs whose abort was asked for
        self._ids = itertools.count(1)
        self._versions = itertools.count(1)
        self._listeners: set[_Listener] = set()
        #: Why the database is away, during an :meth:`outage` (None otherwise).
        self.away: str | None = None

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

    # -- helpers for tests: rows as another process would write them ------------------
    def add_schedule(
        self,
        name: str,
        function: str,
        schedule: str,
        *,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        next_run_at: datetime | None = None,
        **fields: Any,
    ) -> int:
        """A schedule, as ``Schedule(...).save()`` makes it (``next_run_at``: the next
        occurrence after now, unless given). Return its id."""
        tz = fields.get("timezone", "UTC")
        if next_run_at is None and fields.get("enabled", True):
            next_run_at = parse_schedule(schedule, tz=tz or None).next_after(self.clock.now())
        with self._lock:
            row = ScheduleRecord(
                next(self._ids),
                name,
                function,
                schedule,
                payload=encode_call(function, tuple(args), dict(kwargs or {})),
                next_run_at=next_run_at,
                version=next(self._versions),
                **fields,
            )
            self.schedules[row.id] = row
        self._notify("schedule")
        return row.id

    def update_schedule(self, schedule_id: int, **changes: Any) -> None:
        """Change a schedule's fields, as ``QuerySet.update()`` or raw SQL would (its
        version rises)."""
        with self._lock:
            row = self.schedules[schedule_id]
            for key, value in changes.items():
                setattr(row, key, value)
            row.version = next(self._versions)
        self._notify("schedule")

    def add_task(
        self,
        function: str,
        *args: Any,
        run_at: datetime | None = None,
        max_attempts: int = 1,
        priority: int = 0,
        queue_name: str = DEFAULT_QUEUE,
        timeout: float | None = None,
        retry: RetryColumns = DEFAULT_RETRY,
        key: str | None = None,
        on_conflict: str = OnConflict.IGNORE,
        lock: str | None = None,
        max_running: int | None = None,
        **kwargs: Any,
    ) -> int:
        """A pending one-off task ``function(*args, **kwargs)``, as ``schedule()`` makes
        it (due now unless ``run_at``). Return its id. With a ``key`` another pending
        task holds, ``on_conflict`` decides, as for ``schedule()``: that task's id is
        returned (``replace``: moved to this call first), or DuplicateKey is raised."""
        conflict = OnConflict.of(on_conflict)
        with self._lock:
            task = TaskRecord(
                next(self._ids),
                function,
                encode_call(function, args, kwargs),
                run_at or self.clock.now(),
                max_attempts=max_attempts,
                priority=priority,
                queue_name=queue_name,
                timeout=timeout,
                retry=retry,
                key=None if key is None else check_key(key),
                lock=None if lock is None else check_lock(lock),
                max_running=max_running,
            )
            held = self._pending_with(task.key)
            if held is None:
                self.tasks[task.id] = task
            elif conflict is OnConflict.RAISE:
                raise DuplicateKey(held.key or "", held.token)
            elif conflict is OnConflict.IGNORE:
                return held.id
            else:
                for name in (
                    "function",
                    "payload",
                    "run_at",
                    "max_attempts",
                    "timeout",
                    "retry",
                    "lock",
                    "max_running",
                ):
                    setattr(held, name, getattr(task, name))
                held.queue_name, held.priority, held.attempts = queue_name, priority, 0
                held.locked_by = held.lease_expires_at = None
                held.last_error = held.traceback = ""
                task = held
        self._notify("task")
        return task.id

    def _pending_with(self, key: str | None) -> TaskRecord | None:
        """The pending task holding ``key`` (None for no key), with the lock held."""
        if key is None:
            return None
        return next(
            (t for t in self.tasks.values() if t.key == key and t.status == TaskStatus.PENDING),
            None,
        )

    def _superseded(self, task: TaskRecord, now: datetime) -> bool:
        """Whether ``task``, about to be put back to pending, is superseded by a pending
        task holding its key: if so it is finished as cancelled (as the database stores'
        ``supersede``), with the lock held."""
        held = self._pending_with(task.key)
        if held is None or held is task:
            return False
        task.status, task.finished_at = TaskStatus.CANCELLED, now
        task.locked_by = task.lease_expires_at = None
        task.last_error, task.traceback = superseded_reason(held.token), ""
        return True

    def cancel_task(self, task_id: int) -> bool:
        """Cancel a pending task (``cancel(token)``); False if it is not pending."""
        with self._lock:
            task = self.tasks[task_id]
            if task.status != TaskStatus.PENDING:
                return False
            task.status, task.finished_at = TaskStatus.CANCELLED, self.clock.now()
            task.locked_by = task.lease_expires_at = None
        self._notify("task")
        return True

    def request_abort(self, *, task_id: int | None = None, run_id: int | None = None) -> bool:
        """Ask for the abort of a running task or schedule run (as ``abort(token)`` and
        the admin do); False if it is not running, or was asked already."""
        with self._lock:
            now = self.clock.now()
            if task_id is not None:
                task = self.tasks[task_id]
                if task.status != TaskStatus.RUNNING or task.abort_requested_at is not None:
                    return False
                task.abort_requested_at = now
            elif run_id is not None:
                if self.runs[run_id].status != RunStatus.RUNNING or run_id in self.run_aborts:
                    return False
                self.run_aborts.add(run_id)
        self._notify("task")
        return True

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

    def runs_of(
        self, *, schedule_id: int | None = None, task_id: int | None = None
    ) -> list[RunOutcome]:
        """The runs of a schedule or a task, in the order they were written (copies)."""
        with self._lock:
            return [
                dataclasses.replace(r)
                for r in self.runs.values()
                if (schedule_id is None or r.schedule_id == schedule_id)
                and (task_id is None or r.task_id == task_id)
            ]

    def _notify(self, payload: str) -> None:
        for listener in list(self._listeners):
            listener.callbacks[0](payload)

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

    def describe(self) -> str:
        return "memory (django_htask.testing.InMemoryStore)"

    def close(self) -> None:
        pass

    def refresh(self) -> None:
        pass

    def _fence(self, node_id: str) -> NodeRecord:
        node = self.nodes.get(node_id)
        if node is None or node.stopped_at is not None:
            raise NodeFenced(node_id, None if node is None else node.stopped_at)
        return node

    def _run(self, o: RunOutcome, schedule_id: int | None = None) -> int:
        """Write a run row (a copy of ``o``); return its id."""
        run_id = next(self._ids)
        self.runs[run_id] = dataclasses.replace(
            o, run_id=run_id, schedule_id=schedule_id or o.schedule_id, extra={}
        )
        return run_id

    # -- nodes -----------------------------------------------------------------------
    def _register(self, r: values.Registration) -> None:
        node_id, hostname, pid, version, now, queues = r
        with self._lock:
            self.nodes[node_id] = NodeRecord(node_id, hostname, pid, version, now, now, str(queues))
        self._notify("node")

    def heartbeat(self, node_id: str, now: datetime, lease_until: datetime) -> int:
        with self._lock:
            self._fence(node_id).last_heartbeat = now
            return self._renew(node_id, lease_until)

    def _renew(self, node_id: str, lease_until: datetime) -> int:
        renewed = 0
        for task in self.tasks.values():
            if task.locked_by == node_id and task.status in (
                TaskStatus.PENDING,
                TaskStatus.RUNNING,
            ):
                task.lease_expires_at = lease_until
                renewed += 1
        return renewed

    def stop_node(self, node_id: str, now: datetime) -> None:
        with self._lock:
            node = self.nodes.get(node_id)
            if node is not None and node.stopped_at is None:
                node.stopped_at = now
        self._notify("node")

    def _abandon(self, d: values.Departure) -> None:
        node_id, now, abandoned, dead_at, heartbeat_at = d
        with self._lock:
            node = self._fence(node_id)
            for a in abandoned:
                if a.run_id is not None:
                    run = self.runs.get(a.run_id)
                    if run is not None and run.status == RunStatus.RUNNING:
                        _set(run, rules.abandoned_run(a, now))
                    continue
                task = self.tasks.get(a.task_id or 0)
                if task is None or task.locked_by != node_id or task.status != TaskStatus.RUNNING:
                    continue
                if a.started:
                    self._run(rules.crashed_run(task, task.id, node_id, now, a.error))
                self._write(task, rules.abandoned_task(a, task.attempts, now, dead_at), now)
            node.last_heartbeat = heartbeat_at

    def _write(self, task: TaskRecord, changes: dict[str, Any], now: datetime) -> None:
        """Set ``changes`` on ``task``, with the lock held; a task put back to pending
        is superseded instead when a pending task holds its key (then only its lease
        is let go, as the database stores' ``put_back``)."""
        if changes.get("status") == TaskStatus.PENDING and self._superseded(task, now):
            return
        _set(task, changes)

    def _live(self, dead_before: datetime) -> set[str]:
        return {
            n.id
            for n in self.nodes.values()
            if node_is_live(n.stopped_at, n.last_heartbeat, dead_before)
        }

    def live_nodes(self, dead_before: datetime) -> dict[str, tuple[datetime, QueueFilter]]:
        with self._lock:
            live = sorted(self._live(dead_before))
            return {
                i: (self.nodes[i].last_heartbeat, QueueFilter.parse(self.nodes[i].queues))
                for i in live
            }

    def nodes_on_host(self, hostname: str) -> list[tuple[str, int]]:
        with self._lock:
            return [
                (n.id, n.pid)
                for n in self.nodes.values()
                if n.hostname == hostname and n.stopped_at is None
            ]

    def declare_dead(self, node_ids: list[str], now: datetime) -> int:
        with self._lock:
            dead = [self.nodes[i] for i in node_ids if i in self.nodes]
            count = 0
            for node in dead:
                if node.stopped_at is None:
                    node.stopped_at = now
                    count += 1
            return count

    def take_over(
        self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy
    ) -> int:
        with self._lock:
            node = self.nodes.get(node_id)
            if node is None or node.stopped_at is not None:
                return 0
            node.stopped_at = now
            count, _dead_nodes = self._reap(now, dead_before, retry)
        self._reaped(count, 1)
        return count

    def reap(self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy) -> int:
        with self._lock:
            self._fence(node_id)
            count, dead_nodes = self._reap(now, dead_before, retry)
        self._reaped(count, dead_nodes)
        return count

    def _reaped(self, count: int, dead_nodes: int) -> None:
        if count > dead_nodes:
            self._notify("task")
        if dead_nodes:
            self._notify("node")

    def _reap(self, now: datetime, dead_before: datetime, retry: RetryPolicy) -> tuple[int, int]:
        """The reaper's work, with the lock held (see :meth:`reap`): the rows changed and
        the nodes declared dead."""
        count = 0
        for node in self.nodes.values():
            if node_is_silent(node.stopped_at, node.last_heartbeat, dead_before):
                node.stopped_at = now
                count += 1
        dead_nodes = count
        live = self._live(dead_before)
        for task in self.tasks.values():
            if not task_is_lost(task.locked_by, task.lease_expires_at, live, now):
                continue
            if task.status == TaskStatus.RUNNING:
                changes = rules.reaped_task(task, task.locked_by, task.retry, retry, now)
                holder = task.locked_by or "?"
                self._run(rules.crashed_run(task, task.id, holder, now, changes["last_error"]))
                self._write(task, changes, now)
                count += 1
            elif task.status == TaskStatus.PENDING and task.locked_by is not None:
                _set(task, rules.UNLOCKED)
                count += 1
        for run in self.runs.values():
            if run.status == RunStatus.RUNNING and run.node not in live:
                run.status, run.finished_at = RunStatus.FAILED, now
                run.error = rules.lost_run_error(run.error)
                count += 1
        return count, dead_nodes

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
            s = self.schedules.get(schedule_id)
            if s is None:
                return None
            return ScheduleRow(
                s.id,
                s.name,
                s.function,
                s.schedule,
                s.timezone,
                s.payload,
                s.enabled,
                s.next_run_at,
                s.grace,
                s.catch_up,
                s.overlap,
                s.max_attempts,
                s.retry_backoff,
                s.version,
                s.queue_name,
                s.timeout,
                s.retry,
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

    def _claim_occurrence(self, o: values.Occurrence) -> list[int] | None:
        node_id, row, next_run_at, now, runs = o
        with self._lock:
            self._fence(node_id)
            s = self.schedules.get(row.id)
            if (
                s is None
                or not s.enabled
                or (s.next_run_at, s.version) != (row.next_run_at, row.version)
            ):
                return None
            s.next_run_at = next_run_at
            if runs:
                s.last_run_at, s.last_status = now, runs[-1].status
            s.version = next(self._versions)
            return [self._run(o, schedule_id=row.id) for o in runs]

    def _mark_broken(self, b: values.Breakage) -> bool:
        node_id, schedule_id, version, reason, run = b
        with self._lock:
            self._fence(node_id)
            s = self.schedules.get(schedule_id)
            if s is None or (version is not None and s.version != version):
                return False
            s.next_run_at, s.broken = None, rules.broken_reason(reason)
            s.last_status, s.last_run_at = run.status, run.finished_at
            s.version = next(self._versions)
            self._run(run, schedule_id=schedule_id)
            return True

    def start_schedule_run(self, node_id: str, outcome: RunOutcome) -> int:
        with self._lock:
            self._fence(node_id)
            return self._run(outcome)

    # -- one-off tasks ---------------------------------------------------------------
    @staticmethod
    def _served(task: TaskRecord, serving: base.Serving) -> bool:
        if serving.backend is not None and task.backend != serving.backend:
            return False
        return serving.queues.serves(task.queue_name)

    @staticmethod
    def _claimable(task: TaskRecord, now: datetime) -> bool:
        return task_is_claimable(
            task.status, task.run_at, task.locked_by, task.lease_expires_at, now
        )

    def task_outlook(
        self, now: datetime, serving: base.Serving = base.SERVE_ALL
    ) -> tuple[bool, datetime | None]:
        with self._lock:
            served = [t for t in self.tasks.values() if self._served(t, serving)]
            due = any(self._claimable(t, now) and not t.gated for t in served)
            if not due:
                due = bool(self._choose_gated(self._due(now, serving), now, 1))
            later = [t.run_at for t in served if t.status == TaskStatus.PENDING and t.run_at > now]
            return due, min(later, default=None)

    def _due(self, now: datetime, serving: base.Serving) -> list[TaskRecord]:
        """The tasks a claim may take, in its order, with the lock held."""
        return sorted(
            (
                t
                for t in self.tasks.values()
                if self._claimable(t, now) and self._served(t, serving)
            ),
            key=lambda t: (-t.priority, t.run_at, t.id),
        )

    def _choose_gated(self, due: list[TaskRecord], now: datetime, limit: int) -> list[int]:
        """The ids of the tasks with a lock or a limit among ``due`` a claim of ``limit``
        starts (:func:`~django_htask.store.base.pick_gated`), with the lock held."""
        held: set[str] = set()
        running: Counter[str] = Counter()
        for t in self.tasks.values():
            lease = t.lease_expires_at
            if t.status == TaskStatus.RUNNING and lease is not None and lease >= now:
                running[t.function] += 1
                if t.lock is not None:
                    held.add(t.lock)
        gated = [Gated(t.id, t.lock, t.function, t.max_running) for t in due if t.gated]
        return [g.id for g in pick_gated(gated, held, running, limit)]

    def _start_tasks(self, c: values.Claim) -> list[StartedTask]:
        node_id, now, limit, lease_until, finished, serving = c
        with self._lock:
            self._fence(node_id)
            released = self._record(node_id, finished)
            due = self._due(now, serving)
            picked = set(self._choose_gated(due, now, limit))
            plain = [t for t in due if not t.gated][: limit - len(picked)]
            started = []
            for task in [t for t in due if t.id in picked] + plain:
                task.status, task.attempts, task.started_at = (
                    TaskStatus.RUNNING,
                    task.attempts + 1,
                    now,
                )
                task.locked_by, task.lease_expires_at = node_id, lease_until
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
                        task.gated,
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
        a limit ended (the others are told, as PostgreSQL's store does)."""
        released = False
        for o in outcomes:
            if o.task_id is not None:
                task = self.tasks.get(o.task_id)
                if task is None or task.locked_by != node_id or task.status != TaskStatus.RUNNING:
                    continue  # reaped meanwhile: the survivors' record stands
                released = released or task.gated
                task.locked_by = task.lease_expires_at = None
                task.last_error, task.traceback = o.error, o.traceback
                if o.retry_at is not None:
                    if not self._superseded(task, o.finished_at):
                        task.status, task.run_at = TaskStatus.PENDING, o.retry_at
                else:
                    task.status, task.finished_at = o.status, o.finished_at
                    task.result = o.result
                self._run(o)
            elif o.run_id is not None:
                run = self.runs.get(o.run_id)
                if run is not None and run.status == RunStatus.RUNNING:
                    run.status, run.finished_at, run.duration = o.status, o.finished_at, o.duration
                    run.error, run.traceback = o.error, o.traceback
        for schedule_id, (status, when) in values.last_statuses(outcomes).items():
            s = self.schedules.get(schedule_id)
            if s is not None and (s.last_run_at is None or s.last_run_at <= when):
                s.last_status, s.last_run_at = status, when
        return released

    def count_pending_tasks(self) -> int:
        with self._lock:
            return sum(1 for t in self.tasks.values() if t.status == TaskStatus.PENDING)

    # -- maintenance -----------------------------------------------------------------
    def prune_runs(self, days: int) -> int:
        cutoff = self.clock.now() - timedelta(days=days)
        with self._lock:
            old = [
                i
                for i, r in self.runs.items()
                if r.finished_at is not None
                and r.finished_at < cutoff
                and r.status != RunStatus.RUNNING
            ]
            for i in old:
                del self.runs[i]
            return len(old)


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
