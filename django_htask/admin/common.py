"""What several of the admin's pages share: the retry fields, a yes/no filter, rows
only the scheduler writes, a failed row's traceback, an error's first line."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_htask.db import scheduler_alias
from django_htask.models import Run, Schedule, Task
from django_htask.queues import DEFAULT_QUEUE

__all__ = ["RETRY_FIELDS", "QueueListFilter", "ReadOnly", "Traceback", "YesNoFilter", "first_line"]

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
