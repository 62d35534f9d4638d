"""The ``runscheduler`` processes: :class:`Node`, and the admin's overview page's
model (:class:`Overview`)."""

from __future__ import annotations

from django.db import models

from .managers import NodeManager


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
    pruned_tasks = models.PositiveBigIntegerField(
        default=0, db_default=0, help_text="finished tasks past their retention it deleted"
    )
    pruned_runs = models.PositiveBigIntegerField(
        default=0, db_default=0, help_text="runs past their retention it deleted"
    )
    pruned_at = models.DateTimeField(
        null=True, blank=True, help_text="when it last deleted rows past their retention"
    )
    stuck_threads = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="worker threads it gave up, still stuck in calls that did not stop when "
        "forced (as of its last heartbeat; see MAX_ABANDONED_THREADS)",
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
