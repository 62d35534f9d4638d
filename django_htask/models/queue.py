"""A queue an operator acts on live: :class:`Queue`."""

from __future__ import annotations

from django.db import models

from django_htask.queues import MAX_LENGTH

from .fields import MAX_RUNNING_MAX, MAX_RUNNING_RANGE, _constraint
from .managers import QueueManager


class Queue(models.Model):
    """A queue paused or limited by an operator (``pause_queue``, ``resume_queue``,
    ``limit_queue``, the admin's queue list, ``htask queue``). A queue without a row
    runs as usual; its row is made the first time it is acted on, and kept."""

    objects = QueueManager()

    name = models.CharField(max_length=MAX_LENGTH, help_text="the tasks' and schedules' queue_name")
    paused = models.BooleanField(
        default=False,
        db_default=False,
        help_text="no task of this queue is started, no schedule of it fired, until resumed",
    )
    paused_at = models.DateTimeField(null=True, blank=True, editable=False)
    max_running = models.PositiveIntegerField(
        "limit",
        null=True,
        blank=True,
        validators=[MAX_RUNNING_RANGE],
        help_text=f"at most this many of its tasks run at once on all the nodes (1 to "
        f"{MAX_RUNNING_MAX}); empty: no limit",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name",)
        constraints = (
            # A constraint rather than unique=True (no LIKE index on PostgreSQL).
            models.UniqueConstraint(fields=("name",), name="htask_queue_name"),
            _constraint("queue", "max_running", 1, MAX_RUNNING_MAX, null=True),
        )

    def __str__(self) -> str:
        return self.name
