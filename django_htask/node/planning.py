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
from collections.abc import Sequence
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


def plan(
    row: ScheduleRow, node: str, now: datetime, busy: Sequence[str], catch_up_limit: int
) -> Plan:
    """The misfire policy, then the overlap policy, which holds for the caught-up
    occurrences too (``busy``: the nodes with a run of the schedule still going,
    ``node`` itself among them if it has one). Every occurrence due
    that does not run gets a row of its own saying why: missed (late, or
    ``catch_up="skip"``), folded into the run of a later one (``catch_up="latest"``), or
    skipped (``overlap="skip"``); past ``catch_up_limit`` occurrences behind, the rest
    share one missed row."""
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
    runs = result.runs
    if occurrences.missed:
        runs.extend(_missed(row, node, occurrences.missed, now))
    if occurrences.dropped is not None:
        runs.append(_dropped(row, node, occurrences.dropped, occurrences.next, now, catch_up_limit))
    to_run, folded = result.to_run, occurrences.folded
    if busy and row.overlap == Overlap.SKIP:
        where = ", ".join(busy)
        why = f"the previous run was still running (on node {where})"
        runs.extend(_skipped(row, node, sorted(folded + to_run), now, why))
        result.to_run = []
        return result
    if folded:
        runs.extend(_folded(row, node, folded, to_run[0], now))
    if len(to_run) > 1 and row.overlap == Overlap.SKIP:
        # Caught-up occurrences would run together: the first runs, the rest skip.
        why = f"the run of {to_run[0].isoformat()} runs"
        runs.extend(_skipped(row, node, to_run[1:], now, why))
        result.to_run = to_run[:1]
    elif len(to_run) > 1 and row.overlap == Overlap.DELAY:
        # One after another: claim the first; the next stays due and waits for it.
        result.next_run_at, result.to_run = to_run[1], to_run[:1]
    return result


def _missed(row: ScheduleRow, node: str, missed: list[datetime], now: datetime) -> list[RunOutcome]:
    grace = "no limit" if row.grace is None else f"{row.grace:g}s"
    policy = f"(grace {grace}, catch_up={row.catch_up})"
    logger.warning(
        "schedule %s: %d occurrence(s) from %s to %s missed %s",
        row.name,
        len(missed),
        missed[0].isoformat(),
        missed[-1].isoformat(),
        policy,
        extra={"action": "missed"},
    )
    return [
        schedule_run(
            row,
            node,
            RunStatus.MISSED,
            when,
            now,
            error=f"missed: {(now - when).total_seconds():.1f}s late {policy}",
        )
        for when in missed
    ]


def _dropped(
    row: ScheduleRow,
    node: str,
    first: datetime,
    until: datetime | None,
    now: datetime,
    limit: int,
) -> RunOutcome:
    """The one row of the occurrences more than ``limit`` behind, from ``first`` to
    before ``until`` (None: to the end of the schedule)."""
    end = f"before {until.isoformat()}" if until is not None else "the schedule's end"
    error = (
        f"missed: every occurrence from {first.isoformat()} to {end}, more than "
        f"{limit} occurrences behind (CATCH_UP_LIMIT)"
    )
    logger.warning("schedule %s: %s", row.name, error, extra={"action": "missed"})
    return schedule_run(row, node, RunStatus.MISSED, first, now, error=error)


def _folded(
    row: ScheduleRow, node: str, folded: list[datetime], into: datetime, now: datetime
) -> list[RunOutcome]:
    error = f"folded into the run of {into.isoformat()} (catch_up=latest)"
    return [schedule_run(row, node, RunStatus.SKIPPED, w, now, error=error) for w in folded]


def _skipped(
    row: ScheduleRow, node: str, skipped: list[datetime], now: datetime, why: str
) -> list[RunOutcome]:
    error = f"skipped: {why} (overlap=skip)"
    return [schedule_run(row, node, RunStatus.SKIPPED, w, now, error=error) for w in skipped]
