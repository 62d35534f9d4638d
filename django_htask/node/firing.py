"""Firing schedules: the schedules a node has placed, each with a timer at its due time, and
what happens when one is due: claimed, run on a worker, retried.

The schedules are placed on an engine :class:`~django_htask.engine.Timetable` (the
entries due at one instant share a timer, as in the engine's ``Cron`` runner), by their
stored ``next_run_at``: no cron is evaluated to place them. A schedule fires by a
compare-and-set on (id, ``next_run_at``, version) that moves ``next_run_at`` on and
writes its run rows in one transaction, so an occurrence runs once even when another
process or node looks at it too. What runs (the misfire and overlap policies) is
decided by :mod:`~django_htask.node.planning`, which writes nothing. A run that fails
is retried, and one that snoozes (``raise Snooze``) runs again, after a timer of this
node (a new run row: ``start_schedule_run``).
"""

from __future__ import annotations

import functools
import logging
from datetime import datetime, timedelta
from typing import Protocol

from django_htask.engine import Timetable
from django_htask.enums import Overlap, RunStatus
from django_htask.exceptions import NodeFenced, StoreUnavailable
from django_htask.store import RunOutcome, ScheduleRef, ScheduleRow

from .context import NodeContext
from .execution import Call, retry_delay, snooze_delay
from .planning import broken_run, plan, problem, schedule_run
from .supervisor import Supervisor

__all__ = ["Firing", "Roles"]

logger = logging.getLogger(__name__)


class Roles(Protocol):
    """Who fires what among several nodes (:class:`~django_htask.node.membership.Membership`)."""

    def role(self, schedule_id: int, queue: str) -> str | None: ...
    def standby_delay(self, owner: str) -> float: ...
    def suspect(self, owner: str, now: datetime) -> bool: ...


class _Placed:
    """A schedule placed: its due time, version and queue, and ``owner``: "" when this
    node owns it, else the node it stands by for; ``delay``: its timer is that late."""

    __slots__ = ("delay", "due", "owner", "queue", "version")

    def __init__(self, due: datetime, version: int, owner: str, queue: str, delay: float) -> None:
        self.due = due
        self.version = version
        self.owner = owner
        self.queue = queue
        self.delay = delay


