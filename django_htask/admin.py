"""The scheduler in the Django admin.

Schedules
    the list shows each schedule in words (``describe``), its zone, next and last run
    and status; the form offers the registered functions, validates the schedule text
    with the parser's own message and the arguments (JSON) against the function's
    signature, and previews the next five runs in the schedule's zone and in UTC: the
    ones the scheduler will fire once the form is saved (unchanged, from the stored
    ``next_run_at``; edited, from the time of the save).
    Code-defined schedules are read-only except ``enabled``. Actions: run now, enable,
    disable.
Runs
    read-only, with status, duration, node, error and traceback.
    Each schedule's last 20 runs are a strip of coloured marks linking to the runs (a
    column of the list, read for the whole page in one query, and on its page).
Tasks
    status, due time, attempts, last error; a pending task's time can be changed;
    actions: cancel, send again (failed ones).
Nodes
    live or dead from the heartbeat, with the work each holds.
Scheduler overview
    one page (:class:`OverviewAdmin`, on the proxy model ``Overview``): the nodes, the
    last 24 hours and the next 24 hours, drawn as inline SVG (:mod:`django_htask.charts`)
    from :func:`django_htask.overview.read_overview`.

Every state-changing action is an admin action (a POST with the CSRF token) that
needs the model's *change* permission.
"""

from __future__ import annotations

import json
import logging
import pprint
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.http import HttpRequest, JsonResponse
from django.template.defaultfilters import pluralize
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from . import charts, clock
from .admin_database import SchedulerDatabaseAdmin
from .display import defined_at, site_zone, stamp, times
from .models import (
    Node,
    Origin,
    Overview,
    RetryJitter,
    RetryKind,
    Run,
    RunStatus,
    Schedule,
    Task,
    TaskStatus,
)
from .operations import (
    abort_runs,
    describe_schedule,
    edited_runs,
    live_nodes,
    node_state,
    run_schedule_soon,
    send_again,
    validate_zone,
)
from .overview import OUTCOMES, STRIP, RunMark, read_overview, recent_runs
from .overview import Overview as OverviewData
from .retry import exception_name, split_names

__all__ = [
    "NodeAdmin",
    "OverviewAdmin",
    "RunAdmin",
    "ScheduleAdmin",
    "ScheduleForm",
    "TaskAdmin",
    "can_view_overview",
]

logger = logging.getLogger(__name__)

PREVIEW_COUNT = 5
#: Runs in the strip of the schedule list (a schedule's page shows ``STRIP``).
LIST_STRIP = 10
#: Characters of a task's result its page shows (the rest is cut, and counted).
RESULT_SHOWN = 2000
#: A schedule's or a task's retry policy, as its change page shows it.
RETRY_FIELDS = (
    "max_attempts",
    "retry_backoff",
    "retry_kind",
    "retry_backoff_max",
    "retry_jitter",
    "retry_on",
    "give_up_on",
)


# -- schedules ---------------------------------------------------------------------------
class _JSONText(forms.CharField):
    """JSON text that must decode to ``kind`` (a list or a dict)."""

    def __init__(self, kind: type, **kwargs: Any) -> None:
        self.kind = kind
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 2, "cols": 60}))
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        text = (super().to_python(value) or "").strip()
        if not text:
            return self.kind()
        try:
            decoded = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"not valid JSON: {exc} in {text!r}") from exc
        if not isinstance(decoded, self.kind):
            what = (
                "a JSON list, e.g. [1, 2]" if self.kind is list else 'a JSON object, e.g. {"x": 1}'
            )
            raise ValidationError(f"must be {what}, got {text!r}")
        return decoded

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list | dict):
            return json.dumps(value, default=str)
        return value


def _function_choices(current: str | None) -> list[tuple[str, str]]:
    from django_htask.engine import registry  # noqa: PLC0415

    names = registry.names()
    choices = [("", "---------")] + [(n, n) for n in names]
    if current and current not in names:
        choices.append((current, f"{current} (not registered)"))
    return choices


