"""``@task`` and ``@periodic``: register functions, declare code-defined schedules.

::

    from django_htask import periodic, task

    @task
    def send_reminder(reminder_id: int) -> None: ...

    @periodic("@every 5m")
    def refresh_feeds() -> None: ...

    @periodic("30 4 * * *", tz="Asia/Tokyo", overlap="skip", max_attempts=3)
    def nightly_report() -> None: ...

Both decorators return the function unchanged. ``@periodic`` checks its schedule and
arguments when the module is imported (a typo shows at start-up, not at 3 a.m.), and
records a declaration it cannot read instead of raising, so that importing the module
never fails: the site serves, and the system check ``django_htask.E008`` reports it,
naming the function, its file and line and the error (the commands that run the
checks, ``runscheduler``, ``migrate`` and ``runserver`` included, stop with it instead
of a traceback). The declared schedules reach the database with
:func:`sync_schedules`, which ``runscheduler`` runs at start and ``manage.py htask
sync`` runs on demand.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar, overload

from django.apps import apps
from django.conf import settings
from django.db import transaction

from django_htask.engine import (
    FunctionNotRegistered,
    HtaskError,
    InvalidSchedule,
    encode_call,
    parse_schedule,
    registry,
)
from django_htask.engine.errors import short_repr
from django_htask.engine.registry import default_name

from . import notices
from .db import scheduler_alias
from .keys import check_lock
from .models import (
    GRACE_RANGE,
    MAX_ATTEMPTS_RANGE,
    MAX_RUNNING_RANGE,
    RETRY_BACKOFF_RANGE,
    RETRY_CAP_RANGE,
    TIMEOUT_RANGE,
    CatchUp,
    Origin,
    Overlap,
    Schedule,
)
from .queues import DEFAULT_QUEUE
from .queues import check_name as check_queue
from .retry import NAMES_MAX, RetryPolicy, attempts_of, policy_columns

__all__ = [
    "BadDeclaration",
    "PeriodicSpec",
    "SyncResult",
    "bad_declarations",
    "check_max_running",
    "check_policy",
    "check_timeout",
    "declared_schedules",
    "function_name",
    "periodic",
    "sync_schedules",
    "task",
    "task_lock",
    "task_max_running",
    "task_policy",
    "task_timeout",
]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
V = TypeVar("V")

#: The attribute ``@task`` / ``@periodic`` set on a function: its registered name.
NAME_ATTRIBUTE = "htask_name"


@dataclass(frozen=True)
class PeriodicSpec:
    """A schedule declared in code with ``@periodic``."""

    name: str
    function: str
    schedule: str
    timezone: str | None
    overlap: str
    catch_up: str
    grace: float | None
    max_attempts: int
    retry_backoff: float
    args: tuple[Any, ...] = ()
    queue_name: str = DEFAULT_QUEUE
    kwargs: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    retry: RetryPolicy | None = None  # its columns beside max_attempts and retry_backoff


@dataclass(frozen=True)
class BadDeclaration:
    """An ``@periodic`` declaration that cannot be read, recorded instead of raised."""

    #: The decorated function, ``module.qualname``.
    function: str
    #: Where it is declared: ``file:line`` of its first decorator.
    place: str
    #: What ``@periodic`` was given (``repr`` of the schedule).
    when: str
    #: What is wrong with it.
    error: Exception

    def __str__(self) -> str:
        return f"@periodic({self.when}) at {self.place}: {type(self.error).__name__}: {self.error}"


#: What a declaration that cannot be read raises (and ``@periodic`` records).
_DECLARATION_ERRORS = (HtaskError, ValueError, TypeError)

_lock = threading.Lock()
_declared: dict[str, PeriodicSpec] = {}
_bad: dict[tuple[str, str], BadDeclaration] = {}
#: ``@task(timeout=...)``: registered name -> seconds, what ``schedule()`` stores.
_timeouts: dict[str, float] = {}
#: ``@task(retry=...)``: registered name -> policy, what ``schedule()`` stores.
_policies: dict[str, RetryPolicy] = {}
#: ``@task(lock=...)``: registered name -> lock, what ``schedule()`` stores.
_locks: dict[str, str] = {}
#: ``@task(max_running=...)``: registered name -> limit, what ``schedule()`` stores.
_limits: dict[str, int] = {}


def check_timeout(timeout: object) -> float:
    """``timeout`` in seconds, checked (a ValueError naming it when out of range)."""
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ValueError(f"timeout must be seconds or a timedelta, got {timeout!r}")
    TIMEOUT_RANGE.check(timeout)
    return float(timeout)


def check_policy(value: object) -> RetryPolicy:
    """``retry=`` as ``schedule()``, ``@task`` and ``@periodic`` take it: a
    :class:`RetryPolicy` whose numbers fit the columns that store it (raises naming
    the bad value)."""
    if not isinstance(value, RetryPolicy):
        raise TypeError(f"retry must be a RetryPolicy, got {value!r}")
    RETRY_BACKOFF_RANGE.check(value.backoff)
    if math.isfinite(value.max_delay):
        RETRY_CAP_RANGE.check(value.max_delay)
    if value.attempts is not None:
        MAX_ATTEMPTS_RANGE.check(value.attempts)
    for name in ("retry_on", "give_up_on"):
        text = ", ".join(getattr(value, name))
        if len(text) > NAMES_MAX:
            raise ValueError(
                f"{name} must fit in {NAMES_MAX} characters as dotted paths, got {text!r}"
            )
    return value


def check_max_running(value: object) -> int:
    """``max_running=`` as ``@task`` and ``schedule()`` take it: an int from 1 to
    ``MAX_RUNNING_MAX`` (a ValueError naming the value otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"max_running must be an int >= 1, got {value!r}")
    MAX_RUNNING_RANGE.check(value)
    return value


