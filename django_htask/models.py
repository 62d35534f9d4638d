"""The scheduler's tables: schedules, one-off tasks, runs and nodes.

The database is the source of truth. A :class:`Schedule` keeps its ``next_run_at``
current on every save and every fire, so a node loads it without evaluating any cron.
Its ``version`` is set by the database itself (a trigger, see ``store/sqlite.py``) from
one counter that only grows, on every insert and update, including
``QuerySet.update()`` and raw SQL: a node reads only the rows whose version is above
the last one it saw.
"""

from __future__ import annotations

import logging
import math
import secrets
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import models, transaction
from django.db.models import Q
from django.utils.deconstruct import deconstructible

from . import clock, notices
from .db import configured_alias, scheduler_alias
from .enums import CatchUp, Origin, Overlap, RetryJitter, RetryKind, RunStatus, TaskStatus
from .keys import KEY_MAX_LENGTH, LOCK_MAX_LENGTH
from .querysets import NodeQuerySet, RunQuerySet, TaskQuerySet
from .queues import DEFAULT_QUEUE

logger = logging.getLogger(__name__)

__all__ = [
    "GRACE_MAX",
    "GRACE_RANGE",
    "MAX_ATTEMPTS_MAX",
    "MAX_ATTEMPTS_RANGE",
    "MAX_RUNNING_MAX",
    "MAX_RUNNING_RANGE",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "PRIORITY_RANGE",
    "RETRY_BACKOFF_MAX",
    "RETRY_BACKOFF_RANGE",
    "RETRY_CAP_MAX",
    "RETRY_CAP_RANGE",
    "TIMEOUT_MAX",
    "TIMEOUT_MIN",
    "TIMEOUT_RANGE",
    "CatchUp",
    "InRange",
    "Node",
    "Origin",
    "Overlap",
    "Overview",
    "RetryJitter",
    "RetryKind",
    "Run",
    "RunStatus",
    "Schedule",
    "Task",
    "TaskStatus",
    "new_token",
    "prune_runs",
]

# Django's own error for the models of an app that is not installed names neither the
# app nor the fix; importing the decorators, the api or a task module ends here first.
if apps.apps_ready and not apps.is_installed("django_htask"):
    raise ImproperlyConfigured(
        "django_htask is imported but is not in INSTALLED_APPS: add 'django_htask' to "
        "INSTALLED_APPS (then run `manage.py migrate`)"
    )


#: The ranges of the numbers a schedule or a task holds. The model fields refuse a value
#: outside them (the admin, ``full_clean()``, model forms) and so do the database's CHECK
#: constraints (raw SQL); a node marks a schedule row that still holds one broken.
MAX_ATTEMPTS_MAX = 1000  # runs of one occurrence or task, retries included (min 1)
RETRY_BACKOFF_MAX = 86_400.0  # seconds before the first retry: one day (min 0)
RETRY_CAP_MAX = 31_536_000.0  # the longest delay a retry policy allows: 365 days (min 0)
GRACE_MAX = 31_536_000.0  # seconds an occurrence may be late: 365 days (min 0, or empty)
PRIORITY_MIN, PRIORITY_MAX = -100, 100  # as django.tasks
MAX_RUNNING_MAX = 100_000  # runs of one function at once across the nodes (min 1, or none)
TIMEOUT_MIN, TIMEOUT_MAX = 0.001, 31_536_000.0  # seconds a run may take (or empty)


@deconstructible
class InRange:
    """Refuse a number outside ``low`` to ``high`` (or not finite), naming the value:
    ``retry_backoff must be from 0 to 86400 seconds, got -100.0``."""

    code = "out_of_range"

    def __init__(self, name: str, low: float, high: float, unit: str = "") -> None:
        self.name, self.low, self.high, self.unit = name, low, high, unit

    def __call__(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return  # the field's own type check says what is wrong
        if not (math.isfinite(value) and self.low <= value <= self.high):
            unit = f" {self.unit}" if self.unit else ""
            raise ValidationError(
                f"{self.name} must be from {_num(self.low)} to {_num(self.high)}{unit}, "
                "got %(value)r",
                code=self.code,
                params={"value": value},
            )

    def check(self, value: float) -> None:
        """The same test for code (``schedule()``, ``@periodic``): a ``ValueError``."""
        try:
            self(value)
        except ValidationError as exc:
            raise ValueError(exc.messages[0]) from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InRange) and (
            (self.name, self.low, self.high, self.unit)
            == (other.name, other.low, other.high, other.unit)
        )

    def __hash__(self) -> int:
        return hash((self.name, self.low, self.high, self.unit))


