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
"""

from __future__ import annotations

import abc
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeVar

from django_htask.enums import RunStatus
from django_htask.queues import ALL, DEFAULT_QUEUE, QueueFilter
from django_htask.retry import RetryPolicy, split_names

__all__ = [
    "DEFAULT_RETRY",
    "RETRY_COLUMNS",
    "SERVE_ALL",
    "Abandoned",
    "Gated",
    "Listening",
    "RetryColumns",
    "RunOutcome",
    "ScheduleRef",
    "ScheduleRow",
    "Serving",
    "StartedTask",
    "Store",
    "ThreadConnections",
    "pick_gated",
]

T = TypeVar("T")


class Listening(Protocol):
    """A running listener (:meth:`Store.listen`)."""

    listening: threading.Event

    def stop(self, timeout: float = ...) -> None: ...


@dataclass(frozen=True, slots=True)
class Serving:
    """Which tasks a node runs: those of ``queues``; with a ``backend`` alias, only the
    django.tasks tasks enqueued through it (and no schedule)."""

    queues: QueueFilter = ALL
    backend: str | None = None

    @property
    def schedules(self) -> QueueFilter:
        """The queues whose schedules the node fires."""
        return QueueFilter(frozenset()) if self.backend is not None else self.queues


SERVE_ALL = Serving()


def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class ThreadConnections:
    """What a node's threads do with the process's database connections, which the node
    cannot see (it imports no Django): ``refresh`` before and after each call a worker
    makes (the task's own database use: Django's ``close_old_connections``, as around a
    request), ``close`` as each of the node's threads ends (every connection it
    opened). The Django layer's: :data:`django_htask.store.DJANGO_CONNECTIONS`, a node's
    default; the default here does nothing (a node with no database at all)."""

    refresh: Callable[[], object] = _nothing
    close: Callable[[], object] = _nothing


@dataclass(slots=True)
class ScheduleRef:
    """What a node keeps in memory per schedule (no cron is evaluated to build it)."""

    id: int
    next_run_at: datetime | None
    version: int
    enabled: bool = True
    queue: str = DEFAULT_QUEUE


@dataclass(frozen=True, slots=True)
class RetryColumns:
    """A task's or a schedule's retry policy as its row holds it (``retry_kind``,
    ``retry_backoff_max``, ``retry_jitter``, ``retry_on``, ``give_up_on``; a task's
    ``retry_backoff`` too, a schedule's is :attr:`ScheduleRow.retry_backoff`). The
    defaults are the exponential backoff of old, with any error retried."""

    kind: str = "exponential"
    backoff_max: float | None = None  # None: the RETRY_BACKOFF_MAX setting
    jitter: str = "none"
    retry_on: str = ""  # dotted paths, separated by commas
    give_up_on: str = ""
    backoff: float | None = None  # a task's; None: the RETRY_BACKOFF setting

    def policy(
        self,
        backoff: float,
        max_delay: float,
        default: RetryPolicy | None = None,
        *,
        filters: bool = True,
    ) -> RetryPolicy:
        """The policy, ``backoff`` and ``max_delay`` standing for the empty columns
        (the settings, or a schedule's own ``retry_backoff``). ``default`` is returned
        as it is when the columns hold the defaults. Without ``filters``, ``retry_on``
        and ``give_up_on`` are left out (a run that ended without an exception of its
        own: nothing to import them for). Raises naming a stored exception class that
        cannot be imported any more."""
        if default is not None and self == DEFAULT_RETRY:
            return default
        return RetryPolicy(
            backoff if self.backoff is None else self.backoff,
            max_delay if self.backoff_max is None else self.backoff_max,
            kind=self.kind,
            jitter=self.jitter,
            retry_on=split_names(self.retry_on) if filters else (),
            give_up_on=split_names(self.give_up_on) if filters else (),
        )

    def lost_delay(self, default: RetryPolicy, attempt: int) -> float:
        """Seconds before a task whose ``attempt`` was lost (its node died or
        stopped) runs again: by the policy's backoff, ``default`` (the node's
        ``RETRY_BACKOFF`` settings) standing for the empty columns; no filter applies,
        nothing was raised."""
        policy = self.policy(default.backoff, default.max_delay, default, filters=False)
        return policy.delay(max(attempt, 1))


#: The columns of :class:`RetryColumns`, in its order (a task reads all six, a
#: schedule the first five).
RETRY_COLUMNS = (
    "retry_kind",
    "retry_backoff_max",
    "retry_jitter",
    "retry_on",
    "give_up_on",
    "retry_backoff",
)
#: A row with the default policy.
DEFAULT_RETRY = RetryColumns()


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A schedule as read when it fires."""

    id: int
    name: str
    function: str
    schedule: str
    timezone: str
    payload: bytes
    enabled: bool
    next_run_at: datetime | None
    grace: float | None
    catch_up: str
    overlap: str
    max_attempts: int
    retry_backoff: float
    version: int
    queue_name: str = DEFAULT_QUEUE
    timeout: float | None = None  # seconds a run may take (None: the default)
    retry: RetryColumns = DEFAULT_RETRY


@dataclass(frozen=True, slots=True)
class StartedTask:
    """A one-off task marked running by this node, with what it takes to run it."""

    id: int
    token: str
    function: str
    payload: bytes
    run_at: datetime
    attempts: int
    max_attempts: int
    priority: int = 0
    timeout: float | None = None  # seconds a run may take (None: the default)
    retry: RetryColumns = DEFAULT_RETRY
    #: It has a lock or a limit (its end may let a waiting task start).
    gated: bool = False


class Gated(NamedTuple):
    """A pending due task with a lock or a limit, as a claim weighs it."""

    id: int
    lock: str | None
    function: str
    max_running: int | None


def pick_gated(
    candidates: Iterable[Gated], held: set[str], running: Counter[str], limit: int
) -> list[Gated]:
    """The ``candidates`` (in the claim's order) a claim starts, at most ``limit``: a
    task whose lock is not in ``held`` (the locks of the tasks running with an
    unexpired lease) and whose function has fewer than its ``max_running`` tasks
    ``running``. A lock is decided by its first candidate: when that one cannot start
    (its function is full), no later one of the lock starts before it. ``held`` gets
    every lock seen and ``running`` the tasks picked, so a claim reading its candidates
    page by page calls it again with the same two. The one rule of every store
    (docs/howto-exactly-one.md)."""
    picked: list[Gated] = []
    for task in candidates:
        if len(picked) >= limit:
            break
        if task.lock is not None:
            if task.lock in held:
                continue
            held.add(task.lock)  # taken now, or waiting behind this one
        if task.max_running is not None and running[task.function] >= task.max_running:
            continue
        picked.append(task)
        running[task.function] += 1
    return picked


def storable(text: str) -> str:
    """``text`` as every database can store it: NUL, which PostgreSQL's text columns
    refuse, and lone surrogates, which UTF-8 cannot encode, written as the escapes
    ``repr()`` would show (``\\x00``, ``\\udc80``). Error texts come from tasks, and
    a task's exception message from its arguments: such a text must not make the
    write of a whole batch of runs fail."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@dataclass(slots=True)
class RunOutcome:
    """How a run ended, to be written by :meth:`Store.record` (batched). Its error
    and traceback are made :func:`storable`."""

    status: str  # a RunStatus value
    function: str
    name: str
    node: str
    attempt: int
    scheduled_for: datetime | None
    started_at: datetime | None
    finished_at: datetime
    duration: float | None = None
    error: str = ""
    traceback: str = ""
    run_id: int | None = None  # a schedule's run row, created when it started
    schedule_id: int | None = None
    task_id: int | None = None
    #: For a failed task with attempts left: when it runs again (it is then pending).
    retry_at: datetime | None = None
    extra: dict[str, object] = field(default_factory=dict)
    #: What a task's function returned, encoded (``encode_result``); None when it
    #: returned None, failed, or is a schedule's run. Written on the task's row.
    result: bytes | None = None
    #: A task with a lock or a limit: writing its end may let a waiting task start,
    #: so the other nodes are told.
    gated: bool = False

    def __post_init__(self) -> None:
        if self.error:
            self.error = storable(self.error)
        if self.traceback:
            self.traceback = storable(self.traceback)

    def columns(self) -> dict[str, Any]:
        """The fields of its ``Run`` row (a run still going is not finished yet)."""
        values = {name: getattr(self, name) for name in _RUN_COLUMNS}
        if self.status == RunStatus.RUNNING:
            values["finished_at"] = None
        return values


#: The fields of a :class:`RunOutcome` that are columns of its ``Run`` row.
_RUN_COLUMNS = tuple(
    f.name
    for f in fields(RunOutcome)
    if f.name not in ("run_id", "retry_at", "extra", "result", "gated")
)


@dataclass(frozen=True, slots=True)
class Abandoned:
    """A run its node had to leave (shutdown timeout). Started (its function called):
    the task's attempt ends with ``error`` (a retry at ``retry_at``, or failed), and
    the schedule's run row fails with ``error`` once the node is dead. Not started (a
    job still queued): the task is pending again as it was, the run fails at once."""

    error: str
    started: bool
    run_id: int | None = None  # a schedule's run
    task_id: int | None = None
    retry_at: datetime | None = None  # for a started task with attempts left


# What the public methods of a store hand to its implementation.


class Registration(NamedTuple):
    node_id: str
    hostname: str
    pid: int
    version: str
    now: datetime
    queues: QueueFilter


class Departure(NamedTuple):
    node_id: str
    now: datetime
    abandoned: list[Abandoned]
    dead_at: datetime
    heartbeat_at: datetime


class Occurrence(NamedTuple):
    node_id: str
    row: ScheduleRow
    next_run_at: datetime | None
    now: datetime
    runs: list[RunOutcome]


class Breakage(NamedTuple):
    node_id: str
    schedule_id: int
    version: int | None
    reason: str
    run: RunOutcome


class Claim(NamedTuple):
    node_id: str
    now: datetime
    limit: int
    lease_until: datetime
    finished: list[RunOutcome]
    serving: Serving


class ListenTo(NamedTuple):
    on_notify: Callable[[str], None]
    on_reconnect: Callable[[], None]
    retry: float
    retry_max: float
    name: str


def last_statuses(outcomes: list[RunOutcome]) -> dict[int, tuple[str, datetime]]:
    """Schedule id -> the status and time of its latest run among ``outcomes`` (what a
    store writes as the schedule's last status)."""
    latest: dict[int, tuple[str, datetime]] = {}
    for o in outcomes:
        if o.schedule_id is None:
            continue
        when = o.started_at or o.finished_at
        if o.schedule_id not in latest or latest[o.schedule_id][1] <= when:
            latest[o.schedule_id] = (o.status, when)
    return latest


class Store(abc.ABC):
    """The database operations of a node."""

    vendor: str = ""
    #: Every node of this database runs on one host (SQLite): a node may declare dead
    #: at once a node of its own host whose process is gone (:meth:`declare_dead`).
    single_host: bool = False
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
        """Call ``on_notify(payload)`` when a schedule, a task or a node changes in any
        process (``payload``: ``schedule``, ``task`` or ``node``); ``on_reconnect`` after
        notifications may have been lost. None when the store cannot (its nodes poll)."""
        return self._listen(ListenTo(on_notify, on_reconnect, retry, retry_max, name))

    def _listen(self, to: ListenTo) -> Listening | None:
        return None

    @abc.abstractmethod
    def check_migrated(self) -> None:
        """Raise NotMigrated (naming what is missing) unless every migration of
        django_htask is applied to this database."""

    @abc.abstractmethod
    def install(self) -> None:
        """Create what the migrations cannot keep (triggers); idempotent."""

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
        """Register a node; ``queues`` are the queues whose schedules it fires."""
        self._register(Registration(node_id, hostname, pid, version, now, queues))

    @abc.abstractmethod
    def _register(self, r: Registration) -> None: ...

    @abc.abstractmethod
    def heartbeat(self, node_id: str, now: datetime, lease_until: datetime) -> int:
        """Record the heartbeat and renew this node's leases; return how many.
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
    def _abandon(self, d: Departure) -> None: ...

    @abc.abstractmethod
    def live_nodes(self, dead_before: datetime) -> dict[str, tuple[datetime, QueueFilter]]:
        """The nodes not stopped whose heartbeat is not older than ``dead_before``: id ->
        (last heartbeat, the queues whose schedules it fires)."""

    @abc.abstractmethod
    def nodes_on_host(self, hostname: str) -> list[tuple[str, int]]:
        """(id, pid) of the nodes of ``hostname`` not marked stopped."""

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
    def _claim_occurrence(self, o: Occurrence) -> list[int] | None: ...

    def mark_broken(
        self, node_id: str, schedule_id: int, version: int | None, reason: str, run: RunOutcome
    ) -> bool:
        """Stop the schedule for good (no next run), ``reason`` in its ``broken`` field,
        and record ``run`` (failed); with a ``version``, only if it is still that one.
        Return whether it was marked. Saving the schedule clears the mark."""
        return self._mark_broken(Breakage(node_id, schedule_id, version, storable(reason), run))

    @abc.abstractmethod
    def _mark_broken(self, b: Breakage) -> bool: ...

    @abc.abstractmethod
    def start_schedule_run(self, node_id: str, outcome: RunOutcome) -> int:
        """Create a running run row (a retry) and return its id."""

    # -- one-off tasks ---------------------------------------------------------------
    @abc.abstractmethod
    def task_outlook(
        self, now: datetime, serving: Serving = SERVE_ALL
    ) -> tuple[bool, datetime | None]:
        """Whether a pending task nobody holds could be claimed at ``now`` (one with a
        lock or a limit only if :func:`pick_gated` would start it), and when the first
        pending task due after ``now`` is, among those ``serving`` covers (reads only:
        nothing is claimed)."""

    def start_tasks(
        self,
        node_id: str,
        now: datetime,
        limit: int,
        lease_until: datetime,
        *,
        finished: list[RunOutcome] | None = None,
        serving: Serving = SERVE_ALL,
    ) -> list[StartedTask]:
        """Claim up to ``limit`` due tasks nobody holds that ``serving`` covers, highest
        priority first, then oldest, and mark them running (one attempt each) under a
        lease until ``lease_until``. Tasks with a lock or a limit are weighed first, by
        :func:`pick_gated`, serialised per lock and function across the nodes; the
        others fill the rest of ``limit``. Only ask for what workers take at once: a started
        task that never finishes has used its attempt. ``finished`` runs are written
        first, in the same transaction (what :meth:`record` does). The started tasks
        come back highest priority first."""
        if limit <= 0 and not finished:
            return []
        claim = Claim(node_id, now, max(limit, 0), lease_until, finished or [], serving)
        started = self._start_tasks(claim)
        return sorted(started, key=lambda t: (-t.priority, t.run_at, t.id))

    @abc.abstractmethod
    def _start_tasks(self, c: Claim) -> list[StartedTask]: ...

    @abc.abstractmethod
    def record(self, node_id: str, outcomes: list[RunOutcome]) -> None:
        """Write finished runs and their tasks and schedules, in one transaction. A
        task or run the node no longer holds (reaped meanwhile) is left as it is."""

    @abc.abstractmethod
    def aborts(self, node_id: str) -> list[tuple[str, int]]:
        """The jobs running on ``node_id`` whose abort was asked for
        (``cancel(token, abort=True)``, the admin's *Abort*): ``("task", task id)`` and
        ``("run", run id)``. Reads only."""

    @abc.abstractmethod
    def count_pending_tasks(self) -> int: ...

    # -- maintenance -----------------------------------------------------------------
    @abc.abstractmethod
    def prune_runs(self, days: int) -> int:
        """Delete finished runs older than ``days`` days; return how many."""


#: The public methods of the interface: those that raise StoreUnavailable.
INTERFACE = frozenset(
    name for name, value in vars(Store).items() if callable(value) and not name.startswith("_")
)
