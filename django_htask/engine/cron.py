"""The Cron runner: robfig/cron's API on the engine's :class:`Scheduler`.

::

    cron = Cron()
    entry_id = cron.add("*/5 * * * *", report, "daily", name="report", tags=("reports",))
    cron.add(every().day.at("04:30").in_tz("Asia/Tokyo"), cleanup, catch_up="skip")
    cron.start()
    ...
    cron.stop().wait()  # set once running jobs have finished

The entries due at one instant share one timer in the scheduler's heap, so 100k idle
entries cost no CPU and a thousand entries due on the same second cost one timer.
When it fires, the runner decides for each entry what runs (the misfire policy, see
:func:`plan_occurrences`; made once per distinct schedule), hands the runs to the
workers, each run going through the entry's wrapper chain, and arms the entry for its
next occurrence computed from the *scheduled* time (runs do not drift; a late run does
not burst). Hooks see every run: ``before_run``, ``after_run``, ``failed`` and
``skipped``, each with a :class:`RunEvent`.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple, Protocol

from .clock import SystemClock, to_us
from .errors import InvalidSchedule, SchedulerClosed, SchedulerFull
from .fluent import Every
from .interfaces import Clock
from .scheduler import Scheduler
from .schedules import IntervalSchedule, _Bounded, parse_schedule
from .timetable import Timetable
from .wrappers import JobSkipped, RunContext, Wrapper, _current, chain, recover

__all__ = [
    "CATCH_UP_POLICIES",
    "Cron",
    "EntrySnapshot",
    "Plan",
    "RunEvent",
    "SupportsNextAfter",
    "plan_occurrences",
]

logger = logging.getLogger(__name__)

CatchUp = Literal["latest", "all", "skip"]
CATCH_UP_POLICIES: tuple[str, ...] = ("latest", "all", "skip")
EVENTS = ("before_run", "after_run", "failed", "skipped")


class SupportsNextAfter(Protocol):
    """Anything usable as a schedule."""

    def next_after(self, dt: datetime, /) -> datetime | None: ...


# -- the misfire policy (pure) --------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """What to do when an occurrence fires: the occurrences to run, those missed, and
    the next occurrence to arm (None: never again). ``folded``: the occurrences
    coalesced into the one run (``catch_up="latest"``); ``dropped``: the first of the
    occurrences past the cap that were jumped over (every one from it to before
    ``next`` is missed), or None."""

    to_run: list[datetime]
    missed: list[datetime]
    next: datetime | None
    folded: list[datetime] = field(default_factory=list)
    dropped: datetime | None = None


def plan_occurrences(
    schedule: SupportsNextAfter,
    scheduled: datetime,
    now: datetime,
    *,
    grace: float | None = None,
    catch_up: str = "latest",
    limit: int = 10,
) -> Plan:
    """Decide what runs when the occurrence ``scheduled`` fires at ``now``.

    The occurrences due are ``scheduled`` and every later one up to ``now`` (at most
    ``limit``; further behind, the next occurrence jumps to after ``now``). One whose
    lateness exceeds ``grace`` seconds is missed. ``catch_up``: ``latest`` runs once,
    for the latest due occurrence; ``all`` runs each due occurrence that is on time;
    ``skip`` runs only when nothing was missed. The next occurrence is computed from
    the scheduled times, never from ``now`` plus an interval, so runs do not drift.
    """
    if catch_up not in CATCH_UP_POLICIES:
        raise ValueError(f"catch_up must be one of {CATCH_UP_POLICIES}, got {catch_up!r}")
    due = [scheduled]
    nxt = schedule.next_after(scheduled)
    cap = max(limit, 1)
    while nxt is not None and nxt <= now and len(due) < cap:
        due.append(nxt)
        nxt = schedule.next_after(nxt)
    dropped = None
    if nxt is not None and nxt <= now:  # more than the cap behind: jump past now
        dropped = nxt
        if isinstance(schedule, IntervalSchedule):  # on the same sequence, not from now
            nxt = schedule.next_in_sequence(nxt, now)
        else:
            nxt = schedule.next_after(now)

    def on_time(when: datetime) -> bool:
        return grace is None or (now - when).total_seconds() <= grace

    if catch_up == "all":
        to_run = [w for w in due if on_time(w)]
    elif catch_up == "skip":
        to_run = due if len(due) == 1 and on_time(due[0]) else []
    else:
        to_run = [due[-1]] if on_time(due[-1]) else []
    missed = [w for w in due if w not in to_run]
    folded: list[datetime] = []
    if catch_up == "latest" and to_run:
        missed, folded = [], missed  # coalesced into the one run
    return Plan(to_run, missed, nxt, folded, dropped)


# -- entries and events ---------------------------------------------------------------
@dataclass(frozen=True)
class EntrySnapshot:
    """A copy of an entry's state, safe to keep (``Cron.entries()``)."""

    id: int
    name: str
    schedule: object
    next: datetime | None
    prev: datetime | None
    runs: int
    failures: int
    skips: int
    running: int
    tags: frozenset[str]
    max_runs: int | None
    grace: float | None
    catch_up: str


