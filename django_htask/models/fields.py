"""The columns the models share: the ranges of their numbers and the validators that
hold them, the field builders, the CHECK constraints, and the public token."""

from __future__ import annotations

import math
import secrets
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils.deconstruct import deconstructible

from django_htask.enums import RetryJitter, RetryKind
from django_htask.flow import RATE_COUNT_MAX, RATE_PERIOD_MAX
from django_htask.queues import DEFAULT_QUEUE

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
MAX_SNOOZES_MAX = 100_000  # snoozes of one task (min 0, or empty: MAX_SNOOZES)


#: Django's warnings that MySQL and MariaDB ignore the condition of a unique constraint
#: (models.W036) or of an index (models.W037). django_htask's partial indexes and its
#: pending key are written for it: on those databases the store does without the
#: conditions (docs/databases.md), so the warnings would only repeat at every command.
CONDITIONS_IGNORED = frozenset({"models.W036", "models.W037"})


class ConditionsKnown(models.Model):
    """A model whose conditional indexes and constraints are meant to lose their
    condition where the database ignores it: :data:`CONDITIONS_IGNORED` are left out
    of its checks (the abstract base changes no migration)."""

    class Meta:
        abstract = True

    @classmethod
    def _check_indexes(cls, databases: Any) -> list[Any]:
        return _known(super()._check_indexes(databases))  # type: ignore[misc]

    @classmethod
    def _check_constraints(cls, databases: Any) -> list[Any]:
        return _known(super()._check_constraints(databases))  # type: ignore[misc]


def _known(messages: list[Any]) -> list[Any]:
    return [m for m in messages if getattr(m, "id", None) not in CONDITIONS_IGNORED]


#: ``path``: where the migrations find it (the package, as before its split).
@deconstructible(path="django_htask.models.InRange")
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
MAX_SNOOZES_RANGE = InRange("max_snoozes", 0, MAX_SNOOZES_MAX)
RATE_LIMIT_RANGE = InRange("rate_limit", 1, RATE_COUNT_MAX)
RATE_PERIOD_RANGE = InRange("rate_period", 1, RATE_PERIOD_MAX, "seconds")


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


@deconstructible(path="django_htask.models.ExceptionNames")
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
