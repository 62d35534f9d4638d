"""Batching executors: buffer items and hand them over in batches (go-zero's executors).

* :class:`PeriodicalExecutor` is the base: items go into a :class:`TaskContainer`,
  which says when it is full; a batch is executed when the container asks for it and
  every ``interval`` seconds. Its background flusher thread starts on the first add,
  leaves after ten idle intervals and starts again on the next add.
* :class:`BulkExecutor` flushes every ``max_tasks`` items; :class:`ChunkExecutor`
  every ``max_bytes`` (the caller gives each item's size).
* :class:`DelayExecutor` runs a function once, ``delay`` after the first of a burst of
  triggers (a debounce anchored at the first trigger, go-zero's rule).
* :class:`LessExecutor` runs a function at most once per ``threshold`` seconds (a
  throttle; the check-and-set is atomic).

Nothing buffered is lost at shutdown: :meth:`PeriodicalExecutor.close` flushes, and so
does interpreter exit for every executor that is still open.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sized
from typing import Any, Generic, Protocol, Self, TypeVar

from .clock import SystemClock
from .errors import SchedulerClosed
from .interfaces import Clock
from .wheel import acquire, check_seconds

__all__ = [
    "BulkExecutor",
    "ChunkExecutor",
    "DelayExecutor",
    "LessExecutor",
    "PeriodicalExecutor",
    "TaskContainer",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)
B = TypeVar("B")
C = TypeVar("C")

#: The flusher thread leaves after this many intervals in a row with nothing added.
IDLE_ROUNDS = 10

#: At interpreter exit, how long to wait for batches still running on other threads.
EXIT_TIMEOUT = 30.0

_serial = itertools.count(1)


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


class TaskContainer(Protocol[T_contra, B]):
    """The buffer behind a :class:`PeriodicalExecutor`.

    The executor calls ``add`` and ``remove_all`` holding its lock, so a container needs
    no locking of its own; ``execute`` is called without the lock, possibly on several
    threads at once.
    """

    def add(self, item: T_contra) -> bool:
        """Buffer ``item``; return True if the container should be flushed now."""
        ...

    def execute(self, items: B) -> None:
        """Handle one batch (what ``remove_all`` returned)."""
        ...

    def remove_all(self) -> B:
        """Take everything buffered out, as one batch. An empty (falsy) batch is skipped."""
        ...


def _check_callable(execute: C) -> C:
    if not callable(execute):
        raise TypeError(f"execute must be callable, got {execute!r}")
    return execute


def _size(batch: object) -> int | None:
    return len(batch) if isinstance(batch, Sized) else None


def _empty(batch: object) -> bool:
    # What remove_all returned holds nothing to execute: None, or a sized empty batch.
    return batch is None or (isinstance(batch, Sized) and len(batch) == 0)


# Every open executor, weakly: interpreter exit flushes them (see _close_all_at_exit).
_open: weakref.WeakSet[PeriodicalExecutor[Any, Any]] = weakref.WeakSet()
_open_lock = threading.Lock()


def _close_all_at_exit() -> None:
    with _open_lock:
        executors = list(_open)
    for executor in executors:
        try:
            executor.close(timeout=EXIT_TIMEOUT)
        except Exception:  # pragma: no cover - close logs batch errors itself
            logger.exception("executor %s: close at exit failed", executor.name)


atexit.register(_close_all_at_exit)


class _Described(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def interval(self) -> float: ...
    @property
    def closed(self) -> bool: ...


class _Closable:
    """What every executor with an interval shares: ``with`` closes it, and its repr
    says its name, its interval and whether it is closed."""

    def close(self, timeout: float | None = None) -> bool:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self: _Described) -> str:
        state = "closed" if self.closed else "open"
        return f"<{type(self).__name__} {self.name!r} interval={self.interval}s {state}>"


class PeriodicalExecutor(_Closable, Generic[T, B]):
    """Buffers items in ``container``; executes a batch when it is full and every ``interval``.

    Where a batch runs:

    * a full batch (``container.add`` returned True) on the thread whose ``add`` filled
      it, so a producer that fills batches faster than they execute is slowed down;
    * a timed flush on the background flusher thread;
    * :meth:`flush`, :meth:`wait` and :meth:`close` on the calling thread.

    An exception in ``execute`` is logged with the batch size and never reaches the
    producer; later batches go on.
    """

    def __init__(
        self,
        interval: float,
        container: TaskContainer[T, B],
        *,
        clock: Clock | None = None,
        name: str | None = None,
    ) -> None:
        self.interval = check_seconds("interval", interval)
        self._interval_us = max(1, round(self.interval * 1_000_000))
        self.name = name or f"htask-executor-{next(_serial)}"
        self._container = container
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # the flusher waits on it
        self._drained = threading.Condition(self._lock)  # wait() waits on it
        self._closed = False
        self._flusher: threading.Thread | None = None
        self._ready = False
        self._next_us = 0  # the flusher's next tick
        self._added = False  # an add since the flusher's last tick
        self._inflight = 0  # batches taken out of the container, not finished
        self._local = threading.local()  # batches executing on this thread
        with _open_lock:
            _open.add(self)

    # -- producing -------------------------------------------------------------------
    def add(self, item: T) -> None:
        """Buffer ``item``; execute the batch at once if the container is full."""
        lock = self._lock
        if not lock.acquire(False):
            acquire(lock)  # see wheel.acquire: no lock convoy under many producers
        try:
            if self._closed:
                raise SchedulerClosed(f"executor {self.name!r} is closed")
            self._added = True
            started = self._start_flusher() if self._flusher is None else None
            if self._container.add(item):
                batch = self._container.remove_all()
                self._inflight += 1
            else:
                batch = None
        finally:
            lock.release()
        if started is not None:
            self._await_flusher(started)
        if batch is not None:
            self._execute(batch)

    def _start_flusher(self) -> threading.Thread:
        # Called with the lock held; the caller then calls _await_flusher without it.
        self._next_us = self._clock.now_us() + self._interval_us
        self._ready = False
        thread = threading.Thread(target=self._flush_loop, name=f"{self.name}-flusher", daemon=True)
        self._flusher = thread
        thread.start()
        return thread

    def _await_flusher(self, thread: threading.Thread) -> None:
        # Return once the new flusher waits on the clock, so that a FakeClock.advance()
        # right after the add cannot slip past it.
        with self._cond:
            while not self._ready and thread.is_alive():
                self._cond.wait(1.0)

    def _flush_loop(self) -> None:
        clock = self._clock
        cond = self._cond
        iv = self._interval_us
        idle = 0
        me = threading.current_thread()
        first = True
        while True:
            with cond:
                if first:  # the handshake with _start_flusher, in the same lock hold as the wait
                    first = False
                    self._ready = True
                    cond.notify_all()
                while not self._closed and clock.now_us() < self._next_us:
                    clock.wait(cond, self._next_us)
                if self._closed:
                    if self._flusher is me:
                        self._flusher = None
                    return
                now = clock.now_us()
                # The next tick on the original grid, skipping ticks missed while busy.
                self._next_us += iv
                if self._next_us <= now:
                    self._next_us += ((now - self._next_us) // iv + 1) * iv
                batch = self._container.remove_all()
                if _empty(batch):
                    if self._added:
                        idle = 0
                    else:
                        idle += 1
                        if idle >= IDLE_ROUNDS:
                            self._flusher = None
                            logger.debug(
                                "executor %s: flusher idle for %d intervals, leaving",
                                self.name,
                                idle,
                                extra={"action": "flusher_idle_exit"},
                            )
                            return
                    self._added = False
                    continue
                idle = 0
                self._added = False
                self._inflight += 1
            self._execute(batch)

    def _execute(self, batch: B) -> None:
        # The caller counted the batch in _inflight.
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1
        try:
            if not _empty(batch):
                self._container.execute(batch)
        except Exception:
            logger.exception(
                "executor %s: execute failed for a batch of %s items",
                self.name,
                _size(batch),
                extra={"action": "batch_failed", "batch_size": _size(batch)},
            )
        finally:
            local.depth -= 1
            with self._lock:
                self._inflight -= 1
                if self._inflight == 0:
                    self._drained.notify_all()

    # -- flushing and closing ----------------------------------------------------------
    def flush(self) -> bool:
        """Execute what is buffered now, on this thread; False if there was nothing."""
        with self._lock:
            batch = self._container.remove_all()
            if _empty(batch):
                return False
            self._inflight += 1
        self._execute(batch)
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Flush, then wait until every batch in flight has finished.

        Returns False if ``timeout`` (real seconds) ran out first. Called from inside
        ``execute``, it does not wait for the batches running on its own thread.
        """
        self.flush()
        own = getattr(self._local, "depth", 0)
        with self._lock:
            return self._drained.wait_for(lambda: self._inflight <= own, timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float | None = None) -> bool:
        """Flush what is buffered, stop the flusher and wait for batches in flight.

        Later :meth:`add` calls raise :class:`SchedulerClosed`. Closing twice does
        nothing. Returns False if batches were still running after ``timeout``.
        """
        with self._lock:
            if not self._closed:
                self._closed = True
                flusher = self._flusher
                self._clock.kick(self._cond)
            else:
                flusher = None
        with _open_lock:
            _open.discard(self)
        deadline = None if timeout is None else time.monotonic() + timeout
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join(timeout)
        return self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))


