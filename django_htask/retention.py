"""How long finished work is kept: the retention policy of tasks, runs and node rows.

A one-off task that ended (``succeeded``, ``failed`` or ``cancelled``) is deleted,
with its runs, once it has been finished for longer than its retention:

- its function's own, ``@task(retention=timedelta(days=30))``, stored on each task
  queued (so a changed retention applies to the tasks queued after the change);
- else the ``TASK_RETENTION_DAYS`` setting for its status: a number of days for
  every status (7 by default), or a dict by status (``{"failed": 30}``: failed tasks
  kept 30 days, the others 7; a ``"default"`` key sets the others).

Zero keeps for ever, everywhere: ``TASK_RETENTION_DAYS: 0``, ``{"failed": 0}``,
``RUN_RETENTION_DAYS: 0``, ``@task(retention=timedelta(0))``. Runs older than
``RUN_RETENTION_DAYS`` (30) go too, whoever they belong to (schedules' runs, and the
runs of a task kept longer), and so do the rows of nodes stopped as long ago.

The nodes delete it themselves (:mod:`django_htask.node.pruning`); ``manage.py htask
prune`` does it at once. Pure values: nothing here reads a table or a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from .enums import TaskStatus

__all__ = [
    "FINAL_STATUSES",
    "RETENTION_MAX",
    "Cutoffs",
    "TaskRetention",
    "check_retention",
    "gone_reason",
]

#: The statuses of a task that has ended.
FINAL_STATUSES = (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED)
#: The longest retention of a function (seconds): ten years.
RETENTION_MAX = 10 * 366 * 86_400
#: The longest ``TASK_RETENTION_DAYS`` or ``RUN_RETENTION_DAYS``.
DAYS_MAX = RETENTION_MAX / 86_400


def _days(value: object, what: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= DAYS_MAX
        or math.isnan(value)
    ):
        raise ValueError(f"{what} must be a number of days from 0 to {DAYS_MAX:g}, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class TaskRetention:
    """Days a finished task is kept, by its final status (0: for ever)."""

    succeeded: float = 7.0
    failed: float = 7.0
    cancelled: float = 7.0

    @classmethod
    def of(cls, value: object, name: str = "TASK_RETENTION_DAYS") -> TaskRetention:
        """From the setting's value: days for every status, or a dict of days by
        status (``"default"`` for those not named). ValueError naming a bad value."""
        if isinstance(value, Mapping):
            known = {*(str(s) for s in FINAL_STATUSES), "default"}
            unknown = sorted(str(k) for k in value if k not in known)
            if unknown:
                raise ValueError(
                    f"{name} has unknown keys {unknown} (known: {', '.join(sorted(known))})"
                )
            default = _days(value.get("default", 7.0), f"{name}['default']")
            return cls(
                *(_days(value.get(str(s), default), f"{name}[{str(s)!r}]") for s in FINAL_STATUSES)
            )
        days = _days(value, name)
        return cls(days, days, days)

    def days(self, status: str) -> float:
        """The days a task finished with ``status`` is kept (0: for ever)."""
        return float(getattr(self, str(status)))

    def describe(self) -> str:
        """``7 days``, or ``succeeded 7 days, failed 30 days, cancelled for ever``."""
        kept = [_kept(self.days(s)) for s in FINAL_STATUSES]
        if len(set(kept)) == 1:
            return kept[0]
        return ", ".join(f"{s} {k}" for s, k in zip(FINAL_STATUSES, kept, strict=True))


def _kept(days: float) -> str:
    return "for ever" if not days else f"{days:g} day{'s' if days != 1 else ''}"


def check_retention(value: object) -> int:
    """A function's retention (a ``timedelta``, or seconds) as whole seconds, 0 for
    ever; ValueError naming a bad one (negative, under a second, past ten years)."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or math.isnan(seconds)
        or not (seconds == 0 or 1 <= seconds <= RETENTION_MAX)
    ):
        raise ValueError(
            "retention must be a timedelta (or seconds) from 1 second to 10 years, or 0 "
            f"to keep for ever, got {value!r}"
        )
    return round(seconds)


@dataclass(frozen=True, slots=True)
class Cutoffs:
    """What is past its retention at one instant: the tasks of each final status
    finished before ``tasks[status]`` (a status missing: kept for ever) unless their
    function has a retention of its own, the tasks whose function keeps them
    ``seconds`` finished before ``now - seconds``, the runs started and the nodes
    stopped before ``runs`` (None: kept for ever)."""

    now: datetime
    tasks: tuple[tuple[str, datetime], ...]
    runs: datetime | None

    @classmethod
    def at(cls, now: datetime, tasks: TaskRetention, run_days: float) -> Cutoffs:
        by_status = tuple(
            (str(s), now - timedelta(days=tasks.days(s))) for s in FINAL_STATUSES if tasks.days(s)
        )
        return cls(now, by_status, now - timedelta(days=run_days) if run_days else None)

    def own(self, seconds: int) -> datetime | None:
        """Before when a task whose function keeps it ``seconds`` was finished to be
        past it (None: for ever)."""
        return self.now - timedelta(seconds=seconds) if seconds else None


def gone_reason(token: str, retention: TaskRetention) -> str:
    """Why no task has ``token``: the one wording of ``get_result`` and the
    django.tasks backend."""
    return (
        f"no task has the token {token!r}: it was never queued here, or it ended and "
        f"was deleted once its retention passed (finished tasks are kept "
        f"{retention.describe()}: TASK_RETENTION_DAYS, or the function's "
        "@task(retention=...))"
    )
