"""The control thread and what every part of the node uses on it.

A node makes every decision against the database on one thread, in order (see
:mod:`django_htask.node`). :class:`ControlThread` wraps that thread's engine
scheduler: it runs a call later, runs a call once however often it is asked for
(:class:`Once`), retries after a growing delay while the database is away
(:class:`DatabaseBackoff`), and handles what can go wrong in a step (:meth:`ControlThread.guarded`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from django_htask.engine import Clock, SchedulerClosed, TimerHandle
from django_htask.engine import Scheduler as EngineScheduler
from django_htask.exceptions import NodeFenced, StartAborted, StoreUnavailable
from django_htask.retry import Backoff, RetryPolicy

__all__ = ["ControlThread", "DatabaseBackoff", "Once", "database_lost", "deadlock_retried"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How often a step is tried at once when each try is a deadlock's victim.
DEADLOCK_TRIES = 3


def deadlock_retried(fn: Callable[[], T], what: str) -> T:
    """Call ``fn`` (one transaction of the node's), again at once while the database
    makes it a deadlock's victim (rolled back: it wrote nothing), :data:`DEADLOCK_TRIES`
    tries in all. Backing off would hold up for a whole delay a step that another try
    most likely passes: a heartbeat late to the other nodes, a task's end unwritten."""
    tries_left = DEADLOCK_TRIES
    while True:
        try:
            return fn()
        except StoreUnavailable as exc:
            tries_left -= 1
            if not (exc.deadlock and tries_left):
                raise
            logger.info(
                "the node's %s was a deadlock's victim (%s): trying again at once",
                what,
                exc.reason,
                extra={"action": "deadlock_retried", "step": what},
            )


def database_lost(
    exc: StoreUnavailable,
    retry_in: float,
    close: Callable[[], object],
    level: int = logging.WARNING,
) -> None:
    """Say the database is away (retrying in ``retry_in`` seconds), naming the driver's
    error (the store's error's cause), and drop this thread's connection (``close``):
    the next query opens another."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    logger.log(
        level,
        "database unavailable (%s: %s), retrying in %.1fs",
        type(cause).__name__,
        cause,
        retry_in,
        extra={"action": "db_unavailable"},
    )
    with contextlib.suppress(StoreUnavailable):
        close()


class DatabaseBackoff:
    """Waits while the database is away: each failure waits longer (the one formula,
    :class:`~django_htask.retry.RetryPolicy`, from ``first`` up to ``most``), a success
    starts over. It logs the database going away and coming back.

    A failure is logged as a warning once per delay announced: the node's steps that
    fail meanwhile (each schedule due, each claim: hundreds a second) are logged at
    DEBUG, so that an outage reads as a few lines, each with the next delay."""

    __slots__ = ("_close", "_failures", "_lost_at", "_monotonic", "_quiet_until")

    def __init__(
        self,
        first: float,
        most: float,
        close: Callable[[], object],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._failures = Backoff(RetryPolicy(first, most))
        self._close = close
        self._monotonic = monotonic
        #: Until when (``monotonic()``) further failures are logged at DEBUG.
        self._quiet_until: float | None = None
        #: When (``monotonic()``) the database was last found away.
        self._lost_at: float | None = None

    @property
    def delay(self) -> float:
        """The seconds the last failure waits (0 while the database answers)."""
        return self._failures.delay

    def failed(self, exc: StoreUnavailable) -> float:
        """Count a failure; return the seconds to wait before trying again."""
        delay = self._failures.failed()
        self.lost(exc, delay)
        return delay

    def lost(self, exc: StoreUnavailable, retry_in: float) -> None:
        """Say the database is away (a warning, unless one was logged less than its
        delay ago) and drop this thread's connection."""
        now = self._lost_at = self._monotonic()
        quiet = self._quiet_until is not None and now < self._quiet_until
        if not quiet:
            self._quiet_until = now + retry_in
        database_lost(exc, retry_in, self._close, logging.DEBUG if quiet else logging.WARNING)

    def lost_within(self, seconds: float) -> bool:
        """Whether the database was found away in the last ``seconds``."""
        return self._lost_at is not None and self._monotonic() - self._lost_at < seconds

    def succeeded(self) -> None:
        self._quiet_until = None
        if self._failures.succeeded():
            logger.info("database back", extra={"action": "db_back"})

    def retrying(self, fn: Callable[[], T], stopped: Callable[[], bool], who: str) -> T:
        """Call ``fn`` (a start-up step, before the control thread runs) until the
        database answers, sleeping this thread through the delays; once ``stopped()``
        says so, give up with :class:`StartAborted` (``who`` names the node)."""
        while True:
            try:
                return fn()
            except StoreUnavailable as exc:
                if stopped():
                    raise StartAborted(f"{who}: stopped before it started") from exc
                delay = self.failed(exc)
                deadline = time.monotonic() + delay
                while not stopped() and time.monotonic() < deadline:
                    time.sleep(min(0.05, delay))


class ControlThread:
    """The node's control thread (one engine scheduler with one worker)."""

    def __init__(
        self,
        name: str,
        clock: Clock,
        backoff: DatabaseBackoff,
        on_fenced: Callable[[NodeFenced], None],
        on_thread_exit: Callable[[], object],
    ) -> None:
        self.scheduler = EngineScheduler(
            1, clock=clock, name=f"{name}-control", on_thread_exit=on_thread_exit
        )
        self.backoff = backoff
        self._on_fenced = on_fenced
        self.closing = False
        self._fired = -1  # the calls started, at the last look of stuck_for()
        self._progress = 0.0  # when (clock.monotonic()) that count last moved
        self._clock = clock

    def later(self, delay: float, fn: Callable[..., object], *args: Any) -> bool:
        """Run ``fn(*args)`` on the thread after ``delay`` seconds; False if it is
        closing."""
        if self.closing:
            return False
        try:
            self.scheduler.call_later(delay, fn, *args)
        except SchedulerClosed:
            return False
        return True

    def at(self, when: datetime, fn: Callable[..., object], *args: Any) -> TimerHandle | None:
        """A timer for ``fn(*args)`` at ``when`` (None if the thread is closing)."""
        if self.closing:
            return None
        try:
            return self.scheduler.call_at(when, fn, *args)
        except SchedulerClosed:
            return None

    def once(self, fn: Callable[[], None]) -> Once:
        return Once(self, fn)

    def guarded(self, fn: Callable[[], object], what: str, retry: Once | None = None) -> bool:
        """Call ``fn`` (a step of this thread) and handle what can go wrong (see
        :meth:`attempt`). Return whether it succeeded."""

        def step() -> bool:
            fn()
            return True

        return self.attempt(step, what, retry) is not None

    def attempt(self, fn: Callable[[], T], what: str, retry: Once | None = None) -> T | None:
        """Call ``fn`` (a step of this thread) and return its value (never None), or
        None if it failed: a deadlock's victim (tried again at once, see
        :func:`deadlock_retried`), the database away (back off; ``retry`` is asked for again
        after the delay), this node declared dead (it stops), anything else (logged with
        its traceback, never silent)."""
        try:
            value = deadlock_retried(fn, what)
        except NodeFenced as exc:
            self._on_fenced(exc)
        except StoreUnavailable as exc:
            delay = self.backoff.failed(exc)
            if retry is not None:
                retry.request(delay)
        except Exception:
            logger.exception(
                "unexpected error in the node's %s", what, extra={"action": "node_error"}
            )
        else:
            self.backoff.succeeded()
            return value
        return None

    def stuck_for(self) -> float:
        """For how long the thread has been inside one call while work waits (0 when it
        is idle or has started another call since the last look)."""
        now = self._clock.monotonic()
        fired = self.scheduler.stats()["fired"]
        if self.scheduler.idle() or fired != self._fired:
            self._fired = fired
            self._progress = now
            return 0.0
        return now - self._progress

    def close(self, timeout: float | None = None, *, wait: bool = True) -> None:
        """Take no more work; with ``wait``, let the call in progress end."""
        self.closing = True
        self.scheduler.close(wait=wait, timeout=timeout)


class Once:
    """Run ``fn`` on the control thread, once however often it is asked for before it
    runs (a wake-up, a dispatch)."""

    __slots__ = ("_control", "_fn", "_lock", "_queued")

    def __init__(self, control: ControlThread, fn: Callable[[], None]) -> None:
        self._control = control
        self._fn = fn
        self._lock = threading.Lock()
        self._queued = False

    def request(self, delay: float = 0.0) -> None:
        with self._lock:
            if self._queued:
                return
            self._queued = True
        if not self._control.later(delay, self._run):
            with self._lock:
                self._queued = False

    def _run(self) -> None:
        with self._lock:
            self._queued = False
        self._fn()
