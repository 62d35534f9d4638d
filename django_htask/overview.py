"""The import path of the overview's figures that ``htask status`` and the docs use
(``django_htask.overview.waiting_on_gates``, ``why_waiting``): they are read in
:mod:`django_htask.admin.overview.data` (the upcoming occurrences counted in
:mod:`~django_htask.admin.overview.timeline`, a schedule's last runs in
:mod:`django_htask.admin.strip`), and named here too. Nothing imported here registers
a ModelAdmin, so it works in a project without ``django.contrib.admin``."""

from __future__ import annotations

from .admin.overview.data import (
    FAILING_SHOWN,
    HOURS,
    LATENESS_SAMPLE,
    NODES_SHOWN,
    OUTCOMES,
    WAITING_SHOWN,
    Failing,
    Hour,
    NodeLine,
    Overview,
    Waiting,
    next_hours,
    read_overview,
    waiting_on_gates,
    why_waiting,
)
from .admin.overview.timeline import OCCURRENCE_BUDGET, Timeline
from .admin.strip import STRIP, RunMark, recent_runs

__all__ = [
    "FAILING_SHOWN",
    "HOURS",
    "LATENESS_SAMPLE",
    "NODES_SHOWN",
    "OCCURRENCE_BUDGET",
    "OUTCOMES",
    "STRIP",
    "WAITING_SHOWN",
    "Failing",
    "Hour",
    "NodeLine",
    "Overview",
    "RunMark",
    "Timeline",
    "Waiting",
    "next_hours",
    "read_overview",
    "recent_runs",
    "waiting_on_gates",
    "why_waiting",
]
