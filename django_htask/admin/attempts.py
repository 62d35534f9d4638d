"""A task's attempts on its admin page (:func:`attempts_of`): its runs (a failed,
timed out, aborted, snoozed or lost attempt each wrote one, with its error and
traceback) and its success, read from its own row (a success writes no run row unless
``RECORD_EVERY_ATTEMPT`` is set: :meth:`~django_htask.querysets.RunQuerySet.attempts_of`).
"""

from __future__ import annotations

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_htask.models import Run, Task

from .common import first_line
from .display import times

__all__ = ["ATTEMPTS_SHOWN", "attempts_of"]

#: The attempts a task's page lists, the latest (its run list has them all).
ATTEMPTS_SHOWN = 50


def attempts_of(site: str, task: Task) -> SafeString | str:
    """``task``'s attempts as a table, oldest first (the last :data:`ATTEMPTS_SHOWN`):
    the attempt, how it ended, its node, start and seconds, its error with its
    traceback folded under it; a run row's attempt links to it. A link to all its runs
    in the run list follows."""
    attempts = Run.objects.using(task._state.db).attempts_of(task)
    runs_url = reverse(f"{site}:django_htask_run_changelist")
    every = format_html('<a href="{}?task__id__exact={}">its runs</a>', runs_url, task.pk)
    if not attempts:
        return format_html("none yet ({})", every)
    earlier = len(attempts) - ATTEMPTS_SHOWN
    shown = attempts[-ATTEMPTS_SHOWN:]
    rows = format_html_join("", "<tr>{}</tr>", ([_cells(site, r)] for r in shown))
    more = format_html("<p>… and {} earlier</p>", earlier) if earlier > 0 else ""
    return format_html(
        '{}<table class="htask-attempts"><thead><tr><th>attempt</th><th>ended</th>'
        "<th>node</th><th>started</th><th>seconds</th><th>error</th></tr></thead>"
        "<tbody>{}</tbody></table><p>{}</p>",
        more,
        rows,
        every,
    )


def _cells(site: str, run: Run) -> SafeString:
    """One attempt's cells: a run row's attempt links to its page; the success read
    from the task's row (no id) says so."""
    if run._state.adding:
        attempt = format_html("{} (the task's row)", run.attempt)
    else:
        url = reverse(f"{site}:django_htask_run_change", args=[run.pk])
        attempt = format_html('<a href="{}">{}</a>', url, run.attempt)
    seconds = "-" if run.duration is None else f"{run.duration:.3f}"
    return format_html(
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
        attempt,
        run.status,
        run.node or "-",
        times(run.started_at),
        seconds,
        _error(run),
    )


def _error(run: Run) -> SafeString | str:
    """The error's first line, the whole traceback (or error) folded under it."""
    if not run.error and not run.traceback:
        return "-"
    return format_html(
        "<details><summary>{}</summary><pre>{}</pre></details>",
        first_line(run.error or run.traceback),
        run.traceback or run.error,
    )