class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    """The schedule form: registered functions, parsed schedule, JSON arguments."""

    function = forms.ChoiceField(
        choices=(),
        help_text=format_html(
            "a registered function ({} or {})",
            format_html("<code>{}</code>", "@task"),
            format_html("<code>{}</code>", "@periodic"),
        ),
    )
    call_args = _JSONText(list, label="Args", help_text="positional arguments, a JSON list")
    call_kwargs = _JSONText(dict, label="Kwargs", help_text="keyword arguments, a JSON object")

    class Meta:
        model = Schedule
        fields = (
            "name",
            "description",
            "function",
            "schedule",
            "timezone",
            "enabled",
            "grace",
            "catch_up",
            "overlap",
            *RETRY_FIELDS,
            "timeout",
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        instance = self.instance
        if "function" in self.fields:
            field = self.fields["function"]
            assert isinstance(field, forms.ChoiceField)
            field.choices = _function_choices(instance.function if instance.pk else None)
        if instance.pk and instance.payload:
            args, kwargs = _safe_call(instance)
            self.initial.setdefault("call_args", list(args))
            self.initial.setdefault("call_kwargs", dict(kwargs))
        for name in ("retry_kind", "retry_jitter"):  # left out of a post: the default
            if name in self.fields:
                self.fields[name].required = False

    def clean_retry_kind(self) -> str:
        return str(self.cleaned_data.get("retry_kind") or RetryKind.EXPONENTIAL)

    def clean_retry_jitter(self) -> str:
        return str(self.cleaned_data.get("retry_jitter") or RetryJitter.NONE)

    def clean_retry_on(self) -> str:
        return _exception_paths(self.cleaned_data.get("retry_on") or "")

    def clean_give_up_on(self) -> str:
        return _exception_paths(self.cleaned_data.get("give_up_on") or "")

    def clean_timezone(self) -> str:
        value = (self.cleaned_data.get("timezone") or "UTC").strip()
        try:
            validate_zone(value)
        except ValueError as exc:
            raise ValidationError(str(exc)) from exc
        return value

    def clean(self) -> dict[str, Any]:
        from django_htask.engine import (  # noqa: PLC0415
            ArgumentError,
            FunctionNotRegistered,
            InvalidSchedule,
            PayloadError,
            parse_schedule,
            registry,
        )

        data = super().clean() or {}
        if "schedule" in self.fields:
            # What was typed, valid or not: the page shown again after a failed save
            # previews it, not the stored schedule (see ScheduleAdmin.next_runs).
            self.instance.htask_submitted = (
                self["schedule"].value() or "",
                (self["timezone"].value() or "").strip(),
                bool(self["enabled"].value()),
            )
        text = data.get("schedule")
        zone = data.get("timezone")
        if text and zone is not None:
            try:
                parse_schedule(text, tz=zone or None)
            except InvalidSchedule as exc:
                self.add_error("schedule", str(exc))
        if "function" not in self.fields:
            return data  # a code-defined schedule: its call is not edited here
        function = data.get("function")
        if function and not self.has_error("call_args") and not self.has_error("call_kwargs"):
            args = data.get("call_args") or []
            kwargs = data.get("call_kwargs") or {}
            try:
                self.instance.payload = registry.check_call(function, args, kwargs)
            except FunctionNotRegistered as exc:
                self.add_error("function", str(exc))
            except (ArgumentError, PayloadError) as exc:
                self.add_error(_argument_field(str(exc), kwargs), str(exc))
        return data

    def _update_errors(self, errors: ValidationError) -> None:
        """Add the model's own errors, without repeating what the form found; an error
        about the stored call belongs to the arguments."""
        if not hasattr(errors, "error_dict"):
            super()._update_errors(errors)  # type: ignore[misc]
            return
        kept: dict[str, list[ValidationError]] = {}
        for field, messages_ in errors.error_dict.items():
            target = field
            if field == "payload":
                target = "call_args" if "call_args" in self.fields else "__all__"
            if target in self.fields and self.has_error(target):
                continue
            if target != "__all__" and target not in self.fields:
                target = "__all__"
            if target == "__all__" and any(self.errors.values()):
                continue  # the form already says what is wrong
            kept.setdefault(target, []).extend(messages_)
        if kept:
            super()._update_errors(ValidationError(kept))  # type: ignore[misc]


def _argument_field(message: str, kwargs: dict[str, Any]) -> str:
    """Put an argument error on kwargs when it names one of the keyword arguments."""
    for key in kwargs:
        if repr(key) in message:
            return "call_kwargs"
    return "call_args"


class _YesNoFilter(admin.SimpleListFilter):
    """A filter with two answers: *yes* keeps the rows :meth:`matching` selects, *no*
    the others; ``answers`` are what the two are called."""

    answers: tuple[str, str]

    def matching(self) -> Q:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", self.answers[0]), ("no", self.answers[1])]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(self.matching())
        if self.value() == "no":
            return queryset.exclude(self.matching())
        return queryset


class _BrokenFilter(_YesNoFilter):
    title = parameter_name = "broken"
    answers = ("broken", "not broken")

    def matching(self) -> Q:
        return ~Q(broken="")


@admin.register(Schedule)
class ScheduleAdmin(SchedulerDatabaseAdmin):
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
        "next_run_at",
        "last_run_at",
        "last_status",
        "version",
        "created_at",
        "updated_at",
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
            return format_html("{}", obj.name)
        return format_html('{}<br><span class="htask-quiet">{}</span>', obj.name, obj.function)

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, obj: Schedule) -> SafeString:
        return times(obj.next_run_at, obj.timezone)

    @admin.display(description="broken", ordering="broken")
    def problem(self, obj: Schedule) -> str:
        """Why the scheduler stopped firing it (a value it cannot use), or nothing."""
        return _first_line(obj.broken, 120)

    @admin.display(description="schedule", ordering="schedule")
    def in_words(self, obj: Schedule) -> str:
        return describe_schedule(obj.schedule, obj.timezone)

    @admin.display(description="args")
    def call_args(self, obj: Schedule) -> str:
        return json.dumps(list(_safe_call(obj)[0]), default=str)

    @admin.display(description="kwargs")
    def call_kwargs(self, obj: Schedule) -> str:
        return json.dumps(_safe_call(obj)[1], default=str)

    @admin.display(description="next five runs")
    def next_runs(self, obj: Schedule | None) -> SafeString:
        """The preview box: filled here for a saved schedule, and updated by
        ``schedule_preview.js`` while the schedule, zone or enabled flag is edited.

        It shows what the scheduler will fire once the form is saved (see
        :func:`~django_htask.operations.edited_runs`): unchanged, the stored
        ``next_run_at`` and the occurrences after it."""
        url = reverse(f"{self.admin_site.name}:django_htask_schedule_preview")
        # After a failed save, ``obj`` holds what was typed: the preview is of that (or
        # says why there is none), never of the stored schedule beside the error.
        submitted: tuple[str, str, bool] | None = getattr(obj, "htask_submitted", None)
        if obj is None or (not obj.pk and submitted is None):
            inner = format_html("{}", "type a schedule to see its next runs")
            pk = schedule = zone = ""
        else:
            schedule, zone, enabled = submitted or (obj.schedule, obj.timezone, obj.enabled)
            # Compared with the stored row, which is what the scheduler fires today.
            stored = Schedule.objects.filter(pk=obj.pk).first() if obj.pk else None
            inner = _preview_html(preview(stored, schedule, zone, enabled))
            if submitted is not None:
                inner = format_html(
                    '{}<p class="help">{}</p>', inner, "of the values above, not saved"
                )
            pk = str(obj.pk or "")
        return format_html(
            '<div id="htask-live-preview" data-url="{}" data-object="{}" data-schedule="{}" '
            'data-timezone="{}">{}</div>',
            url,
            pk,
            schedule,
            zone,
            inner,
        )

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


