"""A node's async lane: its ``async def`` tasks run as asyncio tasks of one event loop,
on a thread of its own, rather than each on a worker thread (docs/django.md, "The async
lane").

A call on a worker thread costs a thread's wake-up and a run of the thread's loop for
each call; on one loop, a call costs an asyncio task, and 50 calls waiting at an
``await`` need no 50 threads. The lane still counts against ``WORKERS``: it begins a
call only while fewer than ``WORKERS`` of the node's calls are in progress, on the
threads and the lane together (``Running.in_call``); a task handed to it waits until
then, as it would for a free worker thread.

Each call runs in a context of its own, as a call on a thread does (its token, its
task id), and what it left running on the loop is cancelled as it ends, as
:func:`asyncio.run` would. Stopping a call (a timeout, an abort) goes through the
supervisor's three steps (docs/timeouts.md):

1. its token is cancelled, which cancels its task at its next ``await``;
2. after ``TIMEOUT_GRACE``, its task is cancelled again (a call that caught the first
   cancellation sees a second);
3. :data:`~django_htask.node.supervisor.FORCE_WAIT` later, if it has still not
   returned, its run is recorded for it (given up). If the loop did not even run the
   second cancel meanwhile, a call is blocking it in code that does not await (a
   ``time.sleep``, a long computation): the loop is given up with its thread, and a
   new loop on a new thread takes the calls that follow. The old loop's other calls
   are given up each by its own timeout, and its thread counts among the node's stuck
   threads (``MAX_ABANDONED_THREADS``) while it lives.

At the node's stop, the calls not begun are handed back as the threads' are, and those
in progress are waited for up to ``SHUTDOWN_TIMEOUT``. A loop that ends cancels what
still runs on it (a call given up that went on) and lets it end, as :func:`asyncio.run`
does, rather than leave it to be closed wherever the garbage collector frees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from django_htask.engine import Clock

from .execution import ended_outside
from .running import Called, Key, Running

__all__ = ["Lane"]

logger = logging.getLogger(__name__)

#: Seconds a loop that ends lets the tasks it cancels end.
LEFT_WAIT = 1.0

#: What the lane is handed: a job's key, and what begins its call on the loop's thread
#: (the call's coroutine; None if it must not run: the node is stopping).
Begin = Callable[[], Coroutine[Any, Any, None] | None]

#: The tasks a call made on the loop, in the call's own context (its task factory adds
#: them), so that what it left running is cancelled as it ends.
_owned: contextvars.ContextVar[set[asyncio.Task[Any]] | None] = contextvars.ContextVar(
    "htask_owned", default=None
)


class _Loop:
    """One event loop of the lane and the thread running it."""

    def __init__(self, name: str, on_exit: Callable[[], object]) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_task_factory(_task)
        #: The calls begun on it and not ended (touched on its thread only).
        self.calls: dict[Key, asyncio.Task[None]] = {}
        #: How many of those the node waits for as it stops: not those given up.
        self.active = 0
        #: The jobs whose task the loop has not run yet: they begin as it runs.
        self.pending: dict[Key, Begin] = {}
        #: The calls given up while the loop ran on (they may end some day).
        self.detached: set[Key] = set()
        #: The keys of the calls whose second cancel the loop has run (step 2).
        self.reached: set[Key] = set()
        self._on_exit = on_exit
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):  # as asyncio.run ends
                # What still runs (a call given up that goes on) is cancelled here,
                # not left to be closed wherever the garbage collector frees it.
                left = asyncio.all_tasks(loop)
                for task in left:
                    task.cancel()
                if left:
                    loop.run_until_complete(asyncio.wait(left, timeout=LEFT_WAIT))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
            self._on_exit()

    def call(self, fn: Callable[..., object], *args: Any) -> bool:
        """Run ``fn(*args)`` on the loop's thread; False if the loop is closed."""
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            return False
        return True


def _log_failure(key: Key) -> None:
    # Called from the except block of a job whose own code raised (not its call: the
    # call's outcome holds what the function raised).
    logger.exception("%s %s failed", *key, extra={"action": "task_failed", "job": key})


