"""Job wrappers: middleware around a job, as in robfig/cron v3.

A job is a callable taking no arguments. A wrapper takes a job and returns a job;
:func:`chain` composes them so that ``chain(a, b)(job) == a(b(job))`` (``a`` is the
outermost). The :class:`~django_htask.engine.Cron` runner wraps each entry's job once
when it is added, so state such as "still running" is per entry.

* :func:`recover` logs an exception and counts it; it never propagates (on by default).
* :func:`skip_if_still_running` skips a run while the previous one is still running.
* :func:`delay_if_still_running` waits for the previous run to finish.
* :func:`timeout` cancels the run's :class:`CancelToken` after ``seconds`` (cooperative:
  the job checks ``current_token()``) and reports the run as failed if it overran.
* :func:`retry` runs a failed job again, ``times`` more times, waiting ``backoff``
  seconds, doubling each time (on the runner's clock, so tests need no sleep).
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from .backoff import RetryPolicy
from .clock import SystemClock
from .errors import HtaskError, SchedulerClosed, TokenCancelled
from .interfaces import Clock
from .tokens import CancelToken, _set_current, current_token

if TYPE_CHECKING:
    from .scheduler import Scheduler

__all__ = [
    "Job",
    "JobSkipped",
    "RunContext",
    "Wrapper",
    "chain",
    "current_run",
    "delay_if_still_running",
    "recover",
    "retry",
    "skip_if_still_running",
    "timeout",
]

logger = logging.getLogger(__name__)

Job = Callable[[], object]
Wrapper = Callable[[Job], Job]


class JobSkipped(HtaskError, RuntimeError):
    """Raised by a wrapper to say that this run does not happen (and why)."""


@dataclass(slots=True)
class RunContext:
    """What a running job (and its wrappers) can know about the run."""

    entry_id: int | None
    name: str
    scheduled: datetime
    clock: Clock
    scheduler: Scheduler | None = None
    errors: list[BaseException] = field(default_factory=list)
    attempts: int = 0


_current: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "htask_run", default=None
)


def current_run() -> RunContext | None:
    """The context of the run in progress in this thread (inside a Cron job)."""
    return _current.get()


def _clock() -> Clock:
    run = _current.get()
    return run.clock if run is not None else SystemClock()


def _job_name(job: Job) -> str:
    run = _current.get()
    if run is not None:
        return run.name
    return str(getattr(job, "__qualname__", None) or job)


def chain(*wrappers: Wrapper) -> Wrapper:
    """Compose wrappers: ``chain(a, b)(job) == a(b(job))``."""
    for wrapper in wrappers:
        if not callable(wrapper):
            raise TypeError(f"a wrapper must be callable, got {wrapper!r}")

    def wrap(job: Job) -> Job:
        for wrapper in reversed(wrappers):
            job = wrapper(job)
        return job

    return wrap


class _Recover:
    """The wrapper made by :func:`recover`; ``failures`` counts what it caught."""

    def __init__(self) -> None:
        self.failures = 0
        self._lock = threading.Lock()

    def __call__(self, job: Job) -> Job:
        def recovered() -> None:
            try:
                job()
            except JobSkipped:
                raise
            except Exception as exc:
                with self._lock:
                    self.failures += 1
                run = _current.get()
                if run is not None:
                    run.errors.append(exc)
                logger.exception(
                    "job %s failed: %s",
                    _job_name(job),
                    exc,
                    extra={"action": "job_failed"},
                )

        return recovered


def recover() -> _Recover:
    """Log and count an exception; never let it propagate (robfig's ``Recover``)."""
    return _Recover()


def skip_if_still_running() -> Wrapper:
    """Skip a run (``JobSkipped``) while the previous run of the same job is running."""

    def wrap(job: Job) -> Job:
        lock = threading.Lock()

        def skipping() -> object:
            if not lock.acquire(blocking=False):
                logger.info(
                    "job %s skipped: still running",
                    _job_name(job),
                    extra={"action": "job_skipped"},
                )
                raise JobSkipped("the previous run is still running")
            try:
                return job()
            finally:
                lock.release()

        return skipping

    return wrap


def delay_if_still_running() -> Wrapper:
    """Run after the previous run of the same job has finished (runs are serialised)."""

    def wrap(job: Job) -> Job:
        lock = threading.Lock()

        def delaying() -> object:
            if not lock.acquire(blocking=False):
                clock = _clock()
                began = clock.monotonic()
                lock.acquire()
                waited = clock.monotonic() - began
                logger.info(
                    "job %s delayed %.3fs: the previous run was still running",
                    _job_name(job),
                    waited,
                    extra={"action": "job_delayed"},
                )
            try:
                return job()
            finally:
                lock.release()

        return delaying

    return wrap


def _check_seconds(value: object, what: str, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        need = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{what} must be a finite number of seconds {need}, got {value!r}")
    return float(value)


def timeout(seconds: float) -> Wrapper:
    """Cancel the run's token after ``seconds``; a run that overran counts as failed.

    Cooperative: the job polls ``current_token()`` (``cancelled`` or
    ``raise_if_cancelled()``). Inside a Cron runner the deadline is a timer on its
    scheduler (so a fake clock drives it); elsewhere a ``threading.Timer``.
    """
    limit = _check_seconds(seconds, "timeout")

    def wrap(job: Job) -> Job:
        def timed() -> object:
            token = CancelToken()
            outer = current_token()
            if outer is not None:
                outer.on_cancel(lambda _t: token.cancel(outer.reason))
            run = _current.get()
            cancel_timer: Callable[[], object]
            handle = None
            if run is not None and run.scheduler is not None:
                try:
                    handle = run.scheduler.call_later(limit, token.cancel, "timeout")
                except SchedulerClosed:  # the runner is stopping: a real timer
                    handle = None
            if handle is not None:
                cancel_timer = handle.cancel
            else:
                timer = threading.Timer(limit, token.cancel, ("timeout",))
                timer.daemon = True
                timer.start()
                cancel_timer = timer.cancel
            previous = _set_current(token)
            try:
                result = job()
            except TokenCancelled:
                if token.reason == "timeout":
                    raise TimeoutError(f"job {_job_name(job)} ran past {limit:g}s") from None
                raise
            finally:
                _set_current(previous)
                cancel_timer()
            if token.cancelled and token.reason == "timeout":
                raise TimeoutError(f"job {_job_name(job)} ran past {limit:g}s")
            return result

        return timed

    return wrap


def retry(times: int, backoff: float = 1.0, max_delay: float = math.inf) -> Wrapper:
    """Run a failing job again up to ``times`` more times.

    Waits ``backoff`` seconds before the first retry, doubling each time up to
    ``max_delay`` (:class:`~django_htask.engine.backoff.RetryPolicy`), on the runner's
    clock. Stops early if the run's token is cancelled. The last failure propagates (to
    :func:`recover`, say).
    """
    if isinstance(times, bool) or not isinstance(times, int) or times < 0:
        raise ValueError(f"times must be a whole number >= 0, got {times!r}")
    policy = RetryPolicy(_check_seconds(backoff, "backoff", allow_zero=True), max_delay)

    def wrap(job: Job) -> Job:
        def retrying() -> object:
            attempt = 0
            while True:
                run = _current.get()
                if run is not None:
                    run.attempts = attempt + 1
                try:
                    return job()
                except JobSkipped:
                    raise
                except Exception as exc:
                    token = current_token()
                    if attempt >= times or (token is not None and token.cancelled):
                        raise
                    attempt += 1
                    delay = policy.delay(attempt)
                    logger.warning(
                        "job %s failed (%s); retry %d of %d in %gs",
                        _job_name(job),
                        exc,
                        attempt,
                        times,
                        delay,
                        extra={"action": "job_retry"},
                    )
                    _wait(delay)

        return retrying

    return wrap


def _wait(seconds: float) -> None:
    """Wait ``seconds`` on the run's clock (a fake clock wakes us when advanced)."""
    if seconds <= 0:
        return
    clock = _clock()
    deadline = clock.now_us() + round(seconds * 1_000_000)
    cond = threading.Condition()
    token = current_token()
    with cond:
        if token is not None:
            token.on_cancel(lambda _t: _notify(cond, clock))
        while clock.now_us() < deadline and not (token is not None and token.cancelled):
            clock.wait(cond, deadline)


def _notify(cond: threading.Condition, clock: Clock) -> None:
    with cond:
        clock.kick(cond)
