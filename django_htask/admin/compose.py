"""Tasks composed in the admin: batches (:class:`BatchAdmin`: their counts, members
and callbacks), and, on a task's page (:mod:`.tasks`), what it runs after and what
runs after it (:func:`graph_of`) and its batch (:func:`batch_of`); why a waiting task
waits is said with the other reasons a task waits
(:func:`~django_htask.overview.why_waiting`). Each reads a bounded handful of rows by
an index: a task's edges (both ways), a batch's members counted by status."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, Q
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_htask.admin_database import SchedulerDatabaseAdmin
from django_htask.db import scheduler_alias
from django_htask.models import Batch, Dependency, Task, TaskStatus

from .common import ReadOnly, TimeHelp, YesNoFilter, time_of
from .overview.waiting import CALLBACKS, callback_of

__all__ = ["EDGES_SHOWN", "BatchAdmin", "batch_link", "batch_of", "graph_of"]

#: The edges a task's page lists each way (a fan-in of thousands is counted past it).
EDGES_SHOWN = 50


def _task_url(site: str, task_id: int) -> str:
    return reverse(f"{site}:django_htask_task_change", args=[task_id])


def _task_link(site: str, task_id: int, status: str | None) -> SafeString:
    """``task 12 (succeeded)``, linking to its page; ``task 12 (gone)`` once pruned."""
    if status is None:
        return format_html("task {} (gone)", task_id)
    return format_html('<a href="{}">task {}</a> ({})', _task_url(site, task_id), task_id, status)


def batch_link(site: str, batch_id: int | None) -> SafeString | str:
    """A link to batch ``batch_id``'s page ("-" for none)."""
    if batch_id is None:
        return "-"
    url = reverse(f"{site}:django_htask_batch_change", args=[batch_id])
    return format_html('<a href="{}">batch {}</a>', url, batch_id)


def batch_of(site: str, task: Task) -> SafeString | str:
    """A link to the batch ``task`` is a member of, or, while it waits, the one it is
    a callback of (with its role); "-" for none."""
    if task.batch_id is not None or task.status != TaskStatus.WAITING:
        return batch_link(site, task.batch_id)
    found = callback_of(task, using=scheduler_alias())
    if found is None:
        return "-"
    batch, role, _when = found
    return format_html("{} (its {} callback)", batch_link(site, batch.pk), role)


def _edges(site: str, edges: list[tuple[int, str | None, int | None]]) -> SafeString:
    """The tasks of ``edges`` (id, and the parameter and place a result is passed
    to), each with its status, as a list."""
    statuses = dict(
        Task.objects.using(scheduler_alias())
        .filter(id__in=[i for i, _param, _position in edges])
        .values_list("id", "status")
    )
    rows = []
    for task_id, param, position in edges:
        passed = (
            "" if param is None else f" → {param}" + ("" if position is None else f"[{position}]")
        )
        rows.append((_task_link(site, task_id, statuses.get(task_id)), passed))
    return format_html("<ul>{}</ul>", format_html_join("", "<li>{}{}</li>", rows))


def graph_of(site: str, task: Task) -> SafeString | str:
    """What ``task`` runs after (with the parameter each result is passed to) and what
    runs after it, each linked with its status (at most :data:`EDGES_SHOWN` each way,
    and how many more)."""
    edges = Dependency.objects.using(scheduler_alias()).order_by("id")
    after = edges.filter(task_id=task.pk)
    before = edges.filter(after_id=task.pk) if task.followed else edges.none()
    parts = []
    for title, rows, column in (
        ("runs after", after, "after_id"),
        ("runs before", before, "task_id"),
    ):
        shown = list(rows.values_list(column, "param", "position")[:EDGES_SHOWN])
        if not shown:
            continue
        if column == "task_id":
            shown = [(i, None, None) for i, _param, _position in shown]
        more = rows.count() - len(shown) if len(shown) == EDGES_SHOWN else 0
        tail = format_html(" and {} more", more) if more else ""
        parts.append(format_html("<p>{}:</p>{}{}", title, _edges(site, shown), tail))
    if not parts:
        return "-"
    return format_html_join("", "{}", ((p,) for p in parts))


class _FinishedFilter(YesNoFilter):
    title = "finished"
    parameter_name = "finished"
    answers = ("finished", "running")

    def matching(self) -> Q:
        return Q(finished_at__isnull=False)


@admin.register(Batch)
class BatchAdmin(ReadOnly, TimeHelp, SchedulerDatabaseAdmin):
    """Batches: their counts of members by how they ended, their members (the task
    list of the batch) and callbacks."""

    list_display = (
        "id",
        "name",
        "state",
        "total",
        "succeeded",
        "failed",
        "cancelled",
        "created",
        "finished",
    )
    list_filter = (_FinishedFilter,)
    search_fields = ("name",)
    readonly_fields = (
        "name",
        "state",
        "total",
        "succeeded",
        "failed",
        "cancelled",
        "members",
        "callbacks",
        "created",
        "first_failure",
        "finished",
    )
    fields = readonly_fields

    class Media:
        css = {"all": ("django_htask/admin.css",)}

    @admin.display(description="state")
    def state(self, obj: Batch) -> str:
        if obj.finished_at is not None:
            return "finished"
        left = obj.total - obj.succeeded - obj.failed - obj.cancelled
        return f"running: {left} of {obj.total} not ended"

    created = time_of("created_at", "created")
    first_failure = time_of("failed_at", "first failure")
    finished = time_of("finished_at", "finished")

    @admin.display(description="members")
    def members(self, obj: Batch) -> SafeString:
        """Its members left, counted by status (one query, by the batch index), each
        count linking to the task list of those members."""
        url = reverse(f"{self.admin_site.name}:django_htask_task_changelist")
        counts = (
            Task.objects.using(scheduler_alias())
            .filter(batch=obj.pk)
            .order_by()
            .values_list("status")
            .annotate(n=Count("id"))
        )
        rows = [
            (f"{url}?batch={obj.pk}&status={status}", n, status)
            for status, n in sorted(counts, key=lambda row: _ORDER.get(row[0], 9))
        ]
        listed = format_html_join(", ", '<a href="{}">{} {}</a>', rows) if rows else "none left"
        return format_html('{} (<a href="{}?batch={}">all</a>)', listed, url, obj.pk)

    @admin.display(description="callbacks")
    def callbacks(self, obj: Batch) -> SafeString | str:
        """Each callback, when it is called, and its task's status."""
        ids = {role: getattr(obj, f"{role}_id") for role, _when in CALLBACKS}
        statuses = dict(
            Task.objects.using(scheduler_alias())
            .filter(id__in=[i for i in ids.values() if i is not None])
            .values_list("id", "status")
        )
        rows = [
            (role, when, _task_link(self.admin_site.name, ids[role], statuses.get(ids[role])))
            for role, when in CALLBACKS
            if ids[role] is not None
        ]
        if not rows:
            return "-"
        return format_html("<ul>{}</ul>", format_html_join("", "<li>{} ({}): {}</li>", rows))


#: The order a batch's members are counted in.
_ORDER = {
    TaskStatus.WAITING: 0,
    TaskStatus.PENDING: 1,
    TaskStatus.RUNNING: 2,
    TaskStatus.SUCCEEDED: 3,
    TaskStatus.FAILED: 4,
    TaskStatus.CANCELLED: 5,
}
