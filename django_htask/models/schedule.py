"""A periodic job: :class:`Schedule`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction

from django_htask import clock, notices
from django_htask.db import scheduler_alias
from django_htask.enums import CatchUp, Origin, Overlap, RunStatus
from django_htask.queues import DEFAULT_QUEUE

from .fields import (
    GRACE_MAX,
    GRACE_RANGE,
    MAX_ATTEMPTS_MAX,
    RETRY_BACKOFF_MAX,
    RETRY_BACKOFF_RANGE,
    TIMEOUT_MAX,
    TIMEOUT_MIN,
    _constraint,
    _max_attempts,
    _parse,
    _queue_name,
    _retry_constraints,
    _retry_fields,
    _timeout,
)
from .managers import SchedulerManager


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
