"""Queues in the admin: each queue acted on or with tasks pending or running, whether
it is paused, its limit (edited in the list), and its tasks pending and running;
actions: pause, resume (what they do on the nodes: :mod:`django_htask.queue_control`).

A queue appears once it has tasks pending or running: opening the list makes the rows
of the queues that have none yet (a row paused nothing and limits nothing), so that
each can be paused or limited from here. The counts are read for the whole list in one
query (``Task.objects.by_queue()``: the pending and running tasks only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_htask.admin_database import SchedulerDatabaseAdmin
from django_htask.db import scheduler_alias
from django_htask.models import Queue, Task
from django_htask.queue_control import limit_queue, pause_queue, resume_queue
from django_htask.queues import check_name

from .common import TimeHelp, time_of
from .display import times

__all__ = ["QueueAdmin", "QueueForm"]


class QueueForm(forms.ModelForm):  # type: ignore[type-arg]
    """A queue added by hand (to pause or limit it before its first task), or its
    limit changed."""

    class Meta:
        model = Queue
        fields = ("name", "max_running")

    def clean_name(self) -> str:
        try:
            return check_name(self.cleaned_data.get("name"))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(Queue)
class QueueAdmin(TimeHelp, SchedulerDatabaseAdmin):
    form = QueueForm
    list_display = ("name", "state", "max_running", "pending", "running", "updated")
    list_editable = ("max_running",)
    list_filter = ("paused",)
    search_fields = ("name",)
    actions = ("pause", "resume")
    ordering = ("name",)

    class Media:
        css = {"all": ("django_htask/admin.css",)}

    def get_fields(self, request: HttpRequest, obj: Queue | None = None) -> Any:
        if obj is None:
            return ("name", "max_running")
        return ("name", "state", "max_running", "pending", "running", "updated")

    def get_readonly_fields(self, request: HttpRequest, obj: Queue | None = None) -> Any:
        # The name is the queue's: a row renamed would be another queue.
        return () if obj is None else ("name", "state", "pending", "running", "updated")

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _QueueChangeList

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        using = scheduler_alias()
        counts = Task.objects.using(using).by_queue()
        known = set(Queue.objects.using(using).values_list("name", flat=True))
        missing = sorted(counts.keys() - known)
        if missing:
            Queue.objects.using(using).bulk_create(
                [Queue(name=name) for name in missing], ignore_conflicts=True
            )
        request.htask_queue_counts = counts  # type: ignore[attr-defined]
        return super().changelist_view(request, extra_context)

    def save_model(self, request: HttpRequest, obj: Queue, form: Any, change: bool) -> None:
        """A new row is saved as it is; a limit changed goes through ``limit_queue``
        (logged as from the shell)."""
        if not change:
            super().save_model(request, obj, form, change)
        elif "max_running" in form.changed_data:
            limit_queue(obj.name, obj.max_running, using=obj._state.db or scheduler_alias())

    # -- columns ---------------------------------------------------------------------
    @admin.display(description="state", ordering="paused")
    def state(self, obj: Queue) -> SafeString | str:
        if not obj.paused:
            return "running"
        return format_html("paused since {}", times(obj.paused_at)) if obj.paused_at else "paused"

    @admin.display(description="pending")
    def pending(self, obj: Queue) -> int:
        return self._counts(obj)[0]

    @admin.display(description="running")
    def running(self, obj: Queue) -> int:
        return self._counts(obj)[1]

    updated = time_of("updated_at", "updated")

    @staticmethod
    def _counts(obj: Queue) -> tuple[int, int]:
        """Its tasks pending and running: read for the list's page at once
        (:class:`_QueueChangeList`), or here for one queue's page."""
        counts: tuple[int, int] | None = getattr(obj, "htask_counts", None)
        if counts is None:
            rows = Task.objects.using(obj._state.db or scheduler_alias()).filter(
                queue_name=obj.name
            )
            counts = rows.by_queue().get(obj.name, (0, 0))
        return counts

    # -- actions ---------------------------------------------------------------------
    @admin.action(description="Pause the selected queues (on every node)", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        self._act(
            request,
            queryset,
            pause_queue,
            "paused: none of their tasks starts, none of their schedules fires, until "
            "resumed ({} paused already)",
        )

    @admin.action(description="Resume the selected queues", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        self._act(request, queryset, resume_queue, "resumed ({} not paused)")

    def _act(
        self,
        request: HttpRequest,
        queryset: QuerySet[Queue],
        act: Callable[[str], bool],
        said: str,
    ) -> None:
        """``act`` on each selected queue; say how many it changed, then ``said`` (its
        ``{}``: how many were so already)."""
        names = list(queryset.values_list("name", flat=True))
        done = sum(act(name) for name in names)
        text = said.format(len(names) - done)
        self.message_user(request, f"{done} queue(s) {text}", messages.SUCCESS)


class _QueueChangeList(ChangeList):
    """The queue list: the page's rows get their tasks pending and running from the
    one count :meth:`QueueAdmin.changelist_view` read."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        counts: dict[str, tuple[int, int]] = getattr(request, "htask_queue_counts", {})
        for row in self.result_list:
            row.htask_counts = counts.get(row.name, (0, 0))