def preview(stored: Schedule | None, text: str, zone: str, enabled: bool) -> dict[str, Any]:
    """The next five runs once ``stored`` (None: a new schedule) is saved with ``text``,
    ``zone`` and ``enabled``, in the zone and in UTC; or the error. ``note`` says why
    there are none."""
    shown = zone or "UTC"
    site = timezone.get_current_timezone_name()
    try:
        tz = validate_zone(shown)
        runs = edited_runs(stored, text, zone, enabled, PREVIEW_COUNT, clock.now())
    except ValueError as exc:
        return {"zone": shown, "site_zone": site, "runs": [], "error": str(exc), "note": ""}
    note = "disabled: no runs" if not enabled else "none: the schedule will not fire again"
    rows = [{"local": run.text(tz), "site": run.text(site_zone())} for run in runs]
    return {
        "zone": shown,
        # The site's zone is left out where it reads the same (a UTC schedule on a UTC
        # site): one column, not two identical ones.
        "site_zone": None if all(r["local"] == r["site"] for r in rows) else site,
        "runs": rows,
        "error": None,
        "note": "" if runs else note,
    }


def _preview_html(data: dict[str, Any]) -> SafeString:
    if data["error"]:
        return format_html('<p class="htask-preview-error errornote">{}</p>', data["error"])
    if not data["runs"]:
        return format_html("{}", data["note"])
    zones = [data["zone"]] + ([data["site_zone"]] if data["site_zone"] else [])
    keys = ("local", "site")[: len(zones)]
    cells = "".join("<td>{}</td>" for _ in keys)
    rows = format_html_join("", f"<tr>{cells}</tr>", ([r[k] for k in keys] for r in data["runs"]))
    return format_html(
        '<table class="htask-preview"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
        format_html_join("", "<th>{}</th>", ([z] for z in zones)),
        rows,
    )


