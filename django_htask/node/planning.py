"""What a due schedule does, decided without writing anything: whether the node can use
its row at all, which occurrences run now under the misfire and overlap policies, and
the run rows that say so (missed, skipped, broken, started).

Pure functions of a :class:`~django_htask.store.ScheduleRow` and ``now``;
:class:`~django_htask.node.firing.Firing` writes what they decide. The misfire policy
itself is the engine's :func:`~django_htask.engine.plan_occurrences`, shared with
``Cron``.
"""

from __future__ import annotations

import functools
import logging
import math
import zoneinfo
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias

from django_htask.engine import (
    CALL_ERRORS,
    InvalidSchedule,
    parse_schedule,
    plan_occurrences,
    registry,
)
from django_htask.enums import CatchUp, Overlap, RunStatus
from django_htask.store import RunOutcome, ScheduleRow

from .execution import call_of

if TYPE_CHECKING:
    from django_htask.models import Schedule

__all__ = ["Plan", "Scheduled", "broken_run", "plan", "problem", "schedule_run"]

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=4096)
def _parsed(text: str, tz: str) -> Any:
    return parse_schedule(text, tz=tz or None)


#: What a row that cannot be fired raises when its schedule and call are checked.
_UNUSABLE: tuple[type[Exception], ...] = (InvalidSchedule, *CALL_ERRORS)


@dataclass(frozen=True, slots=True)
class _Unreadable:
    """A schedule whose row could not be read: only its id is known."""

    id: int
    name: str
    function: str = ""


#: What a run of a schedule is named after: its row as a node reads it, the model's row
#: (run by hand), or only its id.
Scheduled: TypeAlias = "ScheduleRow | Schedule | _Unreadable"


def schedule_run(
    row: Scheduled,
    node: str,
    status: str,
    scheduled_for: datetime | None,
    now: datetime,
    *,
    error: str = "",
    attempt: int = 1,
) -> RunOutcome:
    """The run row of one occurrence of ``row`` (the one builder of a schedule's run
    rows: started, missed, skipped, broken, or run by hand)."""
    return RunOutcome(
        status,
        row.function,
        row.name,
        node,
        attempt,
        scheduled_for,
        now,
        now,
        error=error,
        schedule_id=row.id,
    )


def broken_run(
    schedule_id: int, row: ScheduleRow | None, node: str, now: datetime, why: str
) -> RunOutcome:
    """The failed run that says why schedule ``schedule_id`` (its ``row`` if it could
    be read) is broken; it never started."""
    run = schedule_run(
        row or _Unreadable(schedule_id, str(schedule_id)),
        node,
        RunStatus.FAILED,
        row.next_run_at if row is not None else None,
        now,
        error=f"broken: {why}",
    )
    run.started_at = None
    return run


def problem(row: ScheduleRow) -> str:
    """Why a node cannot use ``row`` (a value written behind the model's back), or ""."""
    if row.catch_up not in CatchUp.values:
        return f"catch_up {row.catch_up!r} is not one of {', '.join(CatchUp.values)}"
    if row.overlap not in Overlap.values:
        return f"overlap {row.overlap!r} is not one of {', '.join(Overlap.values)}"
    if not row.max_attempts >= 1:
        return f"max_attempts {row.max_attempts!r} is not >= 1"
    if not (row.retry_backoff >= 0 and math.isfinite(row.retry_backoff)):
        return f"retry_backoff {row.retry_backoff!r} is not a finite number >= 0"
    if row.grace is not None and not (row.grace >= 0 and math.isfinite(row.grace)):
        return f"grace {row.grace!r} is not empty or a finite number >= 0"
    from django_htask.models import GRACE_MAX, MAX_ATTEMPTS_MAX, RETRY_BACKOFF_MAX  # noqa: PLC0415

    for name, value, limit in (
        ("max_attempts", row.max_attempts, MAX_ATTEMPTS_MAX),
        ("retry_backoff", row.retry_backoff, RETRY_BACKOFF_MAX),
        ("grace", row.grace, GRACE_MAX),
    ):
        if value is not None and value > limit:  # the models' ranges, CHECK constraints too
            return f"{name} {value!r} is over the limit of {limit:.0f}"
    try:
        if row.timezone:
            zoneinfo.ZoneInfo(row.timezone)
        _parsed(row.schedule, row.timezone)
        registry.bind(row.function, *call_of(row.payload))
    except _UNUSABLE as exc:
        return f"{type(exc).__name__}: {exc}"
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        return f"timezone {row.timezone!r}: {exc}"
    return ""


@dataclass(slots=True)
class Plan:
    """What a due schedule does now: the occurrences that run, its next due time, and
    the rows of the occurrences that do not run (missed, skipped)."""

    to_run: list[datetime]
    next_run_at: datetime | None
    runs: list[RunOutcome] = field(default_factory=list)


def plan(row: ScheduleRow, node: str, now: datetime, busy: int, catch_up_limit: int) -> Plan:
    """The misfire policy, then the overlap policy, which holds for the caught-up
    occurrences too (``busy``: runs of the schedule still going)."""
    assert row.next_run_at is not None
    occurrences = plan_occurrences(
        _parsed(row.schedule, row.timezone),
        row.next_run_at,
        now,
        grace=row.grace,
        catch_up=str(row.catch_up),
        limit=catch_up_limit,
    )
    result = Plan(occurrences.to_run, occurrences.next)
    if occurrences.missed:
        result.runs.append(_missed(row, node, occurrences.missed, now))
    to_run = result.to_run
    if busy and row.overlap == Overlap.SKIP:
        skipped = to_run or [row.next_run_at]
        result.runs.append(_skipped(row, node, skipped, now, "the previous run was still running"))
        result.to_run = []
    elif len(to_run) > 1 and row.overlap == Overlap.SKIP:
        # Caught-up occurrences would run together: the first runs, the rest skip.
        result.runs.append(_skipped(row, node, to_run[1:], now, f"the run of {to_run[0]} runs"))
        result.to_run = to_run[:1]
    elif len(to_run) > 1 and row.overlap == Overlap.DELAY:
        # One after another: claim the first; the next stays due and waits for it.
        result.next_run_at, result.to_run = to_run[1], to_run[:1]
    return result


def _missed(row: ScheduleRow, node: str, missed: list[datetime], now: datetime) -> RunOutcome:
    late = (now - missed[-1]).total_seconds()
    grace = "no limit" if row.grace is None else f"{row.grace:g}s"
    error = (
        f"{len(missed)} occurrence(s) from {missed[0].isoformat()} to "
        f"{missed[-1].isoformat()} missed: {late:.1f}s late "
        f"(grace {grace}, catch_up={row.catch_up})"
    )
    logger.warning("schedule %s: %s", row.name, error, extra={"action": "missed"})
    return schedule_run(row, node, RunStatus.MISSED, missed[-1], now, error=error)


def _skipped(
    row: ScheduleRow, node: str, skipped: list[datetime], now: datetime, why: str
) -> RunOutcome:
    what = (
        f"{len(skipped)} occurrences from {skipped[0].isoformat()} to {skipped[-1].isoformat()}"
        if len(skipped) > 1
        else f"the occurrence of {skipped[0].isoformat()}"
    )
    error = f"{what} skipped: {why} (overlap=skip)"
    return schedule_run(row, node, RunStatus.SKIPPED, skipped[-1], now, error=error)
