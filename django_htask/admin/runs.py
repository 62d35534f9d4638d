"""Runs in the admin: the run list and page, read-only (status, duration, node, error
and traceback), with an abort action for running ones."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from django_htask.admin_database import SchedulerDatabaseAdmin
from django_htask.models import Run, Schedule
from django_htask.operations import abort_runs

from .common import ReadOnly, TimeHelp, Traceback, first_line, time_of
from .display import breakable
from .paging import LargeTablePaginator

__all__ = ["RunAdmin"]


def _zone_of(run: Run) -> str | None:
    """The zone of a run's schedule (a one-off task's run has none)."""
    return run.schedule.timezone if run.schedule_id is not None and run.schedule else None


@admin.register(Run)
class RunAdmin(ReadOnly, Traceback, TimeHelp, SchedulerDatabaseAdmin):
    list_display = (
        "run_name",
        "status",
        "due",
        "started",
        "took",
        "node",
        "attempt",
        "short_error",
    )
    list_filter = ("status", "schedule", "started_at")
    list_select_related = ("schedule",)
    search_fields = ("name", "function", "error", "node")
    # Months of runs: no exact count past a few thousand rows, no date hierarchy
    # (its years and months are a DISTINCT over every row).
    paginator = LargeTablePaginator
    show_full_result_count = False
    actions = ("abort_runs",)
    fields = (
        "name",
        "function",
        "schedule",
        "task",
        "status",
        "node",
        "attempt",
        "due",
        "started",
        "finished",
        "took",
        "abort_requested",
        "error",
        "traceback_text",
    )
    readonly_fields = fields

    def has_abort_permission(self, request: HttpRequest) -> bool:
        """Runs are never changed by hand; aborting one takes the right to change
        schedules."""
        return request.user.has_perm(f"{Schedule._meta.app_label}.change_schedule")

    @admin.action(description="Abort the selected running runs", permissions=["abort"])
    def abort_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        selected = list(queryset.values_list("pk", flat=True))
        asked = abort_runs(selected)
        self.message_user(request, f"abort asked for {asked} running run(s)", messages.SUCCESS)
        if len(selected) > asked:
            self.message_user(
                request,
                f"{len(selected) - asked} run(s) not aborted: not running, or asked already",
                messages.WARNING,
            )

    class Media:
        css = {"all": ("django_htask/admin.css",)}

    @admin.display(description="name", ordering="name")
    def run_name(self, obj: Run) -> SafeString:
        """The schedule's name or the task's function, wrapping only after its dots,
        colons and underscores."""
        return breakable(obj.name)

    due = time_of("scheduled_for", "due", _zone_of)
    started = time_of("started_at", "started", _zone_of)
    finished = time_of("finished_at", "finished", _zone_of)
    abort_requested = time_of("abort_requested_at", "abort requested")

    @admin.display(description="duration", ordering="duration")
    def took(self, obj: Run) -> str:
        if obj.duration is None:
            return "-"
        if obj.duration < 1:
            return f"{obj.duration * 1000:.1f} ms"
        return f"{obj.duration:.2f} s"

    @admin.display(description="error")
    def short_error(self, obj: Run) -> str:
        return first_line(obj.error)
