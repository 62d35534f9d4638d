"""``@task``: the functions registered, and what each declares for the tasks
``schedule()`` makes of it (a timeout, a retry policy, a lock, a limit, a rate limit,
the argument they count apart, how often it may snooze, a priority), with the checks
of those options that ``schedule()`` and ``@periodic`` use too.

::

    from django_htask import task

    @task(timeout=30, lock="mailbox")
    def send_reminder(reminder_id: int) -> None: ...

The function is returned unchanged; its registered name is ``package.module:qualname``
unless given (:func:`function_name` finds it again).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, overload

from django.apps import apps

from django_htask.engine import FunctionNotRegistered, registry
from django_htask.engine.registry import default_name

from .flow import RateLimit, check_per, check_rate_limit
from .keys import check_lock
from .models import (
    MAX_ATTEMPTS_RANGE,
    MAX_RUNNING_RANGE,
    MAX_SNOOZES_RANGE,
    PRIORITY_RANGE,
    RETRY_BACKOFF_RANGE,
    RETRY_CAP_RANGE,
    TIMEOUT_RANGE,
)
from .retention import check_retention
from .retry import NAMES_MAX, RetryPolicy

__all__ = [
    "NAME_ATTRIBUTE",
    "check_max_running",
    "check_max_snoozes",
    "check_policy",
    "check_priority",
    "check_timeout",
    "function_name",
    "register",
    "task",
    "task_lock",
    "task_max_running",
    "task_max_snoozes",
    "task_per",
    "task_policy",
    "task_priority",
    "task_rate_limit",
    "task_retention",
    "task_timeout",
]

F = TypeVar("F", bound=Callable[..., Any])
V = TypeVar("V")

#: The attribute ``@task`` / ``@periodic`` set on a function: its registered name.
NAME_ATTRIBUTE = "htask_name"

_lock = threading.Lock()
#: ``@task(timeout=...)``: registered name -> seconds, what ``schedule()`` stores.
_timeouts: dict[str, float] = {}
#: ``@task(retry=...)``: registered name -> policy, what ``schedule()`` stores.
_policies: dict[str, RetryPolicy] = {}
#: ``@task(lock=...)``: registered name -> lock, what ``schedule()`` stores.
_locks: dict[str, str] = {}
#: ``@task(max_running=...)``: registered name -> limit, what ``schedule()`` stores.
_limits: dict[str, int] = {}
#: ``@task(retention=...)``: registered name -> seconds (0: for ever), what
#: ``schedule()`` stores.
_retentions: dict[str, int] = {}
#: ``@task(max_snoozes=...)``: registered name -> bound, what ``schedule()`` stores.
_snoozes: dict[str, int] = {}
#: ``@task(rate_limit=...)``: registered name -> limit, what ``schedule()`` stores.
_rates: dict[str, RateLimit] = {}
#: ``@task(priority=...)``: registered name -> priority, what ``schedule()`` stores.
_priorities: dict[str, int] = {}
#: ``@task(per=...)``: registered name -> the parameter whose value ``schedule()``
#: stores as each task's per key.
_pers: dict[str, str] = {}


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


def check_max_snoozes(value: object) -> int:
    """``max_snoozes=`` as ``@task`` takes it: an int from 0 to ``MAX_SNOOZES_MAX``
    (a ValueError naming the value otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"max_snoozes must be an int >= 0, got {value!r}")
    MAX_SNOOZES_RANGE.check(value)
    return value


def check_priority(value: object) -> int:
    """``priority=`` as ``@task`` and ``schedule()`` take it: an int from -100 to 100,
    higher first among tasks due together (a ValueError naming the value otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"priority must be an int from -100 to 100, got {value!r}")
    PRIORITY_RANGE.check(value)
    return value


def task_priority(name: str) -> int | None:
    """The priority ``@task(priority=...)`` declared for the function registered as
    ``name``, if any."""
    return _priorities.get(name)


def task_lock(name: str) -> str | None:
    """The lock ``@task(lock=...)`` declared for the function registered as ``name``,
    if any."""
    return _locks.get(name)


def task_max_running(name: str) -> int | None:
    """The limit ``@task(max_running=...)`` declared for the function registered as
    ``name``, if any."""
    return _limits.get(name)


def task_max_snoozes(name: str) -> int | None:
    """How many times ``@task(max_snoozes=...)`` lets a task of the function registered
    as ``name`` snooze, if it says."""
    return _snoozes.get(name)


def task_rate_limit(name: str) -> RateLimit | None:
    """The rate limit ``@task(rate_limit=...)`` declared for the function registered as
    ``name``, if any."""
    return _rates.get(name)


def task_per(name: str) -> str | None:
    """The parameter ``@task(per=...)`` declared for the function registered as
    ``name``, whose value is each task's per key, if any."""
    return _pers.get(name)


