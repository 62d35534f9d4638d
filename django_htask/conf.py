"""django-htask settings: one ``HTASK = {...}`` dict in the project's settings.

Every key is optional; :func:`get_settings` returns a frozen :class:`HtaskSettings`
with the defaults filled in and each value checked. An unknown key or a value of the
wrong type raises :class:`~django.core.exceptions.ImproperlyConfigured` naming it.

Example::

    HTASK = {
        "WORKERS": 8,
        "POLL_INTERVAL": 0.5,
        "RUN_RETENTION_DAYS": 7,
    }
"""

from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

from .retention import TaskRetention

__all__ = ["POOLS", "HtaskSettings", "get_settings", "is_dotted_name"]

#: Where a node's calls may run (the ``POOL`` setting, ``runscheduler --pool``).
POOLS = ("thread", "process")


@dataclass(frozen=True)
class HtaskSettings:
    """The resolved settings (the ``HTASK`` dict's keys, lower-cased)."""

    #: Worker threads running jobs in ``runscheduler`` (0: a thread per job).
    workers: int = 4
    #: Seconds between two looks at the database for changes made by other processes.
    poll_interval: float = 1.0
    #: One-off tasks due within this many seconds are held in memory by a node.
    lookahead: float = 30.0
    #: How many one-off tasks a node claims in one query.
    claim_batch: int = 500
    #: A node claims ahead, beyond its free workers, the due tasks its workers are
    #: expected to begin within this many seconds, judged by how long its recent calls
    #: took, and at most ``PREFETCH_PER_WORKER`` per worker: a worker that ends a call
    #: begins the next at once rather than after the next claim (0: never). Only tasks
    #: without a lock or a limit, never handed to a node before. A stop hands back those
    #: not begun, and so does the reaper for a node that died. See docs/performance.md.
    prefetch_within: float = 0.1
    #: The most tasks a node claims ahead per worker (``PREFETCH_WITHIN``), however
    #: short its recent calls (0: none). It bounds what a node holds when calls that
    #: were short turn long: each worker has that many to run before it is free.
    prefetch_per_worker: int = 8
    #: Seconds a node's claim on a task lasts; renewed by the heartbeats
    #: (:meth:`lease_renewal`).
    lease: float = 60.0
    #: Seconds between two node heartbeats (which also renew leases and reap dead nodes).
    heartbeat_interval: float = 10.0
    #: A node whose last heartbeat is older than this many seconds is dead.
    node_timeout: float = 60.0
    #: With several nodes, each schedule has a standby node besides its owner: an
    #: occurrence the owner has not claimed this many seconds after it was due is
    #: fired by the standby (the compare-and-set still lets one fire it).
    standby_delay: float = 2.0
    #: Seconds running jobs get to finish after SIGTERM before they are handed back.
    shutdown_timeout: float = 30.0
    #: Seconds a run may take when neither its task nor its schedule says (None: no
    #: limit). See docs/timeouts.md.
    default_timeout: float | None = None
    #: Seconds a run asked to stop (timeout, abort) gets to stop by itself before it is
    #: forced: an exception raised in its thread, or its process killed.
    timeout_grace: float = 5.0
    #: Worker threads a node may give up (stuck in C after a forced stop) before it
    #: stops and exits with status 4, for its supervisor to start it afresh.
    max_abandoned_threads: int = 4
    #: Where the calls run: ``"thread"`` (the worker threads) or ``"process"`` (a worker
    #: process per worker thread; see docs/timeouts.md).
    pool: str = "thread"
    #: With the thread pool: run the ``async def`` one-off tasks as tasks of one event
    #: loop (the node's async lane: docs/django.md) rather than each on a worker thread.
    #: False where async tasks block in code that does not await: on the lane one such
    #: call holds up every other until its timeout gives the loop up.
    async_lane: bool = True
    #: With the process pool: a worker process is replaced after this many calls
    #: (0: never).
    max_tasks_per_child: int = 0
    #: With the process pool: a worker process whose peak resident memory passed this
    #: many MiB is replaced after its call (0: never).
    max_memory_per_child: int = 0
    #: The largest return value a task may store, in bytes once encoded (msgpack, as
    #: arguments): a larger one fails the run, which is not retried (docs/api.md).
    result_max_bytes: int = 1 << 20
    #: First retry delay of a failed one-off task, in seconds (doubled at each attempt).
    retry_backoff: float = 10.0
    #: The longest retry delay, in seconds.
    retry_backoff_max: float = 3600.0
    #: How many times a task or a schedule's occurrence may snooze (``raise Snooze``)
    #: before its next snooze fails it (a task's ``@task(max_snoozes=...)`` wins).
    max_snoozes: int = 100
    #: At most this many missed occurrences run when a schedule's catch-up is ``all``.
    catch_up_limit: int = 100
    #: Days a finished one-off task is kept, with its runs, before a node deletes it:
    #: a number for every final status, or a dict by status (``{"failed": 30}``);
    #: 0 keeps them for ever (see :mod:`django_htask.retention`).
    task_retention_days: TaskRetention = TaskRetention()  # noqa: RUF009 - frozen
    #: Days a Run row is kept (and the row of a node stopped that long ago) before a
    #: node deletes it; 0 keeps them for ever.
    run_retention_days: int = 30
    #: Write a Run row for every attempt of a one-off task, its success too. By default
    #: a success writes none: the task's row holds it (its node, start, end and
    #: result), and a run row is written only where it adds something (a failed,
    #: timed out, aborted, snoozed or lost attempt).
    record_every_attempt: bool = False
    #: Seconds between two rounds of pruning (one node at a time deletes what is past
    #: its retention: docs/operating.md).
    prune_interval: float = 300.0
    #: Rows one batch of pruning deletes at most, in one short transaction.
    prune_batch: int = 5_000
    #: Import each installed app's ``tasks`` module when Django starts.
    autodiscover: bool = True
    #: For tests: run a task in the process that schedules it, once its transaction
    #: commits and when it is due, instead of leaving it to a node
    #: (:mod:`django_htask.testing`, docs/testing.md). ``runscheduler`` refuses to start.
    eager: bool = False
    #: Seconds between two attempts to reach a database that went away (doubled up to
    #: ``db_retry_max``).
    db_retry: float = 0.5
    db_retry_max: float = 30.0
    #: Modules (or packages) outside the installed apps whose Django ``@task``
    #: functions a node may import to run them (see docs/django-tasks.md). A module of
    #: an installed app needs no entry.
    django_task_modules: tuple[str, ...] = ()
    #: The ``DATABASES`` alias of the scheduler's tables (None: the project's routers
    #: decide, ``"default"`` without routers). See docs/databases.md.
    database: str | None = None

    def dead_before(self, now: datetime) -> datetime:
        """A node whose last heartbeat is older than this, at ``now``, is dead."""
        return now - timedelta(seconds=self.node_timeout)

    def lease_renewal(self, now: datetime) -> tuple[datetime, datetime]:
        """What a heartbeat at ``now`` renews: the leases expiring before the second
        time, until the first (``LEASE`` from now).

        A lease taken or renewed less than a heartbeat interval ago is left as it is
        (at most half of what is left of ``LEASE`` past the interval): renewing it
        would write the row of each task claimed since the last beat once more,
        which, with tasks of a few milliseconds, is every task a node holds. A lease
        left so is renewed by the next beat, and never has less than half of
        ``LEASE - HEARTBEAT_INTERVAL`` left before then."""
        lease_until = now + timedelta(seconds=self.lease)
        spare = (self.lease - self.heartbeat_interval) / 2
        return lease_until, lease_until - timedelta(
            seconds=max(0.0, min(self.heartbeat_interval, spare))
        )


