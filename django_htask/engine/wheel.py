"""A keyed timing wheel: O(1) set, move and remove of many timers with a coarse tick.

``TimingWheel(interval, slots, execute)`` keeps timers by key. A ticking thread wakes
once per ``interval`` (only while the wheel holds timers), takes the timers due in the
current slot and hands them to a worker pool, which calls ``execute(key, value)``.

Long delays use *circles*: a timer ``k`` ticks away lives in slot ``k % slots`` and
remembers the absolute tick it is due at, so a slot holds timers of several
revolutions and a tick fires only those whose tick has come. Every timer is therefore
looked at once per revolution; pick ``interval * slots`` around the usual delay.

It follows go-zero's ``collection.TimingWheel`` without its known defects:

* a timer lives in exactly one slot (a move takes it out of the old slot at once), so
  a moved timer fires once, at its new time;
* :meth:`TimingWheel.drain` forgets every key it drains, so a key set afterwards is an
  ordinary new timer;
* the current tick is computed from the clock (``(now - start) // interval``) and every
  slot between the last processed tick and it is processed, so a ticking thread that
  falls behind catches up without losing an expiry;
* delays are rounded *up* to whole ticks: a timer never fires before its delay, and
  at most one interval after it.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import threading
from collections.abc import Callable, Hashable
from time import sleep as _sleep
from typing import Generic, TypeVar

from .clock import SystemClock
from .errors import SchedulerClosed
from .interfaces import Clock, Executor
from .pool import WorkerPool

__all__ = ["TimingWheel"]

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: Expiries of one tick are handed to the executor in jobs of at most this many.
CHUNK = 128

_serial = itertools.count(1)


def acquire(lock: threading.Lock, spins: int = 100) -> None:
    """Take ``lock``, yielding the GIL a few times before queueing on it.

    On CPython, once a thread *blocks* on a hot lock, every release wakes it only for it
    to find the lock taken again, and the threads hammering the lock fall into a convoy
    that runs an order of magnitude slower (measured: 8 threads adding to one buffer,
    3.3M/s before a convoy starts, 140k/s after). Yielding with ``sleep(0)`` lets the
    holder finish its few microseconds instead, so no convoy forms. A lock held for
    longer is waited for normally after ``spins`` tries. Call sites try
    ``lock.acquire(False)`` inline first.
    """
    for _ in range(spins):
        _sleep(0)
        if lock.acquire(False):
            return
    lock.acquire()


def check_seconds(name: str, value: object) -> float:
    """``value`` as a float of seconds; TypeError or ValueError naming ``name`` and the value."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not 0 < value < math.inf:  # also rejects NaN
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


