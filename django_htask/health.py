"""Is the scheduler alive and on time? One verdict for ``manage.py htask health`` and
the health endpoint (:mod:`django_htask.urls`).

The scheduler is healthy when, at ``now``:

1. the database answers, and has django_htask's tables (``manage.py migrate`` ran);
2. at least one node is live (not stopped, heartbeat within ``NODE_TIMEOUT``), and,
   when a node id is given, that node is live;
3. no due work is late: no pending one-off task and no enabled, unbroken schedule was
   due more than ``max_late`` seconds ago. Due and not yet started is what "late"
   means: a task still pending whose ``run_at`` is older than ``now - max_late``, a
   schedule whose ``next_run_at`` is (a fired occurrence moves ``next_run_at`` on, and
   a started task is no longer pending). The work of a paused queue waits by an
   operator's decision: it is not late (the verdict names the queues paused).

:func:`check_health` only reads (nothing is written, not even a heartbeat) and never
raises for a database error: the error is the verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import Error

from django_htask import clock
from django_htask.conf import get_settings
from django_htask.db import scheduler_alias
from django_htask.models import Node, Queue, Schedule, Task
from django_htask.store import not_migrated

__all__ = ["DEFAULT_MAX_LATE", "Verdict", "check_health", "parse_max_late", "parse_node"]

#: Seconds due work may wait before it counts as late. A live node starts due work
#: within about a second; after a node dies its schedules wait for the others to see
#: it dead (``NODE_TIMEOUT``, 60 s by default) and its tasks already running are
#: handed back later still, so raise it above ``NODE_TIMEOUT`` when several nodes run.
DEFAULT_MAX_LATE = 60.0
#: The longest node id (``Node.id``'s ``max_length``).
NODE_ID_MAX = 100
#: The problem of a database without django_htask's tables, for the endpoint (the
#: command's line also names the database and the missing table).
NOT_MIGRATED = "django_htask's tables are missing: run `manage.py migrate`"


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Verdict:
    """What :func:`check_health` found; :attr:`healthy` and :attr:`problem` sum it up."""

    #: When the check ran.
    checked_at: datetime
    #: The lateness allowed, in seconds.
    max_late: float
    #: The node that had to be live (``--node``), if one was named.
    node: str | None = None
    #: ``"ClassName: message"`` of the database error, empty when the database answered.
    database_error: str = ""
    #: What to do when the database answered but lacks django_htask's tables (the
    #: message of :class:`~django_htask.exceptions.NotMigrated`), empty otherwise.
    not_migrated: str = ""
    #: The ids of the live nodes.
    live_nodes: tuple[str, ...] = ()
    #: The named node's state: ``"live"``, ``"dead"``, ``"stopped"`` or ``"unknown"``.
    node_state: str | None = None
    #: The named node's last heartbeat (None: it is not registered).
    node_heartbeat: datetime | None = None
    #: The newest heartbeat of any node (live or not), and whose it is.
    last_heartbeat: datetime | None = None
    last_heartbeat_node: str = ""
    last_heartbeat_stopped: bool = False
    #: Pending tasks and schedules due more than ``max_late`` seconds ago.
    late_tasks: int = 0
    late_schedules: int = 0
    #: The oldest due work not started (late or not): when it was due and what it is
    #: (a task's function, ``schedule NAME``).
    oldest_due: datetime | None = None
    oldest_due_name: str = ""
    #: The queues paused (their work is not counted as due).
    paused_queues: tuple[str, ...] = ()
    #: Worker threads the live nodes gave up, still stuck in their calls (as of their
    #: last heartbeats): not a problem by itself, since past ``MAX_ABANDONED_THREADS``
    #: a node starts afresh.
    stuck_threads: int = 0

    @property
    def database_ok(self) -> bool:
        return not self.database_error

    @property
    def oldest_due_seconds(self) -> float | None:
        """How long ago the oldest due work was due, in seconds (None: nothing due)."""
        if self.oldest_due is None:
            return None
        return max(0.0, (self.checked_at - self.oldest_due).total_seconds())

    @property
    def last_heartbeat_seconds(self) -> float | None:
        if self.last_heartbeat is None:
            return None
        return (self.checked_at - self.last_heartbeat).total_seconds()

    def problems(self, *, detail: bool = True) -> list[str]:
        """What is wrong, one phrase each (empty: healthy). Without ``detail`` a
        database error is named by its class only (its message may name hosts)."""
        if self.database_error:
            shown = self.database_error if detail else self.database_error.partition(":")[0]
            return [f"database unavailable ({shown})"]
        if self.not_migrated:
            # The message names the database; without detail, only what to do.
            return [self.not_migrated if detail else NOT_MIGRATED]
        found: list[str] = []
        heard = self._last_heard()
        if not self.live_nodes:
            found.append(f"no live node ({heard})")
        if self.node is not None and self.node_state != "live":
            if self.node_state == "unknown" or self.node_heartbeat is None:
                found.append(f"node {self.node} is not registered")
            elif self.live_nodes or self.node != self.last_heartbeat_node:
                age = (self.checked_at - self.node_heartbeat).total_seconds()
                found.append(
                    f"node {self.node} is {self.node_state} (last heartbeat "
                    f"{_iso(self.node_heartbeat)}, {age:.0f}s ago)"
                )
        late = self.late_tasks + self.late_schedules
        if late:
            what = " and ".join(
                _plural(n, word)
                for n, word in ((self.late_tasks, "task"), (self.late_schedules, "schedule"))
                if n
            )
            verb = "was" if late == 1 else "were"
            found.append(
                f"{what} {verb} due more than {self.max_late:g}s ago (oldest due "
                f"{self.oldest_due_seconds or 0:.0f}s ago: {self.oldest_due_name})"
            )
        return found

    def _last_heard(self) -> str:
        if self.last_heartbeat is None:
            return "no node has registered"
        stopped = ", stopped" if self.last_heartbeat_stopped else ""
        return (
            f"last heartbeat {_iso(self.last_heartbeat)} from {self.last_heartbeat_node}, "
            f"{self.last_heartbeat_seconds or 0:.0f}s ago{stopped}"
        )

    @property
    def healthy(self) -> bool:
        return not self.problems()

    @property
    def problem(self) -> str | None:
        """What is wrong, on one line (None when healthy)."""
        return "; ".join(self.problems()) or None

    def line(self) -> str:
        """``healthy: …`` with the facts, or ``unhealthy: …`` with what is wrong."""
        problem = self.problem
        if problem is not None:
            return f"unhealthy: {problem}"
        nodes = _plural(len(self.live_nodes), "live node")
        named = f" (node {self.node} live)" if self.node is not None else ""
        if self.oldest_due is None:
            due = "nothing due"
        else:
            due = f"oldest due work {self.oldest_due_seconds:.0f}s ago: {self.oldest_due_name}"
        paused = f", queues paused: {', '.join(self.paused_queues)}" if self.paused_queues else ""
        stuck = f", {_plural(self.stuck_threads, 'stuck thread')}" if self.stuck_threads else ""
        return f"healthy: {nodes}{named}, {due}{paused}{stuck} (max late {self.max_late:g}s)"

    def as_json(self) -> dict[str, Any]:
        """The verdict for the health endpoint: facts only, no host names, pids or
        database error messages."""
        problems = self.problems(detail=False)
        return {
            "healthy": not problems,
            "problem": "; ".join(problems) or None,
            "checked_at": _iso(self.checked_at),
            "max_late_seconds": self.max_late,
            "database": self.database_ok,
            "node": self.node,
            "node_state": self.node_state,
            "live_nodes": len(self.live_nodes),
            "last_heartbeat_seconds": _round(self.last_heartbeat_seconds),
            "late_tasks": self.late_tasks,
            "late_schedules": self.late_schedules,
            "oldest_due_seconds": _round(self.oldest_due_seconds),
            "paused_queues": list(self.paused_queues),
            "stuck_threads": self.stuck_threads,
        }


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


def parse_max_late(value: object, name: str = "max_late") -> float:
    """``value`` (a number or its text) as a lateness in seconds: finite and >= 0;
    :class:`ValueError` naming it (as ``name``) otherwise."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    return seconds


