"""The values a store and its node hand each other: what a node serves
(:class:`Serving`), what a claim starts (:class:`StartedTask`), how a run ended
(:class:`RunOutcome`), what a node leaves (:class:`Abandoned`), a schedule as a node
keeps it (:class:`ScheduleRef`, :class:`ScheduleRow`), and the arguments the public
methods of :class:`~django_htask.store.base.Store` hand to its implementation. Plain
data: nothing here reads a table or a clock."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, NamedTuple

from django_htask.enums import RunStatus
from django_htask.queues import ALL, DEFAULT_QUEUE, NO_STATES, QueueFilter, QueueStates
from django_htask.retry import RetryPolicy, split_names

__all__ = [
    "DEFAULT_RETRY",
    "RETRY_COLUMNS",
    "SERVE_ALL",
    "Abandoned",
    "Breakage",
    "Claim",
    "Departure",
    "ListenTo",
    "Occurrence",
    "Probe",
    "Pruned",
    "Registration",
    "RetryColumns",
    "RunOutcome",
    "ScheduleRef",
    "ScheduleRow",
    "Serving",
    "Started",
    "StartedTask",
    "TaskEnd",
    "ThreadConnections",
    "earliest",
    "last_statuses",
    "storable",
]


@dataclass(frozen=True, slots=True)
class Serving:
    """Which tasks a node runs: those of ``queues``; with a ``backend`` alias, only the
    django.tasks tasks enqueued through it (and no schedule). ``states``: the queues
    paused (none of their tasks is claimed, none of their schedules fired) and limited
    (their tasks are weighed as tasks with a limit), as the node last read them."""

    queues: QueueFilter = ALL
    backend: str | None = None
    states: QueueStates = NO_STATES

    @property
    def schedules(self) -> QueueFilter:
        """The queues whose schedules the node fires, paused or not (what its ``Node``
        row says, for sharing out the schedules)."""
        return QueueFilter(frozenset()) if self.backend is not None else self.queues

    def fires(self, queue: str) -> bool:
        """Whether the node fires the schedules of ``queue`` now (served, not paused)."""
        return self.schedules.serves(queue) and queue not in self.states.paused

    @property
    def claimed(self) -> QueueFilter:
        """The queues whose tasks a claim may take: served and not paused."""
        return self.queues.without(self.states.paused)

    @property
    def plain(self) -> QueueFilter:
        """The queues whose tasks without a lock or a limit of their own are claimed
        as plain tasks: :attr:`claimed`, less the limited queues (whose every task is
        weighed against its queue's limit)."""
        if not self.states.limits:
            return self.claimed
        return self.claimed.without(frozenset(name for name, _n in self.states.limits))

    @property
    def limits(self) -> dict[str, int]:
        """The limit of each queue a claim may take tasks of."""
        claimed = self.claimed
        return {name: n for name, n in self.states.limits if claimed.serves(name)}


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
    #: It holds a place while it runs: a lock, or a limit's (its function's, its key's,
    #: its queue's), so its end may let a waiting task start. (A rate limit counts
    #: starts: an end frees nothing.)
    gated: bool = False
    #: Times it snoozed, and how many it may (None: the ``MAX_SNOOZES`` setting).
    snoozes: int = 0
    max_snoozes: int | None = None
    #: Its end is followed up (it belongs to a batch, or tasks wait on it), as the
    #: claim read it (:mod:`~django_htask.store.follow`).
    follow: bool = False


class Started(list[StartedTask]):
    """What a claim started (:meth:`~django_htask.store.base.Store.start_tasks`): the
    tasks, and ``wake_at``, when the node is to look again for tasks the claim held
    back (None: none to look for): the first instant a task held back by its rate limit
    may start, or the claim's own instant when a claim made at the same time took tasks
    it chose (others may be startable that it did not look at). ``buffered``: the ids of
    those claimed for the node's buffer (:attr:`Claim.buffer`), not started yet."""

    __slots__ = ("buffered", "wake_at")

    def __init__(
        self,
        tasks: Iterable[StartedTask] = (),
        wake_at: datetime | None = None,
        buffered: frozenset[int] = frozenset(),
    ):
        super().__init__(tasks)
        self.wake_at = wake_at
        self.buffered = buffered


def earliest(*instants: datetime | None) -> datetime | None:
    """The earliest of ``instants`` that are not None (None: none is)."""
    return min((at for at in instants if at is not None), default=None)


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
    #: For a failed task with attempts left, or a snoozed one: when it runs again (it
    #: is then pending).
    retry_at: datetime | None = None
    extra: dict[str, object] = field(default_factory=dict)
    #: What a task's function returned, encoded (``encode_result``); None when it
    #: returned None, failed, or is a schedule's run. Written on the task's row.
    result: bytes | None = None
    #: A task with a lock or a limit: writing its end may let a waiting task start,
    #: so the other nodes are told.
    gated: bool = False
    #: A task whose end, as its claim read it, is followed up (a batch's member, or
    #: tasks wait on it): written with what follows, which may release tasks.
    follow: bool = False
    #: A task that waited in its node's buffer and whose start is not written yet: its
    #: end writes it (``started_at``).
    start_unwritten: bool = False

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
    if f.name not in ("run_id", "retry_at", "extra", "result", "gated", "follow", "start_unwritten")
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
    #: How many more plain tasks to claim for the node's buffer (not started yet).
    buffer: int = 0
    #: Buffered tasks a worker has begun since (task id, when), to be marked started.
    begun: Sequence[tuple[int, datetime]] = ()


class ListenTo(NamedTuple):
    on_notify: Callable[[str], None]
    on_reconnect: Callable[[], None]
    retry: float
    retry_max: float
    name: str


@dataclass(frozen=True, slots=True)
class Pruned:
    """Rows past their retention, deleted by one batch of the pruner
    (:meth:`~django_htask.store.base.Store.prune`) or counted
    (:meth:`~django_htask.store.base.Store.expired`): finished tasks, runs (those of
    the tasks among them), and the rows of nodes stopped long ago. ``more``: the batch
    stopped at its limit (more may be left)."""

    tasks: int = 0
    runs: int = 0
    nodes: int = 0
    more: bool = False

    @property
    def rows(self) -> int:
        return self.tasks + self.runs + self.nodes

    def __add__(self, other: Pruned) -> Pruned:
        """The counts added; ``more`` the later batch's."""
        return Pruned(
            self.tasks + other.tasks, self.runs + other.runs, self.nodes + other.nodes, other.more
        )


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


class Probe(NamedTuple):
    """A query and its parameters: whether it finds a row is asked in a fenced
    transaction's first statement (``FencedAtomic``)."""

    sql: str
    params: list[Any]


class TaskEnd(NamedTuple):
    """A task's end as :meth:`~django_htask.store.dialect.Dialect.write_ends` writes
    it: the fields of :func:`~django_htask.store.rules.ended_task`, adapted, named as
    their columns, and the task's id."""

    status: str
    #: The retry time; None for a finish (the column keeps its value).
    run_at: Any
    finished_at: Any
    last_error: str
    traceback: str
    result: bytes | None
    #: The start of a task whose start is not written yet (``start_unwritten``), else
    #: None (the column keeps its value).
    started_at: Any
    id: int | None
