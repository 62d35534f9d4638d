"""The overview page's layout: who may see it, and what goes where: the charts (their
titles, series, colours and labels, the busiest minutes marked far enough apart to be
read), the tables' rows and links, the heartbeat meter's bounds. The figures come from
:mod:`~django_htask.admin.overview.data`; the SVG is drawn by
:mod:`~django_htask.admin.overview.charts`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.urls import reverse
from django.utils.safestring import SafeString

from . import charts
from .data import OUTCOMES, Overview

__all__ = ["OVERVIEW_MODELS", "can_view_overview", "page_context"]

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


def page_context(data: Overview, site: str) -> dict[str, Any]:
    """The overview's charts (inline SVG) and the rows of its tables."""
    columns = [f"{hour.start:%H:00}" for hour in data.hours]
    runs_url = reverse(f"{site}:django_htask_run_changelist")
    return {
        "runs_chart": _runs_chart(data, columns),
        "lateness_chart": _lateness_chart(data, columns),
        "timeline_chart": _timeline_chart(data),
        "busiest": data.timeline.busiest(),
        "failing": _failing_rows(data, site, runs_url),
        "legend": [(str(status), charts.COLOURS[status]) for status in OUTCOMES],
        "nodes_url": reverse(f"{site}:django_htask_node_changelist"),
        "queues_url": reverse(f"{site}:django_htask_queue_changelist"),
        "meter_low": data.node_timeout / 3,
        "meter_high": data.node_timeout * 2 / 3,
        "runs_url": runs_url,
    }


def _runs_chart(data: Overview, columns: list[str]) -> SafeString:
    """The runs of each hour, stacked by outcome."""
    return charts.stacked_bars(
        "htask-runs-chart",
        "runs per hour by outcome, last 24 hours (UTC)",
        columns,
        [
            charts.Series(
                str(status), [hour.counts[status] for hour in data.hours], charts.COLOURS[status]
            )
            for status in OUTCOMES
        ],
    )


def _lateness_chart(data: Overview, columns: list[str]) -> SafeString:
    """The lateness of each hour's runs, p50 and p99."""
    return charts.line_chart(
        "htask-lateness-chart",
        "lateness per hour, p50 and p99, last 24 hours (UTC)",
        columns,
        [
            charts.Series("p50", [hour.p50 for hour in data.hours], charts.COLOURS["p50"]),
            charts.Series("p99", [hour.p99 for hour in data.hours], charts.COLOURS["p99"]),
        ],
    )


def _timeline_chart(data: Overview) -> SafeString:
    """The occurrences of each minute of the next 24 hours, the busiest marked and a
    label on each hour three hours apart."""
    timeline = data.timeline
    start = timeline.start
    peaks = _spread(
        [
            (int((when - start).total_seconds() // 60), f"{when:%H:%M}")
            for when, _count in timeline.busiest(PEAK_CANDIDATES)
        ]
    )
    first_hour = 60 - start.minute if start.minute else 0
    x_labels = [
        (minute, f"{start + timedelta(minutes=minute):%H:%M}")
        for minute in range(first_hour, len(timeline.per_minute), 180)
    ]
    return charts.area_chart(
        "htask-timeline-chart",
        "occurrences per minute, next 24 hours (UTC)",
        timeline.per_minute,
        peaks=peaks,
        x_labels=x_labels,
    )


def _failing_rows(data: Overview, site: str, runs_url: str) -> list[dict[str, Any]]:
    """The failing schedules' rows, each with links to its schedule and its failed runs."""
    schedules_url = reverse(f"{site}:django_htask_schedule_changelist")
    return [
        {
            "row": row,
            "schedule_url": f"{schedules_url}{row.schedule_id}/change/",
            "runs_url": f"{runs_url}?schedule__id__exact={row.schedule_id}&status__exact=failed",
        }
        for row in data.failing
    ]