def parse_node(value: str, name: str = "node") -> str:
    """``value`` as a node id: 1 to 100 characters; :class:`ValueError` otherwise."""
    if not 0 < len(value) <= NODE_ID_MAX:
        raise ValueError(f"{name} must be 1 to {NODE_ID_MAX} characters, got {len(value)}")
    return value


def check_health(
    *,
    max_late: float = DEFAULT_MAX_LATE,
    node: str | None = None,
    now: datetime | None = None,
    using: str | None = None,
) -> Verdict:
    """Look at the database ``using`` (default: the scheduler's) at ``now`` (default:
    the clock's now) and judge.

    ``max_late``: seconds due work may wait (:data:`DEFAULT_MAX_LATE`); ``node``: a
    node id that must be live. A database error is returned in the verdict, not raised.
    """
    max_late = parse_max_late(max_late)
    now = now or clock.now()
    using = using or scheduler_alias()
    try:
        facts = _look(now, max_late, node, using)
    except Error as exc:
        missing = not_migrated(exc, using)
        if missing is not None:
            return Verdict(checked_at=now, max_late=max_late, node=node, not_migrated=str(missing))
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        error = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
        return Verdict(checked_at=now, max_late=max_late, node=node, database_error=error)
    return Verdict(checked_at=now, max_late=max_late, node=node, **facts)