class RunEvent(NamedTuple):
    """What a hook receives. ``duration`` and ``error`` are set after a run;
    ``reason`` says why a run was skipped. (A named tuple: cheap to make, as one is
    made for every run.)"""

    event: str
    entry_id: int | None
    name: str
    scheduled: datetime
    lateness: float
    started: datetime | None = None
    duration: float | None = None
    error: BaseException | None = None
    reason: str | None = None


class _Entry:
    __slots__ = (
        "call",
        "catch_up",
        "failures",
        "grace",
        "id",
        "job",
        "max_runs",
        "name",
        "next",
        "plan_key",
        "prev",
        "removed",
        "running",
        "runs",
        "schedule",
        "skips",
        "tags",
    )

    def __init__(
        self,
        entry_id: int,
        name: str,
        schedule: SupportsNextAfter,
        fn: Callable[..., object],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        tags: frozenset[str],
        max_runs: int | None,
        grace: float | None,
        catch_up: str,
    ) -> None:
        self.id = entry_id
        self.name = name
        self.schedule = schedule
        self.tags = tags
        self.max_runs = max_runs
        self.grace = grace
        self.catch_up = catch_up
        # Its plans are shared with entries of the same schedule object (Cron._plan).
        self.plan_key = (id(schedule), grace, catch_up)
        # The bare call, without a Python frame of its own (wrapped by Cron.add).
        self.call: Callable[[], object] = functools.partial(fn, *args, **kwargs)
        self.job: Callable[[], object] = self.call
        self.next: datetime | None = None
        self.prev: datetime | None = None
        self.runs = 0
        self.failures = 0
        self.skips = 0
        self.running = 0
        self.removed = False

    def snapshot(self) -> EntrySnapshot:
        return EntrySnapshot(
            id=self.id,
            name=self.name,
            schedule=self.schedule,
            next=self.next,
            prev=self.prev,
            runs=self.runs,
            failures=self.failures,
            skips=self.skips,
            running=self.running,
            tags=self.tags,
            max_runs=self.max_runs,
            grace=self.grace,
            catch_up=self.catch_up,
        )


# A firing's runs, taken by up to ``workers`` threads: an entry and its occurrences.
_Runs = deque[tuple["_Entry", list[datetime]]]
# The next occurrences to arm once a firing's last run is taken (see Cron._fire): one
# item, (entry, next occurrence, its microseconds) triples and the runner's generation,
# popped by the one thread that arms them.
_Arming = list[tuple[list[tuple["_Entry", datetime, int | None]], int]]

# Plans made during one firing: by (id(schedule), grace, catch_up) and by
# (schedule, grace, catch_up); see Cron._plan.
_Memo = tuple[
    dict[tuple[object, ...], tuple[Plan, int | None]],
    dict[tuple[object, ...], tuple[Plan, int | None]],
]


