"""The rows of :class:`~django_htask.store.memory.InMemoryStore` (records as the
database stores' tables hold them) and :class:`MemoryTables`, the state its parts
share."""

from __future__ import annotations

import dataclasses
import itertools
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django_htask.engine import Clock, SystemClock
from django_htask.enums import TaskStatus
from django_htask.exceptions import NodeFenced
from django_htask.keys import superseded_reason
from django_htask.querysets import node_is_live, task_is_plain
from django_htask.queues import DEFAULT_QUEUE
from django_htask.retention import FINAL_STATUSES
from django_htask.store import rules
from django_htask.store.base import DEFAULT_RETRY, Gated, RetryColumns, RunOutcome
from django_htask.store.follow import Edge, follow

from .follow import MemoryFollow


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
    pruned_tasks: int = 0
    pruned_runs: int = 0
    pruned_at: datetime | None = None
    stuck_threads: int = 0


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
    snoozes: int = 0
    max_snoozes: int | None = None
    priority: int = 0
    queue_name: str = DEFAULT_QUEUE
    backend: str = ""
    timeout: float | None = None
    retry: RetryColumns = DEFAULT_RETRY
    locked_by: str | None = None
    node: str | None = None  # the node that ran its last attempt
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
    retention: int | None = None  # seconds kept once finished (None: the settings')
    per_key: str | None = None
    rate_limit: int | None = None
    rate_period: int | None = None
    batch_id: int | None = None
    #: While waiting: how many of the tasks it runs after have not ended yet.
    waiting_on: int = 0
    #: Its end is followed up: it belongs to a batch, or tasks wait on it.
    followed: bool = False

    @property
    def gated(self) -> bool:
        """It has a lock or a limit."""
        return not task_is_plain(self.lock, self.max_running, self.rate_limit)

    def as_gated(self) -> Gated:
        """As a claim weighs it (:func:`~django_htask.store.base.pick_gated`)."""
        return Gated(
            self.id,
            self.lock,
            self.function,
            self.max_running,
            self.queue_name,
            self.per_key,
            self.rate_limit,
            self.rate_period,
        )


@dataclass
class BatchRecord:
    """A batch, as the ``Batch`` table holds it (the fields of ``rules.BatchFacts``)."""

    id: int
    name: str = ""
    total: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    finished_at: datetime | None = None
    failed_at: datetime | None = None
    on_success_id: int | None = None
    on_failure_id: int | None = None
    on_finish_id: int | None = None


@dataclass
class QueueRecord:
    name: str
    paused: bool = False
    max_running: int | None = None


class _Listener:
    """What :meth:`InMemoryStore.listen` returns: it is listening at once."""

    def __init__(self, store: MemoryTables, callbacks: tuple[Callable[..., None], ...]) -> None:
        self._store = store
        self.callbacks = callbacks
        self.listening = threading.Event()
        self.listening.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._store._listeners.discard(self)
        self.listening.clear()


class MemoryTables:
    """The rows of an in-memory store and what every part of it does with them, under
    one lock: fencing, a run's row, a task put back or superseded, who is live, and
    the listeners told of a change."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.RLock()
        self.nodes: dict[str, NodeRecord] = {}
        self.schedules: dict[int, ScheduleRecord] = {}
        self.tasks: dict[int, TaskRecord] = {}
        #: The runs, by id (``run_id``), as :class:`RunOutcome` s.
        self.runs: dict[int, RunOutcome] = {}
        self.run_aborts: set[int] = set()  # runs whose abort was asked for
        self.queues: dict[str, QueueRecord] = {}
        #: The starts rate limits count: (flow, the start, when it stops counting).
        self.slots: list[tuple[str, datetime, datetime]] = []
        self.batches: dict[int, BatchRecord] = {}
        #: The edges of the tasks' graphs (``Dependency`` rows), in the order written.
        self.edges: list[Edge] = []
        #: Tasks ended by the step under way whose end is followed up
        #: (:meth:`_follow_ended`).
        self._ended: list[int] = []
        self._ids = itertools.count(1)
        self._versions = itertools.count(1)
        self._listeners: set[_Listener] = set()
        #: The nodes holding a session (their heartbeat's): the presence that
        #: :meth:`~django_htask.store.Store.absent` reads, until :meth:`end_sessions`.
        self.sessions: set[str] = set()
        #: Why the database is away, during an
        #: :meth:`~django_htask.store.memory.InMemoryStore.outage` (None otherwise).
        self.away: str | None = None

    def _notify(self, payload: str) -> None:
        for listener in list(self._listeners):
            listener.callbacks[0](payload)

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
        holder = self._pending_with(task.key)
        if holder is None or holder is task:
            return False
        _set(task, rules.superseded_task(now, superseded_reason(holder.token)))
        return True

    def _write(self, task: TaskRecord, changes: dict[str, Any], now: datetime) -> None:
        """Set ``changes`` on ``task``, with the lock held; a task put back to pending
        is superseded instead when a pending task holds its key (then only its lease
        is let go, as the database stores' ``put_back``). A task that ends so, whose
        end is followed up, is noted for :meth:`_follow_ended`."""
        if not (changes.get("status") == TaskStatus.PENDING and self._superseded(task, now)):
            _set(task, changes)
        if task.followed and task.status in FINAL_STATUSES:
            self._ended.append(task.id)

    def _follow_ended(self, now: datetime) -> bool:
        """What follows the ends noted by :meth:`_write` (the database stores do it in
        the transaction that records them), with the lock held; whether a task was
        released."""
        ended, self._ended = self._ended, []
        if not ended:
            return False
        return follow(MemoryFollow(self), ended, now)

    def _live(self, dead_before: datetime) -> set[str]:
        return {
            n.id
            for n in self.nodes.values()
            if node_is_live(n.stopped_at, n.last_heartbeat, dead_before)
        }
