"""The timer queue and the scheduler thread that fires it onto a worker pool.

One scheduler thread sleeps until the earliest timer is due (or until an earlier one
is added), pops every due timer and hands it to the :class:`WorkerPool`. Cancelling
a timer takes it out of the count at once and drops what it holds; the dead heap
entry is compacted away as soon as dead entries outnumber live ones, so a cancelled
timer never waits to reach the head of the heap (the htask seed's open problem).

A :class:`TimerHandle` is its own heap entry: a list ``[when_us, seq]`` that the heap
compares in C (by due time, then by the order the timers were made), with the call
in slots beside it. One object per timer, no tuple around it.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import math
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from heapq import heappush
from typing import Any, NoReturn

from .clock import EPOCH, SystemClock, from_us, to_us
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
_INF = math.inf
Fn = Callable[..., object]  # what a timer calls
_time = time.time


class _KwargsCall(functools.partial):  # type: ignore[type-arg]
    """``fn`` with the keyword arguments of a timer bound (only timers given some
    carry one, so that a timer needs no slot for them)."""

    __slots__ = ()


class TimerHandle(list[int]):
    """A scheduled call. Returned by :meth:`Scheduler.call_at` and ``call_later``.

    Internally it is its own heap entry: the list ``[when_us, seq]``, compared in C.
    Treat it as opaque; equal handles are the same handle.
    """

    __slots__ = ("_args", "_fn", "_sched", "_state", "_token")
    # A set holds handles (CancelToken): hash by identity, as before. Defining only
    # __hash__ keeps list's C comparison, which the heap relies on.
    __hash__ = object.__hash__  # type: ignore[assignment]

    _fn: Callable[..., object] | None
    _args: tuple[Any, ...]
    _token: CancelToken | None
    _sched: Scheduler
    _state: int

    @property
    def when(self) -> datetime:
        """When the timer is due (aware, UTC)."""
        return from_us(self[0])

    @property
    def token(self) -> CancelToken | None:
        return self._token

    @property
    def state(self) -> str:
        """``pending``, ``queued``, ``running``, ``done`` or ``cancelled``."""
        return _STATE_NAMES[self._state]

    @property
    def _kwargs(self) -> dict[str, Any] | None:
        fn = self._fn
        return dict(fn.keywords) if isinstance(fn, _KwargsCall) else None

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
        fn = self._fn
        if isinstance(fn, _KwargsCall):
            fn = fn.func
        name = getattr(fn, "__qualname__", None) or repr(fn)
        return f"<TimerHandle {name} at {self.when.isoformat()} {self.state}>"


class TimerQueue:
    """A min-heap of :class:`TimerHandle` (each its own ``[when_us, seq]`` entry) with
    tombstone cancellation.

    Not thread-safe on its own: :class:`Scheduler` holds its lock around every call.
    Invariant: dead entries never outnumber live ones (checked on every discard).
    """

    __slots__ = ("_dead", "_heap", "_live", "_next_seq")

    def __init__(self) -> None:
        self._heap: list[TimerHandle] = []
        self._live = 0
        self._dead = 0
        # Handles take their seq when made (the order of the calls that made them).
        self._next_seq = itertools.count().__next__

    def __len__(self) -> int:
        return self._live

    @property
    def dead(self) -> int:
        return self._dead

    def push(self, handle: TimerHandle) -> bool:
        """Add ``handle``; return True if it is now the earliest timer."""
        heap = self._heap
        heapq.heappush(heap, handle)
        self._live += 1
        return heap[0] is handle

    def compact(self) -> None:
        """Drop every dead entry (called when dead entries outnumber live ones)."""
        heap = self._heap
        heap[:] = [h for h in heap if h._state == PENDING]
        heapq.heapify(heap)
        self._dead = 0

    def next_due(self) -> int | None:
        """The earliest live due time, dropping dead entries from the top."""
        heap = self._heap
        while heap:
            if heap[0]._state == PENDING:
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
            handle = pop(heap)
            if handle._state == PENDING:
                handle._state = QUEUED
                due.append(handle)
            else:
                self._dead -= 1
        self._live -= len(due)
        return due

    def clear(self) -> Iterator[TimerHandle]:
        """Empty the queue, yielding the live handles it held."""
        heap = self._heap
        live = [h for h in heap if h._state == PENDING]
        heap.clear()  # in place: the scheduler holds this list
        self._live = self._dead = 0
        return iter(live)


def _log_failure(fn: Callable[..., object]) -> None:
    # Called from the except block of a task that raised.
    if isinstance(fn, _KwargsCall):
        fn = fn.func
    logger.exception(
        "task %s failed", getattr(fn, "__qualname__", fn), extra={"action": "task_failed"}
    )


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
        self._closed = False
        self._capacity: int | None = None
        self.capacity = capacity
        self.name = name or f"htask-{next(_serial)}"
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._pool = WorkerPool(workers, name=self.name, on_thread_exit=on_thread_exit)
        # Hot paths take the raw lock (cheaper than entering the Condition); the
        # scheduler thread waits on the Condition built over the same lock.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue = TimerQueue()
        self._heap = self._queue._heap  # the same list for the queue's life
        self._ready: deque[TimerHandle] = deque()  # due, waiting for a drainer
        self._draining = 0  # drainers submitted and not returned (see _drain)
        self._next_seq = self._queue._next_seq
        self._now_us = self._clock.now_us
        # The system clock's now_us, inlined on the hot path of call_later.
        self._system_clock = self._clock.__class__ is SystemClock
        # Guarded by _lock: timers popped from the queue and not finished, and counts.
        self._inflight = 0
        self._running = 0
        self._fired = 0
        self._failed = 0
        self._cancelled = 0
        self._clock.track(self)
        self._thread = threading.Thread(
            target=self._loop, name=f"{self.name}-scheduler", daemon=True
        )
        self._thread.start()

    @property
    def capacity(self) -> int | None:
        """The most pending timers this scheduler holds (None: no bound)."""
        return self._capacity

    @capacity.setter
    def capacity(self, capacity: int | None) -> None:
        if capacity is not None and (
            isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1
        ):
            raise ValueError(f"capacity must be a positive int or None, got {capacity!r}")
        self._capacity = capacity
        # One comparison on the hot path: an add is refused when the pending count
        # reaches _limit (-1 once closed, so that every add is refused).
        self._limit = -1 if self._closed else (sys.maxsize if capacity is None else capacity)

    # -- scheduling ------------------------------------------------------------------
    @property
    def clock(self) -> Clock:
        return self._clock

    def call_at(
        self, when: datetime, fn: Fn, /, *args: Any, token: CancelToken | None = None, **kwargs: Any
    ) -> TimerHandle:
        """Call ``fn(*args, **kwargs)`` at ``when`` (an aware datetime).

        A time in the past runs as soon as possible.
        """
        if when.__class__ is datetime and when.tzinfo is UTC:  # the common case
            td = when - EPOCH  # to_us(), inlined
            when_us = (td.days * 86400 + td.seconds) * 1_000_000 + td.microseconds
            return self._push(when_us, fn, args, kwargs, token)
        if not isinstance(when, datetime):
            raise TypeError(f"when must be an aware datetime, got {when!r}")
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(f"when must be an aware datetime, got naive {when!r}")
        return self._push(to_us(when), fn, args, kwargs, token)

    def call_later(
        self, delay: float, fn: Fn, /, *args: Any, token: CancelToken | None = None, **kwargs: Any
    ) -> TimerHandle:
        """Call ``fn(*args, **kwargs)`` after ``delay`` seconds (0 for as soon as possible)."""
        cls = delay.__class__
        if (cls is float or cls is int) and 0.0 <= delay < _INF:  # the hottest call
            if not delay:
                return self._push(self._now_us(), fn, args, kwargs, token, True)
            if self._system_clock:  # one reading (truncated to the us, as now_us() is)
                return self._push(int((_time() + delay) * 1e6), fn, args, kwargs, token)
        elif cls is not float and cls is not int and not isinstance(delay, float):
            raise TypeError(f"delay must be a number of seconds, got {delay!r}")
        elif not 0.0 <= delay < _INF:  # also rejects NaN
            raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
        return self._push(self._now_us() + round(delay * 1_000_000), fn, args, kwargs, token)

    def call_soon(
        self, fn: Fn, /, *args: Any, token: CancelToken | None = None, **kwargs: Any
    ) -> TimerHandle:
        """Call ``fn`` as soon as a worker is free."""
        return self._push(self._now_us(), fn, args, kwargs, token, True)

    def _push(
        self,
        when_us: int,
        fn: Callable[..., object],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        token: CancelToken | None,
        due: bool = False,
    ) -> TimerHandle:
        # Every add ends here: build the handle (it is its own heap entry) and push it.
        # A call ``due`` now, with no timer due before it in the heap, goes straight to
        # the workers: the scheduler thread would hand it over at once, a thread hop
        # later.
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        handle = TimerHandle((when_us, self._next_seq()))
        handle._fn = _KwargsCall(fn, **kwargs) if kwargs else fn
        handle._args = args
        handle._token = token
        handle._sched = self
        handle._state = PENDING
        if token is not None:
            token._bind(handle)  # raises TokenCancelled
        queue = self._queue
        heap = self._heap
        lock = self._lock
        lock.acquire()  # not "with": its __exit__ call costs more than the push itself
        try:
            if queue._live >= self._limit:
                self._refuse(handle)
            if due and (not heap or heap[0][0] > when_us):
                handle._state = QUEUED
                drainers = self._hand_over([handle])
            else:
                heappush(heap, handle)
                queue._live += 1
                if heap[0] is handle:  # a new earliest timer: the scheduler thread must know
                    self._clock.kick(self._cond)
                return handle
        finally:
            lock.release()
        self._submit(drainers, [handle] if drainers < 0 else [])
        return handle

    def _refuse(self, handle: TimerHandle) -> NoReturn:
        # Called with the lock held, by the adds.
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
        while True:
            with cond:
                if self._closed:
                    return
                due = queue.pop_due(clock.now_us())
                if not due:
                    clock.wait(cond, queue.next_due())
                    continue
                drainers = self._hand_over(due)
            self._submit(drainers, due if drainers < 0 else [])

    def _hand_over(self, due: list[TimerHandle]) -> int:
        """Count ``due`` (popped, QUEUED) in flight and put them in the drainers' deque;
        return how many drainers to submit, or -1 for a thread each (``workers=0``).
        Called with the lock held."""
        self._inflight += len(due)
        workers = self._pool.workers
        if not workers:
            return -1
        # Up to ``workers`` drainers take the due timers from one deque: a burst costs a
        # few pool hand-offs, not one per timer, and a slow call holds up only the
        # worker running it.
        ready = self._ready
        ready.extend(due)
        # Drainers free to take one: those submitted, less those in a call (counted in
        # _running; a thread-per-task run counted there too only makes this start a
        # drainer more, which finds nothing).
        drainers = min(len(ready), workers) - (self._draining - self._running)
        if drainers > 0:
            self._draining += drainers
            return drainers
        return 0

    def _submit(self, drainers: int, alone: list[TimerHandle]) -> None:
        """Submit ``drainers`` drainers, or a thread for each of ``alone``
        (``drainers`` -1); a call the closed pool refuses is finished unrun. Called
        without the lock."""
        pool = self._pool
        orphans: list[TimerHandle] = []
        for _ in range(drainers):
            try:
                pool.submit(self._drain)
            except SchedulerClosed:
                with self._lock:
                    self._draining -= 1
                    if self._draining == 0:  # no drainer left to run them
                        orphans = list(self._ready)
                        self._ready.clear()
        for handle in alone:  # workers=0: a thread for each
            try:
                pool.submit(functools.partial(self._run, handle))
            except SchedulerClosed:
                orphans.append(handle)
        for handle in orphans:
            self._finish_unrun(handle)

    def _finish_unrun(self, handle: TimerHandle) -> None:
        with self._lock:
            handle._state = CANCELLED
            handle._fn = None
            self._inflight -= 1
        self._clock.settled()

    def _drain(self) -> None:
        """Run ready timers until none is left (one of up to ``workers`` drainers).

        This is the loop every fired timer goes through, so the lock is taken once
        per run: to count the previous run finished and to start the next."""
        ready = self._ready
        lock = self._lock
        finished = failed = False
        while True:
            with lock:
                if finished:  # the previous run (still counted in _running)
                    self._inflight -= 1
                    if failed:
                        self._failed += 1
                while ready:
                    handle = ready.popleft()
                    if handle._state == QUEUED:
                        handle._state = RUNNING
                        fn = handle._fn
                        if not finished:  # else the previous run's place is taken over
                            self._running += 1
                        self._fired += 1
                        break
                    self._inflight -= 1  # cancelled while waiting for a worker
                else:
                    if finished:
                        self._running -= 1
                    self._draining -= 1
                    idle = self._inflight == 0
                    fn = None
            if fn is None:
                if idle:
                    self._clock.settled()
                return
            failed = self._call(handle, fn)
            finished = True
            if self._inflight == 1:  # the last run: tell a fake clock at once
                with lock:
                    self._running -= 1
                    self._inflight -= 1
                    if failed:
                        self._failed += 1
                finished = False
                self._clock.settled()

    def _run(self, handle: TimerHandle) -> None:
        """Run one timer (``workers=0``: on a thread of its own)."""
        with self._lock:
            if handle._state != QUEUED:  # cancelled while waiting for a thread
                self._inflight -= 1
                fn = None
            else:
                handle._state = RUNNING
                fn = handle._fn
                self._running += 1
                self._fired += 1
        if fn is not None:
            failed = self._call(handle, fn)
            with self._lock:
                self._running -= 1
                if failed:
                    self._failed += 1
                self._inflight -= 1
        self._clock.settled()

    @staticmethod
    def _call(handle: TimerHandle, fn: Callable[..., object]) -> bool:
        """Call a started timer's function; return True if it raised."""
        token = handle._token
        if token is not None:
            previous = _set_current(token)
        try:
            fn(*handle._args)
            return False
        except BaseException:
            _log_failure(fn)
            return True
        finally:
            if token is not None:
                _set_current(previous)
                token._unbind(handle)
            handle._state = DONE
            handle._fn = None
            handle._args = ()

    # -- pool, state, closing --------------------------------------------------------
    @property
    def workers(self) -> int:
        return self._pool.workers

    def change_workers(self, workers: int) -> None:
        """Resize the worker pool live (0: a thread per task); firing does not pause."""
        if self._closed:
            raise SchedulerClosed(f"scheduler {self.name!r} is closed")
        self._pool.resize(workers)

    def replace_worker(self, thread: threading.Thread) -> bool:
        """Give up a worker stuck in a call and start another in its place (see
        :meth:`WorkerPool.replace`). The stuck call still counts as running until it
        returns, if ever."""
        return self._pool.replace(thread)

    def abandoned_workers(self) -> int:
        """Workers given up by :meth:`replace_worker` still in their call."""
        return self._pool.abandoned()

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
            return {
                "pending": len(self._queue),
                "running": self._running,
                "fired": self._fired,
                "failed": self._failed,
                "cancelled": self._cancelled,
                "dead_entries": self._queue.dead,
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
            self._limit = -1
            discarded = list(self._queue.clear())
            for handle in discarded:
                handle._state = CANCELLED
                handle._fn = None
                handle._args = ()
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