#: The ranges themselves: the fields' validators, and what ``schedule()`` and
#: ``@periodic`` check (``InRange.check``).
MAX_ATTEMPTS_RANGE = InRange("max_attempts", 1, MAX_ATTEMPTS_MAX)
RETRY_BACKOFF_RANGE = InRange("retry_backoff", 0, RETRY_BACKOFF_MAX, "seconds")
RETRY_CAP_RANGE = InRange("retry_backoff_max", 0, RETRY_CAP_MAX, "seconds")
GRACE_RANGE = InRange("grace", 0, GRACE_MAX, "seconds")
PRIORITY_RANGE = InRange("priority", PRIORITY_MIN, PRIORITY_MAX)
TIMEOUT_RANGE = InRange("timeout", TIMEOUT_MIN, TIMEOUT_MAX, "seconds")
MAX_RUNNING_RANGE = InRange("max_running", 1, MAX_RUNNING_MAX)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _in_range(name: str, low: float, high: float, *, null: bool = False) -> Q:
    """The CHECK condition of :class:`InRange` (``NaN`` fails it on PostgreSQL; SQLite
    stores no ``NaN``, and an infinity is out of range)."""
    condition = Q(**{f"{name}__gte": low, f"{name}__lte": high})
    return Q(**{f"{name}__isnull": True}) | condition if null else condition


def _constraint(table: str, name: str, low: float, high: float, *, null: bool = False) -> Any:
    empty = " or empty" if null else ""
    return models.CheckConstraint(
        condition=_in_range(name, low, high, null=null),
        name=f"htask_{table}_{name}_range",
        violation_error_message=f"{name} must be from {_num(low)} to {_num(high)}{empty}",
    )


def _queue_name(what: str, *, blank: bool = False) -> models.CharField[str, str]:
    """The ``queue_name`` of a schedule or a task: only the nodes serving it ``what``."""
    return models.CharField(
        max_length=100,
        blank=blank,
        default=DEFAULT_QUEUE,
        db_default=DEFAULT_QUEUE,  # rows inserted by raw SQL
        help_text=f"only the nodes serving this queue {what}",
    )


def _max_attempts(help_text: str) -> models.PositiveSmallIntegerField[int, int]:
    """The ``max_attempts`` of a schedule or a task (a retry is an attempt)."""
    return models.PositiveSmallIntegerField(
        default=1, validators=[MAX_ATTEMPTS_RANGE], help_text=help_text
    )


@deconstructible
class ExceptionNames:
    """Refuse a list of exception classes (dotted paths, separated by commas) that are
    not all importable exception classes, naming the bad one."""

    code = "invalid_exception"

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, value: str) -> None:
        from django_htask.retry import exception_name, split_names  # noqa: PLC0415

        for path in split_names(value):
            try:
                exception_name(path)
            except (TypeError, ValueError) as exc:
                raise ValidationError(f"{self.name}: {exc}", code=self.code) from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExceptionNames) and self.name == other.name

    def __hash__(self) -> int:
        return hash(self.name)


def _retry_fields() -> tuple[Any, ...]:
    """The retry policy's columns beside ``max_attempts`` and ``retry_backoff``:
    ``retry_kind``, ``retry_backoff_max``, ``retry_jitter``, ``retry_on`` and
    ``give_up_on`` (their defaults: the exponential backoff of old, capped by the
    RETRY_BACKOFF_MAX setting, any error retried)."""
    return (
        models.CharField(
            max_length=12,
            choices=RetryKind.choices,
            default=RetryKind.EXPONENTIAL,
            db_default=RetryKind.EXPONENTIAL,  # rows inserted by raw SQL
            help_text="how the delay between attempts grows",
        ),
        models.FloatField(
            null=True,
            blank=True,
            validators=[RETRY_CAP_RANGE],
            help_text="longest retry delay, seconds (to 365 days); empty: RETRY_BACKOFF_MAX",
        ),
        models.CharField(
            max_length=8,
            choices=RetryJitter.choices,
            default=RetryJitter.NONE,
            db_default=RetryJitter.NONE,
            help_text="how each delay is spread at random",
        ),
        _exception_list(
            "retry_on", "retry only these exception classes (dotted paths, commas between)"
        ),
        _exception_list("give_up_on", "never retry these exception classes (wins over retry_on)"),
    )