class TimingWheel(Generic[K, V]):
    """Keyed timers on a wheel of ``slots`` slots, each ``interval`` seconds wide.

    ``execute(key, value)`` runs on a worker pool (``workers`` threads of its own, or
    the ``executor`` given: anything with ``submit(fn)``), never on the ticking thread.
    Use it as a context manager, or call :meth:`stop`.
    """

    def __init__(
        self,
        interval: float,
        slots: int,
        execute: Callable[[K, V], object],
        clock: Clock | None = None,
        *,
        executor: Executor | None = None,
        workers: int = 4,
        name: str | None = None,
    ) -> None:
        interval = check_seconds("interval", interval)
        if isinstance(slots, bool) or not isinstance(slots, int):
            raise TypeError(f"slots must be an int >= 1, got {slots!r}")
        if slots < 1:
            raise ValueError(f"slots must be an int >= 1, got {slots!r}")
        if not callable(execute):
            raise TypeError(f"execute must be callable, got {execute!r}")
        self._interval_us = max(1, round(interval * 1_000_000))
        self.interval = self._interval_us / 1_000_000
        self.slots = slots
        self.name = name or f"htask-wheel-{next(_serial)}"
        self._execute = execute
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._own_pool = executor is None
        self._executor: Executor = (
            executor if executor is not None else WorkerPool(workers, name=self.name)
        )
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        # A timer is two dict entries: key -> due tick, and key -> value in its slot.
        self._ticks: dict[K, int] = {}
        self._slots: list[dict[K, V]] = [{} for _ in range(slots)]
        self._start_us = self._clock.now_us()
        self._ticked = 0  # the last tick processed; tick k is at start + k * interval
        self._stopped = False
        self._ready = False
        self._inflight = 0  # expiries handed to the executor, not finished
        self._inflight_lock = threading.Lock()
        self._clock.track(self)
        self._thread = threading.Thread(target=self._loop, name=f"{self.name}-tick", daemon=True)
        with self._cond:
            self._thread.start()
            # Return once the thread waits on the clock, so that a FakeClock.advance()
            # right after construction cannot slip past it.
            while not self._ready:
                self._cond.wait(1.0)

    # -- timers ----------------------------------------------------------------------
    def _due(self, delay: float) -> int:
        # Validate ``delay`` and return the due time (read before taking the lock).
        cls = delay.__class__
        if cls is not float and cls is not int:
            delay = check_seconds("delay", delay)  # raises for a bool or a non-number
        if not 0 < delay < math.inf:  # also rejects NaN
            raise ValueError(f"delay must be a finite number of seconds > 0, got {delay!r}")
        return self._clock.now_us() + round(delay * 1_000_000)

    def set_timer(self, key: K, value: V, delay: float) -> None:
        """Call ``execute(key, value)`` after ``delay`` seconds (> 0).

        A key that is already pending gets the new value and is moved to the new time.
        """
        due = self._due(delay)
        self._acquire_open()
        try:
            tick = self._tick_of(due)
            ticks = self._ticks
            old = ticks.get(key)
            if old is not None:
                del self._slots[old % self.slots][key]
            elif not ticks:
                self._wake_up()
                tick = max(tick, self._ticked + 1)
            ticks[key] = tick
            self._slots[tick % self.slots][key] = value
        finally:
            self._lock.release()

    def _acquire_open(self) -> None:
        # Take the lock (without a convoy, see acquire); raise if the wheel is stopped.
        lock = self._lock
        if not lock.acquire(False):
            acquire(lock)
        if self._stopped:
            lock.release()
            raise SchedulerClosed(f"timing wheel {self.name!r} is stopped")

    def _tick_of(self, due: int) -> int:
        # Called with the lock held: the first tick at or after ``due``, and never one
        # already processed (a wall clock stepped back must not put a timer behind the
        # ticking thread).
        tick = -((self._start_us - due) // self._interval_us)
        return tick if tick > self._ticked else self._ticked + 1

    def _wake_up(self) -> None:
        # Called with the lock held when the first timer goes into an empty wheel: the
        # thread sleeps without a deadline. Skip the empty ticks and wake it.
        current = (self._clock.now_us() - self._start_us) // self._interval_us
        self._ticked = max(self._ticked, current)
        self._clock.kick(self._cond)

    def move_timer(self, key: K, delay: float) -> bool:
        """Move a pending timer to ``delay`` seconds from now; False if ``key`` is not pending."""
        due = self._due(delay)
        self._acquire_open()
        try:
            ticks = self._ticks
            old = ticks.get(key)
            if old is None:
                return False
            tick = self._tick_of(due)
            if old != tick:
                n = self.slots
                slots = self._slots
                slots[tick % n][key] = slots[old % n].pop(key)
                ticks[key] = tick
            return True
        finally:
            self._lock.release()

    def remove_timer(self, key: K) -> bool:
        """Remove a pending timer; False if ``key`` is not pending."""
        self._acquire_open()
        try:
            old = self._ticks.pop(key, None)
            if old is None:
                return False
            del self._slots[old % self.slots][key]
            return True
        finally:
            self._lock.release()

    def drain(self, fn: Callable[[K, V], object]) -> int:
        """Empty the wheel, calling ``fn(key, value)`` for every pending timer, now.

        ``fn`` runs on the calling thread, in due order, after the wheel is emptied (so it
        may set timers again, even for the same keys). An exception in ``fn`` is logged
        and the other entries are still drained. Returns how many entries were drained.
        """
        self._acquire_open()
        try:
            entries = self._take_all()
        finally:
            self._lock.release()
        self._call_each(fn, entries, "drain function", "drain_failed")
        return len(entries)

    def _call_each(
        self, fn: Callable[[K, V], object], entries: list[tuple[K, V]], what: str, action: str
    ) -> None:
        # fn(key, value) for every entry; an exception is logged and the rest still run.
        for key, value in entries:
            try:
                fn(key, value)
            except Exception:
                logger.exception(
                    "timing wheel %s: %s failed for key %r",
                    self.name,
                    what,
                    key,
                    extra={"action": action},
                )

    def _take_all(self) -> list[tuple[K, V]]:
        # Called with the lock held: empty the wheel, return its entries in due order.
        ticks, n = self._ticks, self.slots
        entries = sorted(
            ((tick, key, self._slots[tick % n][key]) for key, tick in ticks.items()),
            key=lambda e: e[0],
        )
        self._ticks = {}
        self._slots = [{} for _ in range(n)]
        return [(key, value) for _, key, value in entries]

    def __len__(self) -> int:
        """The number of pending timers."""
        return len(self._ticks)

    def __contains__(self, key: object) -> bool:
        return key in self._ticks

    # -- the ticking thread ----------------------------------------------------------
    def _loop(self) -> None:
        clock = self._clock
        cond = self._cond
        start, iv = self._start_us, self._interval_us
        while True:
            with cond:
                if not self._ready:
                    self._ready = True
                    cond.notify_all()
                while True:
                    if self._stopped:
                        return
                    if not self._ticks:
                        clock.wait(cond, None)
                        continue
                    due_us = start + (self._ticked + 1) * iv
                    now = clock.now_us()
                    if now >= due_us:
                        break
                    clock.wait(cond, due_us)
                expired = self._advance((now - start) // iv)
                if expired:
                    with self._inflight_lock:
                        self._inflight += (len(expired) + CHUNK - 1) // CHUNK
            for i in range(0, len(expired), CHUNK):
                self._submit(expired[i : i + CHUNK])

    def _advance(self, current: int) -> list[tuple[K, V]]:
        """Process every tick after the last processed one up to ``current`` (lock held).

        Removes and returns the expired timers in due order.
        """
        first = self._ticked + 1
        self._ticked = current
        ticks, slots, n = self._ticks, self._slots, self.slots
        if first == current:  # the usual case: one tick
            slot = slots[current % n]
            if not slot:
                return []
            due = [k for k in slot if ticks[k] <= current]
            if len(due) == len(slot):
                slots[current % n] = {}
                for k in due:
                    del ticks[k]
                return list(slot.items())
            return [(k, self._pop(k, slot)) for k in due]
        # Catching up: visit each missed slot once (at most a full revolution).
        found: list[tuple[int, K, V]] = []
        for t in range(first, min(current, first + n - 1) + 1):
            slot = slots[t % n]
            if slot:
                found.extend((ticks[k], k, slot[k]) for k in list(slot) if ticks[k] <= current)
        for _, k, _ in found:
            del slots[ticks.pop(k) % n][k]
        found.sort(key=lambda e: e[0])
        if found:
            logger.debug(
                "timing wheel %s caught up %d ticks, %d timers expired",
                self.name,
                current - first + 1,
                len(found),
                extra={"action": "wheel_caught_up"},
            )
        return [(k, v) for _, k, v in found]

    def _pop(self, key: K, slot: dict[K, V]) -> V:
        del self._ticks[key]
        return slot.pop(key)

    def _submit(self, chunk: list[tuple[K, V]]) -> None:
        run = functools.partial(self._run, chunk)
        try:
            self._executor.submit(run)
        except Exception as exc:
            # A given executor that refuses work (shut down under the wheel, say): run
            # the expiries here rather than lose them; this tick is late by their time.
            logger.warning(
                "timing wheel %s: executor refused %d expiries (%r), running them on the "
                "ticking thread",
                self.name,
                len(chunk),
                exc,
                extra={"action": "expiry_inline"},
            )
            run()

    def _run(self, chunk: list[tuple[K, V]]) -> None:
        try:
            self._call_each(self._execute, chunk, "execute", "expiry_failed")
        finally:
            self._done()

    def _done(self) -> None:
        with self._inflight_lock:
            self._inflight -= 1
        self._clock.settled()

    def idle(self) -> bool:
        """True when no expiry is waiting for or running on the executor (lock-free)."""
        return self._inflight == 0

    # -- stopping --------------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> int:
        """Stop ticking and discard the pending timers; return how many were discarded.

        Expiries already handed to the executor still run; when the wheel owns its pool,
        this waits for them. Later calls raise :class:`SchedulerClosed`; stopping twice
        does nothing and returns 0.
        """
        with self._cond:
            if self._stopped:
                return 0
            self._stopped = True
            discarded = len(self._ticks)
            self._ticks = {}
            self._slots = [{} for _ in range(self.slots)]
            self._clock.kick(self._cond)
        if threading.current_thread() is not self._thread:
            self._thread.join()
        if self._own_pool:
            assert isinstance(self._executor, WorkerPool)
            self._executor.shutdown(wait=True)
        self._clock.untrack(self)
        logger.debug(
            "timing wheel %s stopped, %d pending timers discarded",
            self.name,
            discarded,
            extra={"action": "wheel_stopped"},
        )
        return discarded

    def __enter__(self) -> TimingWheel[K, V]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else f"{len(self)} pending"
        return f"<TimingWheel {self.name!r} interval={self.interval}s slots={self.slots} {state}>"