def task_lock(name: str) -> str | None:
    """The lock ``@task(lock=...)`` declared for the function registered as ``name``,
    if any."""
    return _locks.get(name)


def task_max_running(name: str) -> int | None:
    """The limit ``@task(max_running=...)`` declared for the function registered as
    ``name``, if any."""
    return _limits.get(name)


def task_timeout(name: str) -> float | None:
    """The timeout ``@task(timeout=...)`` declared for the function registered as
    ``name``, if any."""
    return _timeouts.get(name)


def task_policy(name: str) -> RetryPolicy | None:
    """The retry policy ``@task(retry=...)`` declared for the function registered as
    ``name``, if any."""
    return _policies.get(name)


def declared_schedules() -> dict[str, PeriodicSpec]:
    """The schedules declared with ``@periodic`` so far, by schedule name."""
    with _lock:
        return dict(_declared)


def bad_declarations() -> list[BadDeclaration]:
    """The ``@periodic`` declarations that could not be read, in the order seen."""
    with _lock:
        return list(_bad.values())


def _record_bad(fn: Callable[..., Any], when: object, error: Exception) -> None:
    code = getattr(fn, "__code__", None)
    place = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "?"
    what = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    bad = BadDeclaration(what, place, short_repr(when), error)
    with _lock:
        _bad[(bad.function, bad.place)] = bad


def _register(fn: Callable[..., Any], name: str | None) -> str:
    registry.register(fn, name=name)
    registered = name or default_name(fn)
    # Builtins and bound methods take no attribute: they are looked up by name.
    with contextlib.suppress(AttributeError, TypeError):
        setattr(fn, NAME_ATTRIBUTE, registered)
    return registered


def function_name(fn_or_name: Callable[..., Any] | str) -> str:
    """The registered name of a function (or a name, checked to be registered).

    ``FunctionNotRegistered`` names the function and says how to fix it: decorate it
    with ``@task`` in the module every process imports at start, its app's ``tasks``.
    """
    if isinstance(fn_or_name, str):
        if fn_or_name not in registry:
            module = fn_or_name.partition(":")[0] if ":" in fn_or_name else None
            raise _not_registered(f"no function is registered as {fn_or_name!r}", module)
        return fn_or_name
    if not callable(fn_or_name):
        raise TypeError(f"expected a registered function or its name, got {fn_or_name!r}")
    name = getattr(fn_or_name, NAME_ATTRIBUTE, None)
    if isinstance(name, str):
        return name
    try:
        return registry.name_of(fn_or_name)
    except FunctionNotRegistered:
        module = getattr(fn_or_name, "__module__", None)
        qualname = getattr(fn_or_name, "__qualname__", None)
        what = f"{module}.{qualname}" if module and qualname else repr(fn_or_name)
        raise _not_registered(f"{what} is not registered", module) from None