def code_note(obj: Schedule) -> SafeString:
    """What a code-defined schedule's page says above its read-only fields: the change
    belongs in the code, and where that code is."""
    where = defined_at(obj.function)
    if not where:
        where = f"{obj.function} (not registered in this process: look for it by that name)"
    return format_html(
        "Defined in the code, by {} on {}: change it there; the scheduler takes the new "
        "definition when it starts (or at <code>manage.py htask sync</code>). Only "
        "<b>Enabled</b> can be changed here.",
        format_html("<code>{}</code>", "@periodic"),
        where,
    )


def _exception_paths(text: str) -> str:
    """A ``retry_on`` / ``give_up_on`` as stored: each class's own dotted path
    (``ConnectionError`` is ``builtins.ConnectionError``); one that cannot be imported
    is left as typed, for the field's validator to name."""
    paths = []
    for name in split_names(text):
        try:
            paths.append(exception_name(name))
        except (TypeError, ValueError):
            paths.append(name)
    return ", ".join(paths)


def _safe_call(obj: Schedule) -> tuple[tuple[Any, ...], dict[str, Any]]:
    try:
        return obj.call
    except ValueError:
        return (), {}


# -- runs --------------------------------------------------------------------------------
class _ReadOnly:
    """An admin of rows only the scheduler writes (runs, nodes): viewed, never added
    or changed by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class _Traceback:
    """The traceback of a row that failed (a run, a task), as it was printed."""

    @admin.display(description="traceback")
    def traceback_text(self, obj: Run | Task) -> SafeString | str:
        return format_html("<pre>{}</pre>", obj.traceback) if obj.traceback else "-"


@admin.register(Run)
class RunAdmin(_ReadOnly, _Traceback, SchedulerDatabaseAdmin):
    list_display = (
        "name",
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
    date_hierarchy = "started_at"
    actions = ("abort_runs",)
    fields = (
        "name",
        "function",
        "schedule",
        "task",
        "status",
        "node",
        "attempt",
        "scheduled_for",
        "started_at",
        "finished_at",
        "took",
        "abort_requested_at",
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

    @admin.display(description="due", ordering="scheduled_for")
    def due(self, obj: Run) -> SafeString:
        return times(obj.scheduled_for, _zone_of(obj))

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: Run) -> SafeString:
        return times(obj.started_at, _zone_of(obj))

    @admin.display(description="duration", ordering="duration")
    def took(self, obj: Run) -> str:
        if obj.duration is None:
            return "-"
        if obj.duration < 1:
            return f"{obj.duration * 1000:.1f} ms"
        return f"{obj.duration:.2f} s"

    @admin.display(description="error")
    def short_error(self, obj: Run) -> str:
        return _first_line(obj.error)


def _zone_of(run: Run) -> str | None:
    """The zone of a run's schedule (a one-off task's run has none)."""
    return run.schedule.timezone if run.schedule_id is not None and run.schedule else None


def _first_line(error: str, limit: int = 80) -> str:
    """An error's first line, cut at ``limit`` characters (a changelist column)."""
    first = error.splitlines()[0] if error else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


