"""The starts a rate limit counts: :class:`RateSlot`."""

from __future__ import annotations

from django.db import models

from .managers import SchedulerManager

#: The index a claim reads a flow's starts in force through.
RATE_SLOT_INDEX = "htask_rate_slot_gate"


class RateSlot(models.Model):
    """A start of a task with a rate limit, counted against its flow's limit until
    ``expires_at``: its start plus the limit's period (django_htask/flow.py). Written
    by the claim that starts the task, in its transaction; the claims of the flow then
    count the slots not expired. Kept by the database through restarts and kill -9, and
    deleted once expired, by the next claim of the flow or by the pruner."""

    objects = SchedulerManager["RateSlot"]()

    id = models.BigAutoField(primary_key=True)
    gate = models.BigIntegerField(
        help_text="the flow's 64-bit key (its function and per key, hashed)"
    )
    started_at = models.DateTimeField(help_text="the claim's instant")
    expires_at = models.DateTimeField(help_text="when the start stops counting")

    class Meta:
        indexes = (models.Index(fields=("gate", "expires_at"), name=RATE_SLOT_INDEX),)

    def __str__(self) -> str:
        return f"rate slot of {self.gate} until {self.expires_at:%Y-%m-%d %H:%M:%S}"
