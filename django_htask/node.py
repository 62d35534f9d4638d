"""The ``runscheduler`` process: the engine, fed from the database.

A :class:`Node` runs three engine :class:`~django_htask.engine.Scheduler` s on one
clock:

``control``
    one thread that makes every decision against the database, in order: timers for
    each schedule's ``next_run_at`` and each held task's ``run_at``, the poll that reads
    what other processes changed, task claims, rebalancing, and the batched writing of
    finished runs.
``jobs``
    the worker pool that calls the registered functions.
``heartbeat``
    one thread that renews the node's heartbeat and leases and reaps dead nodes, apart
    from the control thread so that a long queue there does not make the node look
    dead (see :meth:`Node._heartbeat`).

At start the node loads every enabled schedule by ``next_run_at`` (no cron evaluated)
and leases the one-off tasks due within the look-ahead window; the poll reads only the
schedules whose version rose and leases more tasks as time passes. A schedule fires
by a compare-and-set on (id, next_run_at, version), so an occurrence runs once even if
another process or node looks at it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import secrets
import socket
import threading
import time
import traceback
import weakref
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
from .models import Overlap, Run, RunStatus
from .signals import run_finished, run_started
from .store import RunOutcome, ScheduleRef, ScheduleRow, StartedTask, Store, get_store

if TYPE_CHECKING:
    from .cluster import Cluster

__all__ = ["Node", "NodeStats", "StartAborted", "notify_local_change"]

logger = logging.getLogger("django_htask.node")

#: Seconds between two prunings of old runs (``RUN_RETENTION_DAYS``).
PRUNE_INTERVAL = 3600.0

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
    held_tasks: int


def _armed(handle: TimerHandle | None) -> bool:
    """Whether ``handle`` is a timer that has yet to fire.

    A held schedule whose timer has fired keeps its due time until it is placed again:
    the fire that lost a compare-and-set only to a version change (another node wrote
    the row's status, say) places the same due time, and must get a new timer."""
    return handle is not None and handle.state in ("pending", "queued")


class _Held:
    """A schedule in memory: its due time, version and timer."""

    __slots__ = ("due", "handle", "version")

    def __init__(self, due: datetime, version: int, handle: TimerHandle | None) -> None:
        self.due = due
        self.version = version
        self.handle = handle


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
    ) -> None:
        self.settings = settings or get_settings()
        self.clock = clock if clock is not None else clocks.get_clock()
        self.node_id = node_id or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.workers = self.settings.workers if workers is None else workers
        self.poll_interval = (
            self.settings.poll_interval if poll_interval is None else float(poll_interval)
        )
        if not self.poll_interval > 0:
            raise ValueError(f"poll_interval must be > 0, got {poll_interval!r}")
        self.store = store or get_store()
        self._jobs: EngineScheduler | None = None
        self._control: EngineScheduler | None = None
        self._beat: EngineScheduler | None = None  # the heartbeat's own thread
        self._control_fired = -1  # the control thread's calls started, at the last beat
        self._control_progress = 0.0  # when (clock.monotonic()) that count last moved
        self._lock = threading.Lock()
        self._schedules: dict[int, _Held] = {}
        self._seen_version = 0
        self._held_tasks: dict[int, TimerHandle] = {}
        self._due_tasks: list[int] = []
        self._dispatch_queued = False
        self._running_tasks: dict[int, StartedTask] = {}
        self._running_runs: dict[int, tuple[int, RunOutcome]] = {}  # run id -> (schedule)
        self._busy_schedules: dict[int, int] = {}
        self._delayed: set[int] = set()
        self._outcomes: list[RunOutcome] = []
        self._flush_queued = False
        self._wake_queued = False
        self._db_delay = 0.0
        self._stopping = False
        self._started = False
        self._cluster: Cluster | None = None  # several nodes on PostgreSQL
        #: Set by :meth:`request_stop` (from a signal handler: a plain flag, no lock).
        self.stop_requested = False

    # -- life cycle ------------------------------------------------------------------
    def start(self, *, sync_code: bool = True) -> NodeStats:
        """Register the node, load schedules and tasks, and start firing."""
        if self._started:
            raise RuntimeError(f"node {self.node_id} is already started")
        self._started = True
        store = self.store
        now = self.clock.now()
        self._with_retry(store.install)
        self._with_retry(
            lambda: store.register_node(
                self.node_id, socket.gethostname(), os.getpid(), django_htask.__version__, now
            )
        )
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
        held = self._with_retry(self._claim_tasks)
        pending = self._with_retry(store.count_pending_tasks)
        _local_nodes.add(self)
        self._control.call_later(self.poll_interval, self._poll)
        self._beat.call_soon(self._heartbeat)
        self._control.call_soon(self._prune)
        logger.info(
            "node %s started: %d schedules, %d pending tasks (%d held)",
            self.node_id,
            len(refs),
            pending,
            held,
            extra={"action": "node_started"},
        )
        return NodeStats(schedules=len(refs), pending_tasks=pending, held_tasks=held)

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

    def wake(self) -> None:
        """Look at the database now (own-process changes)."""
        control = self._control
        if control is None or self._stopping:
            return
        with self._lock:
            if self._wake_queued:
                return
            self._wake_queued = True
        with contextlib.suppress(SchedulerClosed):
            control.call_soon(self._on_wake)

    def _on_wake(self) -> None:
        with self._lock:
            self._wake_queued = False
        if self._stopping:
            return
        try:
            self._sync_schedules()
            self._claim_tasks()
            self._db_ok()
        except DatabaseError as exc:
            self._db_lost(exc, self.poll_interval)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self, timeout: float | None = None) -> None:
        """Stop taking work, let running jobs finish (up to ``timeout`` seconds, default
        the ``SHUTDOWN_TIMEOUT`` setting), hand back what did not run, and write it all
        down. Safe to call twice."""
        if self._stopping:
            return
        self._stopping = True
        _local_nodes.discard(self)
        if self._cluster is not None:
            self._cluster.close()
        timeout = self.settings.shutdown_timeout if timeout is None else timeout
        logger.info(
            "node %s stopping: waiting up to %.0fs for %d running jobs",
            self.node_id,
            timeout,
            len(self._running_tasks) + len(self._running_runs),
            extra={"action": "node_stopping"},
        )
        deadline = time.monotonic() + timeout
        if self._beat is not None:
            self._beat.close(wait=True, timeout=timeout)
        if self._control is not None:
            self._control.close(wait=True, timeout=timeout)
        if self._jobs is not None:  # running jobs get what is left of the timeout
            self._jobs.close(wait=True, timeout=max(deadline - time.monotonic(), 0.0))
        now = self.clock.now()
        with self._lock:
            for task in self._running_tasks.values():
                self._outcomes.append(self._handed_back(task, now))
            for run_id, (schedule_id, started) in self._running_runs.items():
                started.status = RunStatus.FAILED
                started.error = "interrupted: the node stopped before the run finished"
                started.finished_at = now
                started.run_id = run_id
                started.schedule_id = schedule_id
                self._outcomes.append(started)
            outcomes, self._outcomes = self._outcomes, []
            self._running_tasks.clear()
            self._running_runs.clear()
        try:
            self.store.record(outcomes)
            released = self.store.release_tasks(self.node_id)
            self.store.stop_node(self.node_id, now)
        except DatabaseError as exc:
            logger.error(
                "could not write the last %d runs at shutdown: %s",
                len(outcomes),
                exc,
                extra={"action": "stop_unrecorded"},
            )
            released = 0
        finally:
            self.store.close()
        logger.info(
            "node %s stopped (%d runs written, %d held tasks handed back)",
            self.node_id,
            len(outcomes),
            released,
            extra={"action": "node_stopped"},
        )

    def _handed_back(self, task: StartedTask, now: datetime) -> RunOutcome:
        return RunOutcome(
            status=RunStatus.FAILED,
            function=task.function,
            name=task.function,
            node=self.node_id,
            attempt=task.attempts,
            scheduled_for=task.run_at,
            started_at=None,
            finished_at=now,
            task_id=task.id,
            handed_back=True,
        )

    # -- state for tests and the banner ----------------------------------------------
    def held_schedules(self) -> dict[int, datetime]:
        """Schedule id -> due time, as held in memory."""
        with self._lock:
            return {i: h.due for i, h in self._schedules.items()}

    def held_tasks(self) -> list[int]:
        with self._lock:
            return sorted(self._held_tasks)

    def idle(self) -> bool:
        return all(s is None or s.idle() for s in (self._control, self._jobs, self._beat))

    # -- the poll --------------------------------------------------------------------
    def _control_later(self, delay: float, fn: Callable[..., object], *args: Any) -> None:
        control = self._control
        if control is None or self._stopping:
            return
        with contextlib.suppress(SchedulerClosed):
            control.call_later(delay, fn, *args)

    def _poll(self) -> None:
        if self._stopping:
            return
        delay = self.poll_interval
        try:
            self.store.refresh()
            self._sync_schedules()
            self._claim_tasks()
            self._flush()
            self._db_ok()
        except DatabaseError as exc:
            delay = self._next_db_delay()
            self._db_lost(exc, delay)
        self._control_later(delay, self._poll)

    def _heartbeat(self) -> None:
        """Renew this node's heartbeat and leases, reap, and have the control thread
        re-read the members.

        It runs on a thread of its own, so that a control thread with a long queue (a
        burst of fires, the catch-up after the database was away) does not make the
        other nodes declare this one dead, reap the tasks it is running and run them a
        second time. It stops renewing while the control thread is stuck in one call
        for a whole ``NODE_TIMEOUT``: a node that can no longer act must not keep its
        leases."""
        if self._stopping:
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
            reaped = self.store.reap(now, now - timedelta(seconds=s.node_timeout))
            if reaped:
                logger.warning(
                    "%d rows held by dead nodes handed back", reaped, extra={"action": "reaped"}
                )
        except DatabaseError as exc:
            self._db_lost(exc, s.heartbeat_interval)
        if self._cluster is not None:
            self._cluster.queue_refresh()
        beat = self._beat
        if beat is not None and not self._stopping:
            with contextlib.suppress(SchedulerClosed):
                beat.call_later(s.heartbeat_interval, self._heartbeat)

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
        """Hold ``ref`` in memory with a timer at its due time (or drop it)."""
        if self._cluster is not None and not self._cluster.owns(ref.id):
            ref = ScheduleRef(ref.id, None, ref.version, enabled=False)  # another node's
        with self._lock:
            held = self._schedules.get(ref.id)
            if not ref.enabled or ref.next_run_at is None:
                if held is not None:
                    del self._schedules[ref.id]
                    if held.handle is not None:
                        held.handle.cancel()
                return
            if held is not None and held.due == ref.next_run_at and _armed(held.handle):
                held.version = max(held.version, ref.version)
                return
            if held is not None and held.handle is not None:
                held.handle.cancel()
            control = self._control
            handle = None
            if control is not None and not self._stopping:
                handle = control.call_at(ref.next_run_at, self._fire, ref.id)
            self._schedules[ref.id] = _Held(ref.next_run_at, ref.version, handle)

    def _drop(self, schedule_id: int) -> None:
        with self._lock:
            held = self._schedules.pop(schedule_id, None)
        if held is not None and held.handle is not None:
            held.handle.cancel()

    def _fire(self, schedule_id: int) -> None:
        if self._stopping:
            return
        try:
            self._fire_once(schedule_id)
            self._db_ok()
        except DatabaseError as exc:
            delay = self._next_db_delay()
            self._db_lost(exc, delay)
            self._control_later(delay, self._fire, schedule_id)

    def _fire_once(self, schedule_id: int) -> None:
        row = self.store.get_schedule(schedule_id)
        if row is None or not row.enabled or row.next_run_at is None:
            self._drop(schedule_id)
            return
        now = self.clock.now()
        if row.next_run_at > now:  # moved by someone else meanwhile
            self._place(ScheduleRef(row.id, row.next_run_at, row.version))
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
        try:
            to_run, missed, next_run_at = self._occurrences(row, now)
        except InvalidSchedule as exc:
            runs = [self._outcome(row, RunStatus.FAILED, row.next_run_at, now, error=str(exc))]
            if self.store.claim_occurrence(row, None, now, runs) is None:
                self._reload(row.id)
            else:
                self._drop(row.id)
            return
        runs = []
        if busy and row.overlap == Overlap.SKIP:
            skipped = to_run[-1] if to_run else row.next_run_at
            note = "the previous run was still running (overlap=skip)"
            runs.append(self._outcome(row, RunStatus.SKIPPED, skipped, now, error=note))
            to_run = []
        if missed:
            runs.append(self._missed(row, missed, now))
        started = [self._outcome(row, RunStatus.RUNNING, when, now) for when in to_run]
        runs.extend(started)
        ids = self.store.claim_occurrence(row, next_run_at, now, runs)
        if ids is None:
            logger.debug(
                "schedule %s changed before it fired; reloading",
                row.name,
                extra={"action": "claim_lost"},
            )
            self._reload(row.id)
            return
        with self._lock:
            self._delayed.discard(row.id)
        if next_run_at is None:
            self._drop(row.id)
        else:
            self._place(ScheduleRef(row.id, next_run_at, row.version))
        for run_id, outcome in zip(ids[len(runs) - len(started) :], started, strict=True):
            self._start_schedule_run(row, run_id, outcome)

    def _reload(self, schedule_id: int) -> None:
        row = self.store.get_schedule(schedule_id)
        if row is None:
            self._drop(schedule_id)
        else:
            self._place(ScheduleRef(row.id, row.next_run_at, row.version, row.enabled))

    def _occurrences(
        self, row: ScheduleRow, now: datetime
    ) -> tuple[list[datetime], list[datetime], datetime | None]:
        """Which due occurrences run, which are missed, and the next run after now (the
        engine's misfire policy, on the row's grace and catch-up)."""
        assert row.next_run_at is not None
        plan = plan_occurrences(
            _parsed(row.schedule, row.timezone),
            row.next_run_at,
            now,
            grace=row.grace,
            catch_up=str(row.catch_up),
            limit=self.settings.catch_up_limit,
        )
        return plan.to_run, plan.missed, plan.next

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
        if self._stopping:
            return  # written as interrupted by stop()
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
            delay = row.retry_backoff * 2 ** (started.attempt - 1)
            self._control_later(delay, self._retry_schedule, row, started)
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
            run_id = self.store.start_schedule_run(outcome)
        except DatabaseError as exc:
            delay = self._next_db_delay()
            self._db_lost(exc, delay)
            self._control_later(delay, self._retry_schedule, row, previous)
            return
        self._start_schedule_run(row, run_id, outcome)

    # -- one-off tasks ---------------------------------------------------------------
    def _claim_tasks(self) -> int:
        """Lease the tasks due within the look-ahead window; return how many."""
        if self._stopping:
            return 0
        s = self.settings
        total = 0
        cap = max(s.claim_batch * 20, 10_000)
        while True:
            now = self.clock.now()
            claimed = self.store.claim_tasks(
                self.node_id,
                now + timedelta(seconds=s.lookahead),
                now,
                now + timedelta(seconds=s.lease),
                s.claim_batch,
            )
            control = self._control
            with self._lock:
                for task in claimed:
                    old = self._held_tasks.pop(task.id, None)
                    if old is not None:
                        old.cancel()
                    if control is not None:
                        self._held_tasks[task.id] = control.call_at(
                            task.run_at, self._task_due, task.id
                        )
                held = len(self._held_tasks)
            total += len(claimed)
            if len(claimed) < s.claim_batch or held >= cap:
                return total

    def _task_due(self, task_id: int) -> None:
        with self._lock:
            self._held_tasks.pop(task_id, None)
            self._due_tasks.append(task_id)
            if self._dispatch_queued:
                return
            self._dispatch_queued = True
        self._control_later(0, self._dispatch)

    def _dispatch(self) -> None:
        with self._lock:
            ids, self._due_tasks = self._due_tasks, []
            self._dispatch_queued = False
        if self._stopping or not ids:
            return
        try:
            started = self.store.start_tasks(self.node_id, ids, self.clock.now())
            self._db_ok()
        except DatabaseError as exc:
            delay = self._next_db_delay()
            self._db_lost(exc, delay)
            with self._lock:
                self._due_tasks[:0] = ids
                self._dispatch_queued = True
            self._control_later(delay, self._dispatch)
            return
        jobs = self._jobs
        assert jobs is not None
        # Among the tasks due together, the higher priority starts first (the jobs
        # pool takes them in order when its workers are busy).
        started.sort(key=lambda t: (-t.priority, t.run_at, t.id))
        with self._lock:
            for task in started:
                self._running_tasks[task.id] = task
        for task in started:
            try:
                jobs.call_soon(self._task_job, task)
            except SchedulerClosed:
                break

    def _task_job(self, task: StartedTask) -> None:
        if self._stopping:
            return  # handed back by stop()
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
            s = self.settings
            delay = min(s.retry_backoff * 2 ** (task.attempts - 1), s.retry_backoff_max)
            result.retry_at = result.finished_at + timedelta(seconds=delay)
        with self._lock:
            self._running_tasks.pop(task.id, None)
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
        """Call the registered function; never raises."""
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
                if payload:
                    _name, args, kwargs = decode_call(payload)
                else:
                    args, kwargs = [], {}
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
        except Exception as exc:
            status = RunStatus.FAILED
            retryable = True
            error = f"{type(exc).__name__}: {exc}"
            tb = traceback.format_exc()
            logger.warning("%s failed: %s", name, error, extra={"action": "run_failed"})
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
        with self._lock:
            self._outcomes.append(outcome)
            if self._flush_queued:
                return
            self._flush_queued = True
        self._control_later(0, self._flush_soon)

    def _flush_soon(self) -> None:
        with self._lock:
            self._flush_queued = False
        try:
            self._flush()
            self._db_ok()
        except DatabaseError as exc:
            delay = self._next_db_delay()
            self._db_lost(exc, delay)
            with self._lock:
                if self._flush_queued:
                    return
                self._flush_queued = True
            self._control_later(delay, self._flush_soon)

    def _flush(self) -> None:
        with self._lock:
            outcomes, self._outcomes = self._outcomes, []
        if not outcomes:
            return
        try:
            self.store.record(outcomes)
        except DatabaseError:
            with self._lock:
                self._outcomes[:0] = outcomes
            raise
        if any(o.retry_at is not None for o in outcomes):
            self._claim_tasks()
