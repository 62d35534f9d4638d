"""The Cron runner, driven by a FakeClock (no sleeps)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from django_htask.engine import (
    Cron,
    FakeClock,
    IntervalSchedule,
    InvalidSchedule,
    RunEvent,
    Scheduler,
    SchedulerFull,
    current_run,
    every,
    plan_occurrences,
    skip_if_still_running,
)
from django_htask.engine import cron as cron_module

T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def cron(clock: FakeClock) -> Cron:
    runner = Cron(clock=clock)
    yield runner
    assert runner.stop().wait(5)


def secs(*values: float) -> list[datetime]:
    return [T0 + timedelta(seconds=v) for v in values]


# -- plan_occurrences (pure) -------------------------------------------------------------
EVERY_10S = IntervalSchedule(10, anchor=T0)


@pytest.mark.parametrize(
    ("catch_up", "grace", "to_run", "missed", "folded", "nxt"),
    [
        ("latest", None, [30], [], [0, 10, 20], 40),
        ("all", None, [0, 10, 20, 30], [], [], 40),
        ("skip", None, [], [0, 10, 20, 30], [], 40),
        ("latest", 5.0, [30], [], [0, 10, 20], 40),
        ("latest", 1.0, [], [0, 10, 20, 30], [], 40),
        ("all", 15.0, [20, 30], [0, 10], [], 40),
        ("skip", 100.0, [], [0, 10, 20, 30], [], 40),
    ],
)
def test_plan(
    catch_up: str,
    grace: float | None,
    to_run: list[int],
    missed: list[int],
    folded: list[int],
    nxt: int,
) -> None:
    plan = plan_occurrences(
        EVERY_10S, T0, T0 + timedelta(seconds=32), grace=grace, catch_up=catch_up
    )
    assert plan.to_run == secs(*to_run)
    assert plan.missed == secs(*missed)
    assert plan.folded == secs(*folded)  # every due occurrence is in one of the three
    assert plan.next == secs(nxt)[0]
    assert plan.dropped is None


def test_plan_past_the_cap_keeps_an_intervals_sequence() -> None:
    """An interval without anchor counts from its previous occurrence: jumping over a
    backlog keeps its times (on the 5 s past each 10 s), not a sequence from now."""
    free = IntervalSchedule(10)
    first = T0 + timedelta(seconds=5)
    plan = plan_occurrences(free, first, T0 + timedelta(hours=1, seconds=2), limit=3)
    assert plan.to_run == [first + timedelta(seconds=20)]
    assert plan.dropped == first + timedelta(seconds=30)
    assert plan.next == T0 + timedelta(hours=1, seconds=5)
    assert free.next_in_sequence(first, first - timedelta(seconds=1)) == first
    jittered = IntervalSchedule(10, jitter=1)
    later = T0 + timedelta(hours=1)
    assert jittered.next_in_sequence(first, later) == jittered.next_after(later)


def test_plan_on_time_and_late_beyond_grace() -> None:
    on_time = plan_occurrences(EVERY_10S, T0, T0 + timedelta(seconds=1), grace=5)
    assert (on_time.to_run, on_time.missed, on_time.next) == (secs(0), [], secs(10)[0])
    late = plan_occurrences(EVERY_10S, T0, T0 + timedelta(seconds=8), grace=5)
    assert (late.to_run, late.missed, late.next) == ([], secs(0), secs(10)[0])


def test_plan_caps_catch_up_and_does_not_burst() -> None:
    plan = plan_occurrences(EVERY_10S, T0, T0 + timedelta(hours=1), catch_up="all", limit=3)
    assert plan.to_run == secs(0, 10, 20)
    assert plan.next == T0 + timedelta(hours=1, seconds=10)
    assert plan.dropped == secs(30)[0]  # every one from it to before next is jumped over
    with pytest.raises(ValueError, match="catch_up must be one of"):
        plan_occurrences(EVERY_10S, T0, T0, catch_up="most")


# -- the runner ------------------------------------------------------------------------
def test_runs_on_schedule_without_drift(clock: FakeClock, cron: Cron) -> None:
    seen: list[datetime] = []
    entry_id = cron.add("*/10 * * * * *", lambda: seen.append(clock.now()), name="tick")
    cron.start()
    clock.advance(35)
    assert seen == secs(10, 20, 30)
    snap = cron.entry(entry_id)
    assert (snap.name, snap.runs, snap.prev, snap.next) == ("tick", 3, secs(30)[0], secs(40)[0])


def test_arguments_and_fluent_schedules(clock: FakeClock, cron: Cron) -> None:
    seen: list[tuple[str, int]] = []
    cron.add(every(2).seconds, lambda a, b=0: seen.append((a, b)), "x", b=7)
    cron.add(every(2).seconds.not_immediately(), lambda: seen.append(("late", 0)))
    cron.start()
    clock.advance(0)
    assert seen == [("x", 7)]  # immediately
    clock.advance(2)
    assert sorted(seen) == [("late", 0), ("x", 7), ("x", 7)]


def test_add_rejects_bad_input(cron: Cron) -> None:
    with pytest.raises(InvalidSchedule, match="61"):
        cron.add("61 * * * *", print)
    with pytest.raises(InvalidSchedule, match="expected a schedule"):
        cron.add(42, print)
    with pytest.raises(TypeError, match="callable"):
        cron.add("@daily", "print")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_runs"):
        cron.add("@daily", print, max_runs=0)
    with pytest.raises(ValueError, match="grace"):
        cron.add("@daily", print, grace=-1)
    with pytest.raises(ValueError, match="catch_up"):
        cron.add("@daily", print, catch_up="most")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="no cron entry with id 99"):
        cron.entry(99)
    with pytest.raises(ValueError, match="unknown event"):
        cron.on("exploded", print)
    assert len(cron) == 0


def test_entries_snapshot_remove_and_tags(clock: FakeClock, cron: Cron) -> None:
    a = cron.add("@hourly", print, name="a", tags=("reports",))
    b = cron.add("*/5 * * * *", print, name="b", tags=("reports", "x"))
    c = cron.add("@daily", print, name="c")
    cron.start()
    assert [s.name for s in cron.entries()] == ["b", "a", "c"]  # soonest first
    snap = cron.entries()[0]
    assert snap.next == T0 + timedelta(minutes=5)
    assert cron.remove_by_tag("reports") == 2
    assert [s.id for s in cron.entries()] == [c]
    assert cron.remove(c) is True
    assert cron.remove(c) is False
    assert a != b


def test_max_runs_removes_the_entry(clock: FakeClock, cron: Cron) -> None:
    seen: list[datetime] = []
    cron.add("* * * * * *", lambda: seen.append(clock.now()), max_runs=2)
    cron.start()
    clock.advance(5)
    assert seen == secs(1, 2)
    assert cron.entries() == []


def test_once_schedule_runs_once_and_stays_listed(clock: FakeClock, cron: Cron) -> None:
    seen: list[datetime] = []
    entry_id = cron.add("@once 2030-01-01T00:00:03Z", lambda: seen.append(clock.now()))
    cron.start()
    clock.advance(10)
    assert seen == secs(3)
    assert cron.entry(entry_id).next is None


def test_add_and_remove_while_running_and_from_inside_a_job(clock: FakeClock, cron: Cron) -> None:
    seen: list[str] = []
    cron.start()
    other: list[int] = []

    def spawner() -> None:
        seen.append("spawner")
        if not other:
            other.append(cron.add("* * * * * *", lambda: seen.append("child")))

    parent = cron.add("*/2 * * * * *", spawner)
    clock.advance(3)
    assert seen == ["spawner", "child"]
    cron.remove(parent)
    cron.remove(other[0])
    clock.advance(10)
    assert seen == ["spawner", "child"]


def test_run_now_does_not_move_the_schedule(clock: FakeClock, cron: Cron) -> None:
    seen: list[datetime] = []
    entry_id = cron.add("@hourly", lambda: seen.append(clock.now()))
    cron.start()
    cron.run_now(entry_id)
    clock.advance(0)
    assert seen == [T0]
    assert cron.entry(entry_id).next == T0 + timedelta(hours=1)
    assert cron.entry(entry_id).runs == 1


def test_late_fire_runs_once_and_next_is_from_schedule(clock: FakeClock) -> None:
    # A scheduler whose single worker is blocked makes the runner fire late.
    scheduler = Scheduler(workers=1, clock=clock)
    cron = Cron(scheduler=scheduler)
    seen: list[datetime] = []
    release = threading.Event()
    scheduler.call_soon(release.wait, 10)
    cron.add(IntervalSchedule(10, anchor=T0), lambda: seen.append(clock.now()))
    cron.start()
    clock.advance(35, wait=False)
    release.set()
    clock.advance(0)
    assert seen == [T0 + timedelta(seconds=35)]  # latest: one run for 10, 20, 30
    assert cron.entries()[0].next == T0 + timedelta(seconds=40)
    assert cron.stop().wait(5)
    scheduler.close()


def test_grace_and_skip_policy_emit_skipped(clock: FakeClock) -> None:
    scheduler = Scheduler(workers=1, clock=clock)
    cron = Cron(scheduler=scheduler)
    events: list[RunEvent] = []
    cron.on("skipped", events.append)
    seen: list[datetime] = []
    release = threading.Event()
    scheduler.call_soon(release.wait, 10)
    cron.add(IntervalSchedule(10, anchor=T0), lambda: seen.append(clock.now()), grace=3)
    cron.start()
    clock.advance(15, wait=False)
    release.set()
    clock.advance(0)
    assert seen == []
    assert [(e.reason, e.scheduled) for e in events] == [("missed", secs(10)[0])]
    assert events[0].lateness == 5.0
    clock.advance(5)
    assert seen == secs(20)
    assert cron.stop().wait(5)
    scheduler.close()


def test_hooks_with_durations(clock: FakeClock, cron: Cron) -> None:
    events: list[RunEvent] = []
    for name in ("before_run", "after_run", "failed", "skipped"):
        cron.on(name, events.append)

    def slow() -> None:
        clock.advance(0.25, wait=False)

    def bad() -> None:
        raise RuntimeError("boom")

    cron.add("* * * * * *", slow, name="slow", max_runs=1)
    cron.add("*/2 * * * * *", bad, name="bad", max_runs=1)
    cron.start()
    clock.advance(2)
    kinds = [(e.event, e.name) for e in events]
    assert kinds == [
        ("before_run", "slow"),
        ("after_run", "slow"),
        ("before_run", "bad"),
        ("failed", "bad"),
        ("after_run", "bad"),
    ]
    assert events[1].duration == pytest.approx(0.25)
    assert isinstance(events[3].error, RuntimeError)
    assert events[0].lateness == 0.0


def test_a_failing_hook_does_not_stop_the_job(clock: FakeClock, cron: Cron) -> None:
    seen: list[int] = []

    def broken(event: RunEvent) -> None:
        raise ValueError("hook broke")

    unsubscribe = cron.on("before_run", broken)
    cron.add("* * * * * *", lambda: seen.append(1))
    cron.start()
    clock.advance(1)
    unsubscribe()
    clock.advance(1)
    assert seen == [1, 1]


def test_failures_are_counted_and_never_kill_the_runner(clock: FakeClock, cron: Cron) -> None:
    calls: list[int] = []

    def bad() -> None:
        calls.append(1)
        raise RuntimeError("boom")

    entry_id = cron.add("* * * * * *", bad)
    cron.start()
    clock.advance(3)
    snap = cron.entry(entry_id)
    assert (len(calls), snap.runs, snap.failures) == (3, 3, 3)


def test_without_recover_exceptions_are_still_contained(clock: FakeClock) -> None:
    cron = Cron(clock=clock, wrappers=())
    failed: list[RunEvent] = []
    cron.on("failed", failed.append)
    cron.add("* * * * * *", lambda: 1 / 0)
    cron.start()
    clock.advance(2)
    assert len(failed) == 2
    assert isinstance(failed[0].error, ZeroDivisionError)
    assert cron.stop().wait(5)


def test_skip_wrapper_reports_skipped(clock: FakeClock) -> None:
    cron = Cron(clock=clock, wrappers=(skip_if_still_running(),))
    skipped: list[RunEvent] = []
    cron.on("skipped", skipped.append)
    release = threading.Event()
    started = threading.Event()

    def slow() -> None:
        started.set()
        release.wait(10)

    entry_id = cron.add("* * * * * *", slow)
    cron.start()
    clock.advance(1, wait=False)
    assert started.wait(5)
    clock.advance(1, wait=False)
    deadline = threading.Event()
    for _ in range(500):
        if skipped:
            break
        deadline.wait(0.01)
    release.set()
    clock.advance(0)
    assert [e.reason for e in skipped] == ["the previous run is still running"]
    assert cron.entry(entry_id).skips == 1
    assert cron.stop().wait(5)


def test_stop_returns_an_event_set_when_jobs_finish(clock: FakeClock) -> None:
    cron = Cron(clock=clock)
    release = threading.Event()
    started = threading.Event()

    def slow() -> None:
        started.set()
        release.wait(10)

    cron.add("* * * * * *", slow, max_runs=1)
    cron.start()
    clock.advance(1, wait=False)
    assert started.wait(5)
    done = cron.stop()
    assert not done.is_set()
    release.set()
    assert done.wait(5)
    # start again after stop: a new scheduler of its own
    seen: list[int] = []
    cron.add("* * * * * *", lambda: seen.append(1))
    cron.start()
    clock.advance(1)
    assert seen == [1]
    assert cron.stop().wait(5)


def test_stop_without_jobs_is_set_at_once(cron: Cron) -> None:
    assert cron.stop().is_set()
    cron.start()
    cron.start()  # idempotent
    assert cron.running
    assert cron.stop().is_set()
    assert not cron.running


def test_context_manager_and_scheduler_argument(clock: FakeClock) -> None:
    with Scheduler(workers=2, clock=clock) as scheduler, Cron(scheduler=scheduler) as cron:
        seen: list[int] = []
        cron.add("* * * * * *", lambda: seen.append(1))
        clock.advance(2)
        assert seen == [1, 1]
    with pytest.raises(ValueError, match="either a scheduler or a clock"):
        Cron(scheduler=scheduler, clock=FakeClock())


def test_dst_in_the_runner(cron: Cron) -> None:
    clock = FakeClock(datetime(2026, 3, 29, 0, 0, tzinfo=UTC))
    berlin = Cron(clock=clock)
    seen: list[datetime] = []
    berlin.add("CRON_TZ=Europe/Berlin 30 2 * * *", lambda: seen.append(clock.now()))
    berlin.start()
    clock.advance(3600 * 2)
    assert seen == [datetime(2026, 3, 29, 1, 0, tzinfo=UTC)]  # 03:00 CEST, the gap's end
    assert berlin.stop().wait(5)


# -- bursts: entries due at the same instant ----------------------------------------------
def _wait_for(condition: Callable[[], bool]) -> bool:
    pause = threading.Event()
    for _ in range(500):
        if condition():
            return True
        pause.wait(0.01)
    return condition()


def test_entries_due_together_share_one_timer_and_one_plan(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans: list[datetime] = []
    real = cron_module.plan_occurrences

    def counting(schedule: object, scheduled: datetime, *args: object, **kw: object) -> object:
        plans.append(scheduled)
        return real(schedule, scheduled, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(cron_module, "plan_occurrences", counting)
    seen: list[int] = []
    with Scheduler(workers=2, clock=clock) as scheduler:
        cron = Cron(scheduler=scheduler)
        for i in range(50):
            cron.add("* * * * * *", seen.append, i)
        # equal schedules made separately share plans too (compared by value)
        for i in range(50, 60):
            cron.add(IntervalSchedule(1, anchor=T0), seen.append, i)
        cron.start()
        assert len(scheduler) == 1  # one timer for sixty entries
        clock.advance(1)
        assert sorted(seen) == list(range(60))
        assert plans == [T0 + timedelta(seconds=1)] * 2  # one per distinct schedule
        assert len(scheduler) == 1
        assert {(e.runs, e.prev, e.next) for e in cron.entries()} == {
            (1, T0 + timedelta(seconds=1), T0 + timedelta(seconds=2))
        }
        clock.advance(1)
        assert len(seen) == 120
        assert cron.stop().wait(5)


class _CountingSchedule:
    """A schedule of the user's own: its plans are never shared (it may keep state)."""

    def __init__(self) -> None:
        self.calls = 0

    def next_after(self, dt: datetime) -> datetime:
        self.calls += 1
        return dt.replace(microsecond=0) + timedelta(seconds=1)


