"""The store: everything a node asks of the database, in one interface.

A node (``django_htask.node``) talks to the database only through a :class:`Store`.
:class:`~django_htask.store.database.DatabaseStore` implements it with the ORM; each
database adds only what is particular to it (``store/sqlite.py``; PostgreSQL's
``FOR UPDATE SKIP LOCKED`` claim and LISTEN/NOTIFY slot in as ``store/postgres.py``).

Every method is one short transaction (or none), so a node never holds a transaction
open while a job runs.

Fencing: every method that writes on behalf of a node takes its id and first checks,
inside its transaction, that the node is still registered and not declared dead (on
PostgreSQL it locks the node's row, so that no reaper can declare it dead before the
transaction ends). A node declared dead gets :class:`~django_htask.exceptions.NodeFenced`
and its write is not made: a late write from a node the others gave up on can never
overwrite what they recorded. A node's id is new at each start, so it is the
generation of its claims.

Failures: a method whose database cannot be reached, or whose statement failed for a
reason a retry could fix, raises :class:`~django_htask.exceptions.StoreUnavailable`
(the database stores turn the driver's errors into it in one place,
:func:`~django_htask.store.database.unavailable`), so that the node, which imports no
Django, backs off on that one error, and :class:`~django_htask.store.memory.InMemoryStore`
can show it an outage (:meth:`~django_htask.store.memory.InMemoryStore.outage`).

The values the interface takes and returns live in :mod:`django_htask.store.values`
(re-exported here).
"""

from __future__ import annotations

import abc
import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol, TypeVar

from django_htask.flow import flow_key
from django_htask.queues import ALL, DEFAULT_QUEUE, QueueFilter, QueueStates
from django_htask.retention import Cutoffs
from django_htask.retry import RetryPolicy

from .values import (
    DEFAULT_RETRY,
    RETRY_COLUMNS,
    SERVE_ALL,
    Abandoned,
    Breakage,
    Claim,
    Departure,
    ListenTo,
    Occurrence,
    Pruned,
    Registration,
    RetryColumns,
    RunOutcome,
    ScheduleRef,
    ScheduleRow,
    Serving,
    Started,
    StartedTask,
    ThreadConnections,
    storable,
)

__all__ = [
    "DEFAULT_RETRY",
    "RETRY_COLUMNS",
    "SERVE_ALL",
    "Abandoned",
    "Gated",
    "Holding",
    "Listening",
    "Notices",
    "Pruned",
    "RetryColumns",
    "RunOutcome",
    "ScheduleRef",
    "ScheduleRow",
    "Serving",
    "Started",
    "StartedTask",
    "Store",
    "ThreadConnections",
    "Window",
    "holders",
    "holds_place",
    "open_queues",
    "pick_gated",
]

T = TypeVar("T")


class Listening(Protocol):
    """A running listener (:meth:`Store.listen`)."""

    listening: threading.Event

    def stop(self, timeout: float = ...) -> None: ...


class Gated(NamedTuple):
    """A pending due task with a lock or a limit (its own, or its queue's), as a claim
    weighs it."""

    id: int
    lock: str | None
    function: str
    max_running: int | None
    queue: str = DEFAULT_QUEUE
    per_key: str | None = None
    rate_limit: int | None = None
    rate_period: int | None = None

    @property
    def flow(self) -> str | None:
        """Its flow (:func:`~django_htask.flow.flow_key`), if it has a per key or a
        rate limit: its tasks start in due order, and their per-key limit and rate
        limit count the flow's tasks."""
        if self.per_key is None and self.rate_limit is None:
            return None
        return flow_key(self.function, self.per_key)