def _not_registered(problem: str, module: str | None) -> FunctionNotRegistered:
    """``problem`` and the fix: ``@task`` in the tasks module of ``module``'s app, which
    ``runscheduler`` imports at start (a function registered only in a view's module
    is unknown to the scheduler's process)."""
    app = apps.get_containing_app_config(module) if module and apps.apps_ready else None
    where = f"{app.name}.tasks" if app else "<app>.tasks, the tasks module of an installed app"
    return FunctionNotRegistered(
        f"{problem}: decorate it with @task, in a module that is imported at start: {where}"
    )


@overload
def task(fn: F, /) -> F: ...
@overload
def task(
    *,
    name: str | None = None,
    timeout: float | timedelta | None = None,
    retry: RetryPolicy | None = None,
    lock: str | None = None,
    max_running: int | None = None,
) -> Callable[[F], F]: ...
def task(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    timeout: float | timedelta | None = None,
    retry: RetryPolicy | None = None,
    lock: str | None = None,
    max_running: int | None = None,
) -> F | Callable[[F], F]:
    """Register ``fn`` so that :func:`django_htask.schedule` can run it later.

    Its name is ``package.module:qualname`` unless ``name`` is given. ``timeout``:
    seconds a run of it may take, stored on each task ``schedule()`` makes without a
    timeout of its own (docs/timeouts.md). ``retry``: its
    :class:`~django_htask.retry.RetryPolicy`, stored on each task ``schedule()`` makes
    without a policy of its own (docs/retries.md). ``lock``: tasks sharing a lock never
    run at the same time on any node; stored on each task ``schedule()`` makes without
    a lock of its own. ``max_running``: at most this many tasks of the function run at
    once across the nodes; stored on each task ``schedule()`` makes, so a changed
    limit applies to the tasks queued after the change (docs/howto-exactly-one.md).
    """
    seconds = None if timeout is None else check_timeout(timeout)
    policy = None if retry is None else check_policy(retry)
    lock_name = None if lock is None else check_lock(lock)
    limit = None if max_running is None else check_max_running(max_running)

    def decorate(f: F) -> F:
        registered = _register(f, name)
        with _lock:
            _declare_option(_timeouts, registered, seconds)
            _declare_option(_policies, registered, policy)
            _declare_option(_locks, registered, lock_name)
            _declare_option(_limits, registered, limit)
        return f

    return decorate if fn is None else decorate(fn)


def _declare_option(declared: dict[str, V], name: str, value: V | None) -> None:
    """What ``@task`` declares for ``name``: ``value``, or nothing (a function
    decorated again without it)."""
    if value is None:
        declared.pop(name, None)
    else:
        declared[name] = value


