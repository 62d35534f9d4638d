"""Nodes in the admin: live, dead or stopped from the heartbeat, with the work each
holds (counted as the overview counts it, ``Node.objects.with_work()``)."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.template.defaultfilters import pluralize

from django_htask.admin_database import SchedulerDatabaseAdmin
from django_htask.models import Node
from django_htask.operations import live_nodes, node_state
from django_htask.querysets import NodeQuerySet

from .common import ReadOnly, TimeHelp, YesNoFilter, time_of

__all__ = ["NodeAdmin"]


class _AliveFilter(YesNoFilter):
    title = "state"
    parameter_name = "alive"
    answers = ("live", "dead or stopped")

    def matching(self) -> Q:
        return live_nodes()


@admin.register(Node)
class NodeAdmin(ReadOnly, TimeHelp, SchedulerDatabaseAdmin):
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
        "started",
        "heartbeat",
        "stopped",
        "version",
        "running_tasks",
        "running_runs",
        "stuck_threads",
    )
    fields = readonly_fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Node]:
        nodes = super().get_queryset(request)
        assert isinstance(nodes, NodeQuerySet)  # Node.objects'
        return nodes.with_work()

    class Media:
        css = {"all": ("django_htask/admin.css",)}

    heartbeat = time_of("last_heartbeat", "last heartbeat")
    started = time_of("started_at", "started")
    stopped = time_of("stopped_at", "stopped")

    @admin.display(description="state")
    def state(self, obj: Node) -> str:
        return node_state(obj)

    @admin.display(description="running")
    def running(self, obj: Node) -> str:
        """Its work in one column: ``2 tasks, 1 schedule run``, and its worker threads
        given up when it has any (``; 3 stuck threads``)."""
        tasks, runs = self.running_tasks(obj), self.running_runs(obj)
        text = f"{tasks} task{pluralize(tasks)}, {runs} schedule run{pluralize(runs)}"
        stuck = obj.stuck_threads
        return f"{text}; {stuck} stuck thread{pluralize(stuck)}" if stuck else text

    @admin.display(description="running tasks")
    def running_tasks(self, obj: Node) -> int:
        return int(getattr(obj, "n_tasks", 0) or 0)

    @admin.display(description="running schedule runs")
    def running_runs(self, obj: Node) -> int:
        return int(getattr(obj, "n_runs", 0) or 0)
