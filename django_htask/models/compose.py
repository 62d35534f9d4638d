"""Tasks composed: a :class:`Batch` of tasks called back once they end, and a
:class:`Dependency`, one edge of a graph of tasks (``schedule(after=...)``)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from .fields import ConditionsKnown
from .managers import SchedulerManager
from .task import Task

#: The finished batches by their end: the pruner reads them as a range of it.
BATCH_PRUNE_INDEX = "htask_batch_prune"


def _callback(role: str) -> models.ForeignKey[Task | None, Task | None]:
    return models.ForeignKey(
        Task,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,
        editable=False,
        help_text=f"the task called {role} (waiting until then; cancelled if it is not called)",
    )


class Batch(ConditionsKnown):
    """Tasks grouped to be called back once (``django_htask.batch()``): ``on_failure``
    at the first member that fails for good, ``on_success`` and ``on_finish`` once every
    member ended. Its counters move in the transaction that records each member's end,
    so each callback is released exactly once."""

    objects = SchedulerManager["Batch"]()

    name = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    total = models.PositiveIntegerField(default=0, help_text="members added so far")
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0, help_text="members failed for good")
    cancelled = models.PositiveIntegerField(default=0)
    finished_at = models.DateTimeField(
        null=True, blank=True, help_text="when its last member ended (on_finish was called)"
    )
    failed_at = models.DateTimeField(
        null=True, blank=True, help_text="when its first member failed (on_failure was called)"
    )
    on_success = _callback("once every member succeeded")
    on_failure = _callback("at the first member that failed for good")
    on_finish = _callback("once every member ended")

    class Meta:
        ordering = ("-id",)
        verbose_name_plural = "batches"
        indexes = (
            models.Index(
                fields=("finished_at",),
                condition=Q(finished_at__isnull=False),
                name=BATCH_PRUNE_INDEX,
            ),
        )

    def __str__(self) -> str:
        return f"batch {self.pk}{f' {self.name}' if self.name else ''}"


class Dependency(models.Model):
    """``task`` runs once ``after`` succeeded (one edge of ``schedule(after=...)``):
    when ``after`` fails for good or is cancelled, ``task`` is cancelled, unless
    ``run_anyway`` (``after_failure="run"``). With a ``param``, ``after``'s result is
    passed to ``task`` under that name (``position``: its place in a list of results
    passed under one name)."""

    objects = SchedulerManager["Dependency"]()

    # No constraints in the database, as for a run's task: the pruner deletes a task's
    # edges with it (django_htask.store.compose).
    task = models.ForeignKey(
        Task, on_delete=models.CASCADE, related_name="dependencies", db_constraint=False
    )
    after = models.ForeignKey(
        Task, on_delete=models.DO_NOTHING, related_name="dependents", db_constraint=False
    )
    param = models.CharField(
        max_length=100,
        null=True,
        blank=True,
        help_text="the parameter that receives the result of the task it runs after",
    )
    position = models.PositiveIntegerField(
        null=True, blank=True, help_text="its place in the list of results passed to param"
    )
    run_anyway = models.BooleanField(
        default=False,
        help_text="the task runs even when the one it waits for fails or is cancelled",
    )

    class Meta:
        ordering = ("id",)
        verbose_name_plural = "dependencies"

    def __str__(self) -> str:
        return f"task {self.task_id} after task {self.after_id}"
