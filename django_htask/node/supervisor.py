"""Running jobs under watch: timeouts and aborts (docs/timeouts.md).

:meth:`Supervisor.run` is how a worker runs a job (a task or a schedule run): the call,
its timeout, and its outcome handed to the job's ``finish``. A job asked to stop — its
timeout passed, or its abort was asked for — goes through
three steps, each on the supervisor's own thread (so a database that is away delays
none of them):

1. its token is cancelled: a cooperative task (``current_token()``) stops by itself,
   an async task is cancelled at its next ``await``;
2. ``TIMEOUT_GRACE`` seconds later, if it is still in its call,
   :class:`~django_htask.engine.ForcedStop` is raised in its thread;
3. :data:`FORCE_WAIT` seconds after that, if its thread has still not returned (blocked
   in C, or it swallowed the exception), the supervisor records the run for it and the
   worker pool replaces the thread, so its capacity is back. A node that has given up
   more than ``MAX_ABANDONED_THREADS`` threads still stuck asks to stop
   (``runscheduler`` then exits with status 4, for its supervisor to start it afresh).

With the process pool (:mod:`~django_htask.node.processes`) the call runs in a worker
process: step 1 cancels its token there, step 2 raises in it by a signal, and step 3
kills the process, after which the worker thread records the run itself.

A timed-out run is a failed run retried by its task's or schedule's policy; an aborted
one is never retried. Exactly one outcome is recorded for a job: the worker's, or the
supervisor's when it gave the worker up.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from django_htask.engine import RunGuard, SchedulerClosed, TimerHandle
from django_htask.engine import Scheduler as EngineScheduler
from django_htask.store import RunOutcome
from django_htask.store.rules import ABORTED, timed_out

from .context import NodeContext
from .execution import Call, aexecute
from .executors import Executor
from .lane import Lane
from .running import Called, Key

__all__ = ["ABORTED", "FORCE_WAIT", "Supervisor", "timed_out"]

logger = logging.getLogger(__name__)

#: Seconds between the exception raised in a job's thread and giving the thread up.
FORCE_WAIT = 0.5


class Supervisor:
    """Runs jobs, times them out and stops the aborted ones (see the module).

    ``on_too_many(count)`` is called, once, when more than ``MAX_ABANDONED_THREADS``
    given-up threads are still stuck."""

    def __init__(
        self,
        ctx: NodeContext,
        on_too_many: Callable[[int], object],
        executor: Executor,
    ) -> None:
        self.ctx = ctx
        #: Where the calls run: the worker threads or worker processes.
        self.executor = executor
        self._on_too_many = on_too_many
        self._told = False
        self._scheduler: EngineScheduler | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.given_up = 0  # threads given up since the node started

    @property
    def scheduler(self) -> EngineScheduler:
        """The supervisor's timers, on a thread of their own, made at the first timeout
        or abort: a node that uses neither starts no thread for them."""
        with self._lock:
            if self._scheduler is None:
                name = f"{self.ctx.node_id}-supervisor"
                self._scheduler = EngineScheduler(1, clock=self.ctx.clock, name=name)
                if self._closed:
                    self._scheduler.close(wait=False)
            return self._scheduler

    def close(self) -> None:
        with self._lock:
            self._closed = True
            scheduler = self._scheduler
        if scheduler is not None:
            scheduler.close(wait=False)
        self.executor.close()

    def run(
        self,
        key: Key,
        call: Call,
        timeout: float | None,
        finish: Callable[[RunOutcome], None],
    ) -> None:
        """Make the job's call on this (worker) thread, stopped after ``timeout``
        seconds (None: the ``DEFAULT_TIMEOUT`` setting), and hand its outcome to
        ``finish`` — unless the node is stopping (the job is handed back, not run) or the
        supervisor gave this thread up meanwhile (it called ``finish`` itself)."""
        ctx = self.ctx
        guard = ctx.running.call(key, call, ctx.clock.now(), finish)
        if guard is None:
            return
        timer = _Timer(self, key, timeout)
        try:
            outcome = self.executor.execute(ctx, key, call, guard, timer.start)
        finally:
            timer.cancel()
        if guard.settle():
            finish(outcome)

    def begin_async(
        self,
        key: Key,
        call: Call,
        timeout: float | None,
        finish: Callable[[RunOutcome], None],
    ) -> Coroutine[Any, Any, None] | None:
        """:meth:`run` for a call of an ``async def`` function on the node's async lane
        (:mod:`~django_htask.node.lane`), on the lane's thread: the job is begun here
        (None: the node is stopping, and the job is handed back), and the coroutine
        returned makes the call as a task of the lane's loop."""
        ctx = self.ctx
        guard = ctx.running.call(key, call, ctx.clock.now(), finish)
        if guard is None:
            return None
        return self._run_async(key, call, guard, timeout, finish)

    async def _run_async(
        self,
        key: Key,
        call: Call,
        guard: RunGuard,
        timeout: float | None,
        finish: Callable[[RunOutcome], None],
    ) -> None:
        timer = _Timer(self, key, timeout)
        max_result = self.ctx.settings.result_max_bytes
        try:
            outcome = await aexecute(
                call, clock=self.ctx.clock, guard=guard, max_result=max_result, on_start=timer.start
            )
        finally:
            timer.cancel()
        if guard.settle():
            finish(outcome)

    def timeout_of(self, timeout: float | None) -> float | None:
        """A job's timeout: its own, else the ``DEFAULT_TIMEOUT`` setting."""
        return timeout if timeout is not None else self.ctx.settings.default_timeout

    def arm(self, key: Key, timeout: float | None) -> TimerHandle | None:
        """Stop the job ``timeout`` seconds from now (None: never); the caller cancels
        the returned timer when the call is over."""
        if timeout is None:
            return None
        with contextlib.suppress(SchedulerClosed):
            return self.scheduler.call_later(
                timeout, self.stop, key, timed_out(timeout), retryable=True
            )
        return None

    def stop(self, key: Key, reason: str, *, retryable: bool = False) -> bool:
        """Ask the job to stop (step 1) and force it after the grace; False if it is not
        running here or was asked already."""
        guard = self.ctx.running.guard(key)
        if guard is None or not guard.stop(reason, retryable=retryable):
            return False
        logger.info(
            "%s %s: %s",
            *key,
            reason,
            extra={"action": "run_stop_asked", "job": key},
        )
        with contextlib.suppress(SchedulerClosed):
            self.scheduler.call_later(self.ctx.settings.timeout_grace, self._force, key)
        return True

    def _lane_of(self, called: Called) -> Lane | None:
        """The async lane, if ``called`` runs on it: the lane does the forceful steps
        for its calls, the executor for the others."""
        lane = self.ctx.lane
        return lane if lane is not None and lane.owns(called) else None

    def _force(self, key: Key) -> None:
        """Step 2: raise in the job's thread if it is still in its call (cancel it again,
        on the async lane)."""
        called = self.ctx.running.called(key)
        if called is None:
            return  # finished, or not called yet (it will not begin)
        lane = self._lane_of(called)
        if not (lane or self.executor).force(key, called):
            return
        logger.warning(
            "%s %s did not stop within TIMEOUT_GRACE: %s",
            *key,
            "cancelled again" if lane else "interrupted",
            extra={"action": "run_interrupted", "job": key},
        )
        with contextlib.suppress(SchedulerClosed):
            self.scheduler.call_later(FORCE_WAIT, self._give_up, key)

    def _give_up(self, key: Key) -> None:
        """Step 3: end a call that did not return when forced; record its run if its
        worker thread was given up (and replaced) rather than left to record it."""
        ctx = self.ctx
        called = ctx.running.called(key)
        if called is None:
            return
        lane = self._lane_of(called)
        if not (lane.give_up(key, called) if lane else self.executor.give_up(ctx, key, called)):
            return
        self.given_up += 1
        stuck = ctx.stuck_threads()
        if stuck > ctx.settings.max_abandoned_threads and not self._told:
            self._told = True
            self._on_too_many(stuck)


class _Timer:
    """A job's timeout, armed as its call begins and cancelled as it ends."""

    __slots__ = ("_handle", "_key", "_supervisor", "_timeout")

    def __init__(self, supervisor: Supervisor, key: Key, timeout: float | None) -> None:
        self._supervisor, self._key, self._timeout = supervisor, key, timeout
        self._handle: TimerHandle | None = None

    def start(self) -> None:
        supervisor = self._supervisor
        self._handle = supervisor.arm(self._key, supervisor.timeout_of(self._timeout))

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