def _task(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
    task = asyncio.Task(coro, loop=loop, **kwargs)
    owned = _owned.get()
    if owned is not None:
        owned.add(task)
        task.add_done_callback(owned.discard)
    return task


class Lane:
    """The async lane of a node (see the module). Its loop and thread are made at the
    first call handed to it."""

    def __init__(
        self,
        node_id: str,
        clock: Clock,
        running: Running,
        workers: int,
        on_thread_exit: Callable[[], object],
    ) -> None:
        self._node_id, self._clock = node_id, clock
        self._running, self._workers = running, workers
        self._on_thread_exit = on_thread_exit
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)
        self._loop: _Loop | None = None
        self._loops = 0
        #: Handed to it, not begun: waiting for a free place among WORKERS.
        self._waiting: deque[tuple[Key, Begin]] = deque()
        #: The loops given up (a call blocked them), while their threads live.
        self._blocked: list[_Loop] = []
        clock.track(self)

    def submit(self, jobs: Iterable[tuple[Key, Begin]]) -> None:
        """Hand jobs to the lane, in order: each one's ``begin`` is called on the loop's
        thread once a place is free, and the coroutine it returns runs as a task of the
        loop. One wake-up of the loop for them all: a claim's tasks come together."""
        self._waiting.extend(jobs)
        self._current().call(self._pump)

    def freed(self) -> None:
        """A call ended elsewhere (on a worker thread): a place may be free."""
        lane_loop = self._loop
        # A call ending on the lane pumps as it ends.
        if (
            self._waiting
            and lane_loop is not None
            and threading.current_thread() is not lane_loop.thread
        ):
            lane_loop.call(self._pump)

    def _current(self) -> _Loop:
        with self._lock:
            if self._loop is None:
                self._loops += 1
                name = f"{self._node_id}-async-{self._loops}"
                self._loop = _Loop(name, self._on_thread_exit)
            return self._loop

    def _room(self, lane_loop: _Loop) -> bool:
        """Whether a place is free among WORKERS: the calls in progress, and those the
        loop has yet to begin, are fewer."""
        workers = self._workers
        return workers == 0 or self._running.in_call() + len(lane_loop.pending) < workers

    def _pump(self) -> None:
        """Begin the calls waiting while there is room (on the current loop's thread)."""
        lane_loop = self._loop
        if lane_loop is None or threading.current_thread() is not lane_loop.thread:
            return  # a loop given up since: the current one pumps
        waiting, running = self._waiting, self._running
        while waiting and (running.refusing or self._room(lane_loop)):
            key, begin = waiting.popleft()
            with self._lock:
                lane_loop.pending[key] = begin
            # A fresh context, as a new thread's: the call sets its token and task id
            # in it, seen by it and what it calls only.
            lane_loop.loop.create_task(self._call(lane_loop, key), context=contextvars.Context())
        if not waiting:
            self._clock.settled()

    async def _call(self, lane_loop: _Loop, key: Key) -> None:
        """A job's task on the loop: it begins the job as it first runs (a task that
        never ran when its loop was given up is handed to the next loop instead)."""
        with self._lock:
            begin = lane_loop.pending.pop(key, None)
            if begin is not None:
                lane_loop.active += 1
        if begin is None:
            return  # moved to the loop that replaced this one
        try:
            coro = begin()
        except Exception:  # a fault of the node's own: said, as a worker thread says it
            coro = None
            _log_failure(key)
        if coro is None:  # refused: the node stops, and hands it back
            self._ended_one(lane_loop, key)
            return
        owned: set[asyncio.Task[Any]] = set()
        _owned.set(owned)
        task = asyncio.current_task()
        if task is not None:
            lane_loop.calls[key] = task
        try:
            await coro
        except Exception:
            _log_failure(key)
        finally:
            calls = lane_loop.calls
            calls.pop(key, None)
            lane_loop.reached.discard(key)
            left = [made for made in owned if not made.done()]
            if left:  # cancelled, and let end, as asyncio.run does
                for made in left:
                    made.cancel()
                with contextlib.suppress(asyncio.CancelledError):  # a late timeout's
                    await asyncio.wait(left)
            self._ended_one(lane_loop, key)

    def _ended_one(self, lane_loop: _Loop, key: Key) -> None:
        """A call of ``lane_loop`` ended: its place is free."""
        with self._lock:
            if key in lane_loop.detached:
                lane_loop.detached.discard(key)
            else:
                lane_loop.active -= 1
                self._ended.notify_all()
            given_up = lane_loop is not self._loop
        if given_up and not lane_loop.calls:  # it unblocked, and its calls are over
            lane_loop.loop.stop()
        self._pump()
        self._clock.settled()

    # -- stopping a call (the supervisor's steps 2 and 3) ------------------------------
    def force(self, key: Key, called: Called) -> bool:
        """Step 2: cancel the call's task again, on its loop."""
        lane_loop = self._loop_of(called)
        if lane_loop is None:
            return False

        def cancel() -> None:
            lane_loop.reached.add(key)
            task = lane_loop.calls.get(key)
            if task is not None:
                task.cancel()

        return lane_loop.call(cancel)

    def give_up(self, key: Key, called: Called) -> bool:
        """Step 3: record the run of a call that did not end when cancelled twice; give
        its loop up if the loop did not run the second cancel (the call blocks it)."""
        guard = called.guard
        lane_loop = self._loop_of(called)
        if lane_loop is None or not guard.abandon():
            return False
        blocked = key not in lane_loop.reached
        if blocked:
            error = "it blocked the event loop of the node's async tasks, which was given up"
        else:
            error = "it did not stop when cancelled twice, and was given up"
        reason = f"{guard.reason or ''}; {error}"
        called.finish(
            ended_outside(called.call, called.started_at, reason, guard.retryable, self._clock)
        )
        if blocked:
            self._replace(lane_loop)
        else:  # it goes on, unwatched: the node's stop does not wait for it
            with self._lock:
                lane_loop.detached.add(key)
                lane_loop.active -= 1
                self._ended.notify_all()
        logger.error(
            "%s %s: %s (%d threads stuck)",
            *key,
            error,
            self.stuck(),
            extra={"action": "async_call_given_up", "job": key, "blocked": blocked},
        )
        return True

    def owns(self, called: Called) -> bool:
        """Whether ``called`` runs on the lane."""
        return self._loop_of(called) is not None

    def _loop_of(self, called: Called) -> _Loop | None:
        with self._lock:
            for lane_loop in (self._loop, *self._blocked):
                if lane_loop is not None and lane_loop.thread is called.thread:
                    return lane_loop
        return None

    def _replace(self, blocked: _Loop) -> None:
        """Give up a blocked loop: the calls waiting, and those that follow, go to a new
        one."""
        with self._lock:
            if self._loop is not blocked:
                return  # given up already
            self._blocked.append(blocked)
            self._loop = None
            # Its tasks that never ran go first on the next loop.
            self._waiting.extendleft(reversed(blocked.pending.items()))
            blocked.pending.clear()
            self._ended.notify_all()  # the node's stop does not wait for its calls
        if self._waiting:
            self._current().call(self._pump)

    def stuck(self) -> int:
        """Threads of loops given up whose calls have not returned yet."""
        with self._lock:
            self._blocked = [b for b in self._blocked if b.thread.is_alive()]
            return len(self._blocked)

    # -- the node's stop ----------------------------------------------------------------
    def idle(self) -> bool:
        """Nothing waiting and no call in progress (read by a fake clock)."""
        lane_loop = self._loop
        if lane_loop is None:
            return not self._waiting
        return not (self._waiting or lane_loop.pending or lane_loop.active)

    def close(self, timeout: float | None) -> None:
        """Refuse the calls not begun (the node refuses them: they are handed back),
        wait up to ``timeout`` seconds for those in progress (None: not at all), and end
        the loop's thread if they all ended; those still going are left to the
        process's exit."""
        lane_loop = self._loop
        if lane_loop is None:
            return
        lane_loop.call(self._pump)
        with self._lock:
            if timeout:
                self._ended.wait_for(self.idle, timeout)
            idle = self.idle()
        if idle:
            lane_loop.call(lane_loop.loop.stop)
            if timeout:
                lane_loop.thread.join(timeout)
        self._clock.untrack(self)