def test_schedules_of_other_types_are_asked_for_every_entry(clock: FakeClock, cron: Cron) -> None:
    schedule = _CountingSchedule()
    seen: list[int] = []
    for i in range(3):
        cron.add(schedule, seen.append, i)
    cron.start()
    assert schedule.calls == 3  # the first occurrence of each
    clock.advance(1)
    assert sorted(seen) == [0, 1, 2]
    assert schedule.calls == 6


@pytest.mark.parametrize("workers", [2, 0])
def test_a_slow_job_in_a_burst_does_not_hold_up_the_others(clock: FakeClock, workers: int) -> None:
    cron = Cron(clock=clock, workers=workers)
    release = threading.Event()
    started = threading.Event()
    done: list[int] = []

    def slow() -> None:
        started.set()
        release.wait(10)

    cron.add("* * * * * *", slow, max_runs=1)
    for i in range(5):
        cron.add("* * * * * *", done.append, i, max_runs=1)
    cron.start()
    clock.advance(1, wait=False)
    assert started.wait(5)
    assert _wait_for(lambda: len(done) == 5)  # while slow() still holds its thread
    assert sorted(done) == list(range(5))
    assert not release.is_set()
    release.set()
    assert cron.stop().wait(5)


def test_max_runs_in_a_burst_is_exact_and_removes_every_entry(clock: FakeClock, cron: Cron) -> None:
    seen: list[int] = []
    for i in range(10):
        cron.add("* * * * * *", seen.append, i, max_runs=2)
    cron.start()
    clock.advance(5)
    assert sorted(seen) == sorted(list(range(10)) * 2)
    assert cron.entries() == []


