"""The example's own tests (``python manage.py test example``), written as a project
using django_htask would write them: in eager mode, on a fake clock, with the
assertions of :mod:`django_htask.testing` (docs/testing.md).

The views schedule ``fire_reminder`` for the reminder's time. Eager mode runs a task
as soon as it is due, here in the test's process; a task due later waits until the
fake clock reaches its time and :func:`~django_htask.testing.drain` runs it, exactly
as a node would have (the same rows, the same result).
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import TestCase, override_settings
from django.urls import reverse
from django.utils import timezone

from django_htask import schedule
from django_htask.clock import use_clock
from django_htask.engine import FakeClock
from django_htask.testing import assert_scheduled, drain, refute_scheduled

from .models import Reminder
from .tasks import KEEP, cleanup, fire_reminder


@override_settings(HTASK={**settings.HTASK, "EAGER": True})
class ReminderTests(TestCase):
    def setUp(self) -> None:
        # The clock starts at the real time: the form checks times against it. A test
        # moves it to a reminder's due time (set), which the view read from the real one.
        self.clock = FakeClock(timezone.now())
        self.enterContext(use_clock(self.clock))
        user = get_user_model().objects.create_user("ann", password="not-secret")
        self.client.force_login(user)

    def add_reminder(self, text: str, delay: int) -> Reminder:
        # The view schedules inside transaction.atomic(): its task is written when that
        # commits, which a TestCase captures.
        with self.captureOnCommitCallbacks(execute=True):
            response = self.client.post(reverse("home"), {"text": text, "delay": str(delay)})
        assert response.status_code == 302
        return Reminder.objects.get(text=text)

    def test_a_reminder_fires_when_it_is_due(self) -> None:
        reminder = self.add_reminder("call Bob", 3600)
        waiting = assert_scheduled(fire_reminder, reminder.pk)
        assert waiting.token == reminder.token
        assert drain().ran == 0  # not due yet

        self.clock.set(reminder.due_at)
        assert drain().succeeded == 1
        reminder.refresh_from_db()
        assert reminder.status == Reminder.Status.DONE
        refute_scheduled(fire_reminder)

    def test_a_snoozed_reminder_waits_five_more_minutes(self) -> None:
        reminder = self.add_reminder("stretch", 60)
        self.client.post(reverse("snooze", args=[reminder.pk]))
        waiting = assert_scheduled(fire_reminder, reminder.pk)
        assert waiting.run_at == reminder.due_at + timedelta(minutes=5)

        self.clock.set(reminder.due_at)
        assert drain().ran == 0  # its first time: it was snoozed
        self.clock.set(waiting.run_at)
        assert drain().succeeded == 1

    def test_a_cancelled_reminder_never_fires(self) -> None:
        reminder = self.add_reminder("water the plants", 600)
        self.client.post(reverse("cancel", args=[reminder.token]))
        refute_scheduled(fire_reminder, reminder.pk)
        self.clock.set(reminder.due_at)
        assert drain().ran == 0
        reminder.refresh_from_db()
        assert reminder.status == Reminder.Status.CANCELLED

    def test_cleanup_deletes_what_finished_long_ago(self) -> None:
        old = self.add_reminder("old", 10)
        self.clock.set(old.due_at)
        assert drain().succeeded == 1
        Reminder.objects.filter(pk=old.pk).update(due_at=timezone.now() - KEEP * 2)
        recent = self.add_reminder("recent", 10)
        schedule(cleanup)  # due now: eager mode runs it at once
        assert list(Reminder.objects.values_list("pk", flat=True)) == [recent.pk]
