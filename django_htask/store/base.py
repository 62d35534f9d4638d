"""The store: everything a node asks of the database, in one interface.

A node (``django_htask.node``) talks to the database only through a :class:`Store`.
:class:`~django_htask.store.database.DatabaseStore` implements it with the ORM; each
database adds only what is particular to it (``store/sqlite.py``; PostgreSQL's
``FOR UPDATE SKIP LOCKED`` claim and LISTEN/NOTIFY slot in as ``store/postgres.py``).

Every method is one short transaction (or none), so a node never holds a transaction
open while a job runs.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from datetime import datetime

__all__ = [
    "ClaimedTask",
    "RunOutcome",
    "ScheduleRef",
    "ScheduleRow",
    "StartedTask",
    "Store",
]


@dataclass(slots=True)
class ScheduleRef:
    """What a node keeps in memory per schedule (no cron is evaluated to build it)."""

    id: int
    next_run_at: datetime | None
    version: int
    enabled: bool = True


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


@dataclass(frozen=True, slots=True)
class ClaimedTask:
    """A one-off task a node holds (leased) until it is due."""

    id: int
    run_at: datetime


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


@dataclass(slots=True)
class RunOutcome:
    """How a run ended, to be written by :meth:`Store.record` (batched)."""

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
    #: For a task handed back at shutdown: pending again, the attempt not counted.
    handed_back: bool = False
    extra: dict[str, object] = field(default_factory=dict)


class Store(abc.ABC):
    """The database operations of a node."""

    vendor: str = ""

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

    # -- nodes -----------------------------------------------------------------------
    @abc.abstractmethod
    def register_node(
        self, node_id: str, hostname: str, pid: int, version: str, now: datetime
    ) -> None: ...

    @abc.abstractmethod
    def heartbeat(self, node_id: str, now: datetime, lease_until: datetime) -> int:
        """Record the heartbeat and renew this node's leases; return how many."""

    @abc.abstractmethod
    def stop_node(self, node_id: str, now: datetime) -> None: ...

    @abc.abstractmethod
    def reap(self, now: datetime, dead_before: datetime) -> int:
        """Hand back what dead nodes held; fail their runs. Return how many rows."""

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
    def running_elsewhere(self, schedule_id: int, node_id: str, dead_before: datetime) -> int:
        """Runs of the schedule in progress on other live nodes."""

    @abc.abstractmethod
    def claim_occurrence(
        self,
        row: ScheduleRow,
        next_run_at: datetime | None,
        now: datetime,
        runs: list[RunOutcome],
    ) -> list[int] | None:
        """Move the schedule from ``row.next_run_at`` to ``next_run_at`` if nobody else
        changed it (compare-and-set on id, next_run_at and version) and create its run
        rows in the same transaction. Return the run ids, or None if the claim lost."""

    @abc.abstractmethod
    def start_schedule_run(self, outcome: RunOutcome) -> int:
        """Create a running run row (a retry) and return its id."""

    # -- one-off tasks ---------------------------------------------------------------
    @abc.abstractmethod
    def claim_tasks(
        self, node_id: str, until: datetime, now: datetime, lease_until: datetime, limit: int
    ) -> list[ClaimedTask]:
        """Lease up to ``limit`` pending tasks due by ``until``, oldest first."""

    @abc.abstractmethod
    def start_tasks(self, node_id: str, ids: list[int], now: datetime) -> list[StartedTask]:
        """Mark the given held tasks running (one attempt each) and return those that
        still were pending and held by this node."""

    @abc.abstractmethod
    def release_tasks(self, node_id: str) -> int:
        """Hand back every pending task this node holds."""

    @abc.abstractmethod
    def record(self, outcomes: list[RunOutcome]) -> None:
        """Write finished runs and their tasks and schedules, in one transaction."""

    @abc.abstractmethod
    def count_pending_tasks(self) -> int: ...

    # -- maintenance -----------------------------------------------------------------
    @abc.abstractmethod
    def prune_runs(self, days: int) -> int:
        """Delete finished runs older than ``days`` days; return how many."""