def test_removing_entries_of_a_shared_timer(clock: FakeClock) -> None:
    with Scheduler(workers=2, clock=clock) as scheduler:
        cron = Cron(scheduler=scheduler)
        seen: list[int] = []
        ids = [cron.add("* * * * * *", seen.append, i) for i in range(3)]
        cron.start()
        assert cron.remove(ids[0])
        assert len(scheduler) == 1  # the others still wait on it
        clock.advance(1)
        assert sorted(seen) == [1, 2]
        assert cron.remove(ids[1]) and cron.remove(ids[2])
        assert len(scheduler) == 0  # the last one out cancels the timer
        clock.advance(2)
        assert sorted(seen) == [1, 2]
        assert cron.stop().wait(5)


def test_catch_up_all_runs_an_entrys_occurrences_in_order_one_at_a_time(
    clock: FakeClock,
) -> None:
    # Blocked workers make the shared timer fire late: each entry has 3 to catch up.
    scheduler = Scheduler(workers=4, clock=clock)
    cron = Cron(scheduler=scheduler)
    release = threading.Event()
    for _ in range(4):
        scheduler.call_soon(release.wait, 10)
    seen: dict[int, list[datetime]] = {i: [] for i in range(4)}
    overlaps: list[int] = []
    locks = {i: threading.Lock() for i in range(4)}

    def job(i: int) -> None:
        if not locks[i].acquire(blocking=False):
            overlaps.append(i)
            return
        try:
            seen[i].append(current_run().scheduled)  # type: ignore[union-attr]
        finally:
            locks[i].release()

    for i in range(4):
        cron.add(IntervalSchedule(10, anchor=T0), job, i, catch_up="all")
    cron.start()
    clock.advance(35, wait=False)
    release.set()
    clock.advance(0)
    assert overlaps == []
    assert seen == {i: secs(10, 20, 30) for i in range(4)}
    assert {e.runs for e in cron.entries()} == {3}
    assert cron.stop().wait(5)
    scheduler.close()


