"""Clocks: the real one and a fake one that tests drive by hand.

The engine never reads the time itself: it asks its clock. :class:`SystemClock` uses
UTC wall time for *when* things are due and the monotonic clock for waiting.
:class:`FakeClock` stands still until a test calls :meth:`FakeClock.advance`, which
moves time deadline by deadline and returns only when everything that became due has
run, so unit tests never sleep.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from .interfaces import BusySource

__all__ = ["EPOCH", "FakeClock", "SystemClock", "from_us", "to_us"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)

#: The longest a waiting thread sleeps without looking at the wall clock again, so a
#: wall-clock step (NTP, suspend) delays a timer by at most this much.
MAX_SLEEP = 30.0


def to_us(when: datetime) -> int:
    """An aware datetime as whole microseconds since the epoch (exact)."""
    return (when - EPOCH) // _ONE_US


def from_us(us: int) -> datetime:
    """Microseconds since the epoch as an aware UTC datetime (exact)."""
    return EPOCH + timedelta(microseconds=us)


class SystemClock:
    """The real clock: UTC wall time for due times, monotonic waiting."""

    __slots__ = ()

    # now() and monotonic() are the C functions themselves, not Python methods around
    # them: the Cron runner reads both for every run of a burst.
    now: Callable[[], datetime] = staticmethod(functools.partial(datetime.now, UTC))
    monotonic: Callable[[], float] = staticmethod(time.monotonic)

    def now_us(self) -> int:
        return time.time_ns() // 1000

    def wait(self, cond: threading.Condition, deadline_us: int | None) -> None:
        if deadline_us is None:
            cond.wait(MAX_SLEEP)
            return
        timeout = (deadline_us - time.time_ns() // 1000) / 1e6
        if timeout > 0:
            cond.wait(min(timeout, MAX_SLEEP))

    def kick(self, cond: threading.Condition) -> None:
        cond.notify_all()

    def track(self, source: BusySource) -> None:
        pass

    def untrack(self, source: BusySource) -> None:
        pass

    def settled(self) -> None:
        pass

    def __repr__(self) -> str:
        return "SystemClock()"


class _Waiter:
    __slots__ = ("cond", "deadline_us", "thread", "woken")

    def __init__(self, cond: threading.Condition, deadline_us: int | None) -> None:
        self.cond = cond
        self.deadline_us = deadline_us
        self.thread = threading.current_thread()
        self.woken = False


class FakeClock:
    """A clock that moves only when told to.

    ``advance(seconds)`` moves time forward one deadline at a time (so a task that
    schedules another one shortly after sees the time it expects), wakes every thread
    whose deadline has come, and waits until they have all gone back to waiting and
    every tracked source (a scheduler's running tasks) is idle.

    Threads that wait on a fake clock never time out on their own; a test that blocks
    a task on purpose passes ``wait=False`` to :meth:`advance`.
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = datetime(2030, 1, 1, tzinfo=UTC)
        elif start.tzinfo is None or start.utcoffset() is None:
            raise ValueError(f"FakeClock start must be an aware datetime, got {start!r}")
        self._start_us = to_us(start)
        self._now_us = self._start_us
        self._lock = threading.Condition(threading.Lock())
        self._waiters: dict[int, _Waiter] = {}
        # Threads woken by advance() or kick() that have not come back to wait yet.
        self._woken: dict[int, threading.Thread] = {}
        self._sources: list[BusySource] = []

    # -- reading ---------------------------------------------------------------------
    def now(self) -> datetime:
        return from_us(self._now_us)

    def now_us(self) -> int:
        return self._now_us

    def monotonic(self) -> float:
        return (self._now_us - self._start_us) / 1e6

    # -- waiting ---------------------------------------------------------------------
    def wait(self, cond: threading.Condition, deadline_us: int | None) -> None:
        ident = threading.get_ident()
        with self._lock:
            self._woken.pop(ident, None)
            if deadline_us is not None and deadline_us <= self._now_us:
                self._lock.notify_all()
                return
            waiter = _Waiter(cond, deadline_us)
            self._waiters[ident] = waiter
            self._lock.notify_all()
        try:
            # A long real timeout only guards against a lost wake-up; it is not how
            # time passes here.
            cond.wait(60.0)
        finally:
            with self._lock:
                self._waiters.pop(ident, None)
                if waiter.woken:
                    self._woken[ident] = waiter.thread

    def kick(self, cond: threading.Condition) -> None:
        with self._lock:
            for waiter in self._waiters.values():
                if waiter.cond is cond:
                    self._wake(waiter)
        cond.notify_all()

    def _wake(self, waiter: _Waiter) -> None:
        # Called with self._lock held: the thread counts as busy until it waits again.
        waiter.woken = True
        self._woken[waiter.thread.ident or 0] = waiter.thread

    def track(self, source: BusySource) -> None:
        with self._lock:
            self._sources.append(source)

    def untrack(self, source: BusySource) -> None:
        with self._lock:
            if source in self._sources:
                self._sources.remove(source)

    def settled(self) -> None:
        with self._lock:
            self._lock.notify_all()

    def waiting(self) -> list[datetime]:
        """The deadlines threads wait for on this clock now, earliest first (for tests
        that must move time only once a thread has started waiting)."""
        with self._lock:
            deadlines = [w.deadline_us for w in self._waiters.values()]
        return sorted(from_us(d) for d in deadlines if d is not None)

    # -- moving ----------------------------------------------------------------------
    def advance(self, seconds: float = 0.0, *, wait: bool = True, timeout: float = 10.0) -> None:
        """Move time forward by ``seconds`` and run everything that became due.

        With ``wait`` (the default) it returns once every woken thread is waiting again
        and every tracked source is idle, stepping through each deadline on the way; it
        raises :class:`TimeoutError` if that takes more than ``timeout`` real seconds
        (a task blocked forever, say).
        """
        if not isinstance(seconds, int | float) or math.isnan(seconds) or seconds < 0:
            raise ValueError(f"FakeClock.advance needs seconds >= 0, got {seconds!r}")
        target = self._now_us + round(seconds * 1e6)
        deadline = time.monotonic() + timeout
        while True:
            if wait:
                self._settle(deadline)
            with self._lock:
                due = [
                    w.deadline_us
                    for w in self._waiters.values()
                    if w.deadline_us is not None and w.deadline_us <= target
                ]
                self._now_us = max(self._now_us, min(due)) if due else target
                woken = [
                    w
                    for w in self._waiters.values()
                    if w.deadline_us is not None and w.deadline_us <= self._now_us
                ]
                for w in woken:
                    self._wake(w)
            for w in woken:
                with w.cond:
                    w.cond.notify_all()
            if not due:
                break
        if wait:
            self._settle(deadline)

    def set(self, when: datetime, **kwargs: float | bool) -> None:
        """Advance to ``when`` (which must not be in the fake past)."""
        delta = (to_us(when) - self._now_us) / 1e6
        if delta < 0:
            raise ValueError(f"FakeClock cannot go back from {self.now()} to {when}")
        self.advance(delta, **kwargs)  # type: ignore[arg-type]

    def _busy(self) -> bool:
        for ident, thread in list(self._woken.items()):
            if not thread.is_alive():
                del self._woken[ident]
        if self._woken:
            return True
        return not all(source.idle() for source in self._sources)

    def _settle(self, deadline: float) -> None:
        with self._lock:
            while self._busy():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        "FakeClock.advance: work still running after the timeout "
                        f"(threads awake: {[t.name for t in self._woken.values()]})"
                    )
                self._lock.wait(min(remaining, 0.05))

    def __repr__(self) -> str:
        return f"FakeClock({self.now().isoformat()})"
