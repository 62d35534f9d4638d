"""Schedules in the admin: the list (each schedule in words, its next run, the strip of
its last runs, whether it is broken) and the page (the form, the preview of the next
runs, the state). Code-defined schedules are read-only except ``enabled``. Actions: run
now, enable, disable."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, path
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_htask.admin_database import SchedulerDatabaseAdmin
from django_htask.models import Origin, Schedule
from django_htask.operations import describe_schedule, run_schedule_soon

from .common import RETRY_FIELDS, TimeHelp, YesNoFilter, first_line, time_of
from .display import breakable, defined_at
from .forms import ScheduleForm, safe_call
from .preview import preview, preview_box
from .strip import STRIP, RunMark, recent_runs, run_strip

__all__ = ["ScheduleAdmin", "code_note"]

logger = logging.getLogger(__name__)

#: Runs in the strip of the schedule list (a schedule's page shows ``STRIP``).
LIST_STRIP = 10


def _own_zone(obj: Schedule) -> str:
    return obj.timezone


class _BrokenFilter(YesNoFilter):
    title = parameter_name = "broken"
    answers = ("broken", "not broken")

    def matching(self) -> Q:
        return ~Q(broken="")


@admin.register(Schedule)
class ScheduleAdmin(TimeHelp, SchedulerDatabaseAdmin):
    form = ScheduleForm
    # Fits a 1366 px screen beside the admin's sidebar and the filters: the function
    # goes under the name (when it differs), the zone is in the words and the times;
    # the last run and its status are the strip's last mark (its tooltip gives the
    # time; the status is a filter too), and the strip is the last LIST_STRIP runs.
    list_display = (
        "name_and_function",
        "in_words",
        "next_run",
        "recent",
        "enabled",
        "problem",
    )
    list_filter = (
        "enabled",
        _BrokenFilter,
        "last_status",
        "queue_name",
        "origin",
        "orphaned",
        "timezone",
    )
    search_fields = ("name", "function", "schedule")
    actions = ("run_now", "enable", "disable")
    ordering = ("name",)

    class Media:
        js = ("django_htask/schedule_preview.js",)
        css = {"all": ("django_htask/admin.css",)}

    _info_fields = (
        "last_runs",
        "broken",
        "origin",
        "orphaned",
        "next_run",
        "last_run",
        "last_status",
        "version",
        "created",
        "updated",
    )

    def get_fieldsets(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        main = ["name", "description", "function", "schedule", "timezone", "enabled"]
        main += ["call_args", "call_kwargs"]
        in_code = obj is not None and obj.origin == Origin.CODE
        note = code_note(obj) if obj is not None and in_code else ""
        fieldsets: list[tuple[str | None, dict[str, Any]]] = [
            (None, {"fields": main, "description": note}),
            (
                "Next runs",
                {"fields": ["next_runs"]},
            ),
            (
                "Misfires, overlap and timeout",
                {
                    "fields": ["grace", "catch_up", "overlap", "timeout", "queue_name"],
                    "description": "set by the <code>@periodic</code> call too" if in_code else "",
                },
            ),
            (
                "Retries",
                {
                    "fields": list(RETRY_FIELDS),
                    "description": (
                        "set by the <code>@periodic</code> call too"
                        if in_code
                        else "a failed run is tried again until it has run max_attempts "
                        "times; see docs/retries.md"
                    ),
                },
            ),
        ]
        if obj is not None:
            fieldsets.append(("State", {"fields": list(self._info_fields)}))
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        fields = ["next_runs", *self._info_fields]
        if obj is not None and obj.origin == Origin.CODE:
            fields += [
                "name",
                "function",
                "schedule",
                "timezone",
                "call_args",
                "call_kwargs",
                "grace",
                "catch_up",
                "overlap",
                *RETRY_FIELDS,
                "timeout",
                "queue_name",
            ]
        return fields

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _ScheduleChangeList

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        """Not a schedule its code still declares: the next sync would make it again,
        under a new id and without its runs (disable it here, or remove its
        ``@periodic``). An orphaned one (its declaration gone) may go."""
        if obj is not None and _declared(obj):
            return False
        return super().has_delete_permission(request, obj)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """What *Delete selected schedules* lists: not the ones the code declares
        (:meth:`delete_queryset` keeps them, and says so)."""
        return super().get_deleted_objects([o for o in objs if not _declared(o)], request)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        """*Delete selected schedules*: those the code declares are kept, and counted."""
        declared = queryset.filter(origin=Origin.CODE, orphaned=False)
        kept = declared.count()
        super().delete_queryset(request, queryset.exclude(pk__in=declared.values("pk")))
        if kept:
            self.message_user(
                request,
                f"{kept} schedule(s) defined in the code kept: the next sync would make "
                "them again; disable them, or remove their @periodic",
                messages.WARNING,
            )

    # -- columns and read-only values --------------------------------------------------
    @admin.display(description=f"last {STRIP} runs")
    def last_runs(self, obj: Schedule) -> SafeString:
        """The schedule's last runs, oldest left, each a mark linking to the run; read
        for the whole page at once by :class:`_ScheduleChangeList` (one query), or here
        for one schedule's page."""
        marks: list[RunMark] | None = getattr(obj, "htask_recent_runs", None)
        if marks is None:
            marks = recent_runs([obj.pk])[obj.pk] if obj.pk else []
        return run_strip(self.admin_site.name, obj.pk, marks)

    @admin.display(description=f"last {LIST_STRIP} runs")
    def recent(self, obj: Schedule) -> SafeString:
        """The list's shorter strip (read for the whole page by
        :class:`_ScheduleChangeList`)."""
        marks: list[RunMark] = getattr(obj, "htask_recent_runs", [])
        return run_strip(self.admin_site.name, obj.pk, marks, slots=LIST_STRIP)

    @admin.display(description="name", ordering="name")
    def name_and_function(self, obj: Schedule) -> SafeString:
        """The name, and below it the function when the name is not the function's."""
        if obj.name == obj.function:
            return breakable(obj.name)
        quiet = format_html('<br><span class="htask-quiet">{}</span>', breakable(obj.function))
        return breakable(obj.name) + quiet

    next_run = time_of("next_run_at", "next run", _own_zone)
    last_run = time_of("last_run_at", "last run", _own_zone)
    created = time_of("created_at", "created")
    updated = time_of("updated_at", "updated")

    @admin.display(description="broken", ordering="broken")
    def problem(self, obj: Schedule) -> str:
        """Why the scheduler stopped firing it (a value it cannot use), or nothing."""
        return first_line(obj.broken, 120)

    @admin.display(description="schedule", ordering="schedule")
    def in_words(self, obj: Schedule) -> str:
        return describe_schedule(obj.schedule, obj.timezone)

    @admin.display(description="args")
    def call_args(self, obj: Schedule) -> str:
        return json.dumps(list(safe_call(obj)[0]), default=str)

    @admin.display(description="kwargs")
    def call_kwargs(self, obj: Schedule) -> str:
        return json.dumps(safe_call(obj)[1], default=str)

    @admin.display(description="next five runs")
    def next_runs(self, obj: Schedule | None) -> SafeString:
        """The preview box (:func:`~django_htask.admin.preview.preview_box`)."""
        return preview_box(self.admin_site.name, obj)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.preview_view)
        mine = [path("preview/", view, name="django_htask_schedule_preview")]
        return mine + super().get_urls()

    def preview_view(self, request: HttpRequest) -> JsonResponse:
        """``GET preview/?schedule=…&timezone=…&enabled=1&object=PK``: the next five
        runs the scheduler will fire once the form is saved, as JSON. ``object`` is the
        schedule being edited (none for a new one); ``enabled=0`` previews it disabled."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        text = request.GET.get("schedule", "")
        zone = request.GET.get("timezone", "")
        enabled = request.GET.get("enabled", "1") != "0"
        object_id = request.GET.get("object", "")
        stored = self.get_object(request, object_id) if object_id else None
        return JsonResponse(preview(stored, text, zone, enabled))

    # -- saving ------------------------------------------------------------------------
    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        if change and obj.origin == Origin.CODE:
            obj.save(update_fields=["enabled", "updated_at"])
            return
        if not change:
            obj.origin = Origin.ADMIN
        super().save_model(request, obj, form, change)

    # -- actions (POST with CSRF, change permission) -----------------------------------
    @admin.action(description="Run the selected schedules now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for row in queryset:
            try:
                how = run_schedule_soon(row)
            except (LookupError, TypeError, ValueError) as exc:
                self.message_user(request, f"{row.name!r} cannot run: {exc}", messages.ERROR)
                continue
            self.message_user(request, f"{row.name!r} {how}", messages.SUCCESS)
            logger.info(
                "run now: %s (%s) by %s",
                row.name,
                how,
                request.user,
                extra={"action": "admin_run_now"},
            )

    @admin.action(description="Enable the selected schedules", permissions=["change"])
    def enable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description="Disable the selected schedules", permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, False)

    def _set_enabled(
        self, request: HttpRequest, queryset: QuerySet[Schedule], enabled: bool
    ) -> None:
        done = 0
        for row in queryset.filter(enabled=not enabled):
            row.enabled = enabled
            try:
                row.save(update_fields=["enabled", "updated_at"])
            except (LookupError, TypeError, ValueError) as exc:
                self.message_user(request, f"{row.name!r}: {exc}", messages.ERROR)
                continue
            done += 1
        word = "enabled" if enabled else "disabled"
        self.message_user(request, f"{done} schedule(s) {word}", messages.SUCCESS)


def _declared(obj: Schedule) -> bool:
    """Whether ``obj`` is a schedule its code still declares (defined by
    ``@periodic``, not orphaned)."""
    return obj.origin == Origin.CODE and not obj.orphaned


def code_note(obj: Schedule) -> SafeString:
    """What a code-defined schedule's page says above its read-only fields: the change
    belongs in the code, and where that code is."""
    where = defined_at(obj.function)
    if not where:
        where = f"{obj.function} (not registered in this process: look for it by that name)"
    return format_html(
        "Defined in the code, by {} on {}: change it there; the scheduler takes the new "
        "definition when it starts (or at <code>manage.py htask sync</code>). Only "
        "<b>Enabled</b> can be changed here, and it cannot be deleted here (the next "
        "sync would make it again).",
        format_html("<code>{}</code>", "@periodic"),
        where,
    )


# -- a schedule's last runs ------------------------------------------------------------
class _ScheduleChangeList(ChangeList):
    """The schedule list, with the last runs of every schedule on the page read in one
    query (:func:`~django_htask.admin.strip.recent_runs`), not one per row."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)  # evaluates (and caches) the page's rows
        marks = recent_runs([row.pk for row in rows], LIST_STRIP)
        for row in rows:
            row.htask_recent_runs = marks.get(row.pk, [])