def periodic(
    when: object,
    *,
    tz: str | None = None,
    name: str | None = None,
    function_name: str | None = None,
    overlap: str = Overlap.SKIP,
    catch_up: str = CatchUp.LATEST,
    grace: float | None = None,
    max_attempts: int | None = None,
    retry_backoff: float | None = None,
    timeout: float | timedelta | None = None,
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    queue_name: str = DEFAULT_QUEUE,
    retry: RetryPolicy | None = None,
) -> Callable[[F], F]:
    """Register the function and declare a schedule for it.

    ``when`` is anything ``parse_schedule`` reads (``"@every 5m"``, ``"30 4 * * *"``,
    ``"@daily"``) or a schedule value (``every().day.at("10:30")``). ``name`` names
    the schedule (default: the function's registered name); ``function_name``
    registers the function under another name. ``args`` / ``kwargs`` are passed at
    every run and checked against the signature now. Only the nodes serving
    ``queue_name`` fire it (``runscheduler --queue``). ``timeout``: seconds a run may
    take before it is stopped (docs/timeouts.md). ``retry``: a
    :class:`~django_htask.retry.RetryPolicy` (docs/retries.md); without one,
    ``max_attempts`` (default 1) and ``retry_backoff`` (default 10 s, doubled after each
    attempt) as before.

    A declaration that cannot be read is recorded (:func:`bad_declarations`), not
    raised: the function is still registered (if it can be), its schedule is not
    declared.
    """
    problem: Exception | None = None
    attempts, backoff = 1, 10.0
    try:
        policy = None if retry is None else check_policy(retry)
        attempts, backoff = _retry_numbers(max_attempts, retry_backoff, policy)
        text = _check_options(when, tz, overlap, catch_up, grace, attempts, backoff, queue_name)
        seconds = None if timeout is None else check_timeout(timeout)
    except _DECLARATION_ERRORS as exc:
        problem, text, seconds, policy = exc, "", None, None

    def decorate(fn: F) -> F:
        error = problem
        try:
            registered = _register(fn, function_name)
            if error is None:
                _declare(
                    PeriodicSpec(
                        name=name or registered,
                        function=registered,
                        schedule=text,
                        timezone=tz,
                        overlap=str(overlap),
                        catch_up=str(catch_up),
                        grace=None if grace is None else float(grace),
                        max_attempts=attempts,
                        retry_backoff=float(backoff),
                        timeout=seconds,
                        retry=policy,
                        args=tuple(args),
                        kwargs=dict(kwargs or {}),
                        queue_name=queue_name,
                    )
                )
        except _DECLARATION_ERRORS as exc:
            error = error or exc  # the options' error first
        if error is not None:
            _record_bad(fn, when, error)
        return fn

    return decorate


def _retry_numbers(
    max_attempts: int | None, retry_backoff: float | None, policy: RetryPolicy | None
) -> tuple[Any, Any]:
    """``max_attempts`` and ``retry_backoff`` as given, or as ``policy`` sets them
    (given twice and different: a ValueError naming both)."""
    attempts = attempts_of(max_attempts, policy)
    if policy is None:
        return attempts, 10.0 if retry_backoff is None else retry_backoff
    if retry_backoff is not None and retry_backoff != policy.backoff:
        raise ValueError(
            f"retry_backoff {retry_backoff!r} and the retry policy's backoff "
            f"{policy.backoff!r} differ: give one of them"
        )
    return attempts, policy.backoff


#: A schedule's retry columns without a policy: the exponential backoff of old.
_NO_POLICY = {
    name: value for name, value in policy_columns(RetryPolicy()).items() if name != "retry_backoff"
}


def _check_options(
    when: object,
    tz: str | None,
    overlap: str,
    catch_up: str,
    grace: float | None,
    max_attempts: int,
    retry_backoff: float,
    queue_name: str,
) -> str:
    """Check what ``@periodic`` was given (raises naming the bad one); the schedule's
    canonical text."""
    text = _schedule_text(when, tz)
    check_queue(queue_name)
    if overlap not in Overlap.values:
        raise ValueError(f"overlap must be one of {Overlap.values}, got {overlap!r}")
    if catch_up not in CatchUp.values:
        raise ValueError(f"catch_up must be one of {CatchUp.values}, got {catch_up!r}")
    for what, seconds in (("grace", grace), ("retry_backoff", retry_backoff)):
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, int | float)
        ):
            raise ValueError(f"{what} must be a number of seconds, got {seconds!r}")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise ValueError(f"max_attempts must be an int, got {max_attempts!r}")
    MAX_ATTEMPTS_RANGE.check(max_attempts)
    RETRY_BACKOFF_RANGE.check(retry_backoff)
    if grace is not None:
        GRACE_RANGE.check(grace)
    return text


def _declare(spec: PeriodicSpec) -> None:
    """Check ``spec``'s call against the signature and declare it (raises naming what
    does not fit, or the other function declared under its name)."""
    registry.check_call(spec.function, spec.args, spec.kwargs)
    with _lock:
        other = _declared.get(spec.name)
        if other is not None and other.function != spec.function:
            raise ValueError(
                f"schedule name {spec.name!r} is declared twice: for {other.function!r} "
                f"and for {spec.function!r}"
            )
        _declared[spec.name] = spec


