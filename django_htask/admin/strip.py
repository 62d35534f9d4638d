"""A schedule's last runs as a strip of coloured marks, oldest left, each linking to its
run (a column of the schedule list, and on a schedule's page): :func:`recent_runs`
reads the strips of a whole page in one query, :func:`run_strip` writes one (its SVG
drawn by :func:`django_htask.admin.overview.charts.run_strip`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models.expressions import RawSQL
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_htask.db import scheduler_alias
from django_htask.models import Run

from .display import site_zone, stamp
from .overview import charts

__all__ = ["STRIP", "RunMark", "recent_runs", "run_strip"]

#: Runs in a schedule's strip.
STRIP = 20


@dataclass(frozen=True)
class RunMark:
    """One run in a schedule's strip."""

    id: int
    status: str
    started_at: datetime | None
    scheduled_for: datetime | None
    duration: float | None
    error: str


def recent_runs(
    schedule_ids: Iterable[int], count: int = STRIP, *, using: str | None = None
) -> dict[int, list[RunMark]]:
    """The last ``count`` runs of each schedule (oldest first), in one query:
    ``id IN (… UNION ALL …)`` of one ``SELECT id … ORDER BY started_at DESC LIMIT count``
    per schedule, each an index range on ``(schedule, started_at)``."""
    ids = sorted(set(schedule_ids))
    found: dict[int, list[RunMark]] = {pk: [] for pk in ids}
    if not ids:
        return found
    runs = Run.objects.using(using or scheduler_alias())
    # One subquery compiled once, repeated per schedule: compiling a hundred through the
    # ORM would cost more than running them. Each is wrapped so that its LIMIT is
    # allowed in a UNION ALL (SQLite, PostgreSQL).
    inner = runs.filter(schedule_id=0).order_by("-started_at", "-id").values("id")[:count]
    sql, params = inner.query.sql_with_params()
    if list(params) != [0]:  # pragma: no cover - Django inlines the LIMIT
        raise AssertionError(f"unexpected parameters {params!r} in {sql}")
    union = " UNION ALL ".join(f"SELECT * FROM ({sql}) AS htask_last_{i}" for i in range(len(ids)))
    rows = (
        runs.filter(id__in=RawSQL(union, ids))  # our own SQL, the ids as parameters
        .order_by()
        .values_list(
            "id", "schedule_id", "status", "started_at", "scheduled_for", "duration", "error"
        )
    )
    for run_id, schedule_id, status, started_at, scheduled_for, duration, error in rows:
        first = error.splitlines()[0][:200] if error else ""
        found[schedule_id].append(
            RunMark(run_id, status, started_at, scheduled_for, duration, first)
        )
    oldest = datetime.min.replace(tzinfo=UTC)
    for marks in found.values():
        marks.sort(key=lambda m: (m.started_at or oldest, m.id))
    return found


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
