"""The reminders site: create, snooze and cancel reminders; see them fire.

* ``home``: the signed-in user's reminders and the form to add one. A new reminder is
  scheduled with :func:`django_htask.schedule` inside the same transaction as its row.
* ``snooze``: :func:`django_htask.reschedule` moves the task five minutes later.
* ``cancel``: the link carries the task's token (as a link in an e-mail would); the
  page asks to confirm, and the POST calls :func:`django_htask.cancel`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from django_htask import cancel as cancel_task
from django_htask import reschedule, schedule
from django_htask.models import Run, Schedule, Task, TaskStatus

from .forms import ReminderForm
from .models import Reminder
from .tasks import fire_reminder

SNOOZE = timedelta(minutes=5)


class Attempt(NamedTuple):
    name: str
    status: str
    started_at: datetime | None


def latest_runs(n: int) -> list[Attempt]:
    """The ``n`` latest attempts: the schedules' runs and the attempts that failed
    (each a run row), and the tasks that succeeded (read from their own rows: a
    success writes no run row unless ``RECORD_EVERY_ATTEMPT`` is set)."""
    runs = [
        Attempt(r.name, r.status, r.started_at) for r in Run.objects.exclude(started_at=None)[:n]
    ]
    done = Task.objects.filter(status=TaskStatus.SUCCEEDED).order_by("-finished_at")[:n]
    tasks = [Attempt(t.function, t.status, t.started_at) for t in done]
    both = sorted(runs + tasks, key=lambda a: a.started_at or datetime.min.replace(tzinfo=UTC))
    return both[::-1][:n]


@login_required
@require_http_methods(["GET", "POST"])
def home(request: HttpRequest) -> HttpResponse:
    form = ReminderForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        due_at = form.cleaned_data["due_at"]
        with transaction.atomic():
            reminder = Reminder.objects.create(
                user=request.user, text=form.cleaned_data["text"], due_at=due_at
            )
            task = schedule(fire_reminder, reminder.pk, at=due_at)
            reminder.token = task.token
            reminder.save(update_fields=["token"])
        messages.success(request, f"reminder {reminder.text!r} set")
        return HttpResponseRedirect(reverse("home"))
    reminders = Reminder.objects.filter(user=request.user)[:50]
    context = {
        "form": form,
        "reminders": reminders,
        "schedules": Schedule.objects.all(),
        "runs": latest_runs(10),
        "refresh": any(r.status == Reminder.Status.SCHEDULED for r in reminders),
    }
    return render(request, "example/home.html", context)


@login_required
@require_POST
def snooze(request: HttpRequest, pk: int) -> HttpResponse:
    reminder = get_object_or_404(Reminder, pk=pk, user=request.user)
    due_at = max(reminder.due_at, timezone.now()) + SNOOZE
    token = reminder.token or ""
    if reminder.status == Reminder.Status.SCHEDULED and reschedule(token, at=due_at):
        Reminder.objects.filter(pk=pk).update(due_at=due_at, snoozed=reminder.snoozed + 1)
        messages.success(request, f"{reminder.text!r} snoozed to {due_at:%H:%M:%S}")
    else:
        messages.error(request, f"{reminder.text!r} already fired or was cancelled")
    return HttpResponseRedirect(reverse("home"))


@require_http_methods(["GET", "POST"])
def cancel(request: HttpRequest, token: str) -> HttpResponse:
    reminder = get_object_or_404(Reminder, token=token) if token else None
    if reminder is None:
        return HttpResponse(status=404)
    if request.method == "POST":
        if cancel_task(token):
            Reminder.objects.filter(pk=reminder.pk).update(status=Reminder.Status.CANCELLED)
            messages.success(request, f"{reminder.text!r} cancelled")
        else:
            messages.error(request, f"{reminder.text!r} already fired or was cancelled")
        return HttpResponseRedirect(reverse("home"))
    return render(request, "example/cancel.html", {"reminder": reminder})
