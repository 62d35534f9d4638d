"""The Scheduler's fast paths (issue 18): the inlined adds, handles that are their own
heap entries, and the drainers that run a burst of due timers."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from django_htask.engine import CancelToken, FakeClock, Scheduler, SchedulerFull, TimerHandle
from django_htask.engine.clock import to_us

START = datetime(2030, 1, 1, tzinfo=UTC)


class _Moment(datetime):
    """A datetime subclass: takes the general path of call_at."""


# -- adds -------------------------------------------------------------------------------
def test_call_later_on_the_system_clock_is_due_delay_from_now() -> None:
    with Scheduler(workers=1) as sched:
        before = time.time_ns() // 1000
        handle = sched.call_later(3600.25, print)
        after = time.time_ns() // 1000
        due = to_us(handle.when)
        assert before + 3_600_250_000 - 1 <= due <= after + 3_600_250_000 + 1
        handle.cancel()


@pytest.mark.parametrize(
    "when",
    [
        START + timedelta(days=400, microseconds=123_457),
        (START + timedelta(seconds=5)).astimezone(timezone(timedelta(hours=5, minutes=30))),
        _Moment(2031, 2, 3, 4, 5, 6, 789_012, tzinfo=UTC),
    ],
    ids=["utc", "other-offset", "subclass"],
)
def test_call_at_keeps_the_exact_instant_on_every_path(when: datetime, clock: FakeClock) -> None:
    with Scheduler(workers=1, clock=clock) as sched:
        handle = sched.call_at(when, print)
        assert handle.when == when and to_us(handle.when) == to_us(when)
        assert sched.next_due() == when


def test_fast_and_general_adds_fire_in_one_order(clock: FakeClock) -> None:
    seen: list[str] = []
    token = CancelToken()
    with Scheduler(workers=1, clock=clock) as sched:
        sched.call_at(START + timedelta(seconds=1), seen.append, "fast at")
        sched.call_later(1, seen.append, "later with token", token=token)
        sched.call_at(START + timedelta(seconds=1), lambda *, x: seen.append(x), x="kwargs at")
        sched.call_later(1.0, seen.append, "fast later")
        sched.call_at(_Moment(2030, 1, 1, 0, 0, 1, tzinfo=UTC), seen.append, "general at")
        clock.advance(1)
    assert seen == ["fast at", "later with token", "kwargs at", "fast later", "general at"]


@pytest.mark.parametrize("add", ["call_later", "call_at"])
def test_fast_paths_refuse_what_the_general_path_refuses(add: str, clock: FakeClock) -> None:
    with Scheduler(workers=1, capacity=1, clock=clock) as sched:

        def call() -> TimerHandle:
            if add == "call_later":
                return sched.call_later(5.0, print)
            return sched.call_at(START + timedelta(seconds=5), print)

        with pytest.raises(TypeError, match="callable"):
            getattr(sched, add)(5.0 if add == "call_later" else START, "not callable")
        call()
        with pytest.raises(SchedulerFull):
            call()
        sched.capacity = 2
        call()
        assert len(sched) == 2


def test_capacity_is_checked_when_set(clock: FakeClock) -> None:
    with Scheduler(workers=1, clock=clock) as sched:
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match="capacity"):
                sched.capacity = bad  # type: ignore[assignment]
        assert sched.capacity is None


# -- handles ----------------------------------------------------------------------------
def test_handles_are_equal_and_hashed_only_as_themselves(clock: FakeClock) -> None:
    with Scheduler(workers=1, clock=clock) as sched:
        at = START + timedelta(seconds=1)
        a, b = sched.call_at(at, print), sched.call_at(at, print)
        assert a != b and a == a  # noqa: PLR0124
        assert len({a, b}) == 2 and hash(a) != hash(b)


def test_a_kwargs_timer_shows_and_logs_its_function(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(*, why: str) -> None:
        raise RuntimeError(why)

    with Scheduler(workers=1, clock=clock) as sched:
        handle = sched.call_later(1, boom, why="test")
        assert "boom" in repr(handle)
        assert handle._kwargs == {"why": "test"}
        with caplog.at_level(logging.ERROR, logger="django_htask.engine"):
            clock.advance(1)
        assert handle.state == "done" and handle._kwargs is None
        (record,) = [r for r in caplog.records if getattr(r, "action", None) == "task_failed"]
        assert "boom" in record.getMessage()
        assert sched.stats()["failed"] == 1


# -- drainers ---------------------------------------------------------------------------
def test_a_burst_runs_each_timer_once_in_order_on_one_worker(clock: FakeClock) -> None:
    seen: list[int] = []
    with Scheduler(workers=1, clock=clock) as sched:
        for i in range(500):
            sched.call_at(START + timedelta(seconds=1), seen.append, i)
        clock.advance(1)
        assert seen == list(range(500))
        assert sched.stats() | {"dead_entries": 0} == {
            "pending": 0,
            "running": 0,
            "fired": 500,
            "failed": 0,
            "cancelled": 0,
            "dead_entries": 0,
        }
        assert sched.idle()


def test_a_blocked_call_holds_up_only_its_worker(clock: FakeClock) -> None:
    release = threading.Event()
    started = threading.Event()
    seen: list[int] = []
    lock = threading.Lock()
    all_ran = threading.Event()

    def blocker() -> None:
        started.set()
        release.wait(10)

    def quick(i: int) -> None:
        with lock:
            seen.append(i)
            if len(seen) == 100:
                all_ran.set()

    with Scheduler(workers=2, clock=clock) as sched:
        sched.call_later(1, blocker)
        clock.advance(1, wait=False)
        assert started.wait(5)
        for i in range(100):  # due later, while the blocker still runs
            sched.call_later(1, quick, i)
        clock.advance(1, wait=False)
        assert all_ran.wait(5)
        assert sorted(seen) == list(range(100))
        assert sched.stats()["running"] == 1
        release.set()
        clock.advance(0)
        assert sched.stats()["running"] == 0 and sched.idle()


def test_timers_cancelled_while_waiting_in_a_burst_never_run(clock: FakeClock) -> None:
    release = threading.Event()
    started = threading.Event()
    ran: list[int] = []
    handles: list[TimerHandle] = []

    def first() -> None:
        started.set()
        release.wait(10)

    with Scheduler(workers=1, clock=clock) as sched:
        sched.call_later(1, first)
        handles.extend(sched.call_later(1, ran.append, i) for i in range(50))
        clock.advance(1, wait=False)
        assert started.wait(5)
        assert all(h.state == "queued" for h in handles)
        assert all(h.cancel() for h in handles[::2])
        release.set()
        clock.advance(0)
        assert ran == list(range(1, 50, 2))
        assert sched.stats()["cancelled"] == 25 and sched.idle()


def test_bursts_after_a_resize_still_run(clock: FakeClock) -> None:
    seen: list[str] = []
    with Scheduler(workers=2, clock=clock) as sched:
        sched.call_later(1, seen.append, "pool")
        clock.advance(1)
        sched.change_workers(0)
        sched.call_later(1, seen.append, "thread per task")
        clock.advance(1)
        sched.change_workers(3)
        for _ in range(10):
            sched.call_later(1, seen.append, "pool again")
        clock.advance(1)
    assert seen == ["pool", "thread per task"] + ["pool again"] * 10