def _check_parameter(fn: Callable[..., Any], per: str) -> str:
    """``per`` if it names a parameter of ``fn`` that takes one value (not ``*args``
    nor ``**kwargs``); ValueError naming both otherwise."""
    try:
        param = inspect.signature(fn).parameters.get(per)
    except (TypeError, ValueError):  # no signature to read: the call's binding says
        return per
    if param is None or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        what = getattr(fn, "__qualname__", repr(fn))
        raise ValueError(f"per={per!r} names no parameter of {what}()")
    return per


def task_timeout(name: str) -> float | None:
    """The timeout ``@task(timeout=...)`` declared for the function registered as
    ``name``, if any."""
    return _timeouts.get(name)


def task_retention(name: str) -> int | None:
    """The seconds ``@task(retention=...)`` declared for the function registered as
    ``name`` (0: kept for ever), if any."""
    return _retentions.get(name)


def task_policy(name: str) -> RetryPolicy | None:
    """The retry policy ``@task(retry=...)`` declared for the function registered as
    ``name``, if any."""
    return _policies.get(name)


def register(fn: Callable[..., Any], name: str | None) -> str:
    """Register ``fn`` (as ``name``, else its default name); its registered name."""
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
    retention: timedelta | float | None = None,
    max_snoozes: int | None = None,
    rate_limit: str | RateLimit | None = None,
    per: str | None = None,
    priority: int | None = None,
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
    retention: timedelta | float | None = None,
    max_snoozes: int | None = None,
    rate_limit: str | RateLimit | None = None,
    per: str | None = None,
    priority: int | None = None,
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
    ``max_snoozes``: how many times a task of it may snooze (``raise Snooze``) before
    its next snooze fails it, in place of the ``MAX_SNOOZES`` setting; stored on each
    task ``schedule()`` makes (docs/retries.md, "Snooze").

    ``rate_limit``: at most that many of its tasks *start* in any interval of the
    period, across the nodes: ``"100/m"``, ``"20/s"``, ``"1000/h"``, ``"5000/d"``
    (:class:`~django_htask.flow.RateLimit`); a task over it waits, its attempt unused,
    and starts when the window has room. ``per``: the name of a parameter whose value
    partitions its limits: ``max_running`` and ``rate_limit`` then count the tasks of
    each value apart (``@task(max_running=3, per="account_id")``: at most 3 running for
    each account). Both stored on each task ``schedule()`` makes
    (docs/howto-exactly-one.md, "Limits per key and rate limits").

    ``priority``: from -100 to 100 (default 0); among tasks due together, a higher
    priority starts first. Stored on each task ``schedule()`` makes without a priority
    of its own.
    """
    seconds = None if timeout is None else check_timeout(timeout)
    policy = None if retry is None else check_policy(retry)
    lock_name = None if lock is None else check_lock(lock)
    limit = None if max_running is None else check_max_running(max_running)
    kept = None if retention is None else check_retention(retention)
    snoozes = None if max_snoozes is None else check_max_snoozes(max_snoozes)
    rate = None if rate_limit is None else check_rate_limit(rate_limit)
    per_name = None if per is None else check_per(per)
    rank = None if priority is None else check_priority(priority)

    def decorate(f: F) -> F:
        if per_name is not None:
            _check_parameter(f, per_name)
        registered = register(f, name)
        with _lock:
            _declare_option(_timeouts, registered, seconds)
            _declare_option(_policies, registered, policy)
            _declare_option(_locks, registered, lock_name)
            _declare_option(_limits, registered, limit)
            _declare_option(_retentions, registered, kept)
            _declare_option(_snoozes, registered, snoozes)
            _declare_option(_rates, registered, rate)
            _declare_option(_pers, registered, per_name)
            _declare_option(_priorities, registered, rank)
        return f

    return decorate if fn is None else decorate(fn)


def _declare_option(declared: dict[str, V], name: str, value: V | None) -> None:
    """What ``@task`` declares for ``name``: ``value``, or nothing (a function
    decorated again without it)."""
    if value is None:
        declared.pop(name, None)
    else:
        declared[name] = value