def _exception_list(name: str, help_text: str) -> models.CharField[str, str]:
    """``retry_on`` or ``give_up_on``: exception classes' dotted paths, commas between."""
    return models.CharField(
        max_length=1000,
        blank=True,
        default="",
        db_default="",  # rows inserted by raw SQL
        validators=[ExceptionNames(name)],
        help_text=help_text,
    )


def _retry_constraints(table: str) -> tuple[Any, ...]:
    kinds, jitters = RetryKind.values, RetryJitter.values
    return (
        _constraint(table, "retry_backoff_max", 0, RETRY_CAP_MAX, null=True),
        models.CheckConstraint(
            condition=Q(retry_kind__in=kinds),
            name=f"htask_{table}_retry_kind_valid",
            violation_error_message=f"retry_kind must be one of {', '.join(kinds)}",
        ),
        models.CheckConstraint(
            condition=Q(retry_jitter__in=jitters),
            name=f"htask_{table}_retry_jitter_valid",
            violation_error_message=f"retry_jitter must be one of {', '.join(jitters)}",
        ),
    )


def _timeout() -> models.FloatField[float | None, float | None]:
    """The ``timeout`` of a schedule or a task (docs/timeouts.md)."""
    return models.FloatField(
        null=True,
        blank=True,
        validators=[TIMEOUT_RANGE],
        help_text="seconds a run may take before it is stopped (a failed run, retried "
        "by max_attempts); empty: the DEFAULT_TIMEOUT setting, if any",
    )


def _abort_requested_at() -> models.DateTimeField[datetime | None, datetime | None]:
    """When an abort of a running task or run was asked for (its node stops it)."""
    return models.DateTimeField(
        null=True, blank=True, editable=False, help_text="when an abort was asked for"
    )


def new_token() -> str:
    """A public task token: 192 random bits, URL-safe (32 characters)."""
    return secrets.token_urlsafe(24)


def _parse(text: str, tz: str) -> Any:
    from django_htask.engine import parse_schedule  # noqa: PLC0415

    return parse_schedule(text, tz=tz or None)


M = TypeVar("M", bound=models.Model)


class SchedulerManager(models.Manager[M]):
    """The models' manager: with ``HTASK["DATABASE"]`` set, its querysets read and write
    there unless told otherwise (``db_manager``, ``using``), router or not, so
    ``Task.objects...`` and Django's own queries through it (a form's unique checks, the
    admin) find the tables. A new instance's ``save()`` follows the routers: pass
    ``using=`` or add :class:`django_htask.routers.HtaskRouter`."""

    def get_queryset(self) -> models.QuerySet[M]:
        queryset = super().get_queryset()
        database = None if self._db else configured_alias()
        return queryset.using(database) if database else queryset


#: The managers of the models whose rows have rules (:mod:`django_htask.querysets`).
TaskManager = SchedulerManager.from_queryset(TaskQuerySet)
RunManager = SchedulerManager.from_queryset(RunQuerySet)
NodeManager = SchedulerManager.from_queryset(NodeQuerySet)