# -- tasks -------------------------------------------------------------------------------
class TaskForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Task
        fields = ("run_at",)


@admin.register(Task)
class TaskAdmin(_Traceback, SchedulerDatabaseAdmin):
    form = TaskForm
    list_display = (
        "function",
        "short_key",
        "status",
        "due",
        "queue_name",
        "tries",
        "short_error",
    )
    list_filter = ("status", "queue_name", "run_at")
    search_fields = ("function", "token", "key", "lock", "last_error")
    date_hierarchy = "run_at"
    actions = ("cancel_tasks", "abort_tasks", "send_tasks_again")
    _info = (
        "function",
        "status",
        "call",
        "token",
        "key",
        "lock",
        "max_running",
        "attempts",
        *RETRY_FIELDS,
        "timeout",
        "priority",
        "queue_name",
        "backend",
        "locked_by",
        "started_at",
        "lease_expires_at",
        "abort_requested_at",
        "last_error",
        "traceback_text",
        "returned",
        "created_at",
        "finished_at",
    )

    class Media:
        css = {"all": ("django_htask/admin.css",)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="due", ordering="run_at")
    def due(self, obj: Task) -> SafeString:
        return times(obj.run_at)

    @admin.display(description="attempts", ordering="attempts")
    def tries(self, obj: Task) -> str:
        """Attempts made, of the most allowed: ``1 of 3``."""
        return f"{obj.attempts} of {obj.max_attempts}"

    def get_fields(self, request: HttpRequest, obj: Task | None = None) -> Any:
        return ("run_at", *self._info)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _TaskChangeList

    def get_readonly_fields(self, request: HttpRequest, obj: Task | None = None) -> Any:
        if obj is not None and obj.status == TaskStatus.PENDING:
            return self._info
        return ("run_at", *self._info)

    @admin.display(description="key", ordering="key", empty_value="")
    def short_key(self, obj: Task) -> str | None:
        """The key, cut to fit a column (the change page shows all of it)."""
        return None if obj.key is None else _first_line(obj.key, 40)

    @admin.display(description="last error")
    def short_error(self, obj: Task) -> str:
        return _first_line(obj.last_error)

    @admin.display(description="call")
    def call(self, obj: Task) -> str:
        try:
            args, kwargs = obj.call
        except ValueError as exc:
            return f"undecodable payload: {exc}"
        return (
            f"args={json.dumps(list(args), default=str)} kwargs={json.dumps(kwargs, default=str)}"
        )

    @admin.display(description="result")
    def returned(self, obj: Task) -> SafeString | str:
        """What the function returned, decoded, as Python prints it (cut past
        :data:`RESULT_SHOWN` characters)."""
        if obj.status != TaskStatus.SUCCEEDED or (obj.result is None and obj.return_value is None):
            return "-"
        try:
            value = obj.result_value()
        except ValueError as exc:
            return f"undecodable result: {exc}"
        text = pprint.pformat(value, width=100, compact=True)
        if len(text) > RESULT_SHOWN:
            cut = len(text) - RESULT_SHOWN
            text = f"{text[:RESULT_SHOWN]}\n… ({cut} more characters)"
        size = f" ({len(obj.result)} bytes encoded)" if obj.result is not None else ""
        return format_html("<pre>{}</pre>{}", text, size)

    def save_model(self, request: HttpRequest, obj: Task, form: Any, change: bool) -> None:
        from .api import reschedule  # noqa: PLC0415

        moved = change and "run_at" in form.changed_data
        if moved and not reschedule(obj.token, at=obj.run_at):
            self.message_user(
                request,
                f"task {obj.pk} is no longer pending ({_status_now(obj)}): not moved",
                messages.ERROR,
            )

    def _report(self, request: HttpRequest, done: str, refused: int, why: str) -> None:
        """What an action did; and, as a warning, how many rows it refused and why."""
        self.message_user(request, done, messages.SUCCESS)
        if refused:
            self.message_user(request, f"{refused} {why}", messages.WARNING)

    @admin.action(description="Cancel the selected pending tasks", permissions=["change"])
    def cancel_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        from .api import cancel  # noqa: PLC0415

        done = skipped = 0
        for token in queryset.values_list("token", flat=True):
            if cancel(token):
                done += 1
            else:
                skipped += 1
        refused = "task(s) not cancelled: already running or finished"
        self._report(request, f"{done} task(s) cancelled", skipped, refused)

    @admin.action(
        description="Abort the selected tasks (running: stopped; pending: cancelled)",
        permissions=["change"],
    )
    def abort_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        from .api import AbortResult, abort  # noqa: PLC0415

        results = [abort(token) for token in queryset.values_list("token", flat=True)]
        asked = results.count(AbortResult.REQUESTED)
        cancelled = results.count(AbortResult.CANCELLED)
        done = f"abort asked for {asked} running task(s), {cancelled} pending task(s) cancelled"
        missed = results.count(AbortResult.NOT_FOUND)
        self._report(request, done, missed, "task(s) not aborted: already finished")

    @admin.action(description="Send the selected failed tasks again", permissions=["change"])
    def send_tasks_again(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        """Failed tasks only: pending again now, with a fresh attempt count; their runs
        are kept (:func:`~django_htask.operations.send_again`)."""
        result = send_again(queryset.values_list("pk", flat=True))
        sent, refused = f"{len(result.sent)} failed task(s) sent again", "task(s) not sent again"
        self._report(request, sent, len(result.not_failed), f"{refused}: they had not failed")
        if result.superseded:
            self.message_user(
                request,
                f"{len(result.superseded)} {refused}: a newer pending task has their key "
                "(they are cancelled, superseded by it)",
                messages.WARNING,
            )
        if result.sent:
            logger.info(
                "send again: %d task(s) by %s",
                len(result.sent),
                request.user,
                extra={"action": "admin_send_again"},
            )


def _status_now(obj: Task) -> str:
    return str(Task.objects.filter(pk=obj.pk).values_list("status", flat=True).first())


# -- nodes -------------------------------------------------------------------------------
class _AliveFilter(_YesNoFilter):
    title = "state"
    parameter_name = "alive"
    answers = ("live", "dead or stopped")

    def matching(self) -> Q:
        return live_nodes()


@admin.register(Node)
class NodeAdmin(_ReadOnly, SchedulerDatabaseAdmin):
    list_display = (
        "id",
        "state",
        "hostname",
        "pid",
        "heartbeat",
        "running",
        "started",
        "version",
    )
    list_filter = (_AliveFilter,)
    search_fields = ("id", "hostname")
    readonly_fields = (
        "id",
        "state",
        "hostname",
        "pid",
        "started_at",
        "last_heartbeat",
        "stopped_at",
        "version",
        "running_tasks",
        "running_runs",
    )
    fields = readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Node]:
        return _with_work(super().get_queryset(request))

    class Media:
        css = {"all": ("django_htask/admin.css",)}

    @admin.display(description="last heartbeat", ordering="last_heartbeat")
    def heartbeat(self, obj: Node) -> SafeString:
        return times(obj.last_heartbeat)

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: Node) -> SafeString:
        return times(obj.started_at)

    @admin.display(description="state")
    def state(self, obj: Node) -> str:
        return node_state(obj)

    @admin.display(description="running")
    def running(self, obj: Node) -> str:
        """Its work in one column: ``2 tasks, 1 schedule run``."""
        tasks, runs = self.running_tasks(obj), self.running_runs(obj)
        return f"{tasks} task{pluralize(tasks)}, {runs} schedule run{pluralize(runs)}"

    @admin.display(description="running tasks")
    def running_tasks(self, obj: Node) -> int:
        return int(getattr(obj, "n_running_tasks", 0) or 0)

    @admin.display(description="running schedule runs")
    def running_runs(self, obj: Node) -> int:
        return int(getattr(obj, "n_running_runs", 0) or 0)


