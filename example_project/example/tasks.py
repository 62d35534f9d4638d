"""The example's jobs, found by autodiscovery when Django starts.

* ``fire_reminder``: a one-off task per reminder, scheduled from the views.
* ``cleanup``: a code-defined periodic job (``@periodic``) that deletes old reminders.
* ``digest``: a plain registered function; ``setup_demo`` creates an admin-defined
  schedule for it (origin "admin"), editable in the admin.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.utils import timezone

from django_htask import periodic, task

from .models import Reminder

logger = logging.getLogger("django_htask.example")

#: Finished reminders older than this are deleted by ``cleanup``.
KEEP = timedelta(days=1)


@task
def fire_reminder(reminder_id: int) -> None:
    """The reminder is due: mark it done (the page shows it)."""
    updated = Reminder.objects.filter(pk=reminder_id, status=Reminder.Status.SCHEDULED).update(
        status=Reminder.Status.DONE, done_at=timezone.now()
    )
    if updated:
        logger.info("reminder %s fired", reminder_id)


@periodic("@every 10m", name="example-cleanup")
def cleanup() -> None:
    """Delete the reminders that finished more than a day ago."""
    cutoff = timezone.now() - KEEP
    old = Reminder.objects.exclude(status=Reminder.Status.SCHEDULED).filter(due_at__lt=cutoff)
    count, _ = old.delete()
    logger.info("cleanup: %d old reminders deleted", count)


@task
def digest(greeting: str = "hello") -> None:
    """Log how many reminders are waiting (run by an admin-defined schedule)."""
    waiting = Reminder.objects.filter(status=Reminder.Status.SCHEDULED).count()
    logger.info("%s: %d reminders waiting", greeting, waiting)
