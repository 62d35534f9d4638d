"""One-off tasks in the admin: status, due time, attempts, snoozes, last error, the call
and what it returned, its attempts (:mod:`.attempts`), its batch and graph (:mod:`.compose`), why it
waits (a waiting task for its dependencies or batch, a pending due one for its gates:
:func:`~django_htask.overview.why_waiting`); a pending task's time can be changed;
actions: cancel, abort, send again (failed ones)."""

from __future__ import annotations

import json
import logging
import pprint
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_htask import clock
from django_htask.admin_database import SchedulerDatabaseAdmin
from django_htask.flow import RateLimit
from django_htask.models import Task, TaskStatus
from django_htask.operations import FOLLOWED_NOT_SENT, send_again

from .attempts import attempts_of
from .common import RETRY_FIELDS, QueueListFilter, TimeHelp, Traceback, first_line, time_of
from .compose import batch_of, graph_of
from .display import breakable
from .forms import TaskForm
from .overview.waiting import why_waiting
from .paging import LargeTablePaginator

__all__ = ["TaskAdmin"]

logger = logging.getLogger(__name__)

#: Characters of a task's result its page shows (the rest is cut, and counted).
RESULT_SHOWN = 2000


@admin.register(Task)
class TaskAdmin(Traceback, TimeHelp, SchedulerDatabaseAdmin):
    form = TaskForm
    list_display = (
        "function_name",
        "key_and_lock",
        "status",
        "due",
        "queue_name",
        "tries",
        "snoozes",
        "short_error",
    )
    list_filter = ("status", QueueListFilter, "run_at")
    search_fields = ("function", "token", "key", "lock", "last_error")
    # Months of finished tasks: no exact count past a few thousand rows, no date
    # hierarchy (its years and months are a DISTINCT over every row).
    paginator = LargeTablePaginator
    show_full_result_count = False
    actions = ("cancel_tasks", "abort_tasks", "send_tasks_again")
    _info = (
        "function",
        "status",
        "waits_on",
        "call",
        "token",
        "key",
        "lock",
        "max_running",
        "per_key",
        "rate",
        "attempts",
        "snoozes",
        "max_snoozes",
        "run_history",
        *RETRY_FIELDS,
        "timeout",
        "priority",
        "queue_name",
        "backend",
        "locked_by",
        "node",
        "started",
        "lease_expires",
        "abort_requested",
        "last_error",
        "traceback_text",
        "reported",
        "returned",
        "created",
        "finished",
        "batch_page",
        "graph",
    )

    class Media:
        css = {"all": ("django_htask/admin.css",)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    due = time_of("run_at", "due")
    started = time_of("started_at", "started")
    lease_expires = time_of("lease_expires_at", "lease expires")
    abort_requested = time_of("abort_requested_at", "abort requested")
    created = time_of("created_at", "created")
    finished = time_of("finished_at", "finished")

    @admin.display(description="attempts", ordering="attempts")
    def tries(self, obj: Task) -> str:
        """Attempts made, of the most allowed: ``1 of 3``."""
        return f"{obj.attempts} of {obj.max_attempts}"

    @admin.display(description="rate limit")
    def rate(self, obj: Task) -> str:
        """Its rate limit as it is written (``20/s``), or ``-``."""
        if obj.rate_limit is None or obj.rate_period is None:
            return "-"
        return str(RateLimit(obj.rate_limit, obj.rate_period))

    @admin.display(description="waits on")
    def waits_on(self, obj: Task) -> str:
        """Why it does not start: waiting, for the tasks it runs after or its batch;
        pending and due, what the claim weighs (its lock held, its function or key at
        its limit, its rate limit's window full, its queue paused or full):
        :func:`~django_htask.overview.why_waiting`."""
        reasons = why_waiting(obj, clock.now(), using=obj._state.db)
        return "; ".join(reasons) or "-"

    @admin.display(description="batch")
    def batch_page(self, obj: Task) -> SafeString | str:
        """Its batch, or the one it is a callback of (:func:`.compose.batch_of`)."""
        return batch_of(self.admin_site.name, obj)

    @admin.display(description="graph")
    def graph(self, obj: Task) -> SafeString | str:
        """What it runs after and what runs after it
        (:func:`~django_htask.admin.compose.graph_of`)."""
        return graph_of(self.admin_site.name, obj)

    @admin.display(description="its attempts")
    def run_history(self, obj: Task) -> SafeString | str:
        """Its attempts, the failed ones with their tracebacks and its success from its
        own row, and a link to its runs in the run list (:func:`.attempts.attempts_of`)."""
        return attempts_of(self.admin_site.name, obj)

    def get_fields(self, request: HttpRequest, obj: Task | None = None) -> Any:
        """Its due time first: the field ``run_at`` (Django's date and time inputs)
        where it can be moved, else as the list shows it."""
        return ("run_at" if self._movable(request, obj) else "due", *self._info)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return _TaskChangeList

    def get_readonly_fields(self, request: HttpRequest, obj: Task | None = None) -> Any:
        return self._info if self._movable(request, obj) else ("due", *self._info)

    def _movable(self, request: HttpRequest, obj: Task | None) -> bool:
        """Whether its time can be changed here: pending, by a user who may change
        tasks."""
        pending = obj is not None and obj.status == TaskStatus.PENDING
        return pending and self.has_change_permission(request, obj)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Task | None = None,
    ) -> Any:
        """No *Save* buttons on the page of a task that is not pending: nothing on it
        can be changed (its actions are in the list)."""
        if obj is not None and obj.status != TaskStatus.PENDING:
            context.update(show_save=False, show_save_and_continue=False)
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="function", ordering="function")
    def function_name(self, obj: Task) -> SafeString:
        """The function, wrapping only after its dots, colons and underscores."""
        return breakable(obj.function)

    @admin.display(description="key, lock", ordering="key")
    def key_and_lock(self, obj: Task) -> SafeString | str:
        """The key, and under it the lock, each cut to fit the column (the change page
        shows all of them): one column, so that the list still fits a 1366 px screen."""
        key = "" if obj.key is None else first_line(obj.key, 40)
        if obj.lock is None:
            return key
        lock = format_html('<span class="htask-quiet">lock: {}</span>', first_line(obj.lock, 40))
        return format_html("{}<br>{}", key, lock) if key else lock

    @admin.display(description="last error")
    def short_error(self, obj: Task) -> str:
        return first_line(obj.last_error)

    @admin.display(description="call")
    def call(self, obj: Task) -> str:
        try:
            args, kwargs = obj.call
        except ValueError as exc:
            return f"undecodable payload: {exc}"
        return (
            f"args={json.dumps(list(args), default=str)} kwargs={json.dumps(kwargs, default=str)}"
        )

    @admin.display(description="progress")
    def reported(self, obj: Task) -> SafeString | str:
        """What its function last reported with ``set_progress()``, as JSON (its keys
        sorted: PostgreSQL keeps them in an order of its own)."""
        if obj.progress is None:
            return "-"
        return format_html("<pre>{}</pre>", json.dumps(obj.progress, indent=1, sort_keys=True))

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
        from django_htask.api import reschedule  # noqa: PLC0415

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
        from django_htask.api import cancel  # noqa: PLC0415

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
        from django_htask.api import AbortResult, abort  # noqa: PLC0415

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
        if result.followed:
            self.message_user(
                request, f"{len(result.followed)} {refused}: {FOLLOWED_NOT_SENT}", messages.WARNING
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


class _TaskChangeList(ChangeList):
    """The task list, without the results (up to ``RESULT_MAX_BYTES`` a row), which
    only a task's own page shows."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        return super().get_queryset(request, exclude_parameters).defer("result", "return_value")