@dataclass
class Holding:
    """What the tasks running hold, as :func:`pick_gated` weighs it: the locks held,
    how many tasks each function, each queue and each flow with a per key runs; and
    the rate limits' windows read (:meth:`read_windows`), by flow: the starts counted
    and when the first of them expires. ``now``: the claim's instant. As a pick goes,
    it also records the flows whose earlier task waits (``waiting``) and the first
    instant a task held back by a rate limit may start (``wake_at``)."""

    locks: set[str]
    functions: Counter[str]
    queues: Counter[str]
    flows: Counter[str] = field(default_factory=Counter)
    now: datetime | None = None
    starts: Counter[str] = field(default_factory=Counter)
    frees: dict[str, datetime] = field(default_factory=dict)
    latest: dict[str, datetime] = field(default_factory=dict)
    read: set[str] = field(default_factory=set)
    waiting: set[str] = field(default_factory=set)
    wake_at: datetime | None = None

    def unread(self, candidates: Iterable[Gated]) -> list[str]:
        """The flows of the rate-limited ``candidates`` whose windows are not read
        yet, each once, sorted."""
        flows = {f for g in candidates if g.rate_limit is not None and (f := g.flow)}
        return sorted(flows - self.read)

    def read_windows(self, flows: Iterable[str], windows: Iterable[Window]) -> None:
        """Take the windows of ``flows`` as read: ``windows``, the starts each counts
        at :attr:`now` (a flow absent counts none)."""
        self.read.update(flows)
        for w in windows:
            self.starts[w.flow] += w.starts
            first, last = self.frees.get(w.flow), self.latest.get(w.flow)
            self.frees[w.flow] = w.first_expiry if first is None else min(first, w.first_expiry)
            self.latest[w.flow] = w.last_start if last is None else max(last, w.last_start)

    def rate_allows(self, task: Gated, flow: str) -> bool:
        """Whether ``task``'s rate limit lets it start at :attr:`now`: its flow counts
        fewer starts than its limit, none of them later than now (else ``now`` is
        behind a claim that committed first, and the window is counted from there:
        the flow's starts are stamped in the order they are counted, so that a start
        deleted once expired for a later claim never counted for an earlier one).
        When it does not, :attr:`wake_at` learns when it may: when the first start
        counted expires (a start of this claim's: a period from now), or now reaches
        the latest start."""
        assert self.now is not None
        assert task.rate_period is not None
        latest = self.latest.get(flow)
        if latest is not None and latest > self.now:
            at = latest
        elif self.starts[flow] >= (task.rate_limit or 0):
            at = self.frees.get(flow, self.now + timedelta(seconds=task.rate_period))
        else:
            return True
        self.wake_at = at if self.wake_at is None else min(self.wake_at, at)
        return False


class Window(NamedTuple):
    """The starts a rate-limited flow counts at an instant (the slots not expired), when
    the first of them expires, and the latest of them."""

    flow: str
    starts: int
    first_expiry: datetime
    last_start: datetime


def holders(
    rows: Iterable[tuple[str | None, str, str, str | None]], now: datetime | None = None
) -> Holding:
    """What the tasks holding their places hold, of their ``(lock, function, queue,
    per_key)`` (the rule of :func:`~django_htask.querysets.task_is_holding`), at
    ``now``."""
    held = Holding(set(), Counter(), Counter(), now=now)
    for lock, function, queue, per in rows:
        held.functions[function] += 1
        held.queues[queue] += 1
        if lock is not None:
            held.locks.add(lock)
        if per is not None:
            held.flows[flow_key(function, per)] += 1
    return held


def pick_gated(
    candidates: Iterable[Gated], held: Holding, limit: int, limits: Mapping[str, int] = {}
) -> list[Gated]:
    """The ``candidates`` (in the claim's order) a claim starts, at most ``limit``: a
    task whose queue has fewer than its limit (``limits``, by queue) running, whose lock
    is not held (by the tasks running with an unexpired lease), whose function has
    fewer than its ``max_running`` tasks running (with a per key: its flow), and whose
    flow's rate limit counts fewer than its limit of starts (the windows of ``held``,
    :meth:`Holding.read_windows`, read first). A task of a full queue is passed over
    as if it were not there (as a paused queue's); a lock is decided by its first
    candidate otherwise: when that one cannot start (its function is full), no later
    one of the lock starts before it; and so is a flow: its tasks start in due order.
    ``held`` gets every lock and waiting flow seen and the places and starts of the
    tasks picked, so a claim reading its candidates page by page calls it again with
    the same one. The one rule of every store (docs/howto-exactly-one.md)."""
    picked: list[Gated] = []
    for task in candidates:
        if len(picked) >= limit:
            break
        cap = limits.get(task.queue) if limits else None
        if cap is not None and held.queues[task.queue] >= cap:
            continue
        flow = task.flow
        free = flow is None or flow not in held.waiting
        if task.lock is not None:
            free = free and task.lock not in held.locks
            held.locks.add(task.lock)  # taken now, or waiting behind this one
        if not (free and _has_room(task, flow, held)):
            if flow is not None:
                held.waiting.add(flow)
            continue
        picked.append(task)
        held.functions[task.function] += 1
        held.queues[task.queue] += 1
        if flow is not None:
            held.flows[flow] += 1
            if task.rate_limit is not None:
                held.starts[flow] += 1
    return picked