def _count(queryset: QuerySet[Any], by: str) -> Subquery:
    """A correlated ``COUNT(*)`` (None when nothing matches)."""
    grouped = queryset.order_by().values(by).annotate(c=Count("pk")).values("c")
    return Subquery(grouped[:1], output_field=IntegerField())


def _with_work(nodes: QuerySet[Node]) -> QuerySet[Node]:
    """Annotate each node with what it is running (a node holds no task it has not
    started)."""
    mine = Task.objects.filter(locked_by=OuterRef("id"))
    runs = Run.objects.filter(node=OuterRef("id"), status=RunStatus.RUNNING, task=None)
    return nodes.annotate(
        n_running_tasks=_count(mine.filter(status=TaskStatus.RUNNING), "locked_by"),
        n_running_runs=_count(runs, "node"),
    )


class _TaskChangeList(ChangeList):
    """The task list, without the results (up to ``RESULT_MAX_BYTES`` a row), which
    only a task's own page shows."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        return super().get_queryset(request, exclude_parameters).defer("result", "return_value")


# -- a schedule's last runs ------------------------------------------------------------
class _ScheduleChangeList(ChangeList):
    """The schedule list, with the last runs of every schedule on the page read in one
    query (:func:`~django_htask.overview.recent_runs`), not one per row."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)  # evaluates (and caches) the page's rows
        marks = recent_runs([row.pk for row in rows], LIST_STRIP)
        for row in rows:
            row.htask_recent_runs = marks.get(row.pk, [])