def _look(now: datetime, max_late: float, node: str | None, using: str) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    nodes = Node.objects.using(using).order_by()
    dead_before = get_settings().dead_before(now)
    live = list(nodes.live(dead_before).order_by("id").values_list("id", "stuck_threads"))
    facts["live_nodes"] = tuple(node_id for node_id, _ in live)
    facts["stuck_threads"] = sum(stuck for _, stuck in live)
    newest = nodes.heard_last().values_list("id", "last_heartbeat", "stopped_at")
    last = newest.first()
    if last is not None:
        facts["last_heartbeat_node"], facts["last_heartbeat"], stopped_at = last
        facts["last_heartbeat_stopped"] = stopped_at is not None
    if node is not None:
        facts["node_state"], facts["node_heartbeat"] = _node_state(node, using, facts["live_nodes"])
    late_before = now - timedelta(seconds=max_late)
    paused = tuple(Queue.objects.using(using).filter(paused=True).values_list("name", flat=True))
    facts["paused_queues"] = paused
    tasks = Task.objects.using(using).exclude(queue_name__in=paused)
    facts["late_tasks"] = tasks.overdue(late_before).count()
    active = Schedule.objects.using(using).filter(enabled=True, broken="")
    active = active.exclude(queue_name__in=paused)
    facts["late_schedules"] = active.filter(next_run_at__lt=late_before).count()
    task = tasks.due(now).order_by("run_at").values_list("run_at", "function")
    schedule = (
        active.filter(next_run_at__lte=now)
        .order_by("next_run_at")
        .values_list("next_run_at", "name")
    )
    due = [*task[:1], *((when, f"schedule {name}") for when, name in schedule[:1])]
    if due:
        facts["oldest_due"], facts["oldest_due_name"] = min(due)
    return facts


def _node_state(node: str, using: str, live: tuple[str, ...]) -> tuple[str, datetime | None]:
    """The state of ``node`` (live, dead, stopped or unknown) and its last heartbeat."""
    rows = Node.objects.using(using).filter(id=node)
    row = list(rows.values_list("last_heartbeat", "stopped_at"))
    if not row:
        return "unknown", None
    heartbeat, stopped_at = row[0]
    if node in live:
        return "live", heartbeat
    return ("dead" if stopped_at is None else "stopped"), heartbeat