def _as_schedule(schedule: object) -> SupportsNextAfter:
    if isinstance(schedule, str):
        return parse_schedule(schedule)
    if isinstance(schedule, Every):
        return schedule.schedule
    if callable(getattr(schedule, "next_after", None)):
        return schedule  # type: ignore[return-value]
    raise InvalidSchedule(f"expected a schedule (text or value with next_after), got {schedule!r}")


# -- the runner -----------------------------------------------------------------------
def _unrun(entry: _Entry, plan: Plan, to_run: list[datetime]) -> list[tuple[_Entry, datetime, str]]:
    """The occurrences of ``plan`` that run in no run of their own, and why: folded
    into the run of the latest (``catch_up="latest"``), or jumped over past the
    catch-up limit (one for all of them, at the first)."""
    into = f"folded into the run of {to_run[-1].isoformat()}" if to_run else "folded"
    unrun = [(entry, when, into) for when in plan.folded]
    if plan.dropped is not None:
        until = "" if plan.next is None else f" to before {plan.next.isoformat()}"
        why = f"missed: every occurrence from {plan.dropped.isoformat()}{until} (catch_up_limit)"
        unrun.append((entry, plan.dropped, why))
    return unrun


class Cron:
    """Runs functions on schedules (robfig/cron v3's ``Cron``) on an engine Scheduler.

    ``scheduler``: the Scheduler to put timers on (default: one of its own, with a
    thread per job, closed by :meth:`stop`). ``wrappers``: the chain every entry's job
    runs through (default, as in robfig/cron: ``(recover(),)``). ``clock``: for a
    scheduler of its own (a :class:`FakeClock` in tests). ``catch_up_limit`` caps
    ``catch_up="all"``. ``workers``: the job threads of a scheduler of its own.

    Adding, removing and listing entries are safe while it runs, from any thread,
    including from inside a job.
    """

    def __init__(
        self,
        scheduler: Scheduler | None = None,
        wrappers: Iterable[Wrapper] | None = None,
        clock: Clock | None = None,
        *,
        catch_up_limit: int = 10,
        workers: int = 4,
    ) -> None:
        if scheduler is not None and clock is not None and scheduler.clock is not clock:
            raise ValueError("give either a scheduler or a clock, not both")
        if isinstance(catch_up_limit, bool) or not isinstance(catch_up_limit, int):
            raise ValueError(f"catch_up_limit must be a whole number, got {catch_up_limit!r}")
        if catch_up_limit < 1:
            raise ValueError(f"catch_up_limit must be at least 1, got {catch_up_limit!r}")
        self._wrappers = (recover(),) if wrappers is None else tuple(wrappers)
        self._wrap = chain(*self._wrappers)
        self._own_scheduler = scheduler is None
        self._clock_arg = clock
        self._scheduler = scheduler
        self._control: Scheduler | None = None
        self._workers = workers
        self._clock: Clock = scheduler.clock if scheduler is not None else (clock or SystemClock())
        self.catch_up_limit = catch_up_limit
        self._lock = threading.RLock()
        self._entries: dict[int, _Entry] = {}
        # The armed entries; those due at one instant share a timer.
        self._table: Timetable[int, _Entry] | None = None
        self._ids = itertools.count(1)
        self._running = False
        self._active = 0
        self._stopped = threading.Event()
        self._stopped.set()
        self._hooks: dict[str, list[Callable[[RunEvent], object]]] = {e: [] for e in EVENTS}
        # True while any hook listens: a run reads the wall clock only then.
        self._listening = False
        # Counts start() and stop(): arming left from an earlier start is dropped.
        self._generation = 0

    # -- entries ---------------------------------------------------------------------
    def add(
        self,
        schedule: object,
        fn: Callable[..., object],
        /,
        *args: Any,
        name: str | None = None,
        tags: Iterable[str] = (),
        max_runs: int | None = None,
        grace: float | None = None,
        catch_up: CatchUp = "latest",
        **kwargs: Any,
    ) -> int:
        """Run ``fn(*args, **kwargs)`` on ``schedule``; return the entry id.

        ``schedule`` is text (:func:`parse_schedule`), a schedule value or a fluent
        builder. ``max_runs`` removes the entry after that many runs. ``grace``: seconds
        late after which an occurrence is skipped (None: no limit). ``catch_up``:
        ``latest``, ``all`` or ``skip`` (see :func:`plan_occurrences`).
        """
        sched = _as_schedule(schedule)
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        if max_runs is not None and (
            isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1
        ):
            raise ValueError(f"max_runs must be a whole number >= 1 or None, got {max_runs!r}")
        if grace is not None and (
            isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0
        ):
            raise ValueError(f"grace must be a number of seconds >= 0 or None, got {grace!r}")
        if catch_up not in CATCH_UP_POLICIES:
            raise ValueError(f"catch_up must be one of {CATCH_UP_POLICIES}, got {catch_up!r}")
        tag_set = frozenset(tags)
        for tag in tag_set:
            if not isinstance(tag, str):
                raise TypeError(f"tags must be strings, got {tag!r}")
        label = name or str(getattr(fn, "__qualname__", None) or fn)
        with self._lock:
            entry = _Entry(
                next(self._ids),
                label,
                sched,
                fn,
                args,
                kwargs,
                tag_set,
                max_runs,
                None if grace is None else float(grace),
                catch_up,
            )
            entry.job = self._wrap(entry.call)
            if self._running:  # armed first: if its timer is refused, nothing is added
                entry.next = _first(sched, self._clock.now())
                self._arm(entry)
            self._entries[entry.id] = entry
        logger.debug(
            "added entry %d %s (%s)", entry.id, label, sched, extra={"action": "entry_added"}
        )
        return entry.id

    def remove(self, entry_id: int) -> bool:
        """Remove an entry (a run in progress finishes). False if there was none."""
        with self._lock:
            entry = self._entries.pop(entry_id, None)
            if entry is None:
                return False
            entry.removed = True
            self._disarm(entry)
        logger.debug("removed entry %d", entry_id, extra={"action": "entry_removed"})
        return True

    def remove_by_tag(self, tag: str) -> int:
        """Remove every entry with ``tag``; return how many."""
        with self._lock:
            ids = [e.id for e in self._entries.values() if tag in e.tags]
            for entry_id in ids:
                self.remove(entry_id)
        return len(ids)

    def entries(self) -> list[EntrySnapshot]:
        """Snapshots of every entry, soonest first (entries that never run again last)."""
        with self._lock:
            snaps = [e.snapshot() for e in self._entries.values()]
        far = datetime.max.replace(tzinfo=self._clock.now().tzinfo)
        return sorted(snaps, key=lambda s: (s.next or far, s.id))

    def entry(self, entry_id: int) -> EntrySnapshot:
        """A snapshot of one entry (raises KeyError naming the id)."""
        with self._lock:
            entry = self._entries.get(entry_id)
            if entry is None:
                raise KeyError(f"no cron entry with id {entry_id!r}")
            return entry.snapshot()

    def __len__(self) -> int:
        return len(self._entries)

    def run_now(self, entry_id: int) -> None:
        """Run an entry's job now, once, through its wrappers (its schedule is unchanged)."""
        with self._lock:
            entry = self._entries.get(entry_id)
            if entry is None:
                raise KeyError(f"no cron entry with id {entry_id!r}")
            scheduler = self._ensure_scheduler()
            now = self._clock.now()
            self._active += 1
            entry.running += 1
            self._stopped.clear()
        try:
            scheduler.call_soon(self._drain, deque([(entry, [now])]))
        except (SchedulerFull, SchedulerClosed):
            with self._lock:
                entry.running -= 1
            self._done_one()
            raise

    # -- hooks -----------------------------------------------------------------------
    def on(self, event: str, callback: Callable[[RunEvent], object]) -> Callable[[], None]:
        """Call ``callback(RunEvent)`` on ``before_run``, ``after_run``, ``failed`` or
        ``skipped``; returns a function that unsubscribes it."""
        if event not in self._hooks:
            raise ValueError(f"unknown event {event!r}; expected one of {EVENTS}")
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {callback!r}")
        with self._lock:
            self._hooks[event] = [*self._hooks[event], callback]
            self._listening = True

        def unsubscribe() -> None:
            with self._lock:
                self._hooks[event] = [cb for cb in self._hooks[event] if cb is not callback]
                self._listening = any(self._hooks.values())

        return unsubscribe

    def _emit(self, event: RunEvent) -> None:
        for callback in self._hooks[event.event]:
            try:
                callback(event)
            except Exception:
                logger.exception(
                    "cron hook %r for %s failed",
                    callback,
                    event.event,
                    extra={"action": "hook_failed"},
                )

    # -- running ---------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._running

    def start(self) -> None:
        """Arm every entry (their next occurrence counts from now). Idempotent."""
        with self._lock:
            if self._running:
                return
            self._ensure_scheduler()
            self._running = True
            self._generation += 1
            now = self._clock.now()
            broken: list[tuple[_Entry, datetime, Exception]] = []
            for entry in self._entries.values():
                try:
                    entry.next = _first(entry.schedule, now)
                    self._arm(entry)
                except Exception as exc:  # its schedule failed, or its timer was refused
                    _stop(entry, now, exc, broken)
        logger.info("cron started with %d entries", len(self._entries), extra={"action": "started"})
        self._report_stopped(broken)

    def stop(self) -> threading.Event:
        """Stop firing; return an Event that is set once the running jobs have finished.

        A scheduler of its own is closed (pending timers dropped, running jobs finish).
        :meth:`start` may be called again later.
        """
        with self._lock:
            was_running = self._running
            self._running = False
            self._generation += 1
            if self._table is not None:
                self._table.clear()
            scheduler, control = self._scheduler, self._control
            self._control = None
            if self._own_scheduler:
                self._scheduler = None
                self._table = None
            if self._active == 0:
                self._stopped.set()
        if self._own_scheduler and scheduler is not None:
            scheduler.close(wait=False)
        if control is not None:
            control.close(wait=False)
        if was_running:
            logger.info("cron stopped", extra={"action": "stopped"})
        return self._stopped

    def __enter__(self) -> Cron:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop().wait()

    def _ensure_scheduler(self) -> Scheduler:
        if self._scheduler is None:
            self._scheduler = Scheduler(workers=self._workers, clock=self._clock, name="htask-cron")
        if self._table is None:
            self._table = Timetable(self._scheduler, self._fire)
        if self._control is None:
            # Timers of the wrappers (timeouts) get a worker of their own, so that a
            # timeout fires even when every job worker is busy.
            self._control = Scheduler(workers=1, clock=self._clock, name="htask-cron-control")
        return self._scheduler

    def _arm(self, entry: _Entry, key: int | None = None) -> None:
        # Called with the lock held. ``key``: the instant in microseconds, if known.
        when = entry.next
        if when is None or not self._running or entry.removed:
            return
        assert self._table is not None
        self._table.place(entry.id, when, entry, at_us=key)

    def _disarm(self, entry: _Entry) -> None:
        # Called with the lock held.
        if self._table is not None:
            self._table.drop(entry.id)

    def _fire(self, due: list[tuple[int, _Entry]]) -> None:
        """The timer of the entries due at one instant went off (in a worker thread).

        Under the lock, each entry's plan is made (once per distinct schedule: equal
        schedules due together have equal plans) and its next occurrence set; then the
        runs are handed out: this thread and up to ``workers - 1`` more each take runs
        from one queue until it is empty, so a burst costs a few pool hand-offs rather
        than one per run, and a slow job holds up only the thread running it.

        The next occurrences are armed (their timers placed) by the thread that takes
        the last run, before it runs it: the runs of a burst do not wait behind the
        arming of every entry, and the arming does not wait for any job to finish (it
        waits only for a free thread, which the next timer would need as well). On a
        scheduler with a ``capacity`` they are armed first, as the helpers' timers
        would otherwise take places the next occurrences need.
        """
        now = self._clock.now()
        runs: _Runs = deque()
        arms: list[tuple[_Entry, datetime, int | None]] = []
        missed: list[tuple[_Entry, datetime]] = []
        #: Occurrences that did not run of their own, each with why (folded, dropped).
        unrun: list[tuple[_Entry, datetime, str]] = []
        broken: list[tuple[_Entry, datetime, Exception]] = []
        with self._lock:
            if not self._running:
                return
            memo: _Memo = ({}, {})
            by_id = memo[0]
            handed_out = 0
            for _entry_id, entry in due:
                if entry.removed:  # removed while its timer went off
                    continue
                scheduled = entry.next
                assert scheduled is not None
                known = by_id.get(entry.plan_key)
                if known is None:
                    try:
                        known = self._plan(entry, scheduled, now, memo)
                    except Exception as exc:  # a schedule that cannot compute: it stops
                        _stop(entry, scheduled, exc, broken)
                        continue
                plan, next_key = known
                to_run, nxt = plan.to_run, plan.next
                if entry.max_runs is not None:
                    to_run, nxt, next_key = _within_max_runs(entry, to_run, nxt, next_key)
                entry.next = nxt
                if to_run:
                    entry.prev = to_run[-1]
                    count = len(to_run)
                    entry.running += count  # from now on: handed out
                    handed_out += count
                    runs.append((entry, to_run))
                if plan.missed:
                    missed.extend([(entry, when) for when in plan.missed])
                if plan.folded or plan.dropped is not None:
                    unrun += _unrun(entry, plan, to_run)
                if nxt is not None:
                    arms.append((entry, nxt, next_key))
            self._active += handed_out
            if handed_out and self._stopped.is_set():
                self._stopped.clear()
            scheduler = self._scheduler
            arming: _Arming = [(arms, self._generation)] if arms else []
        self._report_stopped(broken)
        assert scheduler is not None
        if not runs or scheduler.capacity is not None:
            self._arm_next(arming)
        if runs:
            self._call_helpers(scheduler, runs, arming)
        for entry, when in missed:
            self._skip_missed(entry, when, now)
        for entry, when, reason in unrun:
            late = (now - when).total_seconds()
            self._emit(RunEvent("skipped", entry.id, entry.name, when, late, reason=reason))
        self._drain(runs, arming)

    def _call_helpers(self, scheduler: Scheduler, runs: _Runs, arming: _Arming) -> None:
        """Have up to ``workers - 1`` more threads take runs from ``runs`` (as many as
        there are queues of runs, less this thread's)."""
        workers = scheduler.workers
        helpers = len(runs) - 1 if workers == 0 else min(len(runs), workers) - 1
        try:
            for _ in range(helpers):
                scheduler.call_soon(self._drain, runs, arming)
        except (SchedulerFull, SchedulerClosed):
            pass  # no room for helpers: this thread runs the rest

    def _arm_next(self, arming: _Arming) -> None:
        """Place the timers of a firing's next occurrences (once: the first caller takes
        them). An entry whose timer is refused stops and is reported."""
        try:
            arms, generation = arming.pop()
        except IndexError:
            return  # none, or another thread took them
        broken: list[tuple[_Entry, datetime, Exception]] = []
        with self._lock:
            if generation != self._generation:
                return  # stopped (and perhaps started again) since the firing
            for entry, nxt, key in arms:
                if entry.next is not nxt:
                    continue
                try:
                    self._arm(entry, key)
                except (SchedulerFull, SchedulerClosed) as exc:  # a shared scheduler
                    _stop(entry, nxt, exc, broken)
        self._report_stopped(broken)

    def _report_stopped(self, broken: list[tuple[_Entry, datetime, Exception]]) -> None:
        """Log and report (``failed``) the entries that were stopped because their
        schedule failed or their next timer was refused; they fire no more."""
        for entry, scheduled, error in broken:
            logger.error(
                "cron entry %d %s is stopped: %s",
                entry.id,
                entry.name,
                error,
                exc_info=error,
                extra={"action": "entry_stopped"},
            )
            self._emit(RunEvent("failed", entry.id, entry.name, scheduled, 0.0, error=error))

    def _plan(
        self, entry: _Entry, scheduled: datetime, now: datetime, memo: _Memo
    ) -> tuple[Plan, int | None]:
        """The entry's plan and the microseconds of its next occurrence. Equal schedules
        due together have equal plans, so within one firing each is made once: the
        caller looks it up by the schedule's identity (text schedules are parsed once
        and shared), this by value. Only the engine's own schedules, whose
        ``next_after`` depends on nothing but their value, are shared."""
        schedule = entry.schedule
        by_id, by_value = memo
        value = (schedule, entry.grace, entry.catch_up)
        shared = isinstance(schedule, _Bounded)
        known = by_value.get(value) if shared else None
        if known is None:
            plan = plan_occurrences(
                schedule,
                scheduled,
                now,
                grace=entry.grace,
                catch_up=entry.catch_up,
                limit=self.catch_up_limit,
            )
            known = (plan, None if plan.next is None else to_us(plan.next))
        if shared:
            by_id[entry.plan_key] = by_value[value] = known
        return known

    def _skip_missed(self, entry: _Entry, when: datetime, now: datetime) -> None:
        with self._lock:
            entry.skips += 1
        late = (now - when).total_seconds()
        logger.warning(
            "cron entry %d %s missed %s (%.3fs late)",
            entry.id,
            entry.name,
            when.isoformat(),
            late,
            extra={"action": "missed"},
        )
        self._emit(RunEvent("skipped", entry.id, entry.name, when, late, reason="missed"))

    def _drain(self, runs: _Runs, arming: _Arming | None = None) -> None:
        """Take an entry's runs from the queue until it is empty, and run each once
        through the entry's wrappers. The runs of one entry (several when
        ``catch_up="all"`` catches up) run one after another, in order. The thread that
        takes the last run arms the firing's next occurrences first (``arming``).

        The caller counted every run in ``_active`` and in ``entry.running`` (a run
        counts as running from when it is handed out, so that ``max_runs`` is never
        exceeded). Every run of a burst goes through this loop, so what does not change
        between runs is read once, the lock is taken once per run, and the wall clock is
        read and events are made only while hooks listen.
        """
        popleft = runs.popleft
        clock = self._clock
        now = clock.now
        monotonic = clock.monotonic
        hooks = self._hooks
        control = self._control
        set_current = _current.set
        reset_current = _current.reset
        while True:
            try:
                entry, whens = popleft()
            except IndexError:
                return
            if arming and not runs:  # the last run is taken
                self._arm_next(arming)
            for scheduled in whens:
                error: BaseException | None = None
                skipped: str | None = None
                started: datetime | None = None
                if self._listening:
                    started = now()
                    if hooks["before_run"]:
                        lateness = (started - scheduled).total_seconds()
                        self._emit(
                            RunEvent(
                                "before_run", entry.id, entry.name, scheduled, lateness, started
                            )
                        )
                context = RunContext(entry.id, entry.name, scheduled, clock, control)
                began = monotonic()
                reset = set_current(context)
                try:
                    entry.job()
                except JobSkipped as exc:
                    skipped = str(exc)
                except BaseException as exc:  # SystemExit too: a job never ends a worker
                    error = exc
                    logger.exception(
                        "cron job %s failed", entry.name, extra={"action": "job_failed"}
                    )
                finally:
                    reset_current(reset)
                if error is None and context.errors:
                    error = context.errors[-1]
                listeners = self._counted(entry, error, skipped)
                if not listeners:
                    continue  # finished: nothing more to tell
                duration = monotonic() - began
                if started is None:  # a hook came while the job ran
                    started = now() - timedelta(seconds=duration)
                try:  # the hooks hear of it before stop() counts the run as finished
                    self._tell(
                        entry,
                        scheduled,
                        (started - scheduled).total_seconds(),
                        started,
                        duration,
                        error,
                        skipped,
                    )
                finally:
                    self._done_one()

    def _counted(
        self, entry: _Entry, error: BaseException | None, skipped: str | None
    ) -> list[Callable[[RunEvent], object]] | None:
        """Count a finished run of ``entry`` (and remove an entry that ran its
        ``max_runs``); the hooks to tell of it, or None when none listens (the run is
        then finished: :meth:`_done_one` is done here)."""
        hooks = self._hooks
        with self._lock:
            entry.running -= 1
            if skipped is not None:
                entry.skips += 1
            else:
                entry.runs += 1
                if error is not None:
                    entry.failures += 1
            if (
                entry.max_runs is not None
                and entry.next is None
                and not entry.removed
                and entry.runs + entry.running >= entry.max_runs
            ):
                self._entries.pop(entry.id, None)
                entry.removed = True
            if not self._listening:
                listeners = None
            elif skipped is not None:
                listeners = hooks["skipped"]
            else:
                listeners = hooks["after_run"] or (hooks["failed"] if error else None)
            if not listeners:
                self._active -= 1
                if self._active == 0 and not self._running:
                    self._stopped.set()
                return None
            return listeners

    def _tell(
        self,
        entry: _Entry,
        scheduled: datetime,
        lateness: float,
        started: datetime,
        duration: float,
        error: BaseException | None,
        skipped: str | None,
    ) -> None:
        """Emit the events of a finished run: ``skipped``, or ``failed`` and ``after_run``."""
        event = functools.partial(
            RunEvent,
            entry_id=entry.id,
            name=entry.name,
            scheduled=scheduled,
            lateness=lateness,
            started=started,
        )
        if skipped is not None:
            self._emit(event("skipped", reason=skipped))
            return
        if error is not None:
            self._emit(event("failed", duration=duration, error=error))
        self._emit(event("after_run", duration=duration, error=error))

    def _done_one(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0 and not self._running:
                self._stopped.set()

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"<Cron {state} entries={len(self._entries)}>"


def _within_max_runs(
    entry: _Entry, to_run: list[datetime], nxt: datetime | None, next_key: Any
) -> tuple[list[datetime], datetime | None, Any]:
    """``entry``'s runs, next occurrence and its plan's key, cut to what its
    ``max_runs`` leaves (no next occurrence once the last run is handed out)."""
    assert entry.max_runs is not None
    left = entry.max_runs - entry.runs - entry.running
    if len(to_run) >= left:
        nxt = next_key = None
        if len(to_run) > left:
            to_run = to_run[: max(left, 0)]
    return to_run, nxt, next_key


def _stop(
    entry: _Entry,
    when: datetime,
    error: Exception,
    broken: list[tuple[_Entry, datetime, Exception]],
) -> None:
    """Stop an entry whose schedule failed or whose timer was refused (called with the
    lock held); the caller reports ``broken`` with ``Cron._report_stopped``."""
    entry.next = None
    entry.failures += 1
    broken.append((entry, when, error))


def _first(schedule: SupportsNextAfter, now: datetime) -> datetime | None:
    """The first occurrence of a new entry: now for an interval that runs immediately."""
    if getattr(schedule, "immediately", False):
        return now
    return schedule.next_after(now)
