"""Running one call of a registered function: the single place that sends the run
signals, times the call and captures what it raised. A node's workers use it for tasks
and schedule runs, and ``manage.py htask run`` for a schedule run by hand.

A worker's call has a :class:`~django_htask.engine.RunGuard`: the call runs with the
guard's token as :func:`~django_htask.engine.current_token`, and a call the node asked
to stop (its timeout, an abort) that then raises — :class:`ForcedStop`, the token's
``TokenCancelled``, an async task's ``CancelledError``, or anything else — ends with
the guard's reason as its error."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import inspect
import logging
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django_htask.current import running_task, set_running_task
from django_htask.engine import (
    CALL_ERRORS,
    CancelToken,
    Clock,
    PayloadError,
    RunGuard,
    decode_call,
    encode_result,
    registry,
)
from django_htask.engine.backoff import RetryPolicy, error_names
from django_htask.engine.codec import DEFAULT_MAX_SIZE
from django_htask.engine.tokens import _set_current
from django_htask.enums import RunStatus
from django_htask.exceptions import Snooze, TooManySnoozes, snoozed_for
from django_htask.signals import run_finished, run_started
from django_htask.store import RunOutcome, StartedTask

__all__ = [
    "RUN_FIELDS",
    "Call",
    "aexecute",
    "call_of",
    "ended_outside",
    "execute",
    "given_up",
    "retry_delay",
    "snooze_delay",
    "task_call",
    "task_ended",
]

logger = logging.getLogger(__name__)


def call_of(payload: bytes) -> tuple[list[Any], dict[str, Any]]:
    """The ``(args, kwargs)`` a stored payload holds (PayloadError if it cannot be
    read)."""
    if not payload:
        return [], {}
    _name, args, kwargs = decode_call(payload)
    return list(args), dict(kwargs)


@dataclass(frozen=True, slots=True)
class Call:
    """One call to make: the registered ``function`` with the arguments ``payload``
    holds, and what its run is (the fields the run signals send)."""

    payload: bytes
    function: str
    name: str
    node: str
    attempt: int
    scheduled_for: datetime | None
    schedule_id: int | None = None
    task_id: int | None = None

    @classmethod
    def of_run(cls, run: RunOutcome, payload: bytes) -> Call:
        """The call of a run row written as it started."""
        return cls(payload, *(getattr(run, name) for name in RUN_FIELDS))

    def __reduce__(self) -> tuple[type[Call], tuple[Any, ...]]:
        # Pickled as its fields (for a worker process): several times faster than the
        # generic state of a frozen dataclass with slots.
        return Call, (self.payload, *(getattr(self, name) for name in RUN_FIELDS))


#: What a run is, as the run signals send it and the run row holds it.
RUN_FIELDS = tuple(f.name for f in dataclasses.fields(Call))[1:]


def task_call(task: StartedTask, node_id: str) -> Call:
    """The call of a task ``node_id`` started (claimed)."""
    function = task.function
    return Call(
        task.payload, function, function, node_id, task.attempts, task.run_at, task_id=task.id
    )


def task_ended(
    task: StartedTask, result: RunOutcome, default: RetryPolicy, max_snoozes: int
) -> RunOutcome:
    """``result``, the end of an attempt of ``task``, made ready to record: when the
    task runs again (its snooze, else its retry by its policy, ``default`` where it
    has none; ``max_snoozes``: the ``MAX_SNOOZES`` setting), and what its end may
    release (its lock or limit, what follows it)."""
    delay = None
    if result.status == RunStatus.SNOOZED:
        most, bound = task.max_snoozes, "its max_snoozes"
        if most is None:
            most, bound = max_snoozes, "MAX_SNOOZES"
        delay = snooze_delay(result, task.snoozes, most, bound)
    if delay is None:
        delay = retry_delay(
            result,
            task.attempts,
            task.max_attempts,
            lambda: task.retry.policy(default.backoff, default.max_delay, default),
        )
    if delay is not None:
        result.retry_at = result.finished_at + timedelta(seconds=delay)
    result.gated = task.gated
    result.follow = task.follow
    return result


def retry_delay(
    result: RunOutcome, attempt: int, max_attempts: int, policy: Callable[[], RetryPolicy]
) -> float | None:
    """The one place a failed attempt of a task or a schedule run is retried or given
    up: the seconds until its retry, or None.

    It is retried when it failed while it ran (``retryable``: not an abort, not a call
    that could not start), ``attempt`` was not the last of ``max_attempts``, and the
    error it raised passes the ``policy``'s ``retry_on`` / ``give_up_on`` (a timeout or
    a lost run raised nothing of its own: only attempts and backoff apply). One the
    filters refuse has the reason added to its error (``not retried: ValueError is in
    give_up_on``). ``policy`` is called only for a failure that may be retried."""
    if result.status != RunStatus.FAILED or not result.extra.get("retryable", False):
        return None  # not run, or stopped on purpose: logged where it ended
    delay = _retry_delay(result, attempt, max_attempts, policy)
    _log_failure(result, attempt, max_attempts, delay)
    return delay


def _retry_delay(
    result: RunOutcome, attempt: int, max_attempts: int, policy: Callable[[], RetryPolicy]
) -> float | None:
    """:func:`retry_delay` of a failure that may be retried."""
    if attempt >= max_attempts:
        return None
    try:
        chosen = policy()
    except (TypeError, ValueError) as exc:  # an exception class gone from the code
        why = f"not retried: its retry policy cannot be used: {exc}"
    else:
        errors = result.extra.get("errors")
        why = chosen.refusal(errors if isinstance(errors, tuple | list) else None)
        if not why:
            return chosen.delay(attempt)
    result.error = f"{result.error}; {why}" if result.error else why
    return None


def _log_failure(result: RunOutcome, attempt: int, most: int, delay: float | None) -> None:
    """Log a failed attempt once its fate is known: a warning when it is retried
    (when, and which attempt comes next), an error when it is not."""
    extra = {"action": "run_failed", "attempt": attempt, "max_attempts": most}
    if delay is not None:
        logger.warning(
            "%s failed: %s; retrying in %s, attempt %d of %d",
            result.name,
            result.error,
            _seconds(delay),
            attempt + 1,
            most,
            extra={**extra, "retry_in": delay},
        )
    else:
        logger.error(
            "%s failed: %s (attempt %d of %d, not retried)",
            result.name,
            result.error,
            attempt,
            most,
            extra=extra,
        )


def _seconds(delay: float) -> str:
    """``delay`` in words: ``1s``, ``2.5s``, ``1m 30s``."""
    if delay < 60:
        return f"{delay:.3g}s"
    minutes, seconds = divmod(round(delay), 60)
    return f"{minutes}m {seconds}s" if seconds else f"{minutes}m"


def snooze_delay(result: RunOutcome, snoozes: int, most: int, bound: str) -> float | None:
    """The one place a snoozed run (``raise Snooze``) of a task or a schedule is let
    wait: the seconds until it runs again, its attempt not counted; or None (a run
    that did not snooze, or may not).

    One that snoozed ``snoozes`` times already may snooze while that is under ``most``
    (``bound``: the setting or option that says so, which its error names). Past it,
    the run fails instead, saying so, and is not retried: the bound is on how long a
    task keeps waiting, and another attempt would fail at its first snooze."""
    if result.status != RunStatus.SNOOZED:
        return None
    asked = result.extra.get("snooze")
    seconds = float(asked) if isinstance(asked, int | float) else 0.0
    if snoozes < most:
        return seconds
    result.status = RunStatus.FAILED
    result.error = (
        f"{TooManySnoozes.__name__}: it asked to snooze {seconds:g}s more after {snoozes} "
        f"snoozes, the most {bound} allows ({most}); not retried"
    )
    result.extra["retryable"] = False
    logger.warning("%s: %s", result.name, result.error, extra={"action": "snoozed_too_often"})
    return None


def execute(
    call: Call,
    *,
    clock: Clock,
    refresh: Callable[[], object] | None = None,
    guard: RunGuard | None = None,
    max_result: int = DEFAULT_MAX_SIZE,
    on_start: Callable[[], object] = lambda: None,
) -> RunOutcome:
    """Make ``call``: the registered function with the arguments it holds; never raises.
    ``on_start`` is called as the run's duration starts counting (the supervisor arms
    the run's timeout there, so that a run stopped by it never lasts less than it).

    Whatever the function raises ends the run failed, ``SystemExit`` and
    ``KeyboardInterrupt`` included (they end only this run, not the process). The run
    is ``retryable`` (in ``extra``) unless it could not start at all (a function not
    registered, a payload or arguments that do not fit), its ``guard`` was stopped
    by an abort, or its result could not be stored. ``refresh`` (a worker's call: the
    node's :class:`~django_htask.store.ThreadConnections`) is called before and after,
    so that the connections the call uses are refreshed as a request's are.

    A task's return value other than None is encoded here, as ``outcome.result``
    (at most ``max_result`` bytes: the ``RESULT_MAX_BYTES`` setting); one that cannot
    be encoded or is too large fails the run, not retried (the function did run). A
    schedule's run keeps no result."""
    if refresh is not None:
        refresh()
    begun = _Begun(call, clock)
    on_start()
    try:
        end = _made(call, guard)
    finally:
        if refresh is not None:
            refresh()
    return begun.outcome(end, guard, max_result)


async def aexecute(
    call: Call,
    *,
    clock: Clock,
    guard: RunGuard,
    max_result: int = DEFAULT_MAX_SIZE,
    on_start: Callable[[], object] = lambda: None,
) -> RunOutcome:
    """:func:`execute` for an ``async def`` function, awaited in the asyncio task that
    awaits this (a call on a node's async lane, :mod:`~django_htask.node.lane`) rather
    than run on a loop of its own. That task must be the call's own, in a context of
    its own: ``guard``'s token, which cancels the task at its next ``await`` (any of
    them), becomes its :func:`~django_htask.engine.current_token`, and the call's task
    id its ``current_task_id()``, for the rest of the task. Never raises (but lets
    ``GeneratorExit`` through: its coroutine closed, it has no outcome)."""
    begun = _Begun(call, clock)
    on_start()
    end = await _amade(call, guard)
    return begun.outcome(end, guard, max_result)


class _Begun:
    """A call begun: ``run_started`` sent, and what its outcome needs of that moment."""

    __slots__ = ("call", "clock", "info", "started_at", "t0")

    def __init__(self, call: Call, clock: Clock) -> None:
        from django_htask.models import Run  # noqa: PLC0415 - the signals' sender

        self.call, self.clock = call, clock
        self.started_at = clock.now()
        self.info: dict[str, Any] = {name: getattr(call, name) for name in RUN_FIELDS}
        run_started.send_robust(sender=Run, **self.info)
        self.t0 = clock.monotonic()

    def outcome(self, end: _Ending, guard: RunGuard | None, max_result: int) -> RunOutcome:
        """The run's outcome once the call ended as ``end`` says (``run_finished`` sent)."""
        call, clock = self.call, self.clock
        if guard is not None and guard.reason is not None:
            _stopped_by(end, guard, call.name)
        result = None
        if end.value is not None and end.status == RunStatus.SUCCEEDED and call.task_id is not None:
            result, end.error = _encoded(call.name, end.value, max_result)
            if end.error:
                end.status, end.retryable = RunStatus.FAILED, False  # it ran: not again
        duration = clock.monotonic() - self.t0
        outcome = _finished(
            call,
            self.info,
            end.status,
            end.error,
            end.tb,
            end.retryable,
            self.started_at,
            clock.now(),
            duration,
            end.errors,
        )
        outcome.result = result
        if end.status == RunStatus.SNOOZED:
            outcome.extra["snooze"] = end.snooze
        return outcome


@dataclass(slots=True)
class _Ending:
    """How a call ended, as :func:`execute` builds its outcome."""

    status: str = RunStatus.SUCCEEDED
    error: str = ""
    tb: str = ""
    retryable: bool = False
    #: The classes of what the function raised (None: it raised nothing of its own).
    errors: tuple[str, ...] | None = None
    #: Whether the function was called (not when its guard stopped it before).
    entered: bool = True
    value: Any = None
    #: The seconds it asked to wait (``raise Snooze``).
    snooze: float | None = None


def _made(call: Call, guard: RunGuard | None) -> _Ending:
    """Bind ``call``'s arguments and call its function (under ``guard``); never raises."""
    end = _Ending()
    try:
        bound = _bound(call, end)
        if bound is None:
            return end
        fn, args, kwargs = bound
        with running_task(call.task_id):
            if guard is None:
                end.value = _call(fn, args, kwargs, None)
            else:
                end.value, end.entered = _guarded(fn, args, kwargs, guard)
    except BaseException as exc:  # a task's SystemExit ends that run only
        _raised(end, exc, call.name)
    return end


async def _amade(call: Call, guard: RunGuard) -> _Ending:
    """:func:`_made` of an ``async def`` function, awaited in this asyncio task."""
    end = _Ending()
    try:
        bound = _bound(call, end)
        if bound is None:
            return end
        fn, args, kwargs = bound
        if guard.stopped:  # before it began: it is not made
            end.entered = False
            return end
        # Set in this task's own context, not reset: the context ends with the task.
        set_running_task(call.task_id)
        _set_current(guard.token)
        task = asyncio.current_task()
        if task is not None:
            _cancel_on(guard.token, task)
        end.value = await fn(*args, **kwargs)
    except GeneratorExit:  # the coroutine itself is closed (its loop went): no outcome
        raise
    except BaseException as exc:
        _raised(end, exc, call.name)
    return end


def _bound(call: Call, end: _Ending) -> tuple[Any, tuple[Any, ...], dict[str, Any]] | None:
    """``call``'s function and its arguments bound; None, ``end`` failed, if the
    function is not registered or the payload or its arguments do not fit."""
    try:
        args, kwargs = call_of(call.payload)
        return registry.bind(call.function, args, kwargs)
    except CALL_ERRORS as exc:
        end.status, end.error = RunStatus.FAILED, f"{type(exc).__name__}: {exc}"
        logger.error("%s cannot run: %s", call.name, end.error, extra={"action": "run_unrunnable"})
        return None


def _raised(end: _Ending, exc: BaseException, name: str) -> None:
    """``end`` as the function raised ``exc`` (called where it is caught)."""
    if isinstance(exc, Snooze):  # not a failure: it runs again later (snooze_delay decides)
        end.status, end.snooze = RunStatus.SNOOZED, exc.seconds
        end.error = snoozed_for(exc.seconds)
        logger.info("%s %s", name, end.error, extra={"action": "run_snoozed"})
        return
    end.status, end.retryable = RunStatus.FAILED, True
    end.error = f"{type(exc).__name__}: {exc}"
    end.errors = error_names(type(exc))
    end.tb = traceback.format_exc()
    # Logged by retry_delay, which says whether it is retried.


def _stopped_by(end: _Ending, guard: RunGuard, name: str) -> None:
    """A call its guard asked to stop that then raised, or that never began, ends with
    the guard's reason (what it raised then is not its own error)."""
    if end.status == RunStatus.SUCCEEDED and end.entered:
        return  # it returned before it saw the request
    end.status, end.error, end.retryable = RunStatus.FAILED, guard.reason or "", guard.retryable
    end.errors = None
    if not end.retryable:  # an abort; a timeout is retried, and retry_delay logs it
        logger.warning("%s stopped: %s", name, end.error, extra={"action": "run_stopped"})


def _guarded(fn: Any, args: Any, kwargs: dict[str, Any], guard: RunGuard) -> tuple[Any, bool]:
    """Call ``fn`` under ``guard``, its token the current one: what it returned, and
    whether it was called (not when the guard was stopped before it began)."""
    previous = _set_current(guard.token)
    try:
        if not guard.enter():
            return None, False
        try:
            return _call(fn, args, kwargs, guard.token), True
        finally:
            guard.leave()
    finally:
        _set_current(previous)


def _encoded(name: str, value: Any, max_result: int) -> tuple[bytes | None, str]:
    """A task's return value encoded, or the error that fails its run: it cannot be
    encoded, or it is over ``max_result`` bytes."""
    try:
        return encode_result(value, max_size=max_result), ""
    except PayloadError as exc:
        error = (
            f"ResultNotStored: {exc} (RESULT_MAX_BYTES is {max_result}); the function ran, "
            "so the task is not retried"
        )
        logger.error("%s: %s", name, error, extra={"action": "result_not_stored"})
        return None, error


def given_up(
    call: Call, started_at: datetime, reason: str, retryable: bool, clock: Clock
) -> RunOutcome:
    """The outcome of a call whose worker was given up: it did not return within the
    grace after it was forced to stop (stuck in C, or it swallowed the exception)."""
    error = f"{reason}; it did not stop when forced, and its worker thread was given up"
    return ended_outside(call, started_at, error, retryable, clock)


def ended_outside(
    call: Call, started_at: datetime, error: str, retryable: bool, clock: Clock
) -> RunOutcome:
    """The failed outcome of a call that ended without returning one: its worker was
    given up, its worker process died, or it was stopped before it began."""
    info: dict[str, Any] = {name: getattr(call, name) for name in RUN_FIELDS}
    now = clock.now()
    duration = (now - started_at).total_seconds()
    return _finished(call, info, RunStatus.FAILED, error, "", retryable, started_at, now, duration)


def _finished(
    call: Call,
    info: dict[str, Any],
    status: str,
    error: str,
    tb: str,
    retryable: bool,
    started_at: datetime,
    finished_at: datetime,
    duration: float,
    errors: tuple[str, ...] | None = None,
) -> RunOutcome:
    """Send ``run_finished`` and build the run's outcome (``extra``: whether it may be
    retried, and the class names of what the function raised, if it raised: they cross
    from a worker process as they are)."""
    from django_htask.models import Run  # noqa: PLC0415 - the signals' sender

    ended: dict[str, Any] = {"status": status, "error": error, "duration": duration}
    run_finished.send_robust(sender=Run, **ended, **info)
    retry: dict[str, object] = {"retryable": retryable}
    if errors is not None:
        retry["errors"] = errors
    return RunOutcome(
        started_at=started_at, finished_at=finished_at, traceback=tb, extra=retry, **ended, **info
    )


def _call(fn: Any, args: Any, kwargs: dict[str, Any], token: CancelToken | None) -> Any:
    """Call ``fn`` and return what it returns; an async one on this thread's event loop
    (:func:`_run_async`), cancelled at its next ``await`` when ``token`` is."""
    if not inspect.iscoroutinefunction(fn):
        return fn(*args, **kwargs)
    return _run_async(fn(*args, **kwargs), token)


class _Loop:
    """A thread's event loop for the async calls it makes (:func:`_run_async`), closed
    when the thread ends (its thread-local value is dropped then).

    It keeps the tasks made on it that have not ended (its task factory), so that what
    a call left running is found without :func:`asyncio.all_tasks`, which goes through
    every task of every thread's loop."""

    __slots__ = ("loop", "pending")

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        pending: set[asyncio.Task[Any]] = set()
        self.pending = pending

        # Not a method: the loop would hold the _Loop through it, and the two would be
        # freed by the garbage collector, in any order, instead of as the thread ends:
        # the loop's own finalizer first, it warns that it was not closed.
        def task(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
            made = asyncio.Task(coro, loop=loop, **kwargs)
            pending.add(made)
            made.add_done_callback(pending.discard)
            return made

        self.loop.set_task_factory(task)
        # As asyncio.Runner does: asyncio.get_event_loop() in the call finds this loop.
        asyncio.set_event_loop(self.loop)

    def run(self, coro: Any, token: CancelToken | None) -> Any:
        """Run ``coro`` to its end, in a copy of the caller's context; then cancel what
        it left running and let that end, as :func:`asyncio.run` does."""
        loop = self.loop
        task = loop.create_task(coro, context=contextvars.copy_context())
        if token is not None:
            _cancel_on(token, task)
        value = loop.run_until_complete(task)
        self._cancel_pending()
        return value

    def _cancel_pending(self) -> None:
        """Cancel the tasks made on the loop that have not ended, and let them end."""
        left = [task for task in self.pending if not task.done()]
        if not left:
            return
        for task in left:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))

    def close(self) -> None:
        """What :func:`asyncio.run` does as it ends: the tasks still going cancelled, the
        async generators and the default executor shut down, the loop closed."""
        loop = self.loop
        if loop.is_closed():
            return
        with contextlib.suppress(Exception):  # a loop interrupted by force, or at exit
            self._cancel_pending()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        with contextlib.suppress(Exception):
            loop.close()

    def __del__(self) -> None:
        self.close()


def _cancel_on(token: CancelToken, task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` (at its next ``await``) when ``token`` is cancelled, from whatever
    thread cancels it."""
    loop = task.get_loop()

    def cancel(_token: CancelToken) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(task.cancel)

    token.on_cancel(cancel)


class _ThreadLoop(threading.local):
    loop: _Loop | None = None


_loops = _ThreadLoop()


def _run_async(coro: Any, token: CancelToken | None = None) -> Any:
    """Run ``coro`` to its end on this thread's event loop, as :func:`asyncio.run` does
    on a loop of its own: in a copy of the caller's context, and what it left running is
    cancelled as it ends; cancelled at its next ``await`` when ``token`` is. The loop is
    kept for the thread's next call, since making and closing one costs more than a
    trivial task's whole run; a call that raised drops it (one stopped by force may have
    been interrupted in the loop's own code), so that the next call gets a loop that is
    whole."""
    loop = _loops.loop
    if loop is None:
        loop = _loops.loop = _Loop()
    try:
        return loop.run(coro, token)
    except BaseException:
        _loops.loop = None
        loop.close()
        asyncio.set_event_loop(None)
        raise
