"""The timer queue and the scheduler thread that fires it onto a worker pool.

One scheduler thread sleeps until the earliest timer is due (or until an earlier one
is added), pops every due timer and hands it to the :class:`WorkerPool`. Cancelling
a timer takes it out of the count at once and drops what it holds; the dead heap
entry is compacted away as soon as dead entries outnumber live ones, so a cancelled
timer never waits to reach the head of the heap (the htask seed's open problem).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import math
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from heapq import heappush
from typing import Any, NoReturn

from .clock import SystemClock, from_us, to_us
from .errors import SchedulerClosed, SchedulerFull
from .interfaces import Clock
from .pool import WorkerPool
from .tokens import CancelToken, _set_current

__all__ = ["Scheduler", "TimerHandle", "TimerQueue"]

logger = logging.getLogger(__name__)

# TimerHandle states
PENDING = 0  # in the heap
QUEUED = 1  # due, handed to a worker, not started
RUNNING = 2
DONE = 3
CANCELLED = 4
_STATE_NAMES = ("pending", "queued", "running", "done", "cancelled")

_serial = itertools.count(1)


class TimerHandle:
    """A scheduled call. Returned by :meth:`Scheduler.call_at` and ``call_later``."""

    __slots__ = ("__weakref__", "_args", "_fn", "_kwargs", "_sched", "_state", "_token", "_when")

    def __init__(
        self,
        when_us: int,
        fn: Callable[..., object],
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        token: CancelToken | None,
        sched: Scheduler,
    ) -> None:
        self._when = when_us
        self._fn: Callable[..., object] | None = fn
        self._args = args
        self._kwargs = kwargs
        self._token = token
        self._sched = sched
        self._state = PENDING

    @property
    def when(self) -> datetime:
        """When the timer is due (aware, UTC)."""
        return from_us(self._when)

    @property
    def token(self) -> CancelToken | None:
        return self._token

    @property
    def state(self) -> str:
        """``pending``, ``queued``, ``running``, ``done`` or ``cancelled``."""
        return _STATE_NAMES[self._state]

    def cancel(self) -> bool:
        """Cancel the timer if it has not started. Idempotent.

        Returns True if the timer is cancelled (now or before), False if it is already
        running or done.
        """
        sched = self._sched
        with sched._lock:
            state = self._state
            if state == CANCELLED:
                return True
            if state >= RUNNING:
                return False
            self._state = CANCELLED
            self._fn = None
            self._args = ()
            self._kwargs = None
            sched._cancelled += 1
            if state == PENDING:
                queue = sched._queue
                queue._live -= 1
                queue._dead += 1
                if queue._dead > queue._live:
                    queue.compact()
        if self._token is not None:
            self._token._unbind(self)
        return True

    def cancelled(self) -> bool:
        return self._state == CANCELLED

    def done(self) -> bool:
        """True once the call has finished (or the timer was cancelled)."""
        return self._state >= DONE

    def __repr__(self) -> str:
        name = getattr(self._fn, "__qualname__", None) or repr(self._fn)
        return f"<TimerHandle {name} at {self.when.isoformat()} {self.state}>"


class TimerQueue:
    """A min-heap of ``(when_us, seq, handle)`` with tombstone cancellation.

    Not thread-safe on its own: :class:`Scheduler` holds its lock around every call.
    Invariant: dead entries never outnumber live ones (checked on every discard).
    """

    __slots__ = ("_dead", "_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, TimerHandle]] = []
        self._live = 0
        self._dead = 0
        self._seq = itertools.count()

    def __len__(self) -> int:
        return self._live

    @property
    def dead(self) -> int:
        return self._dead

    def push(self, handle: TimerHandle) -> bool:
        """Add ``handle``; return True if it is now the earliest timer."""
        entry = (handle._when, next(self._seq), handle)
        heap = self._heap
        heapq.heappush(heap, entry)
        self._live += 1
        return heap[0] is entry

    def compact(self) -> None:
        """Drop every dead entry (called when dead entries outnumber live ones)."""
        self._heap = [e for e in self._heap if e[2]._state == PENDING]
        heapq.heapify(self._heap)
        self._dead = 0

    def next_due(self) -> int | None:
        """The earliest live due time, dropping dead entries from the top."""
        heap = self._heap
        while heap:
            if heap[0][2]._state == PENDING:
                return heap[0][0]
            heapq.heappop(heap)
            self._dead -= 1
        return None

    def pop_due(self, now_us: int) -> list[TimerHandle]:
        """Remove and return every live timer due at or before ``now_us``, in order."""
        heap = self._heap
        due = []
        pop = heapq.heappop
        while heap and heap[0][0] <= now_us:
            handle = pop(heap)[2]
            if handle._state == PENDING:
                handle._state = QUEUED
                due.append(handle)
            else:
                self._dead -= 1
        self._live -= len(due)
        return due

    def clear(self) -> Iterator[TimerHandle]:
        """Empty the queue, yielding the live handles it held."""
        heap, self._heap = self._heap, []
        self._live = self._dead = 0
        return (e[2] for e in heap if e[2]._state == PENDING)


class Scheduler:
    """Runs callables at given times on a pool of worker threads.

    ``Scheduler(workers=4)`` starts one scheduler thread and four workers;
    ``workers=0`` runs each due call on a thread of its own. ``capacity`` bounds the
    pending timers: the call past it raises :class:`SchedulerFull` at once (it never
    blocks, so a task that schedules from inside a worker cannot deadlock).

    ``on_thread_exit()`` runs on each worker thread as it ends (at :meth:`close`, or
    when the pool shrinks), e.g. ``django.db.connections.close_all`` so that the
    database connections the workers opened are closed; :meth:`close` with ``wait``
    returns after it ran.

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        workers: int = 4,
        capacity: int | None = None,
        clock: Clock | None = None,
        name: str | None = None,
        on_thread_exit: Callable[[], object] | None = None,
    ) -> None:
        if capacity is not None and (
            isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1
        ):
            raise ValueError(f"capacity must be a positive int or None, got {capacity!r}")
        self.name = name or f"htask-{next(_serial)}"
        self.capacity = capacity
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._pool = WorkerPool(workers, name=self.name, on_thread_exit=on_thread_exit)
        # Hot paths take the raw lock (cheaper than entering the Condition); the
        # scheduler thread waits on the Condition built over the same lock.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue = TimerQueue()
        self._now_us = self._clock.now_us
        self._closed = False
        self._inflight = 0  # popped from the queue, not finished
        self._running = 0
        self._fired = 0
        self._failed = 0
        self._cancelled = 0  # guarded by _lock; the other counters by _stats_lock
        self._stats_lock = threading.Lock()
        self._clock.track(self)
        self._thread = threading.Thread(
            target=self._loop, name=f"{self.name}-scheduler", daemon=True
        )
        self._thread.start()

    # -- scheduling ------------------------------------------------------------------
    @property
    def clock(self) -> Clock:
        return self._clock

    def call_at(
        self,
        when: datetime,
        fn: Callable[..., object],
        /,
        *args: Any,
        token: CancelToken | None = None,
        **kwargs: Any,
    ) -> TimerHandle:
        """Call ``fn(*args, **kwargs)`` at ``when`` (an aware datetime).

        A time in the past runs as soon as possible.
        """
        if not isinstance(when, datetime):
            raise TypeError(f"when must be an aware datetime, got {when!r}")
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(f"when must be an aware datetime, got naive {when!r}")
        return self._add(to_us(when), fn, args, kwargs, token)

    def call_later(
        self,
        delay: float,
        fn: Callable[..., object],
        /,
        *args: Any,
        token: CancelToken | None = None,
        **kwargs: Any,
    ) -> TimerHandle:
        """Call ``fn(*args, **kwargs)`` after ``delay`` seconds (0 for as soon as possible)."""
        cls = delay.__class__
        if cls is not float and cls is not int and not isinstance(delay, float):
            raise TypeError(f"delay must be a number of seconds, got {delay!r}")
        if not 0 <= delay < math.inf:  # also rejects NaN
            raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
        if token is not None or not callable(fn):
            return self._add(self._now_us() + round(delay * 1_000_000), fn, args, kwargs, token)
        # The common case, inlined: this is the hottest call of the engine.
        when_us = self._now_us() + round(delay * 1_000_000)
        handle = TimerHandle(when_us, fn, args, kwargs or None, None, self)
        queue = self._queue
        with self._lock:
            if self._closed or (self.capacity is not None and queue._live >= self.capacity):
                self._refuse(handle)
            entry = (when_us, next(queue._seq), handle)
            heap = queue._heap
            heappush(heap, entry)
            queue._live += 1
            if heap[0] is entry:
                self._clock.kick(self._cond)
        return handle

    def call_soon(
        self,
        fn: Callable[..., object],
        /,
        *args: Any,
        token: CancelToken | None = None,
        **kwargs: Any,
    ) -> TimerHandle:
        """Call ``fn`` as soon as a worker is free."""
        return self._add(self._now_us(), fn, args, kwargs, token)

    def _add(
        self,
        when_us: int,
        fn: Callable[..., object],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        token: CancelToken | None,
    ) -> TimerHandle:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        handle = TimerHandle(when_us, fn, args, kwargs or None, token, self)
        if token is not None:
            token._bind(handle)  # raises TokenCancelled
        queue = self._queue
        with self._lock:
            if self._closed or (self.capacity is not None and queue._live >= self.capacity):
                self._refuse(handle)
            entry = (when_us, next(queue._seq), handle)
            heap = queue._heap
            heappush(heap, entry)
            queue._live += 1
            if heap[0] is entry:  # a new earliest timer: the scheduler thread must know
                self._clock.kick(self._cond)
        return handle

    def _refuse(self, handle: TimerHandle) -> NoReturn:
        # Called with the lock held, from _add.
        if handle._token is not None:
            handle._token._unbind(handle)
        if self._closed:
            raise SchedulerClosed(f"scheduler {self.name!r} is closed")
        raise SchedulerFull(
            f"scheduler {self.name!r} holds {self.capacity} pending timers (its capacity)"
        )

    # -- the scheduler thread --------------------------------------------------------
    def _loop(self) -> None:
        clock = self._clock
        cond = self._cond
        queue = self._queue
        submit = self._pool.submit
        run = self._run
        partial = functools.partial
        while True:
            with cond:
                if self._closed:
                    return
                due = queue.pop_due(clock.now_us())
                if due:
                    self._inflight += len(due)
                else:
                    clock.wait(cond, queue.next_due())
                    continue
            for handle in due:
                try:
                    submit(partial(run, handle))
                except SchedulerClosed:
                    self._finish_unrun(handle)

    def _finish_unrun(self, handle: TimerHandle) -> None:
        with self._cond:
            handle._state = CANCELLED
            handle._fn = None
            self._inflight -= 1
        self._clock.settled()

    def _run(self, handle: TimerHandle) -> None:
        with self._cond:
            if handle._state != QUEUED:  # cancelled while waiting for a worker
                self._inflight -= 1
                fn = None
            else:
                handle._state = RUNNING
                fn = handle._fn
        if fn is None:
            self._clock.settled()
            return
        token = handle._token
        with self._stats_lock:
            self._running += 1
            self._fired += 1
        previous = _set_current(token)
        failed = False
        try:
            if handle._kwargs:
                fn(*handle._args, **handle._kwargs)
            else:
                fn(*handle._args)
        except BaseException:
            failed = True
            logger.exception(
                "task %s failed", getattr(fn, "__qualname__", fn), extra={"action": "task_failed"}
            )
        finally:
            _set_current(previous)
            handle._state = DONE
            handle._fn = None
            handle._args = ()
            handle._kwargs = None
            if token is not None:
                token._unbind(handle)
            with self._stats_lock:
                self._running -= 1
                if failed:
                    self._failed += 1
            with self._cond:
                self._inflight -= 1
            self._clock.settled()

    # -- pool, state, closing --------------------------------------------------------
    @property
    def workers(self) -> int:
        return self._pool.workers

    def change_workers(self, workers: int) -> None:
        """Resize the worker pool live (0: a thread per task); firing does not pause."""
        if self._closed:
            raise SchedulerClosed(f"scheduler {self.name!r} is closed")
        self._pool.resize(workers)

    def __len__(self) -> int:
        """The number of pending timers."""
        return len(self._queue)

    def idle(self) -> bool:
        """True when no popped timer is queued or running (lock-free read)."""
        return self._inflight == 0

    def next_due(self) -> datetime | None:
        """When the earliest pending timer is due, or None."""
        with self._cond:
            when = self._queue.next_due()
        return None if when is None else from_us(when)

    def stats(self) -> dict[str, int]:
        """Counts: pending, running, fired, failed, cancelled (and dead heap entries)."""
        with self._lock:
            pending = len(self._queue)
            dead = self._queue.dead
            cancelled = self._cancelled
        with self._stats_lock:
            return {
                "pending": pending,
                "running": self._running,
                "fired": self._fired,
                "failed": self._failed,
                "cancelled": cancelled,
                "dead_entries": dead,
            }

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, wait: bool = True, timeout: float | None = None) -> int:
        """Stop firing, discard the pending timers and return how many there were.

        Calls already handed to a worker still run; with ``wait`` this returns once they
        have finished (or after ``timeout`` seconds). Later ``call_*`` raise
        :class:`SchedulerClosed`. Closing twice returns 0.
        """
        with self._cond:
            if self._closed:
                return 0
            self._closed = True
            discarded = list(self._queue.clear())
            for handle in discarded:
                handle._state = CANCELLED
                handle._fn = None
                handle._args = ()
                handle._kwargs = None
            self._cancelled += len(discarded)
            self._clock.kick(self._cond)
        for handle in discarded:
            if handle._token is not None:
                handle._token._unbind(handle)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self._pool.shutdown(wait=wait, timeout=timeout)
        self._clock.untrack(self)
        logger.debug(
            "scheduler %s closed, %d pending timers discarded",
            self.name,
            len(discarded),
            extra={"action": "closed"},
        )
        return len(discarded)

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(wait=True)

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self)} pending"
        return f"<Scheduler {self.name!r} workers={self.workers} {state}>"