def test_a_job_raising_system_exit_fails_alone(clock: FakeClock) -> None:
    cron = Cron(clock=clock, workers=1)  # one thread runs the whole burst
    seen: list[int] = []

    def leave() -> None:
        raise SystemExit(3)

    failing = cron.add("* * * * * *", leave, max_runs=1)
    for i in range(3):
        cron.add("* * * * * *", seen.append, i, max_runs=1)
    failed: list[RunEvent] = []
    cron.on("failed", failed.append)
    cron.start()
    clock.advance(1)
    assert sorted(seen) == [0, 1, 2]
    assert [(e.entry_id, type(e.error)) for e in failed] == [(failing, SystemExit)]
    assert cron.stop().wait(5)


def test_a_refused_timer_stops_only_that_entry_and_is_reported(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    # A scheduler shared with other work, with room for two pending timers.
    with Scheduler(workers=2, capacity=2, clock=clock) as scheduler:
        scheduler.call_at(T0 + timedelta(days=1), lambda: None)  # takes one place
        cron = Cron(scheduler=scheduler)
        failed: list[RunEvent] = []
        cron.on("failed", failed.append)
        seen: list[tuple[str, datetime]] = []
        a = cron.add("* * * * * *", lambda: seen.append(("a", clock.now())))
        b = cron.add(
            IntervalSchedule(2, anchor=T0 + timedelta(seconds=1)),
            lambda: seen.append(("b", clock.now())),
        )
        cron.start()  # both due at T0+1s: one timer
        # no room for an entry due at another instant: refused, and not added
        with pytest.raises(SchedulerFull):
            cron.add(IntervalSchedule(7, anchor=T0), print)
        assert [e.id for e in cron.entries()] == [a, b]
        clock.advance(1)  # a is next due at +2s (a new timer), b at +3s: refused
        assert sorted(seen) == [("a", T0 + timedelta(seconds=1)), ("b", T0 + timedelta(seconds=1))]
        assert [(e.entry_id, type(e.error)) for e in failed] == [(b, SchedulerFull)]
        assert cron.entry(b).next is None and cron.entry(b).failures == 1
        assert "is stopped" in caplog.text
        clock.advance(2)
        assert [name for name, _ in seen].count("a") == 3  # a goes on
        assert [name for name, _ in seen].count("b") == 1
        assert cron.stop().wait(5)


class _FailingSchedule:
    """A schedule of the user's own that answers ``works`` times, then raises."""

    def __init__(self, works: int) -> None:
        self.works = works

    def next_after(self, dt: datetime) -> datetime:
        if self.works <= 0:
            raise RuntimeError("lost its way")
        self.works -= 1
        return dt.replace(microsecond=0) + timedelta(seconds=1)


@pytest.mark.parametrize("works", [0, 1], ids=["at start", "when it fires"])
def test_an_entry_whose_schedule_fails_is_stopped_and_reported_alone(
    clock: FakeClock, cron: Cron, works: int
) -> None:
    seen: list[int] = []
    failing = cron.add(_FailingSchedule(works), seen.append, 0)
    cron.add("* * * * * *", seen.append, 1)
    failed: list[RunEvent] = []
    cron.on("failed", failed.append)
    cron.start()
    clock.advance(2)
    assert [(e.entry_id, str(e.error)) for e in failed] == [(failing, "lost its way")]
    assert cron.entry(failing).next is None and cron.entry(failing).runs == 0
    assert seen == [1, 1]


def test_a_burst_runs_before_its_entries_are_armed_again(clock: FakeClock) -> None:
    # One worker: the firing thread runs the three runs in turn. The next occurrences
    # are armed when the last run is taken, before it runs (not before the first).
    with Scheduler(workers=1, clock=clock) as scheduler:
        cron = Cron(scheduler=scheduler)
        pending: list[int] = []
        ids = [cron.add("* * * * * *", lambda: pending.append(len(scheduler))) for _ in range(3)]
        cron.start()
        clock.advance(1)
        assert pending == [0, 0, 1]  # one timer for the three next occurrences
        assert {cron.entry(i).next for i in ids} == {T0 + timedelta(seconds=2)}
        clock.advance(1)
        assert pending == [0, 0, 1] * 2
        assert cron.stop().wait(5)


def test_a_hook_added_while_a_job_runs_hears_of_that_run(clock: FakeClock, cron: Cron) -> None:
    # No hook when the run starts (the wall clock is not read): its start is worked
    # out from the duration when a hook subscribed meanwhile is told.
    events: list[RunEvent] = []

    def subscribing() -> None:
        cron.on("after_run", events.append)
        clock.advance(0.5, wait=False)

    cron.add("* * * * * *", subscribing, name="subscribing", max_runs=1)
    cron.start()
    clock.advance(1)
    [event] = events
    assert event.scheduled == T0 + timedelta(seconds=1)
    assert event.started == event.scheduled
    assert event.lateness == 0.0
    assert event.duration == pytest.approx(0.5)
    assert cron.stop().wait(5)


def test_folded_and_dropped_occurrences_emit_skipped(clock: FakeClock) -> None:
    """Nothing silent: under ``catch_up="latest"`` the occurrences folded into the one
    run each emit ``skipped`` saying which run took them, and those jumped over past
    ``catch_up_limit`` one ``skipped`` at the first, saying up to where."""
    scheduler = Scheduler(workers=1, clock=clock)
    cron = Cron(scheduler=scheduler, catch_up_limit=2)
    events: list[RunEvent] = []
    cron.on("skipped", events.append)
    seen: list[datetime] = []
    release = threading.Event()
    scheduler.call_soon(release.wait, 10)
    cron.add(IntervalSchedule(10, anchor=T0), lambda: seen.append(clock.now()))
    cron.start()
    clock.advance(65, wait=False)  # due: 10 and 20 (the limit); 30 to 60 jumped over
    release.set()
    clock.advance(0)
    assert seen == [T0 + timedelta(seconds=65)]  # one run, for 20
    at = secs(10, 20, 30, 70)
    assert [(e.scheduled, e.reason) for e in events] == [
        (at[0], f"folded into the run of {at[1].isoformat()}"),
        (
            at[2],
            f"missed: every occurrence from {at[2].isoformat()} to before "
            f"{at[3].isoformat()} (catch_up_limit)",
        ),
    ]
    assert events[0].lateness == 55.0
    assert cron.entries()[0].next == at[3]
    assert cron.stop().wait(5)
    scheduler.close()
