"""Claiming and running one-off tasks.

A due task is claimed only when a worker takes it: one transaction writes the results
waiting and claims as many due tasks as workers are free, marking them running and
counting their attempt. Where the store buffers (the database stores), the same
transaction claims more for a buffer (:meth:`TaskDispatch.buffer`), with no start time: a worker
that ends a call takes the next one from the buffer at once, while the next claim is
made; the claim after a buffered task begins writes its start, and until then a node
that dies hands it back uncharged. For the next task due a node only
reads the time and sets a timer (within ``LOOKAHEAD``; else its poll looks again), so
an idle node writes nothing.

A task with a lock or a limit that cannot start now is not due (``task_outlook``), so a
node never spins on it. When one ends, the claim that writes its end also looks for
the tasks it held back, and the other nodes are woken (PostgreSQL; elsewhere they
poll). A task held back by its rate limit waits for time, not for an end: the claim
and the outlook say when its window has room, and the node sets its wake-up timer
there as for a task due then.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any

from django_htask.engine import TimerHandle, registry
from django_htask.exceptions import StoreUnavailable
from django_htask.store import RunOutcome, Started, StartedTask

from .context import NodeContext
from .execution import task_call, task_ended
from .supervisor import Supervisor

__all__ = ["TaskDispatch"]

logger = logging.getLogger(__name__)


#: The weight of a call's duration in the moving average of the recent ones.
_PACE = 0.2


def _set(handle: TimerHandle) -> bool:
    """Whether the timer is still to go off."""
    return handle.state in ("pending", "queued")


class TaskDispatch:
    """The one-off tasks of a node (see the module)."""

    def __init__(
        self,
        ctx: NodeContext,
        supervisor: Supervisor,
        max_tasks: int | None = None,
        on_dispatched: Callable[[], object] = lambda: None,
        gather: float = 0.0,
    ) -> None:
        self.ctx = ctx
        self.supervisor = supervisor
        self.max_tasks = max_tasks
        self.claimed = 0  # tasks started
        self.finished = 0
        self.due = True  # due tasks may wait in the database
        self._wake: TimerHandle | None = None  # at the next task due
        self._room: TimerHandle | None = None  # when a rate limit a claim met has room
        #: Asks for :meth:`dispatch` on the control thread (a worker is free, a result
        #: waits to be written).
        self.request = ctx.control.once(self.dispatch)
        #: Called after each dispatch (the node checks whether it is done).
        self._on_dispatched = on_dispatched
        #: Seconds a round may wait for the calls running (0: it never waits).
        self.gather = gather
        self._gathering = False
        self._rounds = 0
        #: A round runs (on the control thread); an ask meanwhile (on threads) is put off
        #: until it ends (see ask()).
        self._in_round = False
        self._asked = False
        #: Task id -> when its call was handed to a worker (clock.monotonic()), in that
        #: order, while it runs (with worker processes only: see ask()).
        self._calls: dict[int, float] = {}
        #: The tasks claimed for the buffer whose start is not written yet.
        self._buffered: set[int] = set()
        #: How long the recent task calls took, in seconds (a moving average; None
        #: until one ended): the buffer holds what the workers begin within
        #: ``PREFETCH_WITHIN``.
        self.call_seconds: float | None = None

    def ask(self) -> None:
        """Ask for a round (a result waits, a worker is free). With ``gather`` (worker
        processes), while every task call running was handed out less than ``gather``
        ago, the round waits until they have all ended or the oldest is that old.
        Otherwise, while a task handed out waits for a worker (the buffer is not
        empty), the round waits until the last of them is begun (:meth:`_job` asks
        then), ``PREFETCH_WITHIN`` at most.

        A round costs a few milliseconds of the database whatever it claims. Trivial
        calls in worker processes return a millisecond or two apart, about a round's
        time: asked at once, the next round claimed only the few that had ended, and
        the workers split into two halves taking turns (4 tasks a claim of 8 workers).
        Waiting for calls that are that young keeps them one batch; a call running
        longer is not waited for. Calls on threads that take a fraction of a
        millisecond (an ``async def`` task's) split the same way: an end that came
        while a round was claiming (before that round's tasks were handed out) asked
        for a round of its own, and every other round wrote one end and claimed one
        task. So on threads an ask during a round is left to the round's end, when what
        it handed out is known."""
        self._asked = True
        if self._in_round and not self.gather:
            return  # the round asks as it ends (_ask_after_round)
        self._asked = False
        self._ask()

    def _ask_after_round(self) -> None:
        """As a round ends: the ask it put off, if any. (An ask reads ``_in_round``
        after it sets ``_asked``, and this reads ``_asked`` after ``_in_round`` is
        cleared: whichever comes second sees the other's write, so no ask is lost.)"""
        self._in_round = False
        if self._asked:
            self._asked = False
            self._ask()

    def _ask(self) -> None:
        wait = self._gather_for() if self.gather else self._buffer_left()
        if wait > 0:
            if not self._gathering:
                self._gathering = True
                if not self.ctx.control.later(wait, self._gathered, self._rounds):
                    self._gathering = False
            return
        self.request.request()

    def _buffer_left(self) -> float:
        """``PREFETCH_WITHIN`` while a task handed out waits for a worker, else 0."""
        if not self._buffered or not self.ctx.running.waiting():
            return 0.0
        return self.ctx.settings.prefetch_within

    def _gather_for(self) -> float:
        """Seconds until the oldest task call running is ``gather`` old (none running, or
        one older: 0)."""
        try:
            oldest = next(iter(self._calls.values()))
        except (StopIteration, RuntimeError):  # none; or it changed meanwhile
            return 0.0
        return oldest + self.gather - self.ctx.clock.monotonic()

    def _gathered(self, rounds: int) -> None:
        if rounds == self._rounds:  # no round since
            self.request.request()

    def next_wake(self) -> TimerHandle | None:
        """The earlier of the wake-up timers set, if any."""
        handles = [h for h in (self._wake, self._room) if h is not None and _set(h)]
        return min(handles, key=lambda h: h.when, default=None)

    def watch(self) -> None:
        """Read whether tasks are due and when the next one is, and set the wake-up timer
        there when it is within the look-ahead window. Reads only."""
        ctx = self.ctx
        now = ctx.clock.now()
        due, first = ctx.store.task_outlook(now, ctx.serving)
        if due:
            self.due = True
        self._wake_at(first, now)

    def _wake_at(self, first: datetime | None, now: datetime) -> None:
        """Set the wake-up timer at ``first`` (a task due then, or a rate limit's
        window with room) when it is within the look-ahead window and before the
        timer set, if any: then it looks for tasks, and claims."""
        self._wake = self._timer(self._wake, first, now, self._woken)

    def _room_at(self, when: datetime, now: datetime) -> None:
        """Set the timer at which a rate limit's window a claim found full has room
        (:attr:`~django_htask.store.Started.wake_at`): then it claims at once, and that
        claim says when to come back (no look for tasks first: it is known some wait)."""
        self._room = self._timer(self._room, when, now, self._roomy)

    def _timer(
        self,
        current: TimerHandle | None,
        first: datetime | None,
        now: datetime,
        call: Callable[[], object],
    ) -> TimerHandle | None:
        """``current``, or a timer at ``first`` calling ``call`` in its place if it is
        earlier and within the look-ahead window."""
        if first is None or first > now + timedelta(seconds=self.ctx.settings.lookahead):
            return current
        if current is not None and _set(current):
            if current.when <= first:
                return current
            current.cancel()
        return self.ctx.control.at(first, call)

    def _woken(self) -> None:
        self.ctx.control.guarded(self.watch, "look for tasks")
        self.dispatch()

    def _roomy(self) -> None:
        self.due = True
        self.dispatch()

    def free(self) -> tuple[int, int]:
        """How many more tasks the workers can start now (a thread per job: a batch),
        and how many more the buffer takes (:meth:`buffer`), no more than ``max_tasks``
        allows in all."""
        ctx = self.ctx
        if ctx.workers == 0:
            free, room = ctx.settings.claim_batch, 0
        else:
            held = len(ctx.running)
            free = ctx.workers - held
            size = self.buffer()
            room = min(size, ctx.workers + size - held)
        if self.max_tasks is not None:
            left = self.max_tasks - self.claimed
            free = min(free, left)
            room = min(room, left - max(free, 0))
        return free, room

    def buffer(self) -> int:
        """How many tasks the buffer holds: as many as the workers are expected to
        begin within ``PREFETCH_WITHIN`` seconds at the pace of the recent calls, at
        most ``PREFETCH_PER_WORKER`` per worker; none where the store does not buffer,
        nor before a call has ended."""
        ctx = self.ctx
        within, seconds = ctx.settings.prefetch_within, self.call_seconds
        most = ctx.workers * ctx.settings.prefetch_per_worker
        if not (ctx.store.buffers and within > 0 and most > 0 and seconds is not None):
            return 0
        if seconds * most <= within * ctx.workers:  # also: no division by a call of 0 s
            return most
        return int(ctx.workers * within / seconds)

    def _begun(self) -> list[tuple[int, datetime]]:
        """The buffered tasks a worker has begun and that still run (id, when begun):
        their start is written by the next claim. Those ended have theirs written with
        their end."""
        begun = []
        running = self.ctx.running
        for task_id in list(self._buffered):
            key = ("task", task_id)
            if (called := running.called(key)) is not None:
                begun.append((task_id, called.started_at))
            elif running.guard(key) is not None:
                continue  # not begun yet
            self._buffered.discard(task_id)
        return begun

    def dispatch(self) -> None:
        """Write the results waiting, then claim and start as many due tasks as there
        are free workers (never more), in one transaction."""
        if self.ctx.stopping():
            return  # stop() writes what is left
        self._rounds += 1
        self._gathering = False
        self._in_round = True
        try:
            self._dispatch()
        finally:
            self._ask_after_round()
            self._on_dispatched()

    def _dispatch(self) -> None:
        """One round: write the results waiting, claim, start. If it started tasks, the
        next round is asked for rather than run here, so that the control thread's
        other work (timers, wake-ups, the schedules) goes on between rounds: with a
        steady stream of tasks finishing one by one (worker processes), a loop here
        never ended, and the heartbeat thread, seeing the control thread in one call
        past NODE_TIMEOUT, stopped renewing the leases."""
        outcomes = self.ctx.results.take()
        begun = self._begun() if self._buffered else []
        if any(o.gated or o.follow for o in outcomes):
            self.due = True  # its end, written first, may let a waiting task start
        free, room = self.free() if self.due else (0, 0)
        if free <= 0 and room <= 0 and not outcomes and not begun:
            return
        step = functools.partial(self._start, max(free, 0), max(room, 0), outcomes, begun)
        started = self.ctx.control.attempt(step, "task claim", retry=self.request)
        if started is None:
            return
        if any(o.retry_at is not None for o in outcomes):
            self.ctx.control.guarded(self.watch, "look for tasks")
        if free > 0 and len(started) - len(started.buffered) < free:
            # None left: until a poll, a wake-up or a timer. (The buffer's claim takes
            # only some of the tasks due: its coming short says nothing of the others.)
            self.due = False
        if started.wake_at is not None:  # some were held back until then
            now = self.ctx.clock.now()
            if started.wake_at <= now:  # taken by a claim made at once: others may go
                self.due = True
                self.request.request()
            else:
                self._room_at(started.wake_at, now)
        if not started:
            return
        self.ctx.running.add_tasks(started)
        self._buffered.update(started.buffered)
        self.claimed += len(started)
        lane = self.ctx.lane
        to_lane = []
        for task in started:  # highest priority first
            if self.gather:
                self._calls[task.id] = self.ctx.clock.monotonic()
            if lane is not None and registry.is_async(task.function):
                to_lane.append((("task", task.id), functools.partial(self._begin_async, task)))
            else:
                self.ctx.jobs.call_soon(self._job, task)
        if lane is not None and to_lane:
            lane.submit(to_lane)
        self.ask()  # more may have finished meanwhile

    def _start(
        self,
        free: int,
        room: int,
        finished: list[RunOutcome],
        begun: list[tuple[int, datetime]],
    ) -> Started:
        """Write ``finished`` and the start of the buffered tasks ``begun``, and claim
        up to ``free`` due tasks to start and ``room`` more for the buffer: the tasks
        claimed."""
        ctx = self.ctx
        now = ctx.clock.now()
        lease_until = now + timedelta(seconds=ctx.settings.lease)
        try:
            return ctx.store.start_tasks(
                ctx.node_id,
                now,
                free,
                lease_until,
                finished=finished,
                serving=ctx.serving,
                buffer=room,
                begun=begun,
            )
        except StoreUnavailable:
            ctx.results.put_back(finished)
            self._buffered.update(task_id for task_id, _ in begun)
            raise

    def _job(self, task: StartedTask) -> None:
        """A worker runs one task. One that waited in the buffer asks for a claim, which
        writes its start: the last one waiting, on threads (:meth:`ask`)."""
        self._taken(task)
        finish = functools.partial(self._finish, task)
        self.supervisor.run(
            ("task", task.id), task_call(task, self.ctx.node_id), task.timeout, finish
        )

    def _begin_async(self, task: StartedTask) -> Coroutine[Any, Any, None] | None:
        """:meth:`_job` for an ``async def`` task, begun on the async lane."""
        self._taken(task)
        finish = functools.partial(self._finish, task)
        return self.supervisor.begin_async(
            ("task", task.id), task_call(task, self.ctx.node_id), task.timeout, finish
        )

    def _taken(self, task: StartedTask) -> None:
        """A task handed out is begun: one that waited in the buffer asks for the claim
        that writes its start (on threads, the last one waiting: :meth:`ask`)."""
        if task.id in self._buffered and (self.gather or self.ctx.running.waiting() <= 1):
            self.request.request()

    def _finish(self, task: StartedTask, result: RunOutcome) -> None:
        """Record how the task's attempt ended (on its worker, or by the supervisor):
        its retry, or its snooze, waits in the database as a pending task."""
        ctx = self.ctx
        # Not marked begun yet (it would have left the set as its claim was made): its
        # end writes its start. Read before the task leaves the running ones below.
        result.start_unwritten = task.id in self._buffered
        if result.duration is not None:  # races between workers lose a sample at most
            last = self.call_seconds
            self.call_seconds = (
                result.duration if last is None else last + (result.duration - last) * _PACE
            )
        task_ended(task, result, ctx.task_retry, ctx.settings.max_snoozes)
        ctx.running.task_done(task.id)
        self._calls.pop(task.id, None)
        self.finished += 1
        ctx.results.push(result)
