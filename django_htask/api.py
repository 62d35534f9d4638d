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

import functools
import inspect
import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError, transaction

from django_htask.engine import registry
from django_htask.engine.errors import ArgumentError, FunctionNotRegistered, PayloadError

from . import clock, notices
from .conf import get_settings
from .db import after_commit, scheduler_alias
from .due import MAX_DELAY, due_time
from .flow import RateLimit, check_rate_limit, per_key
from .functions import (
    check_max_running,
    check_policy,
    check_priority,
    check_timeout,
    function_name,
    task_lock,
    task_max_running,
    task_max_snoozes,
    task_per,
    task_policy,
    task_priority,
    task_rate_limit,
    task_retention,
    task_timeout,
)
from .graph import AfterFailure, AfterRef, batch_id_of, building, parse_after
from .keys import OnConflict, check_key, check_lock
from .models import MAX_ATTEMPTS_RANGE, Task, TaskStatus
from .queues import DEFAULT_QUEUE
from .queues import check_name as check_queue
from .retention import gone_reason
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
from .store import not_migrated
from .store.composed import After, NewEdge, attach, join_batch, lock_after
from .store.inserts import TaskCall, insert_tasks

__all__ = [
    "MAX_DELAY",
    "SCHEDULE_OPTIONS",
    "AbortResult",
    "Result",
    "Using",
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
    "option_parameters",
    "reschedule",
    "schedule",
    "schedule_many",
    "using",
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
    after: Any = None,
    after_failure: str = AfterFailure.CANCEL,
    priority: int | None = None,
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

    ``priority``: from -100 to 100; among tasks due together, a higher priority starts
    first (default: the function's ``@task(priority=...)``, else 0).

    ``after``: the task waits (``waiting``, not claimed) until the tasks it names
    succeeded, then runs (no sooner than its ``at``/``delay``): a list of tasks or
    their tokens, or a mapping ``{"param": task}`` that passes that task's result to
    the parameter ``param`` (converted to its annotation as any argument is; a list of
    tasks passes their results as a list). When one of them fails for good or is
    cancelled, this one is cancelled with that reason, unless
    ``after_failure="run"`` (it then runs once they all ended; a result it was to
    receive from a task that did not succeed is None). A token no task has raises
    :class:`~django_htask.exceptions.TaskNotFound`, and nothing is stored; see
    docs/howto-chains.md. A task that waits cannot have a ``key``, and its ``per``
    parameter cannot receive a result.

    Inside a ``with batch(...)`` block (:func:`django_htask.batch`), the task joins
    that batch.
    """
    options = locals()  # the options by name (and the call, which _schedule ignores)
    clashes = _option_parameters_of(fn_or_name)
    if clashes:
        _refuse_ambiguous(fn_or_name, clashes, options)
    return _schedule(fn_or_name, args, kwargs, options)


def _schedule(
    fn_or_name: Callable[..., Any] | str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    option_values: Mapping[str, Any],
) -> Task:
    """:func:`schedule` of ``fn_or_name(*args, **kwargs)`` with the options ``option_values``
    (each of :data:`SCHEDULE_OPTIONS`, by name)."""
    name = function_name(fn_or_name)
    options = _Options.of(
        option_values["at"],
        option_values["delay"],
        option_values["max_attempts"],
        option_values["queue_name"],
        option_values["timeout"],
        option_values["retry"],
        option_values["max_running"],
        option_values["rate_limit"],
        option_values["priority"],
    )
    conflict = OnConflict.of(option_values["on_conflict"])
    key, lock, after = option_values["key"], option_values["lock"], option_values["after"]
    keys: list[str | None] | None = None if key is None else [check_key(key)]
    own_lock = None if lock is None else check_lock(lock)
    refs = [] if after is None else parse_after(after)
    payload, per = _checked_call(name, args, kwargs, _later(refs))
    composition = _Composition.of(1, refs, option_values["after_failure"], building(), keys)
    call = (name, payload, own_lock, per)
    [task] = _store([call], options, BATCH_SIZE, keys, conflict, composition)
    return task


#: Each option of :func:`schedule` (its keyword-only parameters, in order) and its
#: default.
_DEFAULTS: dict[str, Any] = schedule.__kwdefaults__ or {}
#: The options of :func:`schedule`: in its short form, a keyword of one of these names
#: is the option, never an argument of the task (:func:`using` keeps them apart).
SCHEDULE_OPTIONS = tuple(_DEFAULTS)


@functools.lru_cache(maxsize=4096)
def option_parameters(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The parameters of ``fn`` named like an option of :func:`schedule` that a
    keyword can give (not positional-only, not ``*args``/``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to read
        return ()
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in params if p.kind in keyword and p.name in SCHEDULE_OPTIONS)


def _option_parameters_of(fn_or_name: Callable[..., Any] | str) -> tuple[str, ...]:
    """:func:`option_parameters` of a registered function or its name (none for a name
    nothing is registered as: :func:`schedule` says so)."""
    fn: Any = fn_or_name
    if isinstance(fn_or_name, str):
        if fn_or_name not in registry:
            return ()
        fn = registry.get(fn_or_name)
    try:
        return option_parameters(fn)
    except TypeError:  # unhashable: not a plain function, which schedule() refuses
        return ()


def _refuse_ambiguous(
    fn_or_name: Callable[..., Any] | str, clashes: Sequence[str], values: Mapping[str, Any]
) -> None:
    """TypeError when the short form of :func:`schedule` is given an option whose name
    is also a parameter of the task's function (``clashes``), with a value other than
    its default (``values``: the call's): the caller may have meant either, and taking
    it as the option would silently drop the argument."""
    for option in clashes:
        if values[option] != _DEFAULTS[option]:
            what = getattr(fn_or_name, "__qualname__", fn_or_name)
            raise TypeError(
                f"schedule({what}, ..., {option}=...) is ambiguous: {option} is an option "
                f"of schedule() and a parameter of {what}(); to set the task's "
                f"{option}, write using({option}=...).schedule({what}, ...); to pass "
                f"the argument, write using().schedule({what}, ..., {option}=...) "
                "(or pass it by position)"
            )


class Using:
    """Options of :func:`schedule` kept apart from the task's arguments:
    ``using(key="invoice-42", timeout=30).schedule(send, to, key=k)`` sets the task's
    key and timeout and passes every keyword (``key=k`` too) to ``send``. Made by
    :func:`using`; immutable, so one can serve many calls."""

    __slots__ = ("_options",)

    def __init__(self, options: Mapping[str, Any]) -> None:
        unknown = sorted(set(options) - set(SCHEDULE_OPTIONS) - {"batch_size", "batch"})
        if unknown:
            raise TypeError(
                f"using() got {', '.join(map(repr, unknown))}: not an option of "
                f"schedule() ({', '.join(SCHEDULE_OPTIONS)})"
            )
        self._options = dict(options)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self._options.items())
        return f"using({shown})"

    def using(self, **options: Any) -> Using:
        """These options with ``options`` added (or replaced)."""
        return Using({**self._options, **options})

    def schedule(self, fn_or_name: Callable[..., Any] | str, /, *args: Any, **kwargs: Any) -> Task:
        """:func:`schedule` of ``fn_or_name(*args, **kwargs)`` with these options: every
        keyword goes to the function."""
        if {"batch_size", "batch"} & set(self._options):
            raise TypeError(
                f"batch_size and batch are for schedule_many(), not schedule(): {self!r}"
            )
        return _schedule(fn_or_name, args, kwargs, {**_DEFAULTS, **self._options})

    def schedule_many(self, calls: Iterable[ManyCall]) -> list[Task]:
        """:func:`schedule_many` of ``calls`` with these options (a call's key and lock
        are given in the call)."""
        per_call = sorted({"key", "lock"} & set(self._options))
        if per_call:
            raise TypeError(
                f"schedule_many() takes {' and '.join(per_call)} in each call, not from "
                f"using(): {self!r}"
            )
        return schedule_many(calls, **self._options)

    async def aschedule(
        self, fn_or_name: Callable[..., Any] | str, /, *args: Any, **kwargs: Any
    ) -> Task:
        """:meth:`schedule` from async code."""
        return await sync_to_async(self.schedule)(fn_or_name, *args, **kwargs)


def using(**options: Any) -> Using:
    """Options of :func:`schedule` apart from the task's arguments (see :class:`Using`):
    ``using(timeout=30).schedule(fetch, url, timeout=5)`` runs ``fetch(url,
    timeout=5)`` under a 30-second timeout. Any keyword of ``schedule()`` but the
    task's arguments; ``batch_size`` and ``batch`` for :meth:`Using.schedule_many`."""
    return Using(options)


def _checked_call(
    name: str, args: Sequence[Any], kwargs: Mapping[str, Any], later: Collection[str] = ()
) -> tuple[bytes, str | None]:
    """The payload of a call of the function ``name`` (checked: ``registry.check_call``;
    ``later``: the parameters that receive results) and its per key, if the function
    has ``@task(per=...)``."""
    per = task_per(name)
    payload, value = registry.check_call_argument(name, args, kwargs, per, later)
    return payload, None if per is None else per_key(per, value)


def _later(refs: list[AfterRef]) -> list[str]:
    """The parameters that receive results (given their values once released)."""
    return sorted({ref.param for ref in refs if ref.param is not None})


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
    after: Any = None,
    after_failure: str = AfterFailure.CANCEL,
    batch: Any = None,
    priority: int | None = None,
) -> list[Task]:
    """Schedule many calls at once: ``calls`` is an iterable of ``(fn, args, kwargs)``,
    ``(fn, args, kwargs, key)`` or ``(fn, args, kwargs, key, lock)`` (``fn`` a
    registered function or its name, ``key`` a key or None, ``lock`` a lock or None:
    the function's ``@task(lock=...)``), each stored as :func:`schedule` would store
    it, with the same ``at``/``delay``, ``max_attempts``, ``queue_name``, ``timeout``,
    ``retry``, ``on_conflict``, ``max_running``, ``rate_limit`` and ``priority`` for
    all. Every call is checked before anything is stored: a bad one raises its error
    (``ArgumentError``, ``FunctionNotRegistered``, ``PayloadError``) naming its place,
    ``calls[i]``, and nothing is stored. Then the rows are inserted ``batch_size`` per
    statement, all or none, inside the caller's transaction if there is one. Returns the
    stored tasks, in the order of ``calls``.

    Calls of one batch with the same key are resolved as if they were made one after
    another: with ``"ignore"`` the first stands and the later ones return its task,
    with ``"replace"`` the last one's values are stored and every one returns that task,
    with ``"raise"`` :class:`~django_htask.exceptions.DuplicateKey` names both places
    and nothing is stored.

    ``after`` and ``after_failure``: every task waits for the tasks named, as with
    :func:`schedule` (a graph of new tasks waiting for each other: :func:`~django_htask.graph`).
    ``batch``: the tasks join that batch (a :class:`~django_htask.Batch` or its id;
    default: the one a ``with batch(...)`` block around the call is making);
    :class:`~django_htask.exceptions.BatchFinished` if its members had all ended."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    options = _Options.of(
        at, delay, max_attempts, queue_name, timeout, retry, max_running, rate_limit, priority
    )
    conflict = OnConflict.of(on_conflict)
    refs = [] if after is None else parse_after(after)
    later = _later(refs)
    checked = [_checked(i, call, later) for i, call in enumerate(calls)]
    keys = [key for _name, _payload, key, _lock, _per in checked]
    with_keys = keys if any(key is not None for key in keys) else None
    stored = [(name, payload, lock, per) for name, payload, _key, lock, per in checked]
    joined = building() if batch is None else batch_id_of(batch)
    composition = _Composition.of(len(stored), refs, after_failure, joined, with_keys)
    return _store(stored, options, batch_size, with_keys, conflict, composition)


@dataclass(frozen=True)
class _Composition:
    """What :func:`_store` stores beside the tasks of a call that composes them: the
    edges of the graph (its new tasks by their place), and the batch they join."""

    edges: tuple[NewEdge, ...] = ()
    batch: int | None = None
    #: The tasks wait for their batch (a batch's callbacks, released by it).
    wait_for_batch: bool = False

    @classmethod
    def of(
        cls,
        calls: int,
        refs: list[AfterRef],
        after_failure: str,
        batch: int | None,
        keys: list[str | None] | None,
    ) -> _Composition | None:
        """Each of ``calls`` new tasks after every task of ``refs`` (tasks queued
        before, or their tokens), joining ``batch``; None when nothing is composed."""
        run = AfterFailure.of(after_failure) is AfterFailure.RUN
        if not refs and batch is None:
            return None
        if keys is not None:
            raise ValueError("a task with a key cannot wait for others nor join a batch")
        tokens = [_token_of(ref.ref) for ref in refs]
        edges = tuple(
            NewEdge(i, token, ref.param, ref.position, run)
            for i in range(calls)
            for token, ref in zip(tokens, refs, strict=True)
        )
        return cls(edges, batch)

    def waiting(self, calls: int) -> set[int]:
        """The places of the tasks that wait, among ``calls``."""
        return set(range(calls)) if self.wait_for_batch else {edge.task for edge in self.edges}


def _token_of(ref: object) -> str:
    """The token of a task a new one runs after (a task, or its token)."""
    token = getattr(ref, "token", ref)
    if not isinstance(token, str) or not token:
        raise TypeError(f"after must name tasks or their tokens, got {ref!r}")
    return token


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
    priority: int | None = None  # None: each function's own, else 0

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
        priority: int | None = None,
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
        rank = None if priority is None else check_priority(priority)
        queue = check_queue(queue_name)
        return cls(run_at, max_attempts, queue, seconds, retry, limit, rate, rank)

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

    def priority_columns(self, name: str) -> tuple[tuple[str, Any], ...]:
        """The priority of a task of the function ``name``: the call's, else the
        function's, else none (the column's default, 0)."""
        rank = task_priority(name) if self.priority is None else self.priority
        return () if rank is None else (("priority", rank),)


#: Calls as :func:`_store` inserts them: each with the columns of its function and
#: options (consecutive calls with the same in one insert).
_Rows = list[tuple[tuple[tuple[str, Any], ...], TaskCall]]

#: A checked call as :func:`_store` takes it: ``(name, payload, lock, per key)``.
_Call = tuple[str, bytes, str | None, str | None]


def _store(
    calls: list[_Call],
    options: _Options,
    batch_size: int,
    keys: list[str | None] | None = None,
    on_conflict: OnConflict = OnConflict.IGNORE,
    composition: _Composition | None = None,
) -> list[Task]:
    """Insert the checked calls ``(name, payload, lock, per key)`` as tasks, all or
    none (a call without a lock takes its function's; a per key is kept only by a task
    with a limit or a rate limit, which it partitions), composed as ``composition``
    says; signal those written (not a pending task returned as it was) once
    committed."""
    return _store_parts([(calls, options)], batch_size, keys, on_conflict, composition)


def _store_parts(
    parts: list[tuple[list[_Call], _Options]],
    batch_size: int,
    keys: list[str | None] | None = None,
    on_conflict: OnConflict = OnConflict.IGNORE,
    composition: _Composition | None = None,
) -> list[Task]:
    """:func:`_store` of calls in ``parts``, each part's with its options, in one
    transaction (a graph's tasks: ``composition`` places them in the order of the
    parts' calls)."""
    count = sum(len(calls) for calls, _options in parts)
    if not count:
        return []
    prepared: list[tuple[_Rows, dict[str, Any]]] = []
    for calls, options in parts:
        rows = _rows(calls, options)
        common: dict[str, Any] = {"run_at": options.run_at, "queue_name": options.queue_name}
        if composition is not None:
            offset = sum(len(done) for done, _common in prepared)
            rows = _composed_rows(rows, composition, common, offset)
        prepared.append((rows, common))
    using = scheduler_alias()
    try:
        with transaction.atomic(using=using):
            outside = _join(using, composition, count)
            tasks, kept = _insert(using, prepared, batch_size, keys, on_conflict)
            if composition is not None:
                _attach(using, tasks, composition, outside)
    except DatabaseError as exc:
        missing = not_migrated(exc, using)
        if missing is None:
            raise
        raise missing from exc
    _signal(using, [task for task in tasks if task.pk not in kept])
    return tasks


def _rows(calls: list[_Call], options: _Options) -> _Rows:
    """Each call with the columns its function and ``options`` give it."""
    timeouts: dict[str, float | None] = {}
    policies: dict[str, tuple[tuple[str, Any], ...]] = {}
    gates: dict[str, tuple[str | None, int | None, bool]] = {}
    rows: _Rows = []
    for name, payload, lock, per in calls:
        seconds = options.timeout
        if name not in policies:
            retention = task_retention(name)
            own = () if retention is None else (("retention", retention),)
            snoozes = ("max_snoozes", task_max_snoozes(name))
            rate = options.rate_columns(name)
            rank = options.priority_columns(name)
            policies[name] = (*options.retry_columns(name), snoozes, *own, *rate, *rank)
            limit = options.max_running or task_max_running(name)
            gates[name] = (task_lock(name), limit, bool(rate) or limit is not None)
            if seconds is None:
                timeouts[name] = task_timeout(name)
        if seconds is None:
            seconds = timeouts[name]
        default_lock, limit, partitioned = gates[name]
        call = (name, payload, seconds, lock or default_lock, limit, per if partitioned else None)
        rows.append((policies[name], call))
    return rows


def _insert(
    using: str,
    prepared: list[tuple[_Rows, dict[str, Any]]],
    batch_size: int,
    keys: list[str | None] | None,
    on_conflict: OnConflict,
) -> tuple[list[Task], set[int]]:
    """Insert the rows of ``prepared`` (each part with its common fields), in the
    caller's transaction: the tasks, and the ids of the pending ones returned as they
    were (a key held)."""
    tasks: list[Task] = []
    kept: set[int] = set()
    done = 0
    for rows, common in prepared:
        # Consecutive calls with the same columns of their function (its retry
        # policy, its max_snoozes, its retention) in one insert: all of them unless
        # the functions' @task options differ; the order stays the calls'.
        for columns, group in itertools.groupby(rows, key=lambda row: row[0]):
            values = [call for _columns, call in group]
            part = None if keys is None else keys[done : done + len(values)]
            done += len(values)
            fields = {**common, **dict(columns)}
            inserted = insert_tasks(using, values, fields, batch_size, part, on_conflict)
            tasks += inserted.tasks
            kept |= inserted.kept
    return tasks, kept


def _signal(using: str, tasks: list[Task]) -> None:
    """Once the caller's transaction commits, signal the tasks written (each once) and
    wake a node in this process."""
    written = list({id(task): task for task in tasks}.values())
    if not written:
        return

    def committed() -> None:
        for task in written:
            task_scheduled.send_robust(sender=Task, task=task)
        notices.notify_local_change()

    after_commit(committed, using)


def _composed_rows(
    rows: _Rows, composition: _Composition, common: dict[str, Any], offset: int = 0
) -> _Rows:
    """``rows`` (the first at place ``offset`` of the composition) with the fields of
    their composition: those that wait ``waiting`` (inserted apart from the others),
    the batch's members marked; ``common`` gets the batch."""
    if composition.batch is not None:
        common.update(batch_id=composition.batch, followed=True)
    if composition.wait_for_batch:
        common["waiting_on"] = 1
    waiting = composition.waiting(offset + len(rows))
    status = (("status", TaskStatus.WAITING),)
    return [
        ((*columns, *status) if offset + i in waiting else columns, call)
        for i, (columns, call) in enumerate(rows)
    ]


def _join(using: str, composition: _Composition | None, members: int) -> dict[str, After]:
    """Before the tasks of ``composition`` are inserted: the tasks they run after
    locked (:func:`~django_htask.store.composed.lock_after`), then their batch's row
    (in this order, as a node recording ends takes them)."""
    if composition is None:
        return {}
    tokens = sorted({e.after for e in composition.edges if isinstance(e.after, str)})
    missing = gone_reason("{token}", get_settings().task_retention_days)
    outside = lock_after(using, tokens, missing) if tokens else {}
    if composition.batch is not None:
        join_batch(using, composition.batch, members)
    return outside


def _attach(
    using: str, tasks: list[Task], composition: _Composition, outside: dict[str, After]
) -> None:
    """After the tasks of ``composition`` are inserted: their edges, and what follows at
    once (:func:`~django_htask.store.composed.attach`); the tasks as stored then."""
    if composition.edges:
        attach(using, tasks, list(composition.edges), outside, clock.now())
    fields = ("status", "waiting_on", "followed", "finished_at", "last_error", "payload")
    rows = Task.objects.using(using).in_bulk([task.pk for task in tasks])
    for task in tasks:
        row = rows[task.pk]
        for name in fields:
            setattr(task, name, getattr(row, name))


def _checked(
    index: int, call: object, later: list[str] | None = None
) -> tuple[str, bytes, str | None, str | None, str | None]:
    """The function name, the payload, the key, the lock and the per key of
    ``calls[index]`` (its error names its place); ``later``: the parameters that receive
    results."""
    if not isinstance(call, tuple | list) or len(call) not in (3, 4, 5):
        raise TypeError(
            f"calls[{index}] must be a tuple (fn, args, kwargs), (fn, args, kwargs, key) or "
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
        payload, per = _checked_call(name, tuple(args), dict(kwargs), later or ())
        return name, payload, key, lock, per
    except (FunctionNotRegistered, PayloadError, ArgumentError, TypeError, ValueError) as exc:
        raise type(exc)(f"calls[{index}]: {exc}") from exc


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