# -- bulk and chunk ----------------------------------------------------------------------
class _BulkContainer(Generic[T]):
    __slots__ = ("_execute", "items", "max_tasks")

    def __init__(self, execute: Callable[[list[T]], object], max_tasks: int) -> None:
        self._execute = execute
        self.max_tasks = max_tasks
        self.items: list[T] = []

    def add(self, item: T) -> bool:
        items = self.items
        items.append(item)
        return len(items) >= self.max_tasks

    def execute(self, items: list[T]) -> None:
        self._execute(items)

    def remove_all(self) -> list[T]:
        items = self.items
        self.items = []
        return items


class _ChunkContainer(Generic[T]):
    __slots__ = ("_execute", "items", "max_bytes", "size")

    def __init__(self, execute: Callable[[list[T]], object], max_bytes: int) -> None:
        self._execute = execute
        self.max_bytes = max_bytes
        self.items: list[T] = []
        self.size = 0

    def add(self, item: tuple[T, int]) -> bool:
        self.items.append(item[0])
        self.size += item[1]
        return self.size >= self.max_bytes

    def execute(self, items: list[T]) -> None:
        self._execute(items)

    def remove_all(self) -> list[T]:
        items = self.items
        self.items = []
        self.size = 0
        return items


class _Batching(_Closable, Generic[T, B]):
    """What BulkExecutor and ChunkExecutor share: a PeriodicalExecutor inside."""

    def __init__(
        self,
        container: TaskContainer[T, B],
        interval: float,
        clock: Clock | None,
        name: str | None,
    ) -> None:
        self._executor = PeriodicalExecutor(interval, container, clock=clock, name=name)

    @property
    def name(self) -> str:
        return self._executor.name

    @property
    def interval(self) -> float:
        return self._executor.interval

    @property
    def closed(self) -> bool:
        return self._executor.closed

    def flush(self) -> bool:
        """Execute what is buffered now, on this thread; False if there was nothing."""
        return self._executor.flush()

    def wait(self, timeout: float | None = None) -> bool:
        """Flush, then wait until every batch in flight has finished."""
        return self._executor.wait(timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Flush, stop, and wait for batches in flight; later adds raise SchedulerClosed."""
        return self._executor.close(timeout)


class BulkExecutor(_Batching[T, list[T]]):
    """Calls ``execute(items)`` with every ``max_tasks`` items, and every ``interval`` seconds."""

    def __init__(
        self,
        execute: Callable[[list[T]], object],
        max_tasks: int = 1000,
        interval: float = 1.0,
        *,
        clock: Clock | None = None,
        name: str | None = None,
    ) -> None:
        self.max_tasks = _check_count("max_tasks", max_tasks)
        container = _BulkContainer(_check_callable(execute), max_tasks)
        super().__init__(container, interval, clock, name)

    def add(self, item: T) -> None:
        """Buffer ``item`` (a full batch is executed on this thread)."""
        self._executor.add(item)


class ChunkExecutor(_Batching[tuple[T, int], list[T]]):
    """Calls ``execute(items)`` once the items' sizes add up to ``max_bytes``, and every
    ``interval`` seconds."""

    def __init__(
        self,
        execute: Callable[[list[T]], object],
        max_bytes: int = 1024 * 1024,
        interval: float = 1.0,
        *,
        clock: Clock | None = None,
        name: str | None = None,
    ) -> None:
        self.max_bytes = _check_count("max_bytes", max_bytes)
        container = _ChunkContainer(_check_callable(execute), max_bytes)
        super().__init__(container, interval, clock, name)

    def add(self, item: T, size: int) -> None:
        """Buffer ``item`` counting ``size`` bytes (a full chunk is executed on this thread)."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be an int >= 0, got {size!r}")
        self._executor.add((item, size))