def _retry_columns(policy: RetryPolicy | None) -> dict[str, Any]:
    """A declared schedule's retry columns besides ``retry_backoff``."""
    if policy is None:
        return _NO_POLICY
    columns = policy_columns(policy)
    del columns["retry_backoff"]
    return columns


def _schedule_text(when: object, tz: str | None) -> str:
    """The canonical text of ``when``, checked (raises InvalidSchedule naming it)."""
    if isinstance(when, str):
        text = when
    elif hasattr(when, "next_after"):
        text = str(when)
    else:
        raise TypeError(f"expected a schedule text or value, got {when!r}")
    return str(parse_schedule(text, tz=tz))


@dataclass
class SyncResult:
    """What :func:`sync_schedules` did, by schedule name."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"{len(self.created)} created, {len(self.updated)} updated, "
            f"{len(self.unchanged)} unchanged, {len(self.orphaned)} orphaned"
        )


def sync_schedules(using: str | None = None) -> SyncResult:
    """Create or update the code-defined schedules in the database ``using`` (default:
    the scheduler's, django_htask.db).

    A code-defined schedule no longer declared is disabled and marked orphaned, never
    deleted (its runs stay). A row is saved only when something changed, so a sync
    that changes nothing bumps no version. The enabled flag of an existing row is left
    as the admin set it, except that an orphan declared again is enabled again.

    Raises :class:`InvalidSchedule`, syncing nothing, while a declaration cannot be
    read (its row would be taken for gone, and disabled).
    """
    bad = bad_declarations()
    if bad:
        raise InvalidSchedule(
            f"{len(bad)} @periodic declaration(s) cannot be read, nothing synced: "
            + "; ".join(f"{b.function}: {b}" for b in bad)
        )
    using = using or scheduler_alias()
    result = SyncResult()
    declared = declared_schedules()
    default_tz = getattr(settings, "TIME_ZONE", None) or "UTC"
    with transaction.atomic(using=using):
        existing = {s.name: s for s in Schedule.objects.using(using).filter(name__in=declared)}
        for spec in declared.values():
            row = existing.get(spec.name)
            wanted: dict[str, Any] = {
                "function": spec.function,
                "schedule": spec.schedule,
                "timezone": spec.timezone or default_tz,
                "overlap": spec.overlap,
                "catch_up": spec.catch_up,
                "grace": spec.grace,
                "max_attempts": spec.max_attempts,
                "retry_backoff": spec.retry_backoff,
                **_retry_columns(spec.retry),
                "timeout": spec.timeout,
                "queue_name": spec.queue_name,
                "origin": Origin.CODE,
                "orphaned": False,
            }
            if row is None:
                row = Schedule(name=spec.name, **wanted)
                row.set_call(spec.args, spec.kwargs)
                row.save(using=using)
                result.created.append(spec.name)
                continue
            if row.origin != Origin.CODE:
                logger.warning(
                    "schedule %r was made in the admin; code now defines it",
                    spec.name,
                    extra={"action": "sync_takeover"},
                )
            changed = [k for k, v in wanted.items() if getattr(row, k) != v]
            if row.orphaned:
                row.enabled = True
                changed.append("enabled")
            if row.broken:  # saved again below: the mark is cleared, the node tries again
                changed.append("broken")
            if bytes(row.payload) != encode_call(spec.function, spec.args, spec.kwargs):
                changed.append("payload")
            if not changed:
                result.unchanged.append(spec.name)
                continue
            for key, value in wanted.items():
                setattr(row, key, value)
            row.set_call(spec.args, spec.kwargs)
            row.save(using=using)
            result.updated.append(spec.name)
        gone = Schedule.objects.using(using).filter(origin=Origin.CODE, orphaned=False)
        gone = gone.exclude(name__in=declared)
        result.orphaned = list(gone.values_list("name", flat=True))
        if result.orphaned:
            gone.update(enabled=False, orphaned=True, next_run_at=None)
    notices.notify_local_change()
    for label in ("created", "updated", "orphaned"):
        names = getattr(result, label)
        if names:
            logger.info(
                "code schedules %s: %s",
                label,
                ", ".join(names),
                extra={"action": f"sync_{label}"},
            )
    return result