def _has_room(task: Gated, flow: str | None, held: Holding) -> bool:
    """Whether ``task``'s limits let it start (its lock aside); when its rate limit
    does not, ``held`` learns when it may."""
    if flow is None:
        return task.max_running is None or held.functions[task.function] < task.max_running
    if task.max_running is not None:
        running = held.functions[task.function] if task.per_key is None else held.flows[flow]
        if running >= task.max_running:
            return False
    return task.rate_limit is None or held.rate_allows(task, flow)


def holds_place(task: Gated, limits: Mapping[str, int]) -> bool:
    """Whether ``task``, once started, holds a place until it ends (its lock, its
    function's or its key's ``max_running``, its limited queue's): its end may let a
    waiting task start. A rate limit counts starts: a task that has only one holds
    nothing."""
    return task.lock is not None or task.max_running is not None or task.queue in limits


def open_queues(limits: Mapping[str, int], held: Holding) -> list[tuple[str, int]]:
    """The limited queues with room, by name, and how many more of their tasks may
    start: after the tasks with a lock or a limit of their own are picked, a claim
    takes up to that many of each one's other tasks (in the claim's order)."""
    return [(q, n - held.queues[q]) for q, n in sorted(limits.items()) if held.queues[q] < n]


class Notices(Protocol):
    """The notices of one task's end (:meth:`Store.watch_end`)."""

    def clear(self) -> None:
        """Forget the notices heard so far (before a read of the task)."""

    def wait(self, timeout: float) -> bool:
        """Whether the end was announced within ``timeout`` seconds."""


