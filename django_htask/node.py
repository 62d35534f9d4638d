"""The ``runscheduler`` process: the engine, fed from the database.

A :class:`Node` runs three engine :class:`~django_htask.engine.Scheduler` s on one
clock:

``control``
    one thread that makes every decision against the database, in order: timers for
    each schedule's ``next_run_at`` and for the next one-off task due, the poll that
    reads what other processes changed, task claims, rebalancing, and the batched
    writing of finished runs.
``jobs``
    the worker pool that calls the registered functions.
``heartbeat``
    one thread that renews the node's heartbeat and leases and reaps dead nodes, apart
    from the control thread so that a long queue there does not make the node look
    dead (see :meth:`Node._heartbeat`).

At start the node loads every enabled schedule by ``next_run_at`` (no cron evaluated).
A schedule fires by a compare-and-set on (id, next_run_at, version), so an occurrence
runs once even if another process or node looks at it too.

One-off tasks are claimed only as workers take them: a claim marks the task running
and counts its attempt, in one transaction, for as many tasks as there are free
workers. A node never holds a task it has not started, so a node that dies leaves only
the tasks it was running, and each of those has used one attempt. For the tasks due
later the node only reads when the next one is due, and sets a timer.

Every write checks that the node has not been declared dead by the others (fencing,
see :mod:`django_htask.store.base`). A node that finds it was declared dead starts
nothing more, logs it, and stops (``runscheduler`` exits with status 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import math
import os
import secrets
import socket
import threading
import time
import traceback
import weakref
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, close_old_connections, connections

import django_htask
from django_htask.engine import (
    ArgumentError,
    Clock,
    FunctionNotRegistered,
    HtaskError,
    InvalidSchedule,
    PayloadError,
    SchedulerClosed,
    TimerHandle,
    decode_call,
    parse_schedule,
    plan_occurrences,
    registry,
)
from django_htask.engine import Scheduler as EngineScheduler

from . import clock as clocks
from . import cluster
from .conf import HtaskSettings, get_settings
from .exceptions import NodeFenced
from .models import CatchUp, Overlap, Run, RunStatus
from .queues import ALL, QueueFilter
from .retry import RetryPolicy
from .signals import run_finished, run_started
from .store import (
    Abandoned,
    RunOutcome,
    ScheduleRef,
    ScheduleRow,
    Serving,
    StartedTask,
    Store,
    get_store,
)

if TYPE_CHECKING:
    from .cluster import Cluster

__all__ = ["EXIT_GRACE", "Node", "NodeStats", "StartAborted", "notify_local_change"]

logger = logging.getLogger("django_htask.node")

#: Seconds between two prunings of old runs (``RUN_RETENTION_DAYS``).
PRUNE_INTERVAL = 3600.0
#: A node that must exit with runs still going counts as alive this many seconds more,
#: so that no other node starts their schedules before its process is gone.
EXIT_GRACE = 2.0

_local_nodes: weakref.WeakSet[Node] = weakref.WeakSet()


def notify_local_change() -> None:
    """Tell the nodes running in this process that the database changed (a schedule
    saved, a task scheduled): they look at once instead of at the next poll."""
    for node in list(_local_nodes):
        node.wake()


@functools.lru_cache(maxsize=4096)
def _parsed(text: str, tz: str) -> Any:
    return parse_schedule(text, tz=tz or None)


class StartAborted(HtaskError, RuntimeError):
    """A stop was requested while the node was still waiting for the database at start."""


@dataclass(frozen=True)
class NodeStats:
    """What a node loaded at start (for the banner)."""

    schedules: int
    pending_tasks: int
    next_task_due: datetime | None


def _armed(handle: TimerHandle | None) -> bool:
    """Whether ``handle`` is a timer that has yet to fire.

    A held schedule whose timer has fired keeps its due time until it is placed again:
    the fire that lost a compare-and-set only to a version change (another node wrote
    the row's status, say) places the same due time, and must get a new timer."""
    return handle is not None and handle.state in ("pending", "queued")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # somebody else's process: alive
        return True
    return True


class _Held:
    """A schedule in memory: its due time, version, queue and timer, and ``owner``: ""
    when this node owns it, else the owner this node stands by for (several nodes)."""

    __slots__ = ("due", "handle", "owner", "queue", "version")

    def __init__(
        self, due: datetime, version: int, handle: TimerHandle | None, owner: str, queue: str
    ) -> None:
        self.due = due
        self.version = version
        self.handle = handle
        self.owner = owner
        self.queue = queue


class _Once:
    """Run ``fn`` on the node's control thread, once however often it is asked for
    before it runs (a wake-up, a dispatch, a flush of results)."""

    __slots__ = ("_fn", "_lock", "_node", "_queued")

    def __init__(self, node: Node, fn: Callable[[], None]) -> None:
        self._node = node
        self._fn = fn
        self._lock = threading.Lock()
        self._queued = False

    def request(self, delay: float = 0.0) -> None:
        with self._lock:
            if self._queued:
                return
            self._queued = True
        if not self._node._control_later(delay, self._run):
            with self._lock:
                self._queued = False

    def _run(self) -> None:
        with self._lock:
            self._queued = False
        self._fn()


class Node:
    """One scheduler process over the database (see the module's docstring)."""

    def __init__(
        self,
        *,
        node_id: str | None = None,
        workers: int | None = None,
        poll_interval: float | None = None,
        clock: Clock | None = None,
        store: Store | None = None,
        settings: HtaskSettings | None = None,
        queues: QueueFilter = ALL,
        backend: str | None = None,
        max_tasks: int | None = None,
        batch: bool = False,
    ) -> None:
        if max_tasks is not None and not max_tasks > 0:
            raise ValueError(f"max_tasks must be greater than zero, got {max_tasks!r}")
        self.settings = settings or get_settings()
        #: The tasks it runs and the schedules it fires (queues, a django.tasks alias).
        self.serving = Serving(queues, backend)
        #: Stop once this many one-off tasks have run (``runscheduler --max-tasks``).
        self.max_tasks = max_tasks
        #: Stop once nothing is due and nothing runs (``runscheduler --batch``).
        self.batch = batch
        self._claimed_tasks = 0  # one-off tasks started
        self._finished_tasks = 0
        self.clock = clock if clock is not None else clocks.get_clock()
        self.node_id = node_id or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.workers = self.settings.workers if workers is None else workers
        self.poll_interval = (
            self.settings.poll_interval if poll_interval is None else float(poll_interval)
        )
        if not self.poll_interval > 0:
            raise ValueError(f"poll_interval must be > 0, got {poll_interval!r}")
        self.store = store or get_store()
        s = self.settings
        self.task_retry = RetryPolicy(s.retry_backoff, s.retry_backoff_max)
        self._jobs: EngineScheduler | None = None
        self._control: EngineScheduler | None = None
        self._beat: EngineScheduler | None = None  # the heartbeat's own thread
        self._control_fired = -1  # the control thread's calls started, at the last beat
        self._control_progress = 0.0  # when (clock.monotonic()) that count last moved
        self._lock = threading.Lock()
        self._schedules: dict[int, _Held] = {}
        self._seen_version = 0
        self._task_wake: TimerHandle | None = None  # at the next task due
        self._tasks_due = True  # due tasks may wait in the database
        self._running_tasks: dict[int, StartedTask] = {}
        self._running_runs: dict[int, tuple[int, RunOutcome]] = {}  # run id -> (schedule)
        self._busy_schedules: dict[int, int] = {}
        self._delayed: set[int] = set()
        self._outcomes: list[RunOutcome] = []
        #: The jobs whose function has been called: ("task", id) or ("run", run id).
        self._calling: set[tuple[str, int]] = set()
        self._db_delay = 0.0
        self._stopping = False
        self._started = False
        self._fenced: NodeFenced | None = None
        self._cluster: Cluster | None = None  # several nodes on PostgreSQL
        self._waker = _Once(self, self._on_wake)
        self._dispatcher = _Once(self, self._dispatch)
        #: Set by :meth:`request_stop` (from a signal handler: a plain flag, no lock),
        #: and when the node finds it was declared dead.
        self.stop_requested = False
        #: Runs still going when :meth:`stop` gave up waiting (the process must exit).
        self.unfinished = 0
        #: Why the node asked to stop by itself (``max_tasks``, ``batch``), if it did.
        self.done = ""

    # -- life cycle ------------------------------------------------------------------
    def start(self, *, sync_code: bool = True) -> NodeStats:
        """Register the node, load schedules, and start firing."""
        if self._started:
            raise RuntimeError(f"node {self.node_id} is already started")
        self._started = True
        store = self.store
        now = self.clock.now()
        self._with_retry(store.check_migrated)
        self._with_retry(store.install)
        self._with_retry(
            lambda: store.register_node(
                self.node_id,
                socket.gethostname(),
                os.getpid(),
                django_htask.__version__,
                now,
                self.serving.schedules,
            )
        )
        if store.single_host:
            self._with_retry(self._declare_gone_predecessors)
        if sync_code:
            from .decorators import sync_schedules  # noqa: PLC0415

            self._with_retry(sync_schedules)
        # Each worker thread closes the database connections it opened as it ends.
        close = connections.close_all
        self._control = EngineScheduler(
            1, clock=self.clock, name=f"{self.node_id}-control", on_thread_exit=close
        )
        self._jobs = EngineScheduler(
            self.workers, clock=self.clock, name=f"{self.node_id}-jobs", on_thread_exit=close
        )
        self._beat = EngineScheduler(
            1, clock=self.clock, name=f"{self.node_id}-heartbeat", on_thread_exit=close
        )
        self._cluster = self._with_retry(lambda: cluster.attach(self))
        refs, top = self._with_retry(store.load_schedules)
        self._seen_version = top
        for ref in refs:
            self._place(ref)
        pending = self._with_retry(store.count_pending_tasks)
        due_now, next_due = self._with_retry(lambda: store.task_outlook(now, self.serving))
        _local_nodes.add(self)
        self._control.call_soon(self._poll)
        self._beat.call_soon(self._heartbeat)
        self._control.call_soon(self._prune)
        logger.info(
            "node %s started: %d schedules, %d pending tasks",
            self.node_id,
            len(refs),
            pending,
            extra={"action": "node_started"},
        )
        return NodeStats(
            schedules=len(refs), pending_tasks=pending, next_task_due=now if due_now else next_due
        )

    def _declare_gone_predecessors(self) -> None:
        """Declare dead at once the nodes of this host whose process is gone (a node
        killed, then started again): what they held is handed back now, not after
        ``NODE_TIMEOUT``. Only where every node runs on one host (SQLite)."""
        now = self.clock.now()
        gone = [
            node_id
            for node_id, pid in self.store.nodes_on_host(socket.gethostname())
            if node_id != self.node_id and pid != os.getpid() and not _pid_alive(pid)
        ]
        if gone and self.store.declare_dead(gone, now):
            logger.warning(
                "nodes %s of this host are gone (no such process): handing back their work",
                ", ".join(gone),
                extra={"action": "predecessors_gone", "nodes": gone},
            )
            self._reap(now)

    def _with_retry(self, fn: Callable[[], Any]) -> Any:
        """Run a start-up step, retrying while the database is unavailable (until a stop
        is requested: then :class:`StartAborted`)."""
        delay = self.settings.db_retry
        while True:
            try:
                return fn()
            except DatabaseError as exc:
                if self._stopping or self.stop_requested:
                    raise StartAborted(f"node {self.node_id}: stopped before it started") from exc
                self._db_lost(exc, delay)
                deadline = time.monotonic() + delay
                while not self.stop_requested and time.monotonic() < deadline:
                    time.sleep(min(0.05, delay))
                delay = min(delay * 2, self.settings.db_retry_max)

    def request_stop(self) -> None:
        """Ask the process running :meth:`start` / the main loop to stop (safe to call
        from a signal handler: it only sets a flag)."""
        self.stop_requested = True

    def _db_lost(self, exc: BaseException, retry_in: float) -> None:
        logger.warning(
            "database unavailable (%s: %s), retrying in %.1fs",
            type(exc).__name__,
            exc,
            retry_in,
            extra={"action": "db_unavailable"},
        )
        with contextlib.suppress(DatabaseError):
            self.store.close()

    def _next_db_delay(self) -> float:
        self._db_delay = (
            self.settings.db_retry
            if not self._db_delay
            else min(self._db_delay * 2, self.settings.db_retry_max)
        )
        return self._db_delay

    def _db_ok(self) -> None:
        if self._db_delay:
            logger.info("database back", extra={"action": "db_back"})
            self._db_delay = 0.0

    def _guarded(self, fn: Callable[[], object], what: str, retry: _Once | None = None) -> bool:
        """Call ``fn`` (a step of the control thread) and handle what can go wrong: the
        database away (back off; ``retry`` is asked for again after the delay), this
        node declared dead (it stops), anything else (logged with its traceback, never
        silent). Return whether it succeeded."""
        try:
            fn()
        except NodeFenced as exc:
            self._on_fenced(exc)
        except DatabaseError as exc:
            delay = self._next_db_delay()
            self._db_lost(exc, delay)
            if retry is not None:
                retry.request(delay)
        except Exception:
            logger.exception(
                "unexpected error in the node's %s", what, extra={"action": "node_error"}
            )
        else:
            self._db_ok()
            return True
        return False

    def _on_fenced(self, exc: NodeFenced) -> None:
        """This node was declared dead by the others: start nothing more, stop."""
        with self._lock:
            if self._fenced is not None:
                return
            self._fenced = exc
        logger.error(
            "%s; this node starts nothing more, writes nothing more, and stops "
            "(start it again: it joins under a new id)",
            exc,
            extra={"action": "node_fenced", "node": self.node_id},
        )
        self.stop_requested = True

    @property
    def fenced(self) -> bool:
        """Whether the node found it was declared dead (it then stops)."""
        return self._fenced is not None

    def wake(self) -> None:
        """Look at the database now (own-process changes)."""
        if self._control is not None and not self._stopping:
            self._waker.request()

    def _on_wake(self) -> None:
        if self._stopping:
            return

        def look() -> None:
            self._sync_schedules()
            self._watch_tasks()

        self._guarded(look, "wake-up")
        self._dispatch()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self, timeout: float | None = None) -> None:
        """Stop taking work, let running jobs finish (up to ``timeout`` seconds, default
        the ``SHUTDOWN_TIMEOUT`` setting), and write it all down. Safe to call twice.

        Jobs still running after the timeout cannot be stopped from here: their tasks
        end this attempt (retried later, after the process is gone, or failed), their
        schedule runs are noted as interrupted, and :attr:`unfinished` says how many
        there were. The caller must then end the process at once (``runscheduler``
        does): the node counts as alive for :data:`EXIT_GRACE` seconds more, and no
        other node starts that work before then."""
        if self._stopping:
            return
        self._stopping = True
        _local_nodes.discard(self)
        if self._cluster is not None:
            self._cluster.close()
        if self._fenced is not None:
            self._stop_fenced()
            return
        timeout = self.settings.shutdown_timeout if timeout is None else timeout
        logger.info(
            "node %s stopping: waiting up to %.0fs for %d running jobs",
            self.node_id,
            timeout,
            len(self._running_tasks) + len(self._running_runs),
            extra={"action": "node_stopping"},
        )
        deadline = time.monotonic() + timeout
        if self._control is not None:  # the call in progress ends; nothing new starts
            self._control.close(wait=True, timeout=timeout)
        if self._jobs is not None:  # running jobs get what is left of the timeout
            self._jobs.close(wait=True, timeout=max(deadline - time.monotonic(), 0))
        if self._beat is not None:  # it renewed the leases while the jobs ran
            self._beat.close(wait=True, timeout=timeout)
        now = self.clock.now()
        with self._lock:
            outcomes, self._outcomes = self._outcomes, []
            running_tasks = list(self._running_tasks.values())
            running_runs = list(self._running_runs)
            calling = set(self._calling)
        abandoned = self._abandoned(running_tasks, running_runs, calling, now, timeout)
        self.unfinished = sum(a.started for a in abandoned)
        try:
            self.store.record(self.node_id, outcomes)
            if abandoned:
                dead_at = now + timedelta(seconds=EXIT_GRACE)
                heartbeat_at = dead_at - timedelta(seconds=self.settings.node_timeout)
                self.store.abandon(self.node_id, now, abandoned, dead_at, heartbeat_at)
            else:
                self.store.stop_node(self.node_id, now)
        except NodeFenced as exc:
            self._on_fenced(exc)
        except DatabaseError as exc:
            logger.error(
                "could not write the last %d runs at shutdown: %s",
                len(outcomes),
                exc,
                extra={"action": "stop_unrecorded"},
            )
        finally:
            self.store.close()
        if self.unfinished:
            logger.warning(
                "node %s stopped with %d runs still going after %gs: they count as "
                "interrupted, and the process must exit now",
                self.node_id,
                self.unfinished,
                timeout,
                extra={"action": "node_abandoned", "unfinished": self.unfinished},
            )
        logger.info(
            "node %s stopped (%d runs written)",
            self.node_id,
            len(outcomes),
            extra={"action": "node_stopped"},
        )

    def _abandoned(
        self,
        tasks: list[StartedTask],
        run_ids: list[int],
        calling: set[tuple[str, int]],
        now: datetime,
        timeout: float,
    ) -> list[Abandoned]:
        """What stop() leaves: the jobs in a call (interrupted: their attempt counts)
        and those still queued (handed back: pending again, or failed unstarted)."""
        interrupted = (
            f"interrupted: the node stopped (SHUTDOWN_TIMEOUT {timeout:g}s) before the run finished"
        )
        unstarted = "not run: the node stopped before a worker took it"
        abandoned = []
        for run_id in run_ids:
            started = ("run", run_id) in calling
            error = interrupted if started else unstarted
            abandoned.append(Abandoned(error, started, run_id=run_id))
        for task in tasks:
            started = ("task", task.id) in calling
            retry_at = None
            if started and task.attempts < task.max_attempts:
                retry_at = now + timedelta(seconds=self.task_retry.delay(task.attempts))
            error = interrupted if started else unstarted
            abandoned.append(Abandoned(error, started, task_id=task.id, retry_at=retry_at))
        return abandoned

    def _stop_fenced(self) -> None:
        """Stop a node that was declared dead: nothing is written (the database would
        refuse it), nothing is waited for (the others run that work now)."""
        for scheduler in (self._control, self._beat, self._jobs):
            if scheduler is not None:
                scheduler.close(wait=False)
        with self._lock:
            self.unfinished = len(self._running_tasks) + len(self._running_runs)
            self._outcomes.clear()
        self.store.close()
        logger.info(
            "node %s stopped: it had been declared dead",
            self.node_id,
            extra={"action": "node_stopped"},
        )

    # -- state for tests and the banner ----------------------------------------------
    def held_schedules(self) -> dict[int, datetime]:
        """Schedule id -> due time, as held in memory (owned or stood by for)."""
        with self._lock:
            return {i: h.due for i, h in self._schedules.items()}

    def owned_schedules(self) -> dict[int, datetime]:
        """Schedule id -> due time, of the schedules this node owns."""
        with self._lock:
            return {i: h.due for i, h in self._schedules.items() if not h.owner}

    def next_task_wake(self) -> datetime | None:
        """When the node looks for due one-off tasks next (its timer), if it has one."""
        handle = self._task_wake
        return handle.when if _armed(handle) and handle is not None else None

    def running(self) -> int:
        """Jobs handed to the workers and not finished."""
        with self._lock:
            return len(self._running_tasks) + len(self._running_runs)

    def idle(self) -> bool:
        return all(s is None or s.idle() for s in (self._control, self._jobs, self._beat))

    # -- the poll --------------------------------------------------------------------
    def _control_later(self, delay: float, fn: Callable[..., object], *args: Any) -> bool:
        """Run ``fn(*args)`` on the control thread after ``delay`` seconds; False if the
        node is stopping."""
        control = self._control
        if control is None or self._stopping:
            return False
        try:
            control.call_later(delay, fn, *args)
        except SchedulerClosed:
            return False
        return True

    def _poll(self) -> None:
        if self._stopping:
            return

        def look() -> None:
            self.store.refresh()
            self._sync_schedules()
            self._watch_tasks()
            self._flush()

        ok = self._guarded(look, "poll")
        self._dispatch()
        self._stop_when_done()
        self._control_later(self.poll_interval if ok else self._db_delay, self._poll)

    def _heartbeat(self) -> None:
        """Renew this node's heartbeat and leases, reap, and have the control thread
        re-read the members.

        It runs on a thread of its own, so that a control thread with a long queue (a
        burst of fires, the catch-up after the database was away) does not make the
        other nodes declare this one dead, reap the tasks it is running and run them a
        second time. It stops renewing while the control thread is stuck in one call
        for a whole ``NODE_TIMEOUT``: a node that can no longer act must not keep its
        leases. It goes on while the node stops (the leases of the jobs that finish)."""
        if self._fenced is not None:
            return
        now = self.clock.now()
        s = self.settings
        stuck = self._control_stuck()
        try:
            if stuck > s.node_timeout:
                logger.warning(
                    "the control thread has been in one call for %.0fs: leases not renewed",
                    stuck,
                    extra={"action": "control_stuck"},
                )
            else:
                self.store.heartbeat(self.node_id, now, now + timedelta(seconds=s.lease))
            if not self._stopping:
                self._reap(now)
        except NodeFenced as exc:
            self._on_fenced(exc)
            return
        except DatabaseError as exc:
            self._db_lost(exc, s.heartbeat_interval)
        if self._cluster is not None and not self._stopping:
            self._cluster.queue_refresh()
        beat = self._beat
        if beat is not None:
            # From this beat's time, not from now: the work above takes a while, and
            # arming after it would let each beat slip by that much (and by a whole
            # interval if the clock jumped meanwhile).
            with contextlib.suppress(SchedulerClosed):
                beat.call_at(now + timedelta(seconds=s.heartbeat_interval), self._heartbeat)

    def _reap(self, now: datetime) -> None:
        dead_before = now - timedelta(seconds=self.settings.node_timeout)
        reaped = self.store.reap(self.node_id, now, dead_before, self.task_retry)
        if reaped:
            logger.warning(
                "%d rows held by dead nodes handed back", reaped, extra={"action": "reaped"}
            )
            self.wake()

    def _control_stuck(self) -> float:
        """For how long the control thread has been inside one call while work waits
        (0 when it is idle or has started another call since the last look)."""
        control = self._control
        now = self.clock.monotonic()
        if control is None:
            return 0.0
        fired = control.stats()["fired"]
        if control.idle() or fired != self._control_fired:
            self._control_fired = fired
            self._control_progress = now
            return 0.0
        return now - self._control_progress

    def _prune(self) -> None:
        """Delete runs older than ``RUN_RETENTION_DAYS`` (at start, then hourly)."""
        if self._stopping or not self.settings.run_retention_days:
            return
        try:
            deleted = self.store.prune_runs(self.settings.run_retention_days)
            if deleted:
                logger.info(
                    "%d runs older than %d days deleted",
                    deleted,
                    self.settings.run_retention_days,
                    extra={"action": "runs_pruned"},
                )
        except DatabaseError as exc:
            self._db_lost(exc, PRUNE_INTERVAL)
        self._control_later(PRUNE_INTERVAL, self._prune)

    # -- schedules -------------------------------------------------------------------
    def _sync_schedules(self) -> None:
        refs, top = self.store.changed_schedules(self._seen_version)
        self._seen_version = top
        for ref in refs:
            self._place(ref)
        if refs:
            logger.debug(
                "%d schedules changed (version %d)",
                len(refs),
                top,
                extra={"action": "schedules_synced"},
            )

    def _place(self, ref: ScheduleRef) -> None:
        """Hold ``ref`` in memory with a timer at its due time (or drop it). With
        several nodes, a schedule this node stands by for gets its timer later, by the
        standby delay (none while its owner is suspected of being gone)."""
        owner: str | None = "" if self.serving.schedules.serves(ref.queue) else None
        delay = 0.0
        if self._cluster is not None and owner is not None:
            owner = self._cluster.holding(ref.id, ref.queue)
            if owner:
                delay = self._cluster.standby_delay(owner)
        with self._lock:
            held = self._schedules.get(ref.id)
            if owner is None or not ref.enabled or ref.next_run_at is None:
                if held is not None:
                    del self._schedules[ref.id]
                    if held.handle is not None:
                        held.handle.cancel()
                return
            if (
                held is not None
                and held.due == ref.next_run_at
                and held.owner == owner
                and _armed(held.handle)
            ):
                held.version = max(held.version, ref.version)
                return
            if held is not None and held.handle is not None:
                held.handle.cancel()
            control = self._control
            handle = None
            if control is not None and not self._stopping:
                at = ref.next_run_at + timedelta(seconds=delay) if delay else ref.next_run_at
                handle = control.call_at(at, self._fire, ref.id)
            self._schedules[ref.id] = _Held(ref.next_run_at, ref.version, handle, owner, ref.queue)

    def _drop(self, schedule_id: int) -> None:
        with self._lock:
            held = self._schedules.pop(schedule_id, None)
        if held is not None and held.handle is not None:
            held.handle.cancel()

    def replace_held(self, owner: str | None = None) -> None:
        """Place every held schedule again (its role or its owner's standing changed);
        with ``owner``, only those this node stands by for that owner."""
        with self._lock:
            refs = [
                ScheduleRef(i, h.due, h.version, queue=h.queue)
                for i, h in self._schedules.items()
                if owner is None or h.owner == owner
            ]
        for ref in refs:
            self._place(ref)

    def _fire(self, schedule_id: int) -> None:
        if self._stopping:
            return
        try:
            self._fire_once(schedule_id)
            self._db_ok()
        except NodeFenced as exc:
            self._on_fenced(exc)
        except DatabaseError as exc:
            delay = self._next_db_delay()
            self._db_lost(exc, delay)
            self._control_later(delay, self._fire, schedule_id)
        except Exception as exc:
            logger.exception(
                "schedule %s could not be fired", schedule_id, extra={"action": "fire_error"}
            )
            problem = f"{type(exc).__name__}: {exc}"
            self._guarded(lambda: self._break(schedule_id, None, problem), "marking it broken")

    def _fire_once(self, schedule_id: int) -> None:
        with self._lock:
            held = self._schedules.get(schedule_id)
        standby_for = held.owner if held is not None else ""
        row = self.store.get_schedule(schedule_id)
        if row is None or not row.enabled or row.next_run_at is None:
            self._drop(schedule_id)
            return
        now = self.clock.now()
        if standby_for:
            # The owner claims an occurrence by moving next_run_at: fire only one it
            # left where it was for the whole standby delay.
            if held is None or row.next_run_at != held.due or row.next_run_at > now:
                self._place(ScheduleRef(row.id, row.next_run_at, row.version, True, row.queue_name))
                return
        elif row.next_run_at > now:  # moved by someone else meanwhile
            self._place(ScheduleRef(row.id, row.next_run_at, row.version, True, row.queue_name))
            return
        problem = self._problem(row)
        if problem:
            self._break(row.id, row, problem)
            return
        with self._lock:
            busy = self._busy_schedules.get(row.id, 0)
        if row.overlap != Overlap.ALLOW and not busy:
            dead_before = now - timedelta(seconds=self.settings.node_timeout)
            busy = self.store.running_elsewhere(row.id, self.node_id, dead_before)
        if busy and row.overlap == Overlap.DELAY:
            with self._lock:
                self._delayed.add(row.id)
            self._control_later(self.poll_interval, self._fire, row.id)
            return
        plan = plan_occurrences(
            _parsed(row.schedule, row.timezone),
            row.next_run_at,
            now,
            grace=row.grace,
            catch_up=str(row.catch_up),
            limit=self.settings.catch_up_limit,
        )
        to_run, next_run_at = plan.to_run, plan.next
        runs = []
        if plan.missed:
            runs.append(self._missed(row, plan.missed, now))
        if busy and row.overlap == Overlap.SKIP:
            skipped = to_run or [row.next_run_at]
            runs.append(self._skipped(row, skipped, now, "the previous run was still running"))
            to_run = []
        elif len(to_run) > 1 and row.overlap == Overlap.SKIP:
            # Caught-up occurrences would run together: the first runs, the rest skip.
            runs.append(self._skipped(row, to_run[1:], now, f"the run of {to_run[0]} runs"))
            to_run = to_run[:1]
        elif len(to_run) > 1 and row.overlap == Overlap.DELAY:
            # One after another: claim the first; the next stays due and waits for it.
            next_run_at, to_run = to_run[1], to_run[:1]
        started = [self._outcome(row, RunStatus.RUNNING, when, now) for when in to_run]
        runs.extend(started)
        ids = self.store.claim_occurrence(self.node_id, row, next_run_at, now, runs)
        if ids is None:
            logger.debug(
                "schedule %s changed before it fired; reloading",
                row.name,
                extra={"action": "claim_lost"},
            )
            self._reload(row.id)
            return
        if standby_for and self._cluster is not None and self._cluster.suspect(standby_for, now):
            logger.warning(
                "node %s did not fire schedule %s within %gs of its time: this node fires "
                "the schedules it stands by for that node at their time, until it is seen "
                "alive again",
                standby_for,
                row.name,
                self.settings.standby_delay,
                extra={"action": "owner_suspected", "node": standby_for},
            )
            self.replace_held(standby_for)
        with self._lock:
            self._delayed.discard(row.id)
        if next_run_at is None:
            self._drop(row.id)
        else:
            self._place(ScheduleRef(row.id, next_run_at, row.version, True, row.queue_name))
        for run_id, outcome in zip(ids[len(runs) - len(started) :], started, strict=True):
            self._start_schedule_run(row, run_id, outcome)

    def _problem(self, row: ScheduleRow) -> str:
        """Why the node cannot use ``row`` (a value written behind the model's back),
        or "" if it can."""
        if row.catch_up not in CatchUp.values:
            return f"catch_up {row.catch_up!r} is not one of {', '.join(CatchUp.values)}"
        if row.overlap not in Overlap.values:
            return f"overlap {row.overlap!r} is not one of {', '.join(Overlap.values)}"
        if not row.max_attempts >= 1:
            return f"max_attempts {row.max_attempts!r} is not >= 1"
        if not (row.retry_backoff >= 0 and math.isfinite(row.retry_backoff)):
            return f"retry_backoff {row.retry_backoff!r} is not a finite number >= 0"
        if row.grace is not None and not (row.grace >= 0 and math.isfinite(row.grace)):
            return f"grace {row.grace!r} is not empty or a finite number >= 0"
        try:
            if row.timezone:
                zoneinfo.ZoneInfo(row.timezone)
            _parsed(row.schedule, row.timezone)
            registry.bind(row.function, *self._call_of(row.payload))
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            if isinstance(exc, InvalidSchedule | PayloadError | ArgumentError):
                return f"{type(exc).__name__}: {exc}"
            return f"timezone {row.timezone!r}: {exc}"
        except FunctionNotRegistered as exc:
            return f"{type(exc).__name__}: {exc}"
        return ""

    @staticmethod
    def _call_of(payload: bytes) -> tuple[list[Any], dict[str, Any]]:
        if not payload:
            return [], {}
        _name, args, kwargs = decode_call(payload)
        return list(args), dict(kwargs)

    def _break(self, schedule_id: int, row: ScheduleRow | None, problem: str) -> None:
        """Stop firing a schedule the node cannot use: a failed run and the schedule's
        ``broken`` field say why (the admin and ``htask status`` show it), one error
        is logged, and the schedule costs nothing more until it is saved again."""
        now = self.clock.now()
        name = row.name if row is not None else str(schedule_id)
        run = RunOutcome(
            status=RunStatus.FAILED,
            function=row.function if row is not None else "",
            name=name,
            node=self.node_id,
            attempt=1,
            scheduled_for=row.next_run_at if row is not None else None,
            started_at=None,
            finished_at=now,
            error=f"broken: {problem}",
            schedule_id=schedule_id,
        )
        version = row.version if row is not None else None
        marked = self.store.mark_broken(self.node_id, schedule_id, version, problem, run)
        if row is not None and not marked:
            self._reload(schedule_id)  # changed meanwhile: look at it again
            return
        logger.error(
            "schedule %s is broken and will not fire until it is saved again: %s",
            name,
            problem,
            extra={"action": "schedule_broken", "schedule": schedule_id},
        )
        self._drop(schedule_id)

    def _reload(self, schedule_id: int) -> None:
        row = self.store.get_schedule(schedule_id)
        if row is None:
            self._drop(schedule_id)
        else:
            self._place(
                ScheduleRef(row.id, row.next_run_at, row.version, row.enabled, row.queue_name)
            )

    def _missed(self, row: ScheduleRow, missed: list[datetime], now: datetime) -> RunOutcome:
        late = (now - missed[-1]).total_seconds()
        grace = "no limit" if row.grace is None else f"{row.grace:g}s"
        error = (
            f"{len(missed)} occurrence(s) from {missed[0].isoformat()} to "
            f"{missed[-1].isoformat()} missed: {late:.1f}s late "
            f"(grace {grace}, catch_up={row.catch_up})"
        )
        logger.warning("schedule %s: %s", row.name, error, extra={"action": "missed"})
        return self._outcome(row, RunStatus.MISSED, missed[-1], now, error=error)

    def _skipped(
        self, row: ScheduleRow, skipped: list[datetime], now: datetime, why: str
    ) -> RunOutcome:
        what = (
            f"{len(skipped)} occurrences from {skipped[0].isoformat()} to {skipped[-1].isoformat()}"
            if len(skipped) > 1
            else f"the occurrence of {skipped[0].isoformat()}"
        )
        error = f"{what} skipped: {why} (overlap=skip)"
        return self._outcome(row, RunStatus.SKIPPED, skipped[-1], now, error=error)

    def _outcome(
        self,
        row: ScheduleRow,
        status: str,
        scheduled_for: datetime | None,
        now: datetime,
        *,
        error: str = "",
        attempt: int = 1,
    ) -> RunOutcome:
        return RunOutcome(
            status=status,
            function=row.function,
            name=row.name,
            node=self.node_id,
            attempt=attempt,
            scheduled_for=scheduled_for,
            started_at=now,
            finished_at=now,
            error=error,
            schedule_id=row.id,
        )

    def _start_schedule_run(self, row: ScheduleRow, run_id: int, outcome: RunOutcome) -> None:
        outcome.run_id = run_id
        with self._lock:
            self._busy_schedules[row.id] = self._busy_schedules.get(row.id, 0) + 1
            self._running_runs[run_id] = (row.id, outcome)
        jobs = self._jobs
        assert jobs is not None
        with contextlib.suppress(SchedulerClosed):
            jobs.call_soon(self._schedule_job, row, outcome)

    def _schedule_job(self, row: ScheduleRow, started: RunOutcome) -> None:
        key = ("run", started.run_id or 0)
        with self._lock:
            if self._fenced is not None or self._stopping:
                return  # handed back by stop(): not run
            self._calling.add(key)
        result = self._execute(
            started.function,
            row.payload,
            name=row.name,
            attempt=started.attempt,
            scheduled_for=started.scheduled_for,
            schedule_id=row.id,
        )
        result.run_id = started.run_id
        with self._lock:
            self._calling.discard(key)
            self._running_runs.pop(started.run_id or 0, None)
            left = self._busy_schedules.get(row.id, 1) - 1
            if left:
                self._busy_schedules[row.id] = left
            else:
                self._busy_schedules.pop(row.id, None)
            delayed = row.id in self._delayed
        retry = (
            result.status == RunStatus.FAILED
            and result.extra.get("retryable", False)
            and started.attempt < row.max_attempts
        )
        self._push(result)
        if retry:
            policy = RetryPolicy(row.retry_backoff, self.settings.retry_backoff_max)
            self._control_later(policy.delay(started.attempt), self._retry_schedule, row, started)
        if delayed:
            self._control_later(0, self._fire, row.id)

    def _retry_schedule(self, row: ScheduleRow, previous: RunOutcome) -> None:
        if self._stopping:
            return
        now = self.clock.now()
        outcome = self._outcome(
            row, RunStatus.RUNNING, previous.scheduled_for, now, attempt=previous.attempt + 1
        )
        try:
            run_id = self.store.start_schedule_run(self.node_id, outcome)
        except NodeFenced as exc:
            self._on_fenced(exc)
            return
        except DatabaseError as exc:
            delay = self._next_db_delay()
            self._db_lost(exc, delay)
            self._control_later(delay, self._retry_schedule, row, previous)
            return
        self._start_schedule_run(row, run_id, outcome)

    # -- one-off tasks ---------------------------------------------------------------
    def _free_workers(self) -> int:
        """How many more tasks the workers can start now (a thread per job: a batch),
        and no more than ``max_tasks`` allows."""
        if self.workers == 0:
            free = self.settings.claim_batch
        else:
            with self._lock:
                free = self.workers - len(self._running_tasks) - len(self._running_runs)
        if self.max_tasks is not None:
            free = min(free, self.max_tasks - self._claimed_tasks)
        return free

    def _watch_tasks(self) -> None:
        """Read whether tasks are due and when the next one is, and set the wake-up
        timer there when it is within the look-ahead window (else the poll looks again).
        Reads only: an idle node writes nothing."""
        now = self.clock.now()
        due, first = self.store.task_outlook(now, self.serving)
        if due:
            self._tasks_due = True
        if first is None or first > now + timedelta(seconds=self.settings.lookahead):
            return
        control = self._control
        with self._lock:
            current = self._task_wake
            if _armed(current) and current is not None and current.when <= first:
                return
            if current is not None:
                current.cancel()
            self._task_wake = None
            if control is not None and not self._stopping:
                with contextlib.suppress(SchedulerClosed):
                    self._task_wake = control.call_at(first, self._task_due)

    def _task_due(self) -> None:
        self._guarded(self._watch_tasks, "look for tasks")
        self._dispatch()

    def _dispatch(self) -> None:
        """Write the results waiting, then claim and start as many due tasks as there
        are free workers (never more: a task is claimed only when a worker takes it at
        once), in one transaction."""
        if self._stopping or self._fenced is not None:
            return  # stop() writes what is left
        try:
            self._dispatch_all()
        finally:
            self._stop_when_done()

    def _dispatch_all(self) -> None:
        while True:
            free = self._free_workers() if self._tasks_due else 0
            with self._lock:
                outcomes, self._outcomes = self._outcomes, []
            if free <= 0 and not outcomes:
                return
            started: list[StartedTask] = []
            step = functools.partial(self._start_tasks, max(free, 0), outcomes, started)
            if not self._guarded(step, "task claim", retry=self._dispatcher):
                return
            if any(o.retry_at is not None for o in outcomes):
                self._guarded(self._watch_tasks, "look for tasks")
            if free > 0 and len(started) < free:
                self._tasks_due = False  # none left: until a poll, a wake-up or a timer
            if not started:
                return
            jobs = self._jobs
            assert jobs is not None
            with self._lock:
                for task in started:
                    self._running_tasks[task.id] = task
                self._claimed_tasks += len(started)
            for task in started:  # highest priority first
                try:
                    jobs.call_soon(self._task_job, task)
                except SchedulerClosed:
                    return

    def _stop_when_done(self) -> None:
        """Ask the process to stop when ``max_tasks`` tasks have run, or, in batch mode,
        when nothing is due any more and nothing runs."""
        if self.stop_requested or not (self.batch or self.max_tasks is not None):
            return
        now = self.clock.now()
        with self._lock:
            running = len(self._running_tasks) + len(self._running_runs) + len(self._outcomes)
            due = any(not h.owner and h.due <= now for h in self._schedules.values())
        if self.max_tasks is not None and self._finished_tasks >= self.max_tasks and not running:
            why = f"ran the maximum of {self.max_tasks} tasks (--max-tasks)"
        elif self.batch and not (self._tasks_due or running or due or self._delayed):
            why = "nothing is due any more (--batch)"
        else:
            return
        logger.info("node %s: %s: stopping", self.node_id, why, extra={"action": "node_done"})
        self.done = why
        self.stop_requested = True

    def _start_tasks(self, free: int, finished: list[RunOutcome], into: list[StartedTask]) -> None:
        now = self.clock.now()
        lease_until = now + timedelta(seconds=self.settings.lease)
        try:
            into += self.store.start_tasks(
                self.node_id, now, free, lease_until, finished=finished, serving=self.serving
            )
        except DatabaseError:
            with self._lock:
                self._outcomes[:0] = finished
            raise

    def _task_job(self, task: StartedTask) -> None:
        key = ("task", task.id)
        with self._lock:
            if self._fenced is not None or self._stopping:
                return  # handed back by stop(): not run
            self._calling.add(key)
        result = self._execute(
            task.function,
            task.payload,
            name=task.function,
            attempt=task.attempts,
            scheduled_for=task.run_at,
            task_id=task.id,
        )
        if (
            result.status == RunStatus.FAILED
            and result.extra.get("retryable", False)
            and task.attempts < task.max_attempts
        ):
            delay = self.task_retry.delay(task.attempts)
            result.retry_at = result.finished_at + timedelta(seconds=delay)
        with self._lock:
            self._calling.discard(key)
            self._running_tasks.pop(task.id, None)
            self._finished_tasks += 1
        self._push(result)

    # -- running a function ----------------------------------------------------------
    def _execute(
        self,
        function: str,
        payload: bytes,
        *,
        name: str,
        attempt: int,
        scheduled_for: datetime | None,
        schedule_id: int | None = None,
        task_id: int | None = None,
    ) -> RunOutcome:
        """Call the registered function; never raises.

        Whatever the function raises ends the run failed, ``SystemExit`` and
        ``KeyboardInterrupt`` included (they end only this run, not the node)."""
        close_old_connections()
        clock = self.clock
        started_at = clock.now()
        info: dict[str, Any] = {
            "name": name,
            "function": function,
            "node": self.node_id,
            "schedule_id": schedule_id,
            "task_id": task_id,
            "scheduled_for": scheduled_for,
            "attempt": attempt,
        }
        run_started.send_robust(sender=Run, **info)
        t0 = clock.monotonic()
        status = RunStatus.SUCCEEDED
        error = tb = ""
        retryable = False
        try:
            try:
                args, kwargs = self._call_of(payload)
                fn, bound_args, bound_kwargs = registry.bind(function, args, kwargs)
            except (FunctionNotRegistered, PayloadError, ArgumentError) as exc:
                status = RunStatus.FAILED
                error = f"{type(exc).__name__}: {exc}"
                logger.error("%s cannot run: %s", name, error, extra={"action": "run_unrunnable"})
            else:
                if inspect.iscoroutinefunction(fn):
                    asyncio.run(fn(*bound_args, **bound_kwargs))
                else:
                    fn(*bound_args, **bound_kwargs)
        except BaseException as exc:  # a task's SystemExit ends that run only
            status = RunStatus.FAILED
            retryable = True
            error = f"{type(exc).__name__}: {exc}"
            tb = traceback.format_exc()
            level = logging.WARNING if isinstance(exc, Exception) else logging.ERROR
            logger.log(level, "%s failed: %s", name, error, extra={"action": "run_failed"})
        finally:
            close_old_connections()
        duration = clock.monotonic() - t0
        finished_at = clock.now()
        run_finished.send_robust(sender=Run, status=status, error=error, duration=duration, **info)
        return RunOutcome(
            status=status,
            function=function,
            name=name,
            node=self.node_id,
            attempt=attempt,
            scheduled_for=scheduled_for,
            started_at=started_at,
            finished_at=finished_at,
            duration=duration,
            error=error,
            traceback=tb,
            schedule_id=schedule_id,
            task_id=task_id,
            extra={"retryable": retryable},
        )

    # -- writing results -------------------------------------------------------------
    def _push(self, outcome: RunOutcome) -> None:
        """Keep a finished run for the next dispatch, which writes it with its claim (a
        worker is free now)."""
        with self._lock:
            self._outcomes.append(outcome)
        self._dispatcher.request()

    def _flush(self) -> None:
        with self._lock:
            outcomes, self._outcomes = self._outcomes, []
        if not outcomes:
            return
        try:
            self.store.record(self.node_id, outcomes)
        except DatabaseError:
            with self._lock:
                self._outcomes[:0] = outcomes
            raise
        if any(o.retry_at is not None for o in outcomes):
            self._watch_tasks()
