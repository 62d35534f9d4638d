"""The overview page's layout: who may see it, and what goes where: the charts (their
titles, series, colours and labels, the busiest minutes marked far enough apart to be
read), the tables' rows and links, the heartbeat meter's bounds. The figures come from
:mod:`~django_htask.admin.overview.data`; the SVG is drawn by
:mod:`~django_htask.admin.overview.charts`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.urls import reverse

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
        "queues_url": reverse(f"{site}:django_htask_queue_changelist"),
        "meter_low": data.node_timeout / 3,
        "meter_high": data.node_timeout * 2 / 3,
        "runs_url": runs_url,
    }