class Store(abc.ABC):
    """The database operations of a node."""

    vendor: str = ""
    #: Every node of this database runs on one host (SQLite): a node may declare dead
    #: at once a node of its own host whose process is gone (:meth:`declare_dead`).
    single_host: bool = False
    #: A node may claim tasks beyond its free workers, to wait in its buffer
    #: (:meth:`start_tasks`' ``buffer``).
    buffers: bool = False
    #: Several nodes may share it: each holds its share of the schedules and stands by
    #: for another share (:meth:`live_nodes`), and hears of changes (:meth:`listen`).
    supports_several_nodes: bool = False

    def listen(
        self,
        on_notify: Callable[[str], None],
        on_reconnect: Callable[[], None],
        *,
        retry: float,
        retry_max: float,
        name: str,
    ) -> Listening | None:
        """Call ``on_notify(payload)`` when a schedule, a task, a node or a queue changes
        in any process (``payload``: ``schedule``, ``task``, ``node`` or ``queue``);
        ``on_reconnect`` after
        notifications may have been lost. None when the store cannot (its nodes poll)."""
        return self._listen(ListenTo(on_notify, on_reconnect, retry, retry_max, name))

    def _listen(self, to: ListenTo) -> Listening | None:
        return None

    @contextlib.contextmanager
    def watch_end(self, token: str) -> Iterator[Notices | None]:
        """For ``wait_result``: the database's notices of the end of the task ``token``,
        for the time of the ``with``; None when the store hears no notices (the caller
        reads the task at intervals)."""
        yield None

    @abc.abstractmethod
    def check_migrated(self) -> None:
        """Raise NotMigrated (naming what is missing) unless every migration of
        django_htask is applied to this database."""

    @abc.abstractmethod
    def install(self) -> None:
        """Create what the migrations cannot keep (triggers); idempotent."""

    @abc.abstractmethod
    def notify_nodes(self) -> None:
        """Wake the nodes of the other processes now, in the caller's transaction (they
        hear it when it commits), for a change that announces nothing by itself (an
        abort asked for on a run). Where the database cannot, nothing: the nodes see
        the change at their next poll."""

    @abc.abstractmethod
    def describe(self) -> str:
        """The database, for the banner (engine and name, no password)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close this thread's connection."""

    @abc.abstractmethod
    def refresh(self) -> None:
        """Drop this thread's connection if it is unusable or too old."""

    def attempt(self, fn: Callable[[], T]) -> T:
        """Call ``fn``, code of the layer above that works on this store's database (the
        code-defined schedules' sync, at a node's start), with this store's errors: a
        failure a retry could fix raises StoreUnavailable, as this store's methods do."""
        return fn()

    # -- nodes -----------------------------------------------------------------------
    def register_node(
        self,
        node_id: str,
        hostname: str,
        pid: int,
        version: str,
        now: datetime,
        queues: QueueFilter = ALL,
    ) -> None:
        """Register a node; ``queues`` are the queues whose schedules it fires. Where
        several nodes share the database, the connection holds the node's presence
        from then on (:meth:`absent`)."""
        self._register(Registration(node_id, hostname, pid, version, now, queues))

    @abc.abstractmethod
    def _register(self, r: Registration) -> None: ...

    @abc.abstractmethod
    def heartbeat(
        self,
        node_id: str,
        now: datetime,
        lease_until: datetime,
        stuck: int = 0,
        renew_below: datetime | None = None,
    ) -> int:
        """Record the heartbeat, and ``stuck``, the worker threads the node gave up that
        are still in their calls (its row's ``stuck_threads``); renew until
        ``lease_until`` this node's leases that expire before ``renew_below`` (default:
        ``lease_until``: all it extends) and return how many. Where several nodes share the
        database, the connection also holds the node's presence (:meth:`absent`).
        Raises NodeFenced if the node was declared dead."""

    @abc.abstractmethod
    def stop_node(self, node_id: str, now: datetime) -> None:
        """Mark the node stopped (it holds nothing any more)."""

    def abandon(
        self,
        node_id: str,
        now: datetime,
        abandoned: list[Abandoned],
        dead_at: datetime,
        heartbeat_at: datetime,
    ) -> None:
        """Leave runs that are still going, as a node that must exit before they end
        does: each task's attempt ends now (a retry no earlier than ``dead_at``, or
        failed); each schedule run keeps running, its error noted, until the reaper
        fails it once the node is dead; the node's heartbeat is set to ``heartbeat_at``,
        chosen by the caller so that the node counts as dead from ``dead_at`` (after its
        process is gone), not before."""
        self._abandon(Departure(node_id, now, abandoned, dead_at, heartbeat_at))

    @abc.abstractmethod
    def _abandon(self, departure: Departure) -> None: ...

    @abc.abstractmethod
    def live_nodes(self, dead_before: datetime) -> dict[str, tuple[datetime, QueueFilter]]:
        """The nodes not stopped whose heartbeat is not older than ``dead_before``: id ->
        (last heartbeat, the queues whose schedules it fires)."""

    @abc.abstractmethod
    def nodes_on_host(self, hostname: str) -> list[tuple[str, int]]:
        """(id, pid) of the nodes of ``hostname`` not marked stopped."""

    @abc.abstractmethod
    def absent(self, node_ids: list[str]) -> list[str]:
        """Which of ``node_ids`` hold no session on the database: their process has
        ended (:meth:`register_node` and each :meth:`heartbeat` hold a session lock
        named after the node on their connection, which the database releases when the
        connection closes, as it does at once for a process killed with SIGKILL; a
        paused process keeps it: see :mod:`django_htask.store.presence`). [] where the
        database cannot tell."""

    @abc.abstractmethod
    def declare_dead(self, node_ids: list[str], now: datetime) -> int:
        """Mark these nodes dead now (their process is known to be gone); return how
        many were still live. The next :meth:`reap` hands back what they held."""

    @abc.abstractmethod
    def reap(self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy) -> int:
        """Declare dead the nodes whose heartbeat is older than ``dead_before`` and hand
        back what dead nodes held: a task they held but had not started is pending again
        as it was; a task they had started has used that attempt (a failed run row says
        so) and is retried after its policy's backoff (``retry`` standing for the
        columns left empty) or fails; their schedule runs fail.
        Return how many rows changed. ``node_id`` is the reaper (fenced)."""

    @abc.abstractmethod
    def take_over(
        self, node_id: str, now: datetime, dead_before: datetime, retry: RetryPolicy
    ) -> int:
        """Before a node registers under ``node_id`` (``runscheduler --node-id``, a
        container restarted under its pod's name): if a process that used that id never
        stopped (killed, crashed), it is dead now, and what it held is handed back as
        :meth:`reap` does, at once. Without this the new process would renew the dead
        one's leases as its own, and its started tasks would stay running for ever.
        Return how many rows changed (0: the id was free, or stopped cleanly)."""

    # -- schedules -------------------------------------------------------------------
    @abc.abstractmethod
    def load_schedules(self) -> tuple[list[ScheduleRef], int]:
        """Every enabled schedule with a next run, and the highest version seen."""

    @abc.abstractmethod
    def changed_schedules(self, since: int) -> tuple[list[ScheduleRef], int]:
        """Schedules whose version is above ``since`` (enabled or not), and the new
        highest version."""

    @abc.abstractmethod
    def get_schedule(self, schedule_id: int) -> ScheduleRow | None: ...

    @abc.abstractmethod
    def running_elsewhere(self, schedule_id: int, node_id: str, dead_before: datetime) -> list[str]:
        """The other live nodes with a run of the schedule in progress (sorted)."""

    def claim_occurrence(
        self,
        node_id: str,
        row: ScheduleRow,
        next_run_at: datetime | None,
        now: datetime,
        runs: list[RunOutcome],
    ) -> list[int] | None:
        """Move the schedule from ``row.next_run_at`` to ``next_run_at`` if nobody else
        changed it (compare-and-set on id, next_run_at and version) and create its run
        rows in the same transaction. Return the run ids, or None if the claim lost."""
        return self._claim_occurrence(Occurrence(node_id, row, next_run_at, now, runs))

    @abc.abstractmethod
    def _claim_occurrence(self, occurrence: Occurrence) -> list[int] | None: ...

    def mark_broken(
        self, node_id: str, schedule_id: int, version: int | None, reason: str, run: RunOutcome
    ) -> bool:
        """Stop the schedule for good (no next run), ``reason`` in its ``broken`` field,
        and record ``run`` (failed); with a ``version``, only if it is still that one.
        Return whether it was marked. Saving the schedule clears the mark."""
        return self._mark_broken(Breakage(node_id, schedule_id, version, storable(reason), run))

    @abc.abstractmethod
    def _mark_broken(self, breakage: Breakage) -> bool: ...

    @abc.abstractmethod
    def start_schedule_run(self, node_id: str, outcome: RunOutcome) -> int:
        """Create a running run row (a retry) and return its id."""

    # -- one-off tasks ---------------------------------------------------------------
    @abc.abstractmethod
    def task_outlook(
        self, now: datetime, serving: Serving = SERVE_ALL
    ) -> tuple[bool, datetime | None]:
        """Whether a pending task nobody holds could be claimed at ``now`` (one with a
        lock or a limit, or of a limited queue, only if :func:`pick_gated` would start
        it), and when the first pending task due after ``now`` is, or, if earlier, the
        first instant a task held back by its rate limit may start, among those
        ``serving`` covers (a paused queue's are not: :attr:`Serving.claimed`). Reads
        only: nothing is claimed."""

    def start_tasks(
        self,
        node_id: str,
        now: datetime,
        limit: int,
        lease_until: datetime,
        *,
        finished: list[RunOutcome] | None = None,
        serving: Serving = SERVE_ALL,
        buffer: int = 0,
        begun: Sequence[tuple[int, datetime]] = (),
    ) -> Started:
        """Claim up to ``limit`` due tasks nobody holds that ``serving`` covers (none
        of a paused queue), highest priority first, then oldest, and mark them running
        (one attempt each) under a lease until ``lease_until``. Tasks with a lock or a
        limit are weighed first, by :func:`pick_gated`, then the other tasks of the
        limited queues with room (:func:`open_queues`), serialised per lock, function
        and limited queue across the nodes; the others fill the rest of ``limit``. Only
        ask for what workers take at once: a started task that never finishes has used
        its attempt. ``finished`` runs are written
        first, in the same transaction (what :meth:`record` does). The started tasks
        come back highest priority first, with when to look again for the tasks it held
        back (:attr:`Started.wake_at`: a rate limit's window with room, or ``now`` when
        a claim made at the same time took some it chose).

        Where the store :attr:`buffers`, up to ``buffer`` more due tasks without a lock
        or a limit, never handed to a node before, are claimed for the node's buffer:
        running, one attempt each, under the same lease, but with no start time until a
        worker begins one. They come last, and :attr:`Started.buffered` names them. A
        node that dies hands them back as it found them (:meth:`reap`), unless they were
        marked begun: ``begun``, the buffered tasks (id, when) a worker has begun since
        the last claim and that still run, are marked so first. (A buffered task that
        ended has its start written with its end.)"""
        if limit <= 0 and buffer <= 0 and not finished and not begun:
            return Started()
        buffer = max(buffer, 0) if self.buffers else 0
        claim = Claim(
            node_id, now, max(limit, 0), lease_until, finished or [], serving, buffer, begun
        )
        started = self._start_tasks(claim)
        buffered = started.buffered

        def order(task: StartedTask) -> tuple[bool, int, datetime, int]:
            return (task.id in buffered, -task.priority, task.run_at, task.id)

        return Started(sorted(started, key=order), started.wake_at, buffered)

    @abc.abstractmethod
    def _start_tasks(self, claim: Claim) -> Started: ...

    @abc.abstractmethod
    def record(self, node_id: str, outcomes: list[RunOutcome]) -> None:
        """Write finished runs and their tasks and schedules, in one transaction. A
        task or run the node no longer holds (reaped meanwhile) is left as it is. A
        task's end is :func:`~django_htask.store.rules.ended_task`'s, or, for a run
        ``snoozed``, :func:`~django_htask.store.rules.snoozed_task`'s."""

    @abc.abstractmethod
    def aborts(self, node_id: str) -> list[tuple[str, int]]:
        """The jobs running on ``node_id`` whose abort was asked for
        (``cancel(token, abort=True)``, the admin's *Abort*): ``("task", task id)`` and
        ``("run", run id)``. Reads only."""

    @abc.abstractmethod
    def count_pending_tasks(self) -> int: ...

    @abc.abstractmethod
    def queue_states(self) -> QueueStates:
        """The queues paused and limited (the ``Queue`` rows). Reads only."""

    # -- maintenance -----------------------------------------------------------------
    @abc.abstractmethod
    def prune(self, node_id: str, cutoffs: Cutoffs, limit: int) -> Pruned | None:
        """One batch of the pruner, in one short transaction that writes only rows
        past their retention (no claim waits for it): at most ``limit`` finished tasks
        past theirs (:func:`~django_htask.querysets.task_is_expired`) deleted with their
        runs; if fewer, at most as many more runs past ``RUN_RETENTION_DAYS``; if still
        fewer, the rows of the nodes stopped before ``cutoffs.runs``. What it deleted
        is added to node ``node_id``'s counts (its row's ``pruned_*``); ``more`` says
        whether it stopped at ``limit``. None, deleting nothing, when another node
        holds the pruner's lock: one node prunes at a time."""

    @abc.abstractmethod
    def expired(self, cutoffs: Cutoffs) -> Pruned:
        """How many rows the pruner would delete at ``cutoffs`` (reads only)."""

    def estimate_rows(self, rows: Any) -> int | None:
        """How many rows the query ``rows`` (a QuerySet of this store's database)
        selects, as the database's planner estimates it without reading them (the
        admin's lists past their exact count); None where it gives no estimate."""
        return None


#: The public methods of the interface: those that raise StoreUnavailable.
INTERFACE = frozenset(
    name for name, value in vars(Store).items() if callable(value) and not name.startswith("_")
)