def run_strip(
    site: str, schedule_id: int | None, marks: list[RunMark], slots: int = STRIP
) -> SafeString:
    """The strip of ``marks`` (oldest left, ``slots`` long), each linking to its run,
    and a link to all the schedule's runs."""
    runs_url = reverse(f"{site}:django_htask_run_changelist")
    shown = [(mark.status, f"{runs_url}{mark.id}/change/", _mark_title(mark)) for mark in marks]
    strip = charts.run_strip(shown, slots=slots)
    if schedule_id is None:
        return strip
    return format_html(
        '<span class="htask-runs">{} <a href="{}?schedule__id__exact={}">all</a></span>',
        strip,
        runs_url,
        schedule_id,
    )


def _mark_title(mark: RunMark) -> str:
    when = stamp(mark.started_at, site_zone()) if mark.started_at else "not started"
    took = "" if mark.duration is None else f", {mark.duration:.3g} s"
    error = f": {mark.error}" if mark.error else ""
    return f"{mark.status} {when}{took}{error}"


# -- the overview page -----------------------------------------------------------------
#: The models whose *view* (or *change*) permission the overview needs: it shows them all.
OVERVIEW_MODELS = ("schedule", "run", "task", "node")


def can_view_overview(user: Any) -> bool:
    """Staff with the view (or change) permission of every django_htask model; a
    superuser has them all."""
    if not (user.is_active and user.is_staff):
        return False
    return all(
        user.has_perm(f"django_htask.view_{name}") or user.has_perm(f"django_htask.change_{name}")
        for name in OVERVIEW_MODELS
    )


