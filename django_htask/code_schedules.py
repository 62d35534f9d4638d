"""``@periodic``: the code-defined schedules, declared when their module is imported
and written to the database by :func:`sync_schedules`.

::

    from django_htask import periodic

    @periodic("30 4 * * *", tz="Asia/Tokyo", overlap="skip", max_attempts=3)
    def nightly_report() -> None: ...

``@periodic`` registers the function (as ``@task`` does, :mod:`django_htask.functions`)
and returns it unchanged. It checks its schedule and arguments when the module is
imported (a typo shows at start-up, not at 3 a.m.), and records a declaration it cannot
read instead of raising, so that importing the module never fails: the site serves,
and the system check ``django_htask.E008`` reports it, naming the function, its file
and line and the error (the commands that run the checks, ``runscheduler``, ``migrate``
and ``runserver`` included, stop with it instead of a traceback). The declared
schedules reach the database with :func:`sync_schedules`, which ``runscheduler`` runs
at start and ``manage.py htask sync`` runs on demand.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import transaction

from django_htask.engine import (
    HtaskError,
    InvalidSchedule,
    encode_call,
    parse_schedule,
    registry,
)
from django_htask.engine.errors import short_repr

from . import notices
from .db import scheduler_alias
from .functions import check_policy, check_timeout, register
from .models import (
    GRACE_RANGE,
    MAX_ATTEMPTS_RANGE,
    RETRY_BACKOFF_RANGE,
    CatchUp,
    Origin,
    Overlap,
    Schedule,
)
from .queues import DEFAULT_QUEUE
from .queues import check_name as check_queue
from .retry import RetryPolicy, attempts_of, policy_columns

__all__ = [
    "BadDeclaration",
    "PeriodicSpec",
    "SyncResult",
    "bad_declarations",
    "declared_schedules",
    "periodic",
    "sync_schedules",
]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


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
            registered = register(fn, function_name)
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
            outcome = _sync_one(spec, existing.get(spec.name), default_tz, using)
            getattr(result, outcome).append(spec.name)
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


def _sync_one(spec: PeriodicSpec, row: Schedule | None, default_tz: str, using: str) -> str:
    """Write ``spec``'s row (``row``: the one that exists, if any) where it differs;
    say what was done: ``created``, ``updated`` or ``unchanged``."""
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
        return "created"
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
        return "unchanged"
    for key, value in wanted.items():
        setattr(row, key, value)
    row.set_call(spec.args, spec.kwargs)
    row.save(using=using)
    return "updated"
