"""What several of the admin's pages share: the retry fields, a yes/no filter, rows
only the scheduler writes, a failed row's traceback, an error's first line, a time
field shown as the lists show times (:func:`time_of`, with :class:`TimeHelp`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_htask.db import scheduler_alias
from django_htask.models import Run, Schedule, Task
from django_htask.queues import DEFAULT_QUEUE

from .display import times

__all__ = [
    "RETRY_FIELDS",
    "QueueListFilter",
    "ReadOnly",
    "TimeHelp",
    "Traceback",
    "YesNoFilter",
    "first_line",
    "time_of",
]

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


class YesNoFilter(admin.SimpleListFilter):
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


class QueueListFilter(admin.SimpleListFilter):
    """The task list's filter by queue. Its choices are the queues of the schedules
    and of the tasks pending or running (and ``default``), not a DISTINCT over every
    task the table holds: months of finished tasks made that read them all."""

    title = "queue"
    parameter_name = "queue_name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        using = scheduler_alias()
        schedules = Schedule.objects.using(using).order_by()
        tasks = Task.objects.using(using).active().order_by()
        names = {DEFAULT_QUEUE, *schedules.values_list("queue_name", flat=True).distinct()}
        names |= set(tasks.values_list("queue_name", flat=True).distinct())
        value = self.value()
        if value:
            names.add(value)
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(queue_name=value) if value else queryset


class ReadOnly:
    """An admin of rows only the scheduler writes (runs, nodes): viewed, never added
    or changed by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class Traceback:
    """The traceback of a row that failed (a run, a task), as it was printed."""

    @admin.display(description="traceback")
    def traceback_text(self, obj: Run | Task) -> SafeString | str:
        return format_html("<pre>{}</pre>", obj.traceback) if obj.traceback else "-"


def first_line(error: str, limit: int = 80) -> str:
    """An error's first line, cut at ``limit`` characters (a changelist column)."""
    first = error.splitlines()[0] if error else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def time_of(
    field: str, description: str, zone: Callable[[Any], str | None] | None = None
) -> Callable[[Any, Any], SafeString]:
    """A ModelAdmin's display method for the datetime field ``field``: a list's column
    or a change page's read-only value, written by :func:`.display.times` (to the
    second, with its zone; first in the zone ``zone`` gives for the row, a schedule's,
    when that reads differently), sorted by ``field``. Django writes a model field named
    in ``readonly_fields`` in its own format ("Nov. 28, 2026, 6:22 p.m."): a change page
    names this method instead."""

    def show(model_admin: Any, obj: Any) -> SafeString:
        return times(getattr(obj, field), None if zone is None else zone(obj))

    show.htask_time_field = field  # type: ignore[attr-defined]
    shown: Callable[[Any, Any], SafeString] = admin.display(
        description=description, ordering=field
    )(show)
    return shown


class TimeHelp:
    """A ModelAdmin whose change page shows time fields by :func:`time_of`: each keeps
    its model field's help text (Django looks the help up by the name shown, which is
    the method's, not the field's)."""

    model: type[Model]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        helps = dict(kwargs.pop("help_texts", None) or {})
        for name in dir(type(self)):
            field = getattr(getattr(type(self), name, None), "htask_time_field", None)
            if field is not None:
                text = getattr(self.model._meta.get_field(field), "help_text", "")
                if text:
                    helps.setdefault(name, text)
        return super().get_form(request, obj, change, help_texts=helps, **kwargs)  # type: ignore[misc]
