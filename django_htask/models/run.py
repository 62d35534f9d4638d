"""What ran: :class:`Run`."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from django_htask.enums import RunStatus

from .fields import ConditionsKnown, _abort_requested_at
from .managers import RunManager
from .schedule import Schedule
from .task import Task


class Run(ConditionsKnown):
    """One execution (or a missed or skipped occurrence) of a schedule or a task."""

    objects = RunManager()

    schedule = models.ForeignKey(
        Schedule, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    # No constraint in the database: it would check the task's row at every run written
    # (a FOR KEY SHARE lock on it, on PostgreSQL) and look for runs at every task
    # deleted, the largest part of a prune. The ORM keeps SET_NULL; the pruner deletes
    # a task's runs with it; a task deleted by raw SQL leaves its runs until
    # RUN_RETENTION_DAYS.
    task = models.ForeignKey(
        Task,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="runs",
        db_constraint=False,
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