_FIELDS = {f.name: f for f in dataclasses.fields(HtaskSettings)}
_lock = threading.Lock()
_cached: HtaskSettings | None = None


#: The settings that may be None (no limit) besides a number > 0.
_OPTIONAL_SECONDS = frozenset({"default_timeout"})
#: The settings that name one of a few choices.
_CHOICES = {"pool": POOLS}


def _check(key: str, value: Any, default: Any) -> Any:
    if isinstance(default, TaskRetention):
        try:
            return TaskRetention.of(value, f"HTASK[{key!r}]")
        except ValueError as exc:
            raise ImproperlyConfigured(str(exc)) from None
    if key.lower() == "database":
        if value is not None and (not isinstance(value, str) or not value):
            raise ImproperlyConfigured(
                f"HTASK[{key!r}] must be None or a DATABASES alias, got {value!r}"
            )
        return value
    if key.lower() in _OPTIONAL_SECONDS:
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 < value < math.inf
        ):
            raise ImproperlyConfigured(
                f"HTASK[{key!r}] must be None or a number of seconds > 0, got {value!r}"
            )
        return float(value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ImproperlyConfigured(f"HTASK[{key!r}] must be True or False, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ImproperlyConfigured(f"HTASK[{key!r}] must be an int >= 0, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise ImproperlyConfigured(f"HTASK[{key!r}] must be a number >= 0, got {value!r}")
        return float(value)
    if key.lower() in _CHOICES:
        choices = _CHOICES[key.lower()]
        if value not in choices:
            raise ImproperlyConfigured(
                f"HTASK[{key!r}] must be one of {', '.join(map(repr, choices))}, got {value!r}"
            )
        return value
    if isinstance(default, tuple):
        if not isinstance(value, list | tuple) or not all(is_dotted_name(v) for v in value):
            raise ImproperlyConfigured(
                f"HTASK[{key!r}] must be a list of dotted module names, got {value!r}"
            )
        return tuple(value)
    return value  # pragma: no cover - every field is typed above


def is_dotted_name(name: object) -> bool:
    """Whether ``name`` is a dotted module name (``"myapp.jobs"``)."""
    return isinstance(name, str) and all(part.isidentifier() for part in name.split("."))


def load(raw: object) -> HtaskSettings:
    """Build :class:`HtaskSettings` from the raw ``HTASK`` setting (a dict or None)."""
    if raw is None:
        return HtaskSettings()
    if not isinstance(raw, dict):
        raise ImproperlyConfigured(f"HTASK must be a dict, got {raw!r}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = str(key).lower()
        field = _FIELDS.get(name)
        if not isinstance(key, str) or field is None or key != name.upper():
            known = ", ".join(sorted(n.upper() for n in _FIELDS))
            raise ImproperlyConfigured(f"HTASK has an unknown key {key!r} (known: {known})")
        values[name] = _check(key, value, field.default)
    result = HtaskSettings(**values)
    if not 0 < result.poll_interval < math.inf:
        raise ImproperlyConfigured(
            f"HTASK['POLL_INTERVAL'] must be a finite number > 0, got {result.poll_interval!r}"
        )
    for key in ("claim_batch", "result_max_bytes", "prune_batch"):
        if getattr(result, key) < 1:
            raise ImproperlyConfigured(
                f"HTASK[{key.upper()!r}] must be >= 1, got {getattr(result, key)!r}"
            )
    return result


def get_settings() -> HtaskSettings:
    """The current settings (cached; reset when a test overrides ``HTASK``)."""
    global _cached  # noqa: PLW0603
    current = _cached
    if current is None:
        with _lock:
            current = _cached
            if current is None:
                current = _cached = load(getattr(settings, "HTASK", None))
    return current


def _reset(*, setting: str, **kwargs: object) -> None:
    # Under the lock: a thread loading the settings read before the change must not
    # store them after this reset.
    global _cached  # noqa: PLW0603
    if setting == "HTASK":
        with _lock:
            _cached = None


setting_changed.connect(_reset, dispatch_uid="django_htask.conf.reset")
