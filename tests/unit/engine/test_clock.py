"""The clocks: exact time conversion, the fake clock's stepping and settling."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest

from django_htask.engine import FakeClock, SystemClock
from django_htask.engine.clock import from_us, to_us


def test_us_conversion_is_exact() -> None:
    when = datetime(2031, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert from_us(to_us(when)) == when
    plus9 = datetime(2031, 1, 1, 9, tzinfo=timezone(timedelta(hours=9)))
    assert from_us(to_us(plus9)) == datetime(2031, 1, 1, tzinfo=UTC)


def test_system_clock_reads_utc() -> None:
    clock = SystemClock()
    now = clock.now()
    assert now.tzinfo is UTC
    assert abs(to_us(now) - clock.now_us()) < 5_000_000
    assert clock.monotonic() <= clock.monotonic()


def test_system_clock_wait_returns_on_kick() -> None:
    clock = SystemClock()
    cond = threading.Condition()
    woke = threading.Event()

    def waiter() -> None:
        with cond:
            clock.wait(cond, None)
        woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    while not woke.is_set():
        with cond:
            clock.kick(cond)
        woke.wait(0.01)
    thread.join(5)
    assert woke.is_set()


def test_system_clock_wait_with_past_deadline_returns_at_once() -> None:
    clock = SystemClock()
    cond = threading.Condition()
    with cond:
        clock.wait(cond, clock.now_us() - 1)


def test_fake_clock_starts_where_told_and_moves_only_when_told() -> None:
    start = datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)
    clock = FakeClock(start)
    assert clock.now() == start
    assert clock.monotonic() == 0
    clock.advance(1.5)
    assert clock.now() == start + timedelta(seconds=1.5)
    assert clock.monotonic() == 1.5
    clock.set(start + timedelta(hours=1))
    assert clock.now() == start + timedelta(hours=1)


@pytest.mark.parametrize("bad", [-1, float("nan"), "1"])
def test_fake_clock_refuses_bad_advance(bad: object) -> None:
    with pytest.raises(ValueError, match="seconds"):
        FakeClock().advance(bad)  # type: ignore[arg-type]


def test_fake_clock_cannot_go_back() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="cannot go back"):
        clock.set(clock.now() - timedelta(seconds=1))


def test_fake_clock_refuses_naive_start() -> None:
    with pytest.raises(ValueError, match="aware"):
        FakeClock(datetime(2030, 1, 1))


def test_fake_clock_wakes_a_raw_waiter_at_its_deadline() -> None:
    """A thread using the clock protocol directly (not a Scheduler) is driven too."""
    clock = FakeClock()
    cond = threading.Condition()
    ticks: list[float] = []
    stop = False

    def ticker() -> None:
        next_us = clock.now_us() + 1_000_000
        with cond:
            while not stop:
                if clock.now_us() >= next_us:
                    ticks.append(clock.monotonic())
                    next_us += 1_000_000
                    continue
                clock.wait(cond, next_us)

    thread = threading.Thread(target=ticker)
    thread.start()
    clock.advance(0)  # lets the thread reach its first wait
    assert clock.waiting() == [clock.now() + timedelta(seconds=1)]
    clock.advance(3.5)
    assert ticks == [1.0, 2.0, 3.0]
    assert clock.waiting() == [clock.now() + timedelta(seconds=0.5)]
    with cond:
        stop = True
        clock.kick(cond)
    thread.join(5)
    assert not thread.is_alive()


def test_fake_clock_times_out_on_work_that_never_settles() -> None:
    clock = FakeClock()

    class Busy:
        def idle(self) -> bool:
            return False

    clock.track(Busy())
    with pytest.raises(TimeoutError, match="still running"):
        clock.advance(1, timeout=0.05)