# -- delay and less ------------------------------------------------------------------------
class DelayExecutor:
    """Runs ``fn()`` once, ``delay`` seconds after the first of a burst of triggers.

    The first :meth:`trigger` arms a timer; triggers while it is pending are absorbed;
    when it fires the executor is disarmed *before* ``fn`` runs, so a trigger during
    ``fn`` arms a new timer and is never lost. Unlike a classic debounce, later
    triggers do not push the run back: ``fn`` runs at most ``delay`` after the first.
    ``fn`` runs on a thread of its own; an exception in it is logged.
    """

    def __init__(
        self,
        fn: Callable[[], object],
        delay: float,
        *,
        clock: Clock | None = None,
        name: str | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        self.delay = check_seconds("delay", delay)
        self.name = name or f"htask-delay-{next(_serial)}"
        self._fn = fn
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._cond = threading.Condition(threading.Lock())
        self._armed = False
        self._ready = False

    @property
    def pending(self) -> bool:
        """True while a run is armed and has not started."""
        return self._armed

    def trigger(self) -> bool:
        """Arm the timer unless it is pending; True if this call armed it."""
        with self._cond:
            if self._armed:
                return False
            self._armed = True
            self._ready = False
            deadline = self._clock.now_us() + max(1, round(self.delay * 1_000_000))
            thread = threading.Thread(
                target=self._wait_and_run, args=(deadline,), name=f"{self.name}-timer", daemon=True
            )
            thread.start()
            # Return once the thread waits on the clock (see PeriodicalExecutor).
            while not self._ready and thread.is_alive():
                self._cond.wait(1.0)
        return True

    def _wait_and_run(self, deadline_us: int) -> None:
        clock = self._clock
        with self._cond:
            self._ready = True
            self._cond.notify_all()
            while clock.now_us() < deadline_us:
                clock.wait(self._cond, deadline_us)
            self._armed = False
        try:
            self._fn()
        except Exception:
            logger.exception(
                "delay executor %s: function failed", self.name, extra={"action": "delay_failed"}
            )

    def __repr__(self) -> str:
        return f"<DelayExecutor {self.name!r} delay={self.delay}s armed={self._armed}>"


class LessExecutor:
    """Runs a function at most once per ``threshold`` seconds; other calls are discarded."""

    def __init__(self, threshold: float, *, clock: Clock | None = None) -> None:
        self.threshold = check_seconds("threshold", threshold)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._last: float | None = None

    def do_or_discard(self, fn: Callable[[], object]) -> bool:
        """Call ``fn()`` on this thread if ``threshold`` seconds have passed since the last
        run (or it never ran); return whether it ran.

        The check and the recording of the run are one atomic step, so of many threads
        calling at once exactly one runs ``fn``. An exception in ``fn`` propagates to
        the caller, and the run still counts.
        """
        with self._lock:
            now = self._clock.monotonic()
            last = self._last
            if last is not None and now - last < self.threshold:
                return False
            self._last = now
        fn()
        return True

    def __repr__(self) -> str:
        return f"<LessExecutor threshold={self.threshold}s>"