class Schedule(models.Model):
    """A periodic job: a registered function, its arguments and when it runs."""

    objects = SchedulerManager["Schedule"]()

    name = models.CharField(max_length=200, unique=True)
    # db_default: producers inserting rows by raw SQL (docs/wire-format.md) may leave it out
    description = models.TextField(
        blank=True, default="", db_default="", help_text="what it is for"
    )
    function = models.CharField(
        max_length=300, help_text="registered name, package.module:qualname"
    )
    schedule = models.CharField(
        max_length=300, help_text="cron, @every 5m, @daily, once 2030-01-01T10:00 …"
    )
    timezone = models.CharField(max_length=64, default="UTC", blank=True)
    payload = models.BinaryField(
        default=b"", blank=True, editable=False, help_text="the msgpack call"
    )
    enabled = models.BooleanField(default=True)
    next_run_at = models.DateTimeField(null=True, blank=True, db_index=True, editable=False)
    last_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_status = models.CharField(
        max_length=16, choices=RunStatus.choices, blank=True, default="", editable=False
    )
    grace = models.FloatField(
        null=True,
        blank=True,
        validators=[GRACE_RANGE],
        help_text="seconds an occurrence may be late and still run, at most 365 days "
        "(empty: no limit)",
    )
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.LATEST)
    overlap = models.CharField(max_length=8, choices=Overlap.choices, default=Overlap.SKIP)
    # blank: empty in a form, the default queue
    queue_name = _queue_name("fire it (runscheduler --queue); empty: default", blank=True)
    max_attempts = _max_attempts("runs of one occurrence, retries included (1 to 1000)")
    retry_backoff = models.FloatField(
        default=10.0,
        validators=[RETRY_BACKOFF_RANGE],
        help_text="seconds before the first retry (0 to 86400: a day); see retry_kind",
    )
    retry_kind, retry_backoff_max, retry_jitter, retry_on, give_up_on = _retry_fields()
    timeout = _timeout()
    origin = models.CharField(max_length=8, choices=Origin.choices, default=Origin.ADMIN)
    orphaned = models.BooleanField(
        default=False, editable=False, help_text="declared in code once, no longer"
    )
    version = models.BigIntegerField(default=0, db_index=True, editable=False)
    broken = models.TextField(
        blank=True,
        default="",
        db_default="",  # rows inserted by raw SQL
        editable=False,
        help_text="why the scheduler cannot use this schedule (it then stops firing it); "
        "saving the schedule clears it",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name",)
        indexes = (models.Index(fields=("enabled", "next_run_at"), name="htask_sched_due"),)
        constraints = (
            _constraint("schedule", "max_attempts", 1, MAX_ATTEMPTS_MAX),
            _constraint("schedule", "retry_backoff", 0, RETRY_BACKOFF_MAX),
            *_retry_constraints("schedule"),
            _constraint("schedule", "grace", 0, GRACE_MAX, null=True),
            _constraint("schedule", "timeout", TIMEOUT_MIN, TIMEOUT_MAX, null=True),
        )

    def __str__(self) -> str:
        return self.name

    # -- the call --------------------------------------------------------------------
    def set_call(
        self, args: tuple[Any, ...] | list[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> None:
        """Store ``function(*args, **kwargs)``, checked against the signature."""
        from django_htask.engine import registry  # noqa: PLC0415

        self.payload = registry.check_call(self.function, tuple(args), dict(kwargs or {}))

    @property
    def call(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The stored ``(args, kwargs)``."""
        if not self.payload:
            return (), {}
        from django_htask.engine import decode_call  # noqa: PLC0415

        _name, args, kwargs = decode_call(bytes(self.payload))
        return tuple(args), dict(kwargs)

    # -- time ------------------------------------------------------------------------
    def parsed(self) -> Any:
        """The schedule value (raises InvalidSchedule naming the bad text)."""
        return _parse(self.schedule, self.timezone)

    def compute_next_run(self, after: datetime | None = None) -> datetime | None:
        """The first occurrence strictly after ``after`` (default: now)."""
        when: datetime | None = self.parsed().next_after(after or clock.now())
        return when

    def clean(self) -> None:
        from django_htask.engine import FunctionNotRegistered, InvalidSchedule  # noqa: PLC0415

        errors: dict[str, str] = {}
        try:
            self.parsed()
        except InvalidSchedule as exc:
            errors["schedule"] = str(exc)
        try:
            self._check_call()
        except FunctionNotRegistered as exc:
            errors["function"] = str(exc)
        except (TypeError, ValueError) as exc:
            errors["payload"] = str(exc)
        if errors:
            raise ValidationError(errors)

    def _check_call(self) -> None:
        from django_htask.engine import registry  # noqa: PLC0415

        args, kwargs = self.call
        registry.check_call(self.function, args, kwargs)

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Check the call, recompute ``next_run_at`` and save.

        ``next_run_at`` is recomputed from now when the row is new, when its schedule,
        zone or enabled flag changed, or when it is empty (as it is when the scheduler
        marked the schedule broken: saving clears the mark). The version is set by the
        database and read back. The call is checked against the function's signature
        whenever the schedule is enabled; a disabled one is not checked, so a schedule
        whose function is gone from the code (orphaned) can still be saved disabled.
        """
        if self.enabled:
            self._check_call()
        if not self.queue_name:
            self.queue_name = DEFAULT_QUEUE
        update_fields = kwargs.get("update_fields")
        timing = update_fields is None or {"schedule", "timezone", "enabled"} & set(update_fields)
        if timing and self.broken:  # saved again: the scheduler tries it afresh
            self.broken = ""
            if update_fields is not None:
                kwargs["update_fields"] = update_fields = {*update_fields, "broken"}
        if timing and self._timing_changed():
            self.next_run_at = self.compute_next_run() if self.enabled else None
            if update_fields is not None:
                kwargs["update_fields"] = {*update_fields, "next_run_at"}
        super().save(*args, **kwargs)
        using = kwargs.get("using") or self._state.db or scheduler_alias()
        self.version = (
            Schedule.objects.using(using)
            .filter(pk=self.pk)
            .values_list("version", flat=True)
            .first()
            or 0
        )
        # A node in this process looks at once, but only after the commit: before it,
        # its own connection could not see the row.
        transaction.on_commit(notices.notify_local_change, using=using)

    def _timing_changed(self) -> bool:
        if self.pk is None or self.next_run_at is None:
            return True
        old = (
            Schedule.objects.using(self._state.db or scheduler_alias())
            .filter(pk=self.pk)
            .values("schedule", "timezone", "enabled", "next_run_at")
            .first()
        )
        if old is None:
            return True
        return (
            old["schedule"] != self.schedule
            or old["timezone"] != self.timezone
            or old["enabled"] != self.enabled
        )


#: The index a claim of due tasks reads, in the claim's order.
CLAIM_INDEX = "htask_task_claim"
#: The partial unique index behind keys: one pending task per key, across queues; rows
#: without a key are not in it. Its predicate, as SQL, is the conflict target's of
#: ``INSERT … ON CONFLICT`` (store/inserts.py), which must match it word for word.
KEY_INDEX = "htask_task_pending_key"
KEY_PREDICATE = '"key" IS NOT NULL AND "status" = \'pending\''
#: The pending tasks with a lock or a limit (docs/howto-exactly-one.md), which a claim
#: starts only when their lock is free and their function below its limit; the partial
#: index over them, and its predicate as SQL (a claim's query must imply it word for
#: word for SQLite to read the index).
GATED = Q(status="pending") & (Q(lock__isnull=False) | Q(max_running__isnull=False))
GATED_INDEX = "htask_task_gated"
GATED_PREDICATE = "status = 'pending' AND (lock IS NOT NULL OR max_running IS NOT NULL)"
#: The tasks a node holds (``locked_by`` set).
HOLDER_INDEX = "htask_task_holder"


class Task(models.Model):
    """A one-off call, scheduled for a time, cancellable by its public token."""

    objects = TaskManager()

    token = models.CharField(max_length=64, default=new_token, editable=False)
    key = models.CharField(
        max_length=KEY_MAX_LENGTH,
        null=True,
        blank=True,
        editable=False,
        help_text="at most one pending task has this key (schedule(key=...)); empty: none",
    )
    lock = models.CharField(
        max_length=LOCK_MAX_LENGTH,
        null=True,
        blank=True,
        editable=False,
        help_text="tasks sharing a lock never run at the same time on any node "
        "(schedule(lock=...), @task(lock=...)); empty: none",
    )
    max_running = models.PositiveIntegerField(
        null=True,
        blank=True,
        editable=False,
        validators=[MAX_RUNNING_RANGE],
        help_text="at most this many tasks of its function run at once on all the nodes "
        "(@task(max_running=...) when it was queued); empty: no limit",
    )
    function = models.CharField(max_length=300)
    payload = models.BinaryField(default=b"", editable=False)
    run_at = models.DateTimeField(db_index=True)
    # Not indexed on its own: the indexes below begin with it (see Meta).
    status = models.CharField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    max_attempts = _max_attempts("runs in all, retries included (1 to 1000)")
    retry_backoff = models.FloatField(
        null=True,
        blank=True,
        validators=[RETRY_BACKOFF_RANGE],
        help_text="seconds before the first retry (to 86400); empty: RETRY_BACKOFF",
    )
    retry_kind, retry_backoff_max, retry_jitter, retry_on, give_up_on = _retry_fields()
    queue_name = _queue_name("run it (runscheduler --queue)")
    backend = models.CharField(
        max_length=100,
        blank=True,
        default="",
        db_default="",
        editable=False,
        help_text="the django.tasks backend alias it was enqueued through (runscheduler "
        "--backend), empty for django-htask's own",
    )
    priority = models.SmallIntegerField(
        default=0,
        db_default=0,  # rows inserted by raw SQL or another language's producer
        validators=[PRIORITY_RANGE],
        help_text="among tasks due together, a higher priority starts first (-100 to 100)",
    )
    timeout = _timeout()
    locked_by = models.CharField(max_length=100, blank=True, null=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    abort_requested_at = _abort_requested_at()
    started_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="when its last attempt started"
    )
    last_error = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    return_value = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="what a django.tasks task returned (JSON), once it succeeded",
    )
    result = models.BinaryField(
        null=True,
        blank=True,
        editable=False,
        help_text="what the function returned (msgpack), once it succeeded; empty if None",
    )

    class Meta:
        ordering = ("run_at", "id")
        indexes = (
            models.Index(fields=("status", "run_at"), name="htask_task_due"),
            # The claim's order after its status: a claim reads the few rows it takes,
            # not every pending one (a backlog of 100k tasks made each claim sort them
            # all). Not a partial index: SQLite uses one only for a literal status.
            models.Index(fields=("status", "-priority", "run_at", "id"), name=CLAIM_INDEX),
            # The aborts a node looks for, as for runs.
            models.Index(
                fields=("locked_by",),
                condition=Q(abort_requested_at__isnull=False),
                name="htask_task_abort",
            ),
            # The pending tasks with a lock or a limit, in the claim's order: a claim
            # looks for them here first, and finds none at once when there are none.
            models.Index(fields=("-priority", "run_at", "id"), condition=GATED, name=GATED_INDEX),
            # The tasks a node holds (its heartbeat renews their leases): partial, so
            # that queuing a task, which no node holds yet, does not write it (on
            # MySQL/MariaDB, which have no partial index, Django drops the condition).
            models.Index(
                fields=("locked_by",), condition=Q(locked_by__isnull=False), name=HOLDER_INDEX
            ),
        )
        constraints = (
            _constraint("task", "max_attempts", 1, MAX_ATTEMPTS_MAX),
            _constraint("task", "retry_backoff", 0, RETRY_BACKOFF_MAX, null=True),
            *_retry_constraints("task"),
            _constraint("task", "priority", PRIORITY_MIN, PRIORITY_MAX),
            _constraint("task", "timeout", TIMEOUT_MIN, TIMEOUT_MAX, null=True),
            _constraint("task", "max_running", 1, MAX_RUNNING_MAX, null=True),
            models.UniqueConstraint(
                fields=("key",),
                condition=Q(key__isnull=False, status="pending"),
                name=KEY_INDEX,
            ),
            # A constraint rather than unique=True, which on PostgreSQL also builds a
            # second index for LIKE (varchar_pattern_ops) that no query uses and every
            # task queued would write.
            models.UniqueConstraint(fields=("token",), name="htask_task_token"),
        )

    def __str__(self) -> str:
        return f"{self.function} at {self.run_at:%Y-%m-%d %H:%M:%S} ({self.status})"

    @property
    def call(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The stored ``(args, kwargs)``."""
        from django_htask.engine import decode_call  # noqa: PLC0415

        _name, args, kwargs = decode_call(bytes(self.payload))
        return tuple(args), dict(kwargs)

    def result_value(self) -> Any:
        """What the function returned, once the task succeeded; None before, or if it
        returned None. Decoded and converted to the function's return annotation; read
        as decoded (logged, action ``result_as_decoded``) when the function is not
        registered in this process or the value no longer fits its annotation. A
        django.tasks task's value is its JSON ``return_value``. Raises
        ``PayloadError`` if the stored bytes are not a result."""
        from django_htask.engine import registry  # noqa: PLC0415
        from django_htask.engine.codec import decode_result  # noqa: PLC0415
        from django_htask.engine.errors import ArgumentError, FunctionNotRegistered  # noqa: PLC0415

        if self.result is None:
            return self.return_value
        data = bytes(self.result)
        try:
            return registry.read_result(self.function, data)
        except (FunctionNotRegistered, ArgumentError) as exc:
            logger.warning(
                "the result of task %s is read as decoded: %s",
                self.token,
                exc,
                extra={"action": "result_as_decoded", "token": self.token},
            )
            return decode_result(data)


class Run(models.Model):
    """One execution (or a missed or skipped occurrence) of a schedule or a task."""

    objects = RunManager()

    schedule = models.ForeignKey(
        Schedule, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    name = models.CharField(max_length=300, help_text="the schedule's name or the function")
    function = models.CharField(max_length=300)
    node = models.CharField(max_length=100, blank=True, default="")
    attempt = models.PositiveSmallIntegerField(default=1)
    scheduled_for = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=RunStatus.choices, db_index=True)
    error = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    duration = models.FloatField(null=True, blank=True, help_text="seconds")
    abort_requested_at = _abort_requested_at()

    class Meta:
        ordering = ("-started_at", "-id")
        indexes = (
            # The aborts a node looks for (a few rows at most): a small partial index,
            # on a condition without parameters, which SQLite can use too.
            models.Index(
                fields=("node",),
                condition=Q(abort_requested_at__isnull=False),
                name="htask_run_abort",
            ),
            # A schedule's last runs (the admin's strip of marks): an index range each.
            models.Index(fields=("schedule", "started_at"), name="htask_run_recent"),
            # The runs of one outcome in a time range (the overview's failures).
            models.Index(fields=("status", "started_at"), name="htask_run_outcome"),
        )

    def __str__(self) -> str:
        return f"{self.name} {self.status}"


def prune_runs(days: int | None = None, *, using: str | None = None) -> int:
    """Delete the finished runs older than ``days`` days (default: the
    ``RUN_RETENTION_DAYS`` setting) in the database ``using`` (default: the
    scheduler's); return how many. Runs still running are kept.

    ``days=0`` deletes every finished run; with the setting at 0 (keep for ever) and no
    ``days`` given, nothing is deleted. ``runscheduler`` calls it once an hour;
    ``manage.py htask prune`` calls it on demand.
    """
    from .conf import get_settings  # noqa: PLC0415

    if days is None:
        days = get_settings().run_retention_days
        if days == 0:
            return 0
    if isinstance(days, bool) or not isinstance(days, int) or days < 0:
        raise ValueError(f"days must be an int >= 0, got {days!r}")
    cutoff = clock.now() - timedelta(days=days)
    old = Run.objects.using(using or scheduler_alias()).filter(finished_at__lt=cutoff)
    old = old.exclude(status=RunStatus.RUNNING)
    deleted, _ = old.delete()
    return deleted


class Node(models.Model):
    """A ``runscheduler`` process, alive while its heartbeat is recent."""

    objects = NodeManager()

    id = models.CharField(max_length=100, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_heartbeat = models.DateTimeField(db_index=True)
    version = models.CharField(max_length=40, help_text="django-htask version")
    stopped_at = models.DateTimeField(null=True, blank=True)
    queues = models.CharField(
        max_length=1000,
        default="*",
        db_default="*",
        help_text="the queues it serves: * every one, a,b only those, *,-c all but c",
    )

    class Meta:
        ordering = ("-last_heartbeat",)

    def __str__(self) -> str:
        return self.id


class Overview(Node):
    """No table of its own: the admin's *Scheduler overview* page hangs on it, since a
    model is what gets a line in the admin index (see ``admin.OverviewAdmin``)."""

    class Meta:
        proxy = True
        verbose_name = "scheduler overview"
        verbose_name_plural = "scheduler overview"
        default_permissions = ()