@admin.register(Overview)
class OverviewAdmin(_ReadOnly, SchedulerDatabaseAdmin):
    """*Scheduler overview* in the admin index: one read-only page, no rows of its own
    (``Overview`` is a proxy model so that the index lists the page)."""

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return can_view_overview(request.user)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return can_view_overview(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.overview_view)
        return [path("", view, name="django_htask_overview_changelist")]

    def overview_view(self, request: HttpRequest) -> TemplateResponse:
        """``GET``: the overview, read now (see :mod:`django_htask.overview`)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        data = read_overview()
        context = {
            **self.admin_site.each_context(request),
            "title": "Scheduler overview",
            "opts": self.model._meta,
            "app_label": self.model._meta.app_label,
            "overview": data,
            **overview_charts(data, self.admin_site.name),
        }
        return TemplateResponse(request, "admin/django_htask/overview.html", context)


#: The busiest minutes looked at to mark five apart on the timeline.
PEAK_CANDIDATES = 500


def _spread(peaks: list[tuple[int, str]], count: int = 5, apart: int = 90) -> list[tuple[int, str]]:
    """Up to ``count`` of the busiest minutes (busiest first), each at least ``apart``
    minutes from those kept, so that their labels do not overlap."""
    kept: list[tuple[int, str]] = []
    for index, label in peaks:
        if all(abs(index - other) >= apart for other, _ in kept):
            kept.append((index, label))
        if len(kept) == count:
            break
    return kept


def overview_charts(data: OverviewData, site: str) -> dict[str, Any]:
    """The overview's charts (inline SVG) and the rows of its tables."""
    columns = [f"{hour.start:%H:00}" for hour in data.hours]
    runs = charts.stacked_bars(
        "htask-runs-chart",
        "runs per hour by outcome, last 24 hours (UTC)",
        columns,
        [
            charts.Series(
                str(status), [h.counts[status] for h in data.hours], charts.COLOURS[status]
            )
            for status in OUTCOMES
        ],
    )
    lateness = charts.line_chart(
        "htask-lateness-chart",
        "lateness per hour, p50 and p99, last 24 hours (UTC)",
        columns,
        [
            charts.Series("p50", [h.p50 for h in data.hours], charts.COLOURS["p50"]),
            charts.Series("p99", [h.p99 for h in data.hours], charts.COLOURS["p99"]),
        ],
    )
    timeline = data.timeline
    busiest = timeline.busiest()
    start = timeline.start
    peaks = _spread(
        [
            (int((when - start).total_seconds() // 60), f"{when:%H:%M}")
            for when, _n in timeline.busiest(PEAK_CANDIDATES)
        ]
    )
    first_hour = 60 - start.minute if start.minute else 0
    x_labels = [
        (i, f"{start + timedelta(minutes=i):%H:%M}")
        for i in range(first_hour, len(timeline.per_minute), 180)
    ]
    upcoming = charts.area_chart(
        "htask-timeline-chart",
        "occurrences per minute, next 24 hours (UTC)",
        timeline.per_minute,
        peaks=peaks,
        x_labels=x_labels,
    )
    runs_url = reverse(f"{site}:django_htask_run_changelist")
    schedules_url = reverse(f"{site}:django_htask_schedule_changelist")
    failing = [
        {
            "row": row,
            "schedule_url": f"{schedules_url}{row.schedule_id}/change/",
            "runs_url": f"{runs_url}?schedule__id__exact={row.schedule_id}&status__exact=failed",
        }
        for row in data.failing
    ]
    return {
        "runs_chart": runs,
        "lateness_chart": lateness,
        "timeline_chart": upcoming,
        "busiest": busiest,
        "failing": failing,
        "legend": [(str(s), charts.COLOURS[s]) for s in OUTCOMES],
        "nodes_url": reverse(f"{site}:django_htask_node_changelist"),
        "meter_low": data.node_timeout / 3,
        "meter_high": data.node_timeout * 2 / 3,
        "runs_url": runs_url,
    }
