"""A reminder: a message for a signed-in user at a time, fired by the scheduler."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Reminder(models.Model):
    class Status(models.TextChoices):
        SCHEDULED = "scheduled", "scheduled"
        DONE = "done", "done"
        CANCELLED = "cancelled", "cancelled"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    text = models.CharField(max_length=200)
    due_at = models.DateTimeField()
    #: The scheduled task's token: it cancels or moves the task (and is in the cancel link).
    token = models.CharField(max_length=64, unique=True, null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.SCHEDULED)
    snoozed = models.PositiveSmallIntegerField(default=0)
    done_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects: models.Manager[Reminder] = models.Manager()

    class Meta:
        ordering = ("-due_at",)

    def __str__(self) -> str:
        return f"{self.text} at {self.due_at:%Y-%m-%d %H:%M:%S} ({self.status})"
