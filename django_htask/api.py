"""Scheduling one-off tasks from views: ``schedule``, ``schedule_many`` and their async
twins. What is done with a task once scheduled (``cancel``, ``abort``, ``reschedule``,
``get_task``, ``get_result``) is :mod:`django_htask.scheduled`, re-exported here.

::

    from django_htask import schedule, cancel

    def snooze(request, pk):
        task = schedule(send_reminder, pk, delay=600)
        request.session["reminder"] = task.token   # cancel(task.token) later

Arguments are checked against the function's signature here, in the caller: a wrong
call raises (``ArgumentError``, ``FunctionNotRegistered``, ``PayloadError``) and stores
nothing. Inside ``transaction.atomic(using=...)`` on the scheduler's database
(``HTASK["DATABASE"]``, django_htask.db: ``"default"`` unless set or routed) the task
is an ordinary row of that transaction: it exists, and can fire, only once the
transaction commits. A transaction on another alias does not cover it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError, transaction

from django_htask.engine import registry
from django_htask.engine.errors import ArgumentError, FunctionNotRegistered, PayloadError

from . import notices
from .db import scheduler_alias
from .due import MAX_DELAY, due_time
from .flow import RateLimit, check_rate_limit, per_key
from .functions import (
    check_max_running,
    check_policy,
    check_timeout,
    function_name,
    task_lock,
    task_max_running,
    task_max_snoozes,
    task_per,
    task_policy,
    task_rate_limit,
    task_retention,
    task_timeout,
)
from .keys import OnConflict, check_key, check_lock
from .models import MAX_ATTEMPTS_RANGE, Task
from .queues import DEFAULT_QUEUE
from .queues import check_name as check_queue
from .retry import RetryPolicy, attempts_of, policy_columns
from .scheduled import (
    AbortResult,
    Result,
    aabort,
    abort,
    acancel,
    aget_result,
    aget_task,
    areschedule,
    cancel,
    get_result,
    get_task,
    reschedule,
)
from .signals import task_scheduled
from .store.database import not_migrated
from .store.inserts import insert_tasks

__all__ = [
    "MAX_DELAY",
    "AbortResult",
    "Result",
    "aabort",
    "abort",
    "acancel",
    "aget_result",
    "aget_task",
    "areschedule",
    "aschedule",
    "aschedule_many",
    "cancel",
    "due_time",
    "get_result",
    "get_task",
    "reschedule",
    "schedule",
    "schedule_many",
]


def schedule(
    fn_or_name: Callable[..., Any] | str,
    /,
    *args: Any,
    at: datetime | None = None,
    delay: float | timedelta | None = None,
    max_attempts: int | None = None,
    queue_name: str = DEFAULT_QUEUE,
    timeout: float | timedelta | None = None,
    retry: RetryPolicy | None = None,
    key: str | None = None,
    on_conflict: str = OnConflict.IGNORE,
    lock: str | None = None,
    max_running: int | None = None,
    rate_limit: str | RateLimit | None = None,
    **kwargs: Any,
) -> Task:
    """Run ``fn(*args, **kwargs)`` once, at ``at``, after ``delay`` seconds, or now, on a
    node serving ``queue_name``.

    ``timeout``: seconds (or a timedelta) a run may take before it is stopped (see
    docs/timeouts.md); default: the function's ``@task(timeout=...)``, else the
    ``DEFAULT_TIMEOUT`` setting. ``retry``: a :class:`~django_htask.retry.RetryPolicy`
    stored on the task (docs/retries.md); default: the function's
    ``@task(retry=...)``, else none (``max_attempts``, default 1, and the
    ``RETRY_BACKOFF`` settings). ``max_attempts`` given beside a policy's own
    ``attempts`` must be the same number. Returns the stored :class:`~django_htask.models.Task`;
    keep ``task.token`` to cancel, abort or move it. Raises
    :class:`~django_htask.exceptions.NotMigrated` when the database lacks the table
    (``manage.py migrate`` has not run).

    ``key``: at most one pending task has a given key, whatever its queue (see
    docs/howto-exactly-one.md); when one does, ``on_conflict`` says what happens:
    ``"ignore"`` returns it unchanged, ``"replace"`` moves it to this call (same
    token) and returns it, ``"raise"`` raises
    :class:`~django_htask.exceptions.DuplicateKey`. The database decides, so
    concurrent callers cannot both insert.

    ``lock``: tasks sharing a lock never run at the same time on any node; the others
    wait, in due order (docs/howto-exactly-one.md); default: the function's
    ``@task(lock=...)``. ``max_running``: at most this many tasks of the function run
    at once across the nodes, counting this one; default: the function's
    ``@task(max_running=...)``. ``rate_limit``: at most that many tasks of the
    function start in any interval of the period across the nodes (``"100/m"``,
    ``"20/s"``, ``"1000/h"``; the function's own otherwise); with the function's
    ``@task(per=...)``, both count the tasks of this call's value of that parameter
    apart (docs/howto-exactly-one.md). A value of it that cannot be a key raises
    ValueError naming it.
    """
    name = function_name(fn_or_name)
    options = _Options.of(
        at, delay, max_attempts, queue_name, timeout, retry, max_running, rate_limit
    )
    conflict = OnConflict.of(on_conflict)
    keys: list[str | None] | None = None if key is None else [check_key(key)]
    own_lock = None if lock is None else check_lock(lock)
    payload, per = _checked_call(name, args, kwargs)
    [task] = _store([(name, payload, own_lock, per)], options, BATCH_SIZE, keys, conflict)
    return task


def _checked_call(
    name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[bytes, str | None]:
    """The payload of a call of the function ``name`` (checked: ``registry.check_call``)
    and its per key, if the function has ``@task(per=...)``."""
    per = task_per(name)
    payload, value = registry.check_call_argument(name, args, kwargs, per)
    return payload, None if per is None else per_key(per, value)


#: The most rows :func:`schedule_many` inserts in one statement.
BATCH_SIZE = 1000


#: A call of :func:`schedule_many`: ``(fn, args, kwargs)``, ``(fn, args, kwargs, key)``
#: or ``(fn, args, kwargs, key, lock)``.
ManyCall = (
    tuple[Callable[..., Any] | str, Sequence[Any], Mapping[str, Any]]
    | tuple[Callable[..., Any] | str, Sequence[Any], Mapping[str, Any], str | None]
    | tuple[Callable[..., Any] | str, Sequence[Any], Mapping[str, Any], str | None, str | None]
)


def schedule_many(
    calls: Iterable[ManyCall],
    *,
    at: datetime | None = None,
    delay: float | timedelta | None = None,
    max_attempts: int | None = None,
    queue_name: str = DEFAULT_QUEUE,
    timeout: float | timedelta | None = None,
    retry: RetryPolicy | None = None,
    batch_size: int = BATCH_SIZE,
    on_conflict: str = OnConflict.IGNORE,
    max_running: int | None = None,
    rate_limit: str | RateLimit | None = None,
) -> list[Task]:
    """Schedule many calls at once: ``calls`` is an iterable of ``(fn, args, kwargs)``,
    ``(fn, args, kwargs, key)`` or ``(fn, args, kwargs, key, lock)`` (``fn`` a
    registered function or its name, ``key`` a key or None, ``lock`` a lock or None:
    the function's ``@task(lock=...)``), each stored as :func:`schedule` would store
    it, with the same ``at``/``delay``, ``max_attempts``, ``queue_name``, ``timeout``,
    ``retry``, ``on_conflict``, ``max_running`` and ``rate_limit`` for all. Every call is checked
    before anything is stored: a bad one raises its error (``ArgumentError``,
    ``FunctionNotRegistered``, ``PayloadError``) naming its place, ``calls[i]``, and
    nothing is stored. Then the rows are inserted ``batch_size`` per statement, all or
    none, inside the caller's transaction if there is one. Returns the stored tasks, in
    the order of ``calls``.

    Calls of one batch with the same key are resolved as if they were made one after
    another: with ``"ignore"`` the first stands and the later ones return its task,
    with ``"replace"`` the last one's values are stored and every one returns that task,
    with ``"raise"`` :class:`~django_htask.exceptions.DuplicateKey` names both places
    and nothing is stored."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    options = _Options.of(
        at, delay, max_attempts, queue_name, timeout, retry, max_running, rate_limit
    )
    conflict = OnConflict.of(on_conflict)
    checked = [_checked(i, call) for i, call in enumerate(calls)]
    keys = [key for _name, _payload, key, _lock, _per in checked]
    with_keys = keys if any(key is not None for key in keys) else None
    stored = [(name, payload, lock, per) for name, payload, _key, lock, per in checked]
    return _store(stored, options, batch_size, with_keys, conflict)


@dataclass(frozen=True)
class _Options:
    """What :func:`schedule` and :func:`schedule_many` store beside each call, checked."""

    run_at: datetime
    max_attempts: int | None  # None: the policy's attempts, else 1
    queue_name: str
    timeout: float | None  # None: each function's own, else DEFAULT_TIMEOUT
    retry: RetryPolicy | None  # None: each function's own, else none
    max_running: int | None = None  # None: each function's own, else no limit
    rate_limit: RateLimit | None = None  # None: each function's own, else none

    @classmethod
    def of(
        cls,
        at: datetime | None,
        delay: float | timedelta | None,
        max_attempts: int | None,
        queue_name: str,
        timeout: float | timedelta | None,
        retry: RetryPolicy | None,
        max_running: int | None = None,
        rate_limit: str | RateLimit | None = None,
    ) -> _Options:
        if max_attempts is not None:
            if (
                isinstance(max_attempts, bool)
                or not isinstance(max_attempts, int)
                or max_attempts < 1
            ):
                raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
            MAX_ATTEMPTS_RANGE.check(max_attempts)
        if retry is not None:
            max_attempts = attempts_of(max_attempts, check_policy(retry))
        run_at = due_time(at, delay)
        seconds = check_timeout(timeout) if timeout is not None else None
        limit = None if max_running is None else check_max_running(max_running)
        rate = None if rate_limit is None else check_rate_limit(rate_limit)
        return cls(run_at, max_attempts, check_queue(queue_name), seconds, retry, limit, rate)

    def retry_columns(self, name: str) -> tuple[tuple[str, Any], ...]:
        """The ``max_attempts`` and retry columns of a task of the function ``name``:
        the call's policy, else the function's (``max_attempts`` given in the call
        wins over its attempts), else none (the columns' defaults)."""
        policy = self.retry or task_policy(name)
        if policy is None:
            return (("max_attempts", self.max_attempts or 1),)
        attempts = self.max_attempts or policy.attempts or 1
        return (("max_attempts", attempts), *policy_columns(policy).items())

    def rate_columns(self, name: str) -> tuple[tuple[str, Any], ...]:
        """The rate limit columns of a task of the function ``name``: the call's rate
        limit, else the function's, else none."""
        rate = self.rate_limit or task_rate_limit(name)
        return () if rate is None else (("rate_limit", rate.count), ("rate_period", rate.period))


def _store(
    calls: list[tuple[str, bytes, str | None, str | None]],
    options: _Options,
    batch_size: int,
    keys: list[str | None] | None = None,
    on_conflict: OnConflict = OnConflict.IGNORE,
) -> list[Task]:
    """Insert the checked calls ``(name, payload, lock, per key)`` as tasks, all or
    none (a call without a lock takes its function's; a per key is kept only by a task
    with a limit or a rate limit, which it partitions); signal those written (not a
    pending task returned as it was) once committed."""
    if not calls:
        return []
    timeouts: dict[str, float | None] = {}
    policies: dict[str, tuple[tuple[str, Any], ...]] = {}
    gates: dict[str, tuple[str | None, int | None, bool]] = {}
    rows = []
    for name, payload, lock, per in calls:
        seconds = options.timeout
        if name not in policies:
            retention = task_retention(name)
            own = () if retention is None else (("retention", retention),)
            snoozes = ("max_snoozes", task_max_snoozes(name))
            rate = options.rate_columns(name)
            policies[name] = (*options.retry_columns(name), snoozes, *own, *rate)
            limit = options.max_running or task_max_running(name)
            gates[name] = (task_lock(name), limit, bool(rate) or limit is not None)
            if seconds is None:
                timeouts[name] = task_timeout(name)
        if seconds is None:
            seconds = timeouts[name]
        default_lock, limit, partitioned = gates[name]
        call = (name, payload, seconds, lock or default_lock, limit, per if partitioned else None)
        rows.append((policies[name], call))
    common = {"run_at": options.run_at, "queue_name": options.queue_name}
    using = scheduler_alias()
    try:
        with transaction.atomic(using=using):
            # Consecutive calls with the same columns of their function (its retry
            # policy, its max_snoozes, its retention) in one insert: all of them unless
            # the functions' @task options differ; the order stays the calls'.
            tasks: list[Task] = []
            kept: set[int] = set()
            done = 0
            for columns, group in itertools.groupby(rows, key=lambda row: row[0]):
                values = [call for _columns, call in group]
                part = None if keys is None else keys[done : done + len(values)]
                done += len(values)
                fields = {**common, **dict(columns)}
                inserted = insert_tasks(using, values, fields, batch_size, part, on_conflict)
                tasks += inserted.tasks
                kept |= inserted.kept
    except DatabaseError as exc:
        missing = not_migrated(exc, using)
        if missing is None:
            raise
        raise missing from exc

    written = list({id(task): task for task in tasks if task.pk not in kept}.values())
    if not written:
        return tasks

    def committed() -> None:
        for task in written:
            task_scheduled.send_robust(sender=Task, task=task)
        notices.notify_local_change()

    transaction.on_commit(committed, using=using, robust=True)
    return tasks


def _checked(i: int, call: object) -> tuple[str, bytes, str | None, str | None, str | None]:
    """The function name, the payload, the key, the lock and the per key of
    ``calls[i]`` (its error names its place)."""
    if not isinstance(call, tuple | list) or len(call) not in (3, 4, 5):
        raise TypeError(
            f"calls[{i}] must be a tuple (fn, args, kwargs), (fn, args, kwargs, key) or "
            f"(fn, args, kwargs, key, lock), got {call!r}"
        )
    fn, args, kwargs, key, lock = (*call, None, None)[:5]
    try:
        if key is not None:
            check_key(key)
        if lock is not None:
            check_lock(lock)
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise TypeError(f"args must be a sequence (a tuple or a list), got {args!r}")
        if not isinstance(kwargs, Mapping):
            raise TypeError(f"kwargs must be a mapping (a dict), got {kwargs!r}")
        name = function_name(fn)
        payload, per = _checked_call(name, tuple(args), dict(kwargs))
        return name, payload, key, lock, per
    except (FunctionNotRegistered, PayloadError, ArgumentError, TypeError, ValueError) as exc:
        raise type(exc)(f"calls[{i}]: {exc}") from exc


# The async twins run the sync function in Django's thread for sync code
# (``thread_sensitive``), so a transaction opened around them behaves as in a view.


async def aschedule(fn_or_name: Callable[..., Any] | str, /, *args: Any, **options: Any) -> Task:
    """:func:`schedule` for async views: the same arguments (``at``, ``delay``,
    ``max_attempts``, ``queue_name``, ``timeout``, ``key``, ``on_conflict``, ``lock``,
    ``max_running``, ``rate_limit`` and the function's own)."""
    return await sync_to_async(schedule)(fn_or_name, *args, **options)


async def aschedule_many(
    calls: Iterable[ManyCall],
    **options: Any,
) -> list[Task]:
    """:func:`schedule_many` for async views: the same arguments."""
    return await sync_to_async(schedule_many)(calls, **options)
