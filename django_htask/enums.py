"""The choices of the scheduler's fields: where a schedule comes from, its overlap and
catch-up policies, and the statuses of runs and tasks (``models`` re-exports them)."""

from __future__ import annotations

from django.db import models

__all__ = [
    "CALLED",
    "CatchUp",
    "Origin",
    "Overlap",
    "RetryJitter",
    "RetryKind",
    "RunStatus",
    "TaskStatus",
]


class Origin(models.TextChoices):
    CODE = "code", "code"
    ADMIN = "admin", "admin"


class Overlap(models.TextChoices):
    ALLOW = "allow", "allow (run beside the previous run)"
    SKIP = "skip", "skip (drop the occurrence)"
    DELAY = "delay", "delay (wait for the previous run)"


class CatchUp(models.TextChoices):
    LATEST = "latest", "latest (missed occurrences run once)"
    ALL = "all", "all (each missed occurrence runs, up to a cap)"
    SKIP = "skip", "skip (missed occurrences do not run)"


class RetryKind(models.TextChoices):
    """How a retry's delay grows (``RetryPolicy.kind``)."""

    FIXED = "fixed", "fixed (retry_backoff every time)"
    LINEAR = "linear", "linear (retry_backoff times the attempt)"
    EXPONENTIAL = "exponential", "exponential (retry_backoff, doubled after each)"


class RetryJitter(models.TextChoices):
    """How a retry's delay is spread (``RetryPolicy.jitter``)."""

    NONE = "none", "none"
    FULL = "full", "full (0 to the delay)"
    EQUAL = "equal", "equal (half the delay plus 0 to half)"


class RunStatus(models.TextChoices):
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    MISSED = "missed", "missed"
    SKIPPED = "skipped", "skipped"
    #: The run asked to run again later (``raise Snooze``): not a failure.
    SNOOZED = "snoozed", "snoozed"


#: The statuses of the runs that called their function (a missed or skipped occurrence
#: did not): their lateness, started minus scheduled, is the scheduler's.
CALLED = (RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.SNOOZED)


class TaskStatus(models.TextChoices):
    PENDING = "pending", "pending"
    #: Waiting for other tasks: its dependencies (``schedule(after=...)``), or, for a
    #: batch's callback, its batch. Never claimed; made pending (or cancelled) by the
    #: transaction that records the end it waits for.
    WAITING = "waiting", "waiting"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"
