"""The timer heap, the scheduler thread and the worker pool, on a fake clock."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from django_htask.engine import (
    CancelToken,
    FakeClock,
    Scheduler,
    SchedulerClosed,
    SchedulerFull,
    SystemClock,
    TimerHandle,
    TokenCancelled,
)

START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def sched(clock: FakeClock) -> Iterator[Scheduler]:
    scheduler = Scheduler(workers=1, clock=clock, name="test")
    yield scheduler
    scheduler.close()


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


# -- ordering ---------------------------------------------------------------------------
def test_fires_in_time_order(clock: FakeClock, sched: Scheduler) -> None:
    seen: list[str] = []
    sched.call_at(at(3), seen.append, "c")
    sched.call_at(at(1), seen.append, "a")
    sched.call_later(2, seen.append, "b")
    clock.advance(0.999)
    assert seen == []
    clock.advance(0.001)
    assert seen == ["a"]
    clock.advance(5)
    assert seen == ["a", "b", "c"]


def test_equal_times_fire_fifo(clock: FakeClock, sched: Scheduler) -> None:
    seen: list[int] = []
    for i in range(50):
        sched.call_at(at(1), seen.append, i)
    clock.advance(1)
    assert seen == list(range(50))


def test_task_sees_its_due_time_when_advancing_past_it(clock: FakeClock, sched: Scheduler) -> None:
    seen: list[datetime] = []
    sched.call_at(at(2), lambda: seen.append(clock.now()))
    sched.call_at(at(7), lambda: seen.append(clock.now()))
    clock.advance(60)
    assert seen == [at(2), at(7)]
    assert clock.now() == at(60)


def test_task_scheduled_from_a_task_runs_within_the_same_advance(
    clock: FakeClock, sched: Scheduler
) -> None:
    seen: list[tuple[str, datetime]] = []

    def first() -> None:
        seen.append(("first", clock.now()))
        sched.call_later(0.5, lambda: seen.append(("second", clock.now())))

    sched.call_at(at(1), first)
    sched.call_at(at(2), lambda: seen.append(("third", clock.now())))
    clock.advance(3)
    assert seen == [("first", at(1)), ("second", at(1.5)), ("third", at(2))]


def test_past_time_runs_as_soon_as_possible(clock: FakeClock, sched: Scheduler) -> None:
    done = threading.Event()
    handle = sched.call_at(at(-3600), done.set)
    clock.advance(0)
    assert done.is_set()
    assert handle.done()
    assert handle.when == at(-3600)


def test_call_soon_and_zero_delay(clock: FakeClock, sched: Scheduler) -> None:
    seen: list[int] = []
    sched.call_soon(seen.append, 1)
    sched.call_later(0, seen.append, 2)
    clock.advance(0)
    assert seen == [1, 2]


@pytest.mark.parametrize("workers", [1, 0])
def test_a_call_due_now_goes_to_a_worker_without_the_scheduler_thread(workers: int) -> None:
    """``call_soon`` and ``call_later(0)`` hand the call to a worker themselves: with the
    scheduler thread never woken (its wake-up made a no-op), they still run."""

    class Deaf(SystemClock):
        deaf = True

        def kick(self, cond: threading.Condition) -> None:
            if not self.deaf:
                super().kick(cond)

    clock = Deaf()
    scheduler = Scheduler(workers=workers, clock=clock, name="direct")
    try:
        ran = [threading.Event(), threading.Event()]
        scheduler.call_soon(ran[0].set)
        scheduler.call_later(0, ran[1].set)
        assert ran[0].wait(5) and ran[1].wait(5)
    finally:
        clock.deaf = False  # close() wakes the scheduler thread to end it
        scheduler.close()


def test_a_call_due_now_waits_behind_the_timers_due_before_it(
    clock: FakeClock, sched: Scheduler
) -> None:
    """A timer already due in the heap keeps its place: ``call_soon`` goes through the
    heap behind it rather than straight to a worker."""
    seen: list[str] = []
    sched.call_at(at(0), seen.append, "due")
    sched.call_soon(seen.append, "soon")
    clock.advance(0)
    assert seen == ["due", "soon"]


def test_kwargs_are_passed(clock: FakeClock, sched: Scheduler) -> None:
    seen: list[tuple[int, str]] = []
    sched.call_later(1, lambda a, b="x": seen.append((a, b)), 1, b="y")
    clock.advance(1)
    assert seen == [(1, "y")]


def test_when_round_trips_exactly(sched: Scheduler) -> None:
    when = datetime(2031, 5, 6, 7, 8, 9, 123457, tzinfo=UTC)
    assert sched.call_at(when, print).when == when
    tokyo = datetime(2031, 5, 6, 7, 8, 9, 1, tzinfo=timezone(timedelta(hours=9)))
    assert sched.call_at(tokyo, print).when == tokyo


# -- invalid input ----------------------------------------------------------------------
def test_naive_datetime_is_refused(sched: Scheduler) -> None:
    with pytest.raises(ValueError, match="naive"):
        sched.call_at(datetime(2030, 1, 1), print)


@pytest.mark.parametrize("when", ["2030-01-01", 1234, None])
def test_non_datetime_is_refused(sched: Scheduler, when: object) -> None:
    with pytest.raises(TypeError, match=repr(when)):
        sched.call_at(when, print)  # type: ignore[arg-type]


@pytest.mark.parametrize("delay", [-1, -0.001, math.nan, math.inf])
def test_bad_delay_is_refused(sched: Scheduler, delay: float) -> None:
    with pytest.raises(ValueError, match=r"delay must be"):
        sched.call_later(delay, print)


@pytest.mark.parametrize("delay", ["1", None, True])
def test_non_number_delay_is_refused(sched: Scheduler, delay: object) -> None:
    with pytest.raises(TypeError, match="delay"):
        sched.call_later(delay, print)  # type: ignore[arg-type]


def test_non_callable_is_refused(sched: Scheduler) -> None:
    with pytest.raises(TypeError, match="'not callable'"):
        sched.call_later(1, "not callable")  # type: ignore[arg-type]


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True])
def test_bad_capacity_is_refused(capacity: object) -> None:
    with pytest.raises(ValueError, match="capacity"):
        Scheduler(capacity=capacity, clock=FakeClock())  # type: ignore[arg-type]


@pytest.mark.parametrize("workers", [-1, 1.0, None])
def test_bad_workers_is_refused(workers: object) -> None:
    with pytest.raises(ValueError, match="workers"):
        Scheduler(workers=workers, clock=FakeClock())  # type: ignore[arg-type]


# -- cancel -----------------------------------------------------------------------------
def test_cancel_before_firing(clock: FakeClock, sched: Scheduler) -> None:
    seen: list[int] = []
    handle = sched.call_later(1, seen.append, 1)
    assert handle.cancel() is True
    assert handle.cancel() is True  # idempotent
    assert handle.cancelled() and handle.done()
    assert len(sched) == 0
    clock.advance(2)
    assert seen == []
    assert sched.stats()["cancelled"] == 1


def test_cancel_after_firing_returns_false(clock: FakeClock, sched: Scheduler) -> None:
    handle = sched.call_later(1, lambda: None)
    clock.advance(1)
    assert handle.done() and not handle.cancelled()
    assert handle.cancel() is False
    assert handle.state == "done"


def test_cancel_while_running_returns_false(clock: FakeClock, sched: Scheduler) -> None:
    started, release = threading.Event(), threading.Event()

    def job() -> None:
        started.set()
        release.wait(5)

    handle = sched.call_later(1, job)
    clock.advance(1, wait=False)
    assert started.wait(5)
    assert handle.state == "running"
    assert handle.cancel() is False
    release.set()
    clock.advance(0)
    assert handle.done() and not handle.cancelled()


def test_cancel_while_queued_behind_a_busy_worker(clock: FakeClock, sched: Scheduler) -> None:
    started, release = threading.Event(), threading.Event()
    seen: list[str] = []

    def blocker() -> None:
        started.set()
        release.wait(5)

    sched.call_later(1, blocker)
    queued = sched.call_later(1, seen.append, "queued")
    clock.advance(1, wait=False)
    assert started.wait(5)
    assert queued.cancel() is True
    release.set()
    clock.advance(0)
    assert seen == []
    assert queued.cancelled()


def test_cancelled_timers_release_their_arguments(sched: Scheduler) -> None:
    payload = bytearray(10)
    handle = sched.call_later(100, print, payload)
    handle.cancel()
    assert handle._args == () and handle._fn is None


def test_dead_entries_never_outnumber_live_ones(sched: Scheduler) -> None:
    handles = [sched.call_later(10 + i, print) for i in range(1000)]
    for i, handle in enumerate(handles):
        if i % 3:
            handle.cancel()
        stats = sched.stats()
        assert stats["dead_entries"] <= stats["pending"] or stats["dead_entries"] <= 1
    assert len(sched) == 334
    assert len(sched._queue._heap) <= 2 * 334


def test_cancelling_everything_empties_the_heap(sched: Scheduler) -> None:
    handles = [sched.call_later(10, print) for _ in range(100)]
    for handle in handles:
        handle.cancel()
    assert len(sched) == 0
    assert sched._queue._heap == []
    assert sched.next_due() is None


def test_cancelling_the_head_moves_next_due(clock: FakeClock, sched: Scheduler) -> None:
    seen: list[int] = []
    first = sched.call_later(1, seen.append, 1)
    sched.call_later(2, seen.append, 2)
    assert sched.next_due() == at(1)
    first.cancel()
    assert sched.next_due() == at(2)
    clock.advance(2)
    assert seen == [2]


# -- tokens -----------------------------------------------------------------------------
def test_token_cancels_every_pending_timer(clock: FakeClock, sched: Scheduler) -> None:
    seen: list[int] = []
    token = CancelToken()
    for i in range(5):
        sched.call_later(i + 1, seen.append, i, token=token)
    other = sched.call_later(3, seen.append, 99)
    clock.advance(1)
    assert seen == [0]
    assert token.pending() == 4
    assert token.cancel("user asked") == 4
    assert token.cancelled and token.reason == "user asked"
    assert token.pending() == 0
    clock.advance(10)
    assert seen == [0, 99]
    assert other.done()
    assert token.cancel() == 0


def test_scheduling_with_a_cancelled_token_raises(sched: Scheduler) -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(TokenCancelled):
        sched.call_later(1, print, token=token)
    assert len(sched) == 0


def test_running_task_reads_its_token(clock: FakeClock, sched: Scheduler) -> None:
    from django_htask.engine import current_token

    token = CancelToken()
    started, stop_seen = threading.Event(), threading.Event()
    progress: list[int] = []

    def cooperative() -> None:
        me = current_token()
        assert me is token
        started.set()
        for step in range(1000):
            if me.cancelled:
                stop_seen.set()
                return
            progress.append(step)
            token_wait = threading.Event()
            token_wait.wait(0.001)

    sched.call_later(1, cooperative, token=token)
    clock.advance(1, wait=False)
    assert started.wait(5)
    token.cancel()
    assert stop_seen.wait(5)
    clock.advance(0)
    assert len(progress) < 1000
    assert current_token() is None


def test_token_on_cancel_callback(clock: FakeClock) -> None:
    token = CancelToken()
    seen: list[CancelToken] = []
    token.on_cancel(seen.append)
    token.cancel()
    token.on_cancel(seen.append)  # already cancelled: called at once
    assert seen == [token, token]
    with pytest.raises(TokenCancelled, match="no reason"):
        token.raise_if_cancelled()


def test_fired_timers_leave_their_token(clock: FakeClock, sched: Scheduler) -> None:
    token = CancelToken()
    sched.call_later(1, print, token=token)
    clock.advance(1)
    assert token.pending() == 0
    assert token.cancel() == 0


# -- capacity ---------------------------------------------------------------------------
def test_capacity_fails_fast(clock: FakeClock) -> None:
    with Scheduler(workers=1, capacity=3, clock=clock) as sched:
        handles = [sched.call_later(10, print) for _ in range(3)]
        with pytest.raises(SchedulerFull, match="3 pending"):
            sched.call_later(10, print)
        handles[0].cancel()
        sched.call_later(10, print)  # room again
        assert len(sched) == 3


def test_capacity_full_inside_a_worker_does_not_deadlock(clock: FakeClock) -> None:
    outcome: list[str] = []
    with Scheduler(workers=1, capacity=1, clock=clock) as sched:

        def reschedule_self() -> None:
            sched.call_later(100, print)  # takes the only slot
            try:
                sched.call_later(100, print)
            except SchedulerFull:
                outcome.append("full")

        sched.call_later(1, reschedule_self)
        clock.advance(1)
    assert outcome == ["full"]


def test_full_with_token_does_not_leave_a_binding(clock: FakeClock) -> None:
    token = CancelToken()
    with Scheduler(workers=1, capacity=1, clock=clock) as sched:
        sched.call_later(10, print)
        with pytest.raises(SchedulerFull):
            sched.call_later(10, print, token=token)
    assert token.pending() == 0


# -- close ------------------------------------------------------------------------------
def test_close_discards_pending_and_refuses_more(clock: FakeClock) -> None:
    sched = Scheduler(workers=2, clock=clock)
    handles = [sched.call_later(i + 1, print) for i in range(7)]
    assert sched.close() == 7
    assert all(h.cancelled() for h in handles)
    assert sched.close() == 0
    with pytest.raises(SchedulerClosed):
        sched.call_later(1, print)
    with pytest.raises(SchedulerClosed):
        sched.change_workers(3)
    assert sched.stats()["cancelled"] == 7


def test_close_waits_for_running_tasks() -> None:
    clock = FakeClock()
    sched = Scheduler(workers=2, clock=clock)
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def job() -> None:
        started.set()
        release.wait(5)
        finished.set()

    sched.call_later(1, job)
    clock.advance(1, wait=False)
    assert started.wait(5)
    closer = threading.Thread(target=sched.close)
    closer.start()
    closer.join(0.05)
    assert closer.is_alive()  # waiting for the job
    release.set()
    closer.join(5)
    assert not closer.is_alive()
    assert finished.is_set()


def test_close_without_wait_returns_at_once() -> None:
    clock = FakeClock()
    sched = Scheduler(workers=1, clock=clock)
    started, release = threading.Event(), threading.Event()
    sched.call_later(1, lambda: (started.set(), release.wait(5)))
    clock.advance(1, wait=False)
    assert started.wait(5)
    assert sched.close(wait=False) == 0
    release.set()
    assert sched._pool.shutdown(wait=True, timeout=5)


def test_close_from_inside_a_task_does_not_deadlock() -> None:
    clock = FakeClock()
    sched = Scheduler(workers=2, clock=clock)
    result: list[int] = []
    sched.call_later(5, print)
    sched.call_later(1, lambda: result.append(sched.close()))
    clock.advance(1)
    assert result == [1]
    assert sched.closed


def test_context_manager_closes(clock: FakeClock) -> None:
    with Scheduler(workers=1, clock=clock) as sched:
        sched.call_later(5, print)
    assert sched.closed
    assert len(sched) == 0


# -- exceptions -------------------------------------------------------------------------
def test_exception_is_logged_counted_and_worker_survives(
    clock: FakeClock, sched: Scheduler, caplog: pytest.LogCaptureFixture
) -> None:
    def boom() -> None:
        raise RuntimeError("kaput")

    seen: list[int] = []
    sched.call_later(1, boom)
    sched.call_later(2, seen.append, 2)
    with caplog.at_level(logging.ERROR, logger="django_htask.engine"):
        clock.advance(2)
    assert seen == [2]
    stats = sched.stats()
    assert stats["failed"] == 1 and stats["fired"] == 2
    (record,) = [r for r in caplog.records if getattr(r, "action", None) == "task_failed"]
    assert record.name == "django_htask.engine.scheduler"
    assert record.exc_info is not None and "kaput" in str(record.exc_info[1])
    assert "boom" in record.getMessage()


# -- workers ----------------------------------------------------------------------------
def test_workers_zero_runs_each_task_on_its_own_thread(clock: FakeClock) -> None:
    names: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(5, timeout=5)

    def job() -> None:
        with lock:
            names.append(threading.current_thread().name)
        barrier.wait()  # all five must be running at once

    with Scheduler(workers=0, clock=clock) as sched:
        for _ in range(5):
            sched.call_later(1, job)
        clock.advance(1)
    assert len(set(names)) == 5


def test_parallel_workers_run_concurrently(clock: FakeClock) -> None:
    barrier = threading.Barrier(3, timeout=5)
    with Scheduler(workers=3, clock=clock) as sched:
        for _ in range(3):
            sched.call_later(1, barrier.wait)
        clock.advance(1)
        assert sched.stats()["failed"] == 0


def test_change_workers_up_and_down_while_firing(clock: FakeClock) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def job(i: int) -> None:
        with lock:
            seen.append(i)

    with Scheduler(workers=2, clock=clock) as sched:
        for i in range(300):
            sched.call_later(i / 100, job, i)
        for n in (5, 1, 0, 3, 0, 2):
            sched.change_workers(n)
            assert sched.workers == n
            clock.advance(0.5)
        clock.advance(5)
        assert sorted(seen) == list(range(300))
        assert sched._pool.alive() == 2


def test_shrinking_to_zero_with_queued_work_loses_nothing(clock: FakeClock) -> None:
    seen: list[int] = []
    lock = threading.Lock()
    release = threading.Event()

    def job(i: int) -> None:
        release.wait(5)
        with lock:
            seen.append(i)

    with Scheduler(workers=2, clock=clock) as sched:
        for i in range(20):
            sched.call_later(1, job, i)
        clock.advance(1, wait=False)
        sched.change_workers(0)
        release.set()
        clock.advance(0)
        assert sorted(seen) == list(range(20))
        sched.call_later(1, job, 20)
        clock.advance(1)
        assert len(seen) == 21


def test_stats_and_len(clock: FakeClock, sched: Scheduler) -> None:
    sched.call_later(1, print)
    sched.call_later(2, print)
    assert len(sched) == 2
    assert sched.stats() == {
        "pending": 2,
        "running": 0,
        "fired": 0,
        "failed": 0,
        "cancelled": 0,
        "dead_entries": 0,
    }


def test_handle_repr_and_state(sched: Scheduler) -> None:
    handle = sched.call_at(at(1), print)
    assert isinstance(handle, TimerHandle)
    assert handle.state == "pending"
    assert "print" in repr(handle) and "pending" in repr(handle)
    assert "test" in repr(sched)


# -- thread safety ----------------------------------------------------------------------
def test_many_threads_adding_and_cancelling(clock: FakeClock) -> None:
    """Nothing lost, nothing run twice, nothing cancelled runs."""
    threads_n, per_thread = 8, 500
    ran: list[tuple[int, int]] = []
    ran_lock = threading.Lock()
    cancelled: set[tuple[int, int]] = set()
    kept: set[tuple[int, int]] = set()
    bookkeeping = threading.Lock()

    def job(key: tuple[int, int]) -> None:
        with ran_lock:
            ran.append(key)

    with Scheduler(workers=4, clock=clock) as sched:
        start = threading.Barrier(threads_n)

        def producer(t: int) -> None:
            start.wait()
            mine: list[tuple[tuple[int, int], TimerHandle]] = []
            for i in range(per_thread):
                key = (t, i)
                mine.append((key, sched.call_later((i % 50) / 10, job, key)))
                if i % 3 == 0:
                    old_key, old = mine[i // 2]
                    if old.cancel():
                        with bookkeeping:
                            cancelled.add(old_key)
            with bookkeeping:
                kept.update(k for k, _ in mine)

        producers = [threading.Thread(target=producer, args=(t,)) for t in range(threads_n)]
        for p in producers:
            p.start()
        # Fire while producers are still adding.
        for _ in range(20):
            clock.advance(0.1)
        for p in producers:
            p.join(10)
        clock.advance(10)

    assert len(ran) == len(set(ran)), "a timer ran twice"
    assert not cancelled & set(ran), "a cancelled timer ran"
    assert set(ran) | cancelled == kept, "a timer was lost"
    assert len(kept) == threads_n * per_thread