class Firing:
    """The schedules one node fires (see the module)."""

    def __init__(
        self, ctx: NodeContext, supervisor: Supervisor, roles: Roles | None = None
    ) -> None:
        self.ctx = ctx
        self.supervisor = supervisor
        self.roles = roles  # several nodes
        self._table: Timetable[int, _Placed] = Timetable(ctx.control.scheduler, self._due)
        self._delayed: dict[int, _Placed | None] = {}  # waiting for a run (overlap=delay)
        self.seen_version = 0

    # -- what is placed ----------------------------------------------------------------
    def placed(self) -> dict[int, datetime]:
        """Schedule id -> due time, of every schedule placed (owned or stood by for)."""
        return {i: h.due for i, h in self._table.items()}

    def owned(self) -> dict[int, datetime]:
        return {i: h.due for i, h in self._table.items() if not h.owner}

    def due_now(self, now: datetime) -> bool:
        """Whether an occurrence this node owns is due (or waits for a run)."""
        return bool(self._delayed) or any(
            not h.owner and h.due <= now for _i, h in self._table.items()
        )

    def load(self, refs: list[ScheduleRef], top: int) -> None:
        self.seen_version = top
        for ref in refs:
            self.place(ref)

    def sync(self) -> None:
        """Read the schedules whose version rose since the last look, and place them."""
        refs, top = self.ctx.store.changed_schedules(self.seen_version)
        self.seen_version = top
        for ref in refs:
            self.place(ref)
        if refs:
            logger.debug(
                "%d schedules changed (version %d)",
                len(refs),
                top,
                extra={"action": "schedules_synced"},
            )

    def place(self, ref: ScheduleRef) -> None:
        """Place ``ref`` with a timer at its due time, or let it go. With several nodes,
        a schedule this node stands by for gets its timer the standby delay later (none
        while its owner is suspected of being gone)."""
        owner: str | None = "" if self.ctx.serving.fires(ref.queue) else None
        delay = 0.0
        if self.roles is not None and owner is not None:
            owner = self.roles.role(ref.id, ref.queue)
            if owner:
                delay = self.roles.standby_delay(owner)
        if owner is None or not ref.enabled or ref.next_run_at is None:
            self._table.drop(ref.id)
            return
        placed = self._table.get(ref.id)
        if placed is not None and (placed.due, placed.owner, placed.delay) == (
            ref.next_run_at,
            owner,
            delay,
        ):
            placed.version = max(placed.version, ref.version)
            return
        if self.ctx.control.closing:
            return
        at = ref.next_run_at + timedelta(seconds=delay) if delay else ref.next_run_at
        self._table.place(
            ref.id, at, _Placed(ref.next_run_at, ref.version, owner, ref.queue, delay)
        )

    def drop(self, schedule_id: int) -> None:
        self._table.drop(schedule_id)

    def replace_placed(self, owner: str | None = None) -> None:
        """Place every schedule again (roles changed); with ``owner``, only those
        this node stands by for that owner."""
        for schedule_id, placed in self._table.items():
            if owner is None or placed.owner == owner:
                self.place(ScheduleRef(schedule_id, placed.due, placed.version, queue=placed.queue))

    def place_again(self, queues: frozenset[str]) -> None:
        """Place the schedules of ``queues`` again (resumed: they were let go while
        paused), from a full read; an occurrence that fell due meanwhile fires at once."""
        refs, _top = self.ctx.store.load_schedules()
        for ref in refs:
            if ref.queue in queues:
                self.place(ref)

    def clear(self) -> None:
        self._table.clear()

    # -- firing --------------------------------------------------------------------------
    def _due(self, due: list[tuple[int, _Placed]]) -> None:
        for schedule_id, placed in due:
            self.fire(schedule_id, placed)

    def fire(self, schedule_id: int, placed: _Placed | None) -> None:
        if self.ctx.stopping():
            return
        control = self.ctx.control
        ok = control.guarded(
            lambda: self._fire_once(schedule_id, placed), f"fire of schedule {schedule_id}"
        )
        if not ok and control.backoff.delay:  # the database away: try again after the delay
            control.later(control.backoff.delay, self.fire, schedule_id, placed)

    def _fire_once(self, schedule_id: int, placed: _Placed | None) -> None:
        try:
            self._claim_and_run(schedule_id, placed)
        except (StoreUnavailable, NodeFenced):
            raise  # the control thread's to handle: back off, or stop
        except Exception as exc:  # a row written behind the model's back, say
            logger.exception(
                "schedule %s could not be fired", schedule_id, extra={"action": "fire_error"}
            )
            self._break(schedule_id, None, f"{type(exc).__name__}: {exc}")

    def _claim_and_run(self, schedule_id: int, placed: _Placed | None) -> None:
        ctx = self.ctx
        standby_for = placed.owner if placed is not None else ""
        row = ctx.store.get_schedule(schedule_id)
        if row is None or not row.enabled or row.next_run_at is None or self._paused(row):
            self._delayed.pop(schedule_id, None)
            self.drop(schedule_id)
            return
        now = ctx.clock.now()
        moved = row.next_run_at > now
        if standby_for:  # the owner claims by moving next_run_at: only one left as it was
            moved = moved or placed is None or row.next_run_at != placed.due
        if moved:
            self.place(_ref(row))
            return
        why = problem(row)
        if why:
            self._break(row.id, row, why)
            return
        busy = [ctx.node_id] if ctx.running.busy(row.id) else []
        if row.overlap != Overlap.ALLOW and not busy:
            busy = ctx.store.running_elsewhere(row.id, ctx.node_id, ctx.settings.dead_before(now))
        if busy and row.overlap == Overlap.DELAY:
            self._delayed[row.id] = placed
            ctx.control.later(ctx.settings.poll_interval, self.fire, row.id, placed)
            return
        decided = plan(row, ctx.node_id, now, busy, ctx.settings.catch_up_limit)
        next_run_at, runs = decided.next_run_at, decided.runs
        node, running = ctx.node_id, RunStatus.RUNNING
        started = [schedule_run(row, node, running, when, now) for when in decided.to_run]
        runs.extend(started)
        ids = ctx.store.claim_occurrence(ctx.node_id, row, next_run_at, now, runs)
        if ids is None:
            logger.debug(
                "schedule %s changed before it fired; reloading",
                row.name,
                extra={"action": "claim_lost"},
            )
            self._reload(row.id)
            return
        if standby_for and self.roles is not None and self.roles.suspect(standby_for, now):
            logger.warning(
                "node %s did not fire schedule %s within %gs of its time: this node fires "
                "the schedules it stands by for that node at their time, until it is seen "
                "alive again",
                standby_for,
                row.name,
                ctx.settings.standby_delay,
                extra={"action": "owner_suspected", "node": standby_for},
            )
            self.replace_placed(standby_for)
        self._delayed.pop(row.id, None)
        if next_run_at is None:
            self.drop(row.id)
        else:
            self.place(ScheduleRef(row.id, next_run_at, row.version, True, row.queue_name))
        for run_id, outcome in zip(ids[len(runs) - len(started) :], started, strict=True):
            self._start_run(row, run_id, outcome)

    def _paused(self, row: ScheduleRow) -> bool:
        """Whether ``row``'s queue was paused since it was placed."""
        return not self.ctx.serving.fires(row.queue_name)

    def _break(self, schedule_id: int, row: ScheduleRow | None, why: str) -> None:
        """Stop firing a schedule the node cannot use: a failed run and the schedule's
        ``broken`` field say why (the admin and ``htask status`` show it), one error
        is logged, and the schedule costs nothing more until it is saved again."""
        ctx = self.ctx
        now = ctx.clock.now()
        run = broken_run(schedule_id, row, ctx.node_id, now, why)
        version = row.version if row is not None else None
        marked = ctx.store.mark_broken(ctx.node_id, schedule_id, version, why, run)
        if row is not None and not marked:
            self._reload(schedule_id)  # changed meanwhile: look at it again
            return
        logger.error(
            "schedule %s is broken and will not fire until it is saved again: %s",
            run.name,
            why,
            extra={"action": "schedule_broken", "schedule": schedule_id},
        )
        self.drop(schedule_id)

    def _reload(self, schedule_id: int) -> None:
        row = self.ctx.store.get_schedule(schedule_id)
        if row is None:
            self.drop(schedule_id)
        else:
            self.place(_ref(row))

    # -- running -------------------------------------------------------------------------
    def _start_run(
        self, row: ScheduleRow, run_id: int, outcome: RunOutcome, snoozes: int = 0
    ) -> None:
        """Run ``outcome`` (its occurrence snoozed ``snoozes`` times so far) on a worker."""
        outcome.run_id = run_id
        self.ctx.running.add_run(row.id, run_id, outcome)
        self.ctx.jobs.call_soon(self._job, row, outcome, snoozes)

    def _job(self, row: ScheduleRow, started: RunOutcome, snoozes: int) -> None:
        """A worker runs one occurrence (or a retry of it)."""
        call = Call.of_run(started, row.payload)
        finish = functools.partial(self._finish, row, started, snoozes)
        self.supervisor.run(("run", started.run_id or 0), call, row.timeout, finish)

    def _finish(
        self, row: ScheduleRow, started: RunOutcome, snoozes: int, result: RunOutcome
    ) -> None:
        """Record how the run ended (on its worker, or by the supervisor). A retry, or
        a snooze (the same attempt again), waits on a timer of the control thread."""
        ctx = self.ctx
        run_id = started.run_id or 0
        result.run_id = run_id
        ctx.running.run_done(row.id, run_id)
        snooze = snooze_delay(result, snoozes, ctx.settings.max_snoozes, "MAX_SNOOZES")
        cap = ctx.settings.retry_backoff_max
        delay = retry_delay(
            result,
            started.attempt,
            row.max_attempts,
            lambda: row.retry.policy(row.retry_backoff, cap),
        )
        ctx.results.push(result)
        if snooze is not None:
            ctx.control.later(snooze, self._retry, row, started, started.attempt, snoozes + 1)
        elif delay is not None:
            ctx.control.later(delay, self._retry, row, started, started.attempt + 1, snoozes)
        if row.id in self._delayed:
            ctx.control.later(0, self.fire, row.id, self._delayed[row.id])

    def _retry(self, row: ScheduleRow, previous: RunOutcome, attempt: int, snoozes: int) -> None:
        """Run ``previous``'s occurrence again, as attempt ``attempt``: a new run row."""
        ctx = self.ctx
        if ctx.stopping():
            return
        now = ctx.clock.now()
        outcome = schedule_run(
            row, ctx.node_id, RunStatus.RUNNING, previous.scheduled_for, now, attempt=attempt
        )
        run_id = ctx.control.attempt(
            lambda: ctx.store.start_schedule_run(ctx.node_id, outcome),
            f"retry of schedule {row.name}",
        )
        if run_id is not None:
            self._start_run(row, run_id, outcome, snoozes)
        elif ctx.control.backoff.delay:
            delay = ctx.control.backoff.delay
            ctx.control.later(delay, self._retry, row, previous, attempt, snoozes)


def _ref(row: ScheduleRow) -> ScheduleRef:
    return ScheduleRef(row.id, row.next_run_at, row.version, row.enabled, row.queue_name)
