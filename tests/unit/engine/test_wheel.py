"""The keyed timing wheel, on a fake clock, including go-zero's three defects."""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_htask.engine import FakeClock, SchedulerClosed, TimingWheel, WorkerPool
from django_htask.engine.clock import from_us, to_us
from django_htask.engine.interfaces import BusySource

START = datetime(2030, 1, 1, tzinfo=UTC)
US = 1_000_000
START_US = to_us(START)

Fired = list[tuple[Any, Any, int]]  # (key, value, fake time in µs since START)


def make_wheel(
    clock: Any, interval: float = 1.0, slots: int = 8, **kwargs: Any
) -> tuple[TimingWheel[Any, Any], Fired]:
    fired: Fired = []
    lock = threading.Lock()
    origin = clock.now_us()

    def execute(key: Any, value: Any) -> None:
        with lock:
            fired.append((key, value, clock.now_us() - origin))

    return TimingWheel(interval, slots, execute, clock=clock, **kwargs), fired


@pytest.fixture
def wheel(clock: FakeClock) -> Iterator[tuple[TimingWheel[Any, Any], Fired]]:
    w, fired = make_wheel(clock)
    yield w, fired
    w.stop()


# -- arguments ---------------------------------------------------------------------------
@pytest.mark.parametrize("interval", [0, -1, 0.0, math.nan, math.inf])
def test_bad_interval_raises_value_error(clock: FakeClock, interval: float) -> None:
    with pytest.raises(ValueError, match="interval"):
        TimingWheel(interval, 4, print, clock=clock)


@pytest.mark.parametrize("interval", [True, "1", None])
def test_interval_that_is_not_a_number_raises_type_error(clock: FakeClock, interval: Any) -> None:
    with pytest.raises(TypeError, match="interval"):
        TimingWheel(interval, 4, print, clock=clock)


@pytest.mark.parametrize("slots", [0, -3])
def test_bad_slots_raise_value_error(clock: FakeClock, slots: int) -> None:
    with pytest.raises(ValueError, match=f"slots must be an int >= 1, got {slots}"):
        TimingWheel(1, slots, print, clock=clock)


@pytest.mark.parametrize("slots", [2.0, True, "4"])
def test_slots_that_are_not_ints_raise_type_error(clock: FakeClock, slots: Any) -> None:
    with pytest.raises(TypeError, match="slots"):
        TimingWheel(1, slots, print, clock=clock)


def test_execute_must_be_callable(clock: FakeClock) -> None:
    with pytest.raises(TypeError, match="execute"):
        TimingWheel(1, 4, "print", clock=clock)  # type: ignore[arg-type]


@pytest.mark.parametrize("delay", [0, -1, -0.5, 0.0, math.nan, math.inf])
def test_bad_delay_raises_value_error(
    wheel: tuple[TimingWheel[Any, Any], Fired], delay: float
) -> None:
    w, _ = wheel
    with pytest.raises(ValueError, match="delay"):
        w.set_timer("k", 1, delay)
    w.set_timer("k", 1, 5)
    with pytest.raises(ValueError, match="delay"):
        w.move_timer("k", delay)
    assert len(w) == 1


@pytest.mark.parametrize("delay", [True, "1", None])
def test_delay_that_is_not_a_number_raises_type_error(
    wheel: tuple[TimingWheel[Any, Any], Fired], delay: Any
) -> None:
    w, _ = wheel
    with pytest.raises(TypeError, match="delay"):
        w.set_timer("k", 1, delay)
    assert "k" not in w


# -- firing ----------------------------------------------------------------------------
def test_timer_fires_with_its_value_at_the_first_tick_after_its_delay(
    clock: FakeClock, wheel: tuple[TimingWheel[Any, Any], Fired]
) -> None:
    w, fired = wheel
    w.set_timer("a", "A", 2.5)
    assert "a" in w
    assert len(w) == 1
    clock.advance(2.999)
    assert fired == []
    clock.advance(0.001)
    assert fired == [("a", "A", 3 * US)]
    assert "a" not in w
    assert len(w) == 0


def test_delay_shorter_than_an_interval_waits_for_the_next_tick(clock: FakeClock) -> None:
    # go-zero runs a timer shorter than one interval at once, i.e. before its delay.
    w, fired = make_wheel(clock, interval=1.0)
    try:
        clock.advance(0.25)
        w.set_timer("a", 1, 0.1)
        clock.advance(0.5)
        assert fired == []
        clock.advance(0.25)
        assert fired == [("a", 1, 1 * US)]
    finally:
        w.stop()


def test_delay_landing_exactly_on_a_tick_fires_on_that_tick(clock: FakeClock) -> None:
    w, fired = make_wheel(clock, interval=0.1)
    try:
        w.set_timer("a", 1, 0.3)
        clock.advance(1)
        assert fired == [("a", 1, 300_000)]
    finally:
        w.stop()


def test_delays_longer_than_one_revolution(clock: FakeClock) -> None:
    w, fired = make_wheel(clock, interval=1.0, slots=4)
    try:
        w.set_timer("long", 1, 10.5)  # 2.6 revolutions: same slot as tick 3 and 7
        w.set_timer("short", 2, 3)
        w.set_timer("mid", 3, 7)
        clock.advance(30)
        assert fired == [("short", 2, 3 * US), ("mid", 3, 7 * US), ("long", 1, 11 * US)]
    finally:
        w.stop()


def test_single_slot_wheel(clock: FakeClock) -> None:
    w, fired = make_wheel(clock, interval=0.5, slots=1)
    try:
        w.set_timer("a", 1, 2)
        w.set_timer("b", 2, 0.5)
        clock.advance(5)
        assert fired == [("b", 2, 500_000), ("a", 1, 2 * US)]
    finally:
        w.stop()


def test_expiries_run_on_the_pool_not_on_the_ticking_or_calling_thread(clock: FakeClock) -> None:
    threads: list[str] = []
    w: TimingWheel[str, int] = TimingWheel(
        1, 4, lambda k, v: threads.append(threading.current_thread().name), clock=clock, name="tw"
    )
    try:
        w.set_timer("a", 1, 1)
        clock.advance(1)
        assert len(threads) == 1
        assert threads[0].startswith("tw-worker-")
    finally:
        w.stop()


def test_a_slow_callback_does_not_delay_the_wheel(clock: FakeClock) -> None:
    slow_started = threading.Event()
    fast_ran = threading.Event()
    outcome: list[bool] = []

    def execute(key: str, value: int) -> None:
        if key == "slow":
            slow_started.set()
            # Released only by the expiry of a later tick.
            outcome.append(fast_ran.wait(10))
        else:
            fast_ran.set()

    w: TimingWheel[str, int] = TimingWheel(1, 4, execute, clock=clock, workers=2)
    try:
        w.set_timer("slow", 1, 1)
        w.set_timer("fast", 2, 2)
        clock.advance(1, wait=False)  # do not wait for the blocked callback
        assert slow_started.wait(10)
        clock.advance(1, wait=False)
        assert fast_ran.wait(10)
        clock.advance(0)  # settle: the slow callback finishes
        assert outcome == [True]
    finally:
        w.stop()


def test_timers_set_from_an_expiry_fire_later(clock: FakeClock) -> None:
    fired: list[int] = []
    holder: list[TimingWheel[str, int]] = []

    def execute(key: str, value: int) -> None:
        fired.append(value)
        if value < 3:
            holder[0].set_timer(key, value + 1, 1)

    w: TimingWheel[str, int] = TimingWheel(1, 4, execute, clock=clock)
    holder.append(w)
    try:
        w.set_timer("k", 1, 1)
        clock.advance(10)
        assert fired == [1, 2, 3]
        assert len(w) == 0
    finally:
        w.stop()


def test_an_exception_in_execute_is_logged_and_the_others_still_run(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []

    def execute(key: str, value: int) -> None:
        if key == "bad":
            raise RuntimeError("boom")
        ran.append(key)

    w: TimingWheel[str, int] = TimingWheel(1, 4, execute, clock=clock)
    try:
        w.set_timer("before", 1, 1)
        w.set_timer("bad", 1, 1)
        w.set_timer("after", 1, 1)
        w.set_timer("later", 1, 2)
        with caplog.at_level(logging.ERROR, logger="django_htask.engine.wheel"):
            clock.advance(3)
        assert ran == ["before", "after", "later"]
        [record] = [r for r in caplog.records if getattr(r, "action", None) == "expiry_failed"]
        assert "'bad'" in record.getMessage()
    finally:
        w.stop()


def test_many_expiries_in_one_tick_all_run_in_order(clock: FakeClock) -> None:
    w, fired = make_wheel(clock, interval=1, slots=16, workers=1)
    try:
        for i in range(1000):
            w.set_timer(i, -i, 5)
        clock.advance(5)
        assert [k for k, _, _ in fired] == list(range(1000))
        assert all(t == 5 * US for _, _, t in fired)
    finally:
        w.stop()


# -- set, move, remove -----------------------------------------------------------------
def test_setting_an_existing_key_updates_its_value_and_moves_it(
    clock: FakeClock, wheel: tuple[TimingWheel[Any, Any], Fired]
) -> None:
    w, fired = wheel
    w.set_timer("a", "old", 2)
    w.set_timer("a", "new", 5)
    assert len(w) == 1
    clock.advance(10)
    assert fired == [("a", "new", 5 * US)]


def test_moved_timer_fires_exactly_once_at_its_new_time(
    clock: FakeClock, wheel: tuple[TimingWheel[Any, Any], Fired]
) -> None:
    # go-zero defect: a timer moved later could fire at the old time and again later.
    w, fired = wheel
    w.set_timer("later", 1, 2)
    w.set_timer("earlier", 2, 6)
    w.set_timer("circle", 3, 3)
    assert w.move_timer("later", 4)
    assert w.move_timer("earlier", 1)
    assert w.move_timer("circle", 19)  # 8 slots: two revolutions on, same slot
    clock.advance(30)
    assert fired == [("earlier", 2, 1 * US), ("later", 1, 4 * US), ("circle", 3, 19 * US)]


def test_moving_many_times_fires_once(
    clock: FakeClock, wheel: tuple[TimingWheel[Any, Any], Fired]
) -> None:
    w, fired = wheel
    w.set_timer("a", 1, 1)
    for delay in [5, 2, 9, 3, 30, 4]:
        assert w.move_timer("a", delay)
    clock.advance(1)
    assert w.move_timer("a", 2)  # now due at 3
    clock.advance(40)
    assert fired == [("a", 1, 3 * US)]


def test_move_and_remove_of_unknown_keys_return_false(
    clock: FakeClock, wheel: tuple[TimingWheel[Any, Any], Fired]
) -> None:
    w, fired = wheel
    assert w.move_timer("nope", 1) is False
    assert w.remove_timer("nope") is False
    w.set_timer("a", 1, 1)
    clock.advance(1)
    assert fired == [("a", 1, 1 * US)]
    assert w.move_timer("a", 1) is False  # already fired
    assert w.remove_timer("a") is False
    clock.advance(5)
    assert len(fired) == 1


def test_removed_timer_never_fires(
    clock: FakeClock, wheel: tuple[TimingWheel[Any, Any], Fired]
) -> None:
    w, fired = wheel
    w.set_timer("a", 1, 2)
    w.set_timer("b", 2, 2)
    assert w.remove_timer("a") is True
    assert w.remove_timer("a") is False
    assert "a" not in w
    clock.advance(20)
    assert fired == [("b", 2, 2 * US)]


def test_keys_of_any_hashable_type(
    clock: FakeClock, wheel: tuple[TimingWheel[Any, Any], Fired]
) -> None:
    w, fired = wheel
    w.set_timer(("user", 1), None, 1)
    w.set_timer(42, None, 1)
    assert ("user", 1) in w
    clock.advance(1)
    assert {k for k, _, _ in fired} == {("user", 1), 42}


# -- drain -------------------------------------------------------------------------------
def test_drain_hands_over_every_entry_in_due_order_and_empties_the_wheel(
    clock: FakeClock, wheel: tuple[TimingWheel[Any, Any], Fired]
) -> None:
    w, fired = wheel
    w.set_timer("c", 3, 30)
    w.set_timer("a", 1, 1)
    w.set_timer("b", 2, 5)
    drained: list[tuple[str, int, str]] = []
    assert w.drain(lambda k, v: drained.append((k, v, threading.current_thread().name))) == 3
    me = threading.current_thread().name
    assert drained == [("a", 1, me), ("b", 2, me), ("c", 3, me)]
    assert len(w) == 0
    clock.advance(60)
    assert fired == []


def test_key_set_after_drain_fires_normally(
    clock: FakeClock, wheel: tuple[TimingWheel[Any, Any], Fired]
) -> None:
    # go-zero defect: drained keys stayed in its key map, so setting one again moved a
    # timer that no longer existed and the new timer was silently lost.
    w, fired = wheel
    w.set_timer("a", 1, 5)
    w.drain(lambda k, v: None)
    w.set_timer("a", 2, 3)
    assert "a" in w
    assert w.move_timer("a", 4)
    clock.advance(10)
    assert fired == [("a", 2, 4 * US)]


def test_drain_function_may_set_timers_again(
    clock: FakeClock, wheel: tuple[TimingWheel[Any, Any], Fired]
) -> None:
    w, fired = wheel
    w.set_timer("a", 1, 5)
    w.drain(lambda k, v: w.set_timer(k, v + 1, 2))
    clock.advance(10)
    assert fired == [("a", 2, 2 * US)]


def test_drain_logs_a_failing_entry_and_drains_the_rest(
    wheel: tuple[TimingWheel[Any, Any], Fired], caplog: pytest.LogCaptureFixture
) -> None:
    w, _ = wheel
    for key in "abc":
        w.set_timer(key, 0, 1)
    seen: list[str] = []

    def fn(key: str, value: int) -> None:
        seen.append(key)
        if key == "b":
            raise ValueError("bad entry")

    with caplog.at_level(logging.ERROR, logger="django_htask.engine.wheel"):
        assert w.drain(fn) == 3
    assert seen == ["a", "b", "c"]
    assert [getattr(r, "action", None) for r in caplog.records] == ["drain_failed"]


# -- catching up missed ticks ------------------------------------------------------------
class LaggingClock:
    """A FakeClock seen through a skew: raising ``skew`` while the wheel's thread waits
    makes it wake ``skew`` later than it meant to, as if it had fallen behind."""

    def __init__(self, fake: FakeClock) -> None:
        self.fake = fake
        self.skew = 0

    def now(self) -> datetime:
        return from_us(self.now_us())

    def now_us(self) -> int:
        return self.fake.now_us() + self.skew

    def monotonic(self) -> float:
        return self.fake.monotonic() + self.skew / US

    def wait(self, cond: threading.Condition, deadline_us: int | None) -> None:
        self.fake.wait(cond, None if deadline_us is None else deadline_us - self.skew)

    def kick(self, cond: threading.Condition) -> None:
        self.fake.kick(cond)

    def track(self, source: BusySource) -> None:
        self.fake.track(source)

    def untrack(self, source: BusySource) -> None:
        self.fake.untrack(source)

    def settled(self) -> None:
        self.fake.settled()


@pytest.mark.parametrize("behind", [3, 5, 8, 20])
def test_a_ticking_thread_that_fell_behind_processes_every_missed_slot(
    clock: FakeClock, behind: int
) -> None:
    # go-zero defect: a late ticker processes one slot per tick it receives, so the
    # slots it skipped hold their timers for another revolution (or lose them).
    lagging = LaggingClock(clock)
    w, fired = make_wheel(lagging, interval=1.0, slots=8)
    try:
        for k in range(1, 12):
            w.set_timer(f"t{k}", k, k)  # due at ticks 1..11
        clock.advance(0)  # the thread, kicked by the first set, waits for tick 1 again
        lagging.skew = behind * US  # the thread waiting for tick 1 will wake at 1 + behind
        clock.advance(1)
        woke = (1 + behind) * US
        due_now = [k for k in range(1, 12) if k <= 1 + behind]
        assert sorted(v for _, v, _ in fired) == due_now
        assert [v for _, v, _ in fired] == due_now  # still in due order
        assert [t for _, _, t in fired] == [woke] * len(fired)
        lagging.skew = behind * US  # unchanged: time runs normally from here
        clock.advance(20)
        assert [v for _, v, _ in fired] == list(range(1, 12))
        assert all(t >= v * US for _, v, t in fired)  # never early
        assert len(w) == 0
    finally:
        w.stop()


def test_catching_up_keeps_timers_of_later_revolutions(clock: FakeClock) -> None:
    lagging = LaggingClock(clock)
    w, fired = make_wheel(lagging, interval=1.0, slots=4)
    try:
        w.set_timer("soon", 1, 2)
        w.set_timer("far", 2, 30)
        clock.advance(0)
        lagging.skew = 9 * US
        clock.advance(1)  # the thread wakes at 10 and processes ticks 1..10
        assert [k for k, _, _ in fired] == ["soon"]
        assert "far" in w
        clock.advance(25)
        assert fired[1] == ("far", 2, 30 * US)
    finally:
        w.stop()


# -- the timing rule, as a property ------------------------------------------------------
ops = st.lists(
    st.tuples(
        st.sampled_from(["set", "move", "remove", "wait"]),
        st.integers(0, 5),  # key
        st.integers(1, 40_000_000),  # delay or wait, µs
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(
    interval_us=st.sampled_from([250_000, 1_000_000, 3_000_000]),
    slots=st.integers(1, 6),
    script=ops,
)
def test_each_timer_fires_once_between_its_due_time_and_one_interval_later(
    interval_us: int, slots: int, script: list[tuple[str, int, int]]
) -> None:
    clock = FakeClock(START)
    w, fired = make_wheel(clock, interval=interval_us / US, slots=slots, workers=1)
    pending: dict[int, tuple[int, int]] = {}  # key -> (due, value), µs since START
    version = 0

    def check() -> None:
        now = clock.now_us() - START_US
        for key, value, t in fired:
            due, expected = pending.pop(key)  # KeyError: fired twice, or when removed
            assert value == expected
            assert due <= t < due + interval_us
        fired.clear()
        for due, _ in pending.values():  # not fired: its first tick at or after due is ahead
            assert -(-due // interval_us) * interval_us > now

    try:
        for op, key, amount in script:
            now = clock.now_us() - START_US
            if op == "set":
                version += 1
                w.set_timer(key, version, amount / US)
                pending[key] = (now + amount, version)
            elif op == "move":
                moved = w.move_timer(key, amount / US)
                assert moved == (key in pending)
                if moved:
                    pending[key] = (now + amount, pending[key][1])
            elif op == "remove":
                assert w.remove_timer(key) == (key in pending)
                pending.pop(key, None)
            else:
                clock.advance(amount / US)
                check()
            assert {k for k in range(6) if k in w} == set(pending)
        clock.advance(100)
        check()
        assert not pending
        assert len(w) == 0
    finally:
        w.stop()


# -- stop ------------------------------------------------------------------------------------
def test_stop_discards_pending_timers_and_later_calls_raise(clock: FakeClock) -> None:
    w, fired = make_wheel(clock)
    w.set_timer("a", 1, 1)
    w.set_timer("b", 2, 2)
    assert w.stop() == 2
    assert w.stopped
    assert len(w) == 0
    assert "a" not in w
    clock.advance(10)
    assert fired == []
    calls: list[Callable[[], object]] = [
        lambda: w.set_timer("a", 1, 1),
        lambda: w.move_timer("a", 1),
        lambda: w.remove_timer("a"),
        lambda: w.drain(print),
    ]
    for call in calls:
        with pytest.raises(SchedulerClosed, match="stopped"):
            call()
    assert w.stop() == 0  # a second stop is harmless


def test_stop_waits_for_running_expiries_and_ends_the_threads(clock: FakeClock) -> None:
    w, fired = make_wheel(clock, name="stopper")
    w.set_timer("a", 1, 1)
    clock.advance(1)
    w.stop()
    assert fired == [("a", 1, 1 * US)]
    assert not [t for t in threading.enumerate() if t.name.startswith("stopper-")]


def test_context_manager_stops(clock: FakeClock) -> None:
    with TimingWheel(1, 4, print, clock=clock) as w:
        w.set_timer("a", 1, 5)
    assert w.stopped
    with pytest.raises(SchedulerClosed):
        w.set_timer("a", 1, 1)


def test_a_given_executor_is_used_and_left_running(clock: FakeClock) -> None:
    pool = WorkerPool(1, name="mine")
    names: list[str] = []
    w: TimingWheel[str, int] = TimingWheel(
        1, 4, lambda k, v: names.append(threading.current_thread().name), clock, executor=pool
    )
    w.set_timer("a", 1, 1)
    clock.advance(1)
    w.stop()
    assert names == ["mine-worker-1"]
    pool.submit(lambda: names.append("still running"))
    assert pool.shutdown(wait=True, timeout=10)
    assert names[-1] == "still running"


def test_repr(clock: FakeClock) -> None:
    w: TimingWheel[str, int] = TimingWheel(0.5, 3, print, clock=clock, name="rw")
    w.set_timer("a", 1, 1)
    assert repr(w) == "<TimingWheel 'rw' interval=0.5s slots=3 1 pending>"
    w.stop()
    assert repr(w) == "<TimingWheel 'rw' interval=0.5s slots=3 stopped>"


class RefusingExecutor:
    """An executor shut down under the wheel: every submit raises."""

    def submit(self, fn: Callable[[], object]) -> None:
        raise SchedulerClosed("worker pool 'gone' is shut down")


def test_expiries_refused_by_the_executor_run_on_the_ticking_thread(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    threads: list[str] = []
    w: TimingWheel[str, int] = TimingWheel(
        1,
        4,
        lambda k, v: threads.append(threading.current_thread().name),
        clock,
        executor=RefusingExecutor(),
        name="refused",
    )
    try:
        w.set_timer("a", 1, 1)
        w.set_timer("b", 2, 1)
        with caplog.at_level(logging.WARNING, logger="django_htask.engine.wheel"):
            clock.advance(1)
        assert threads == ["refused-tick", "refused-tick"]  # not lost
        [record] = caplog.records
        assert record.action == "expiry_inline"  # type: ignore[attr-defined]
        assert "refused 2 expiries" in record.getMessage()
        assert w.idle()
    finally:
        w.stop()


def test_stop_from_inside_an_expiry(clock: FakeClock) -> None:
    holder: list[TimingWheel[str, int]] = []
    discarded: list[int] = []
    w: TimingWheel[str, int] = TimingWheel(
        1, 4, lambda k, v: discarded.append(holder[0].stop()), clock, name="self-stop"
    )
    holder.append(w)
    w.set_timer("a", 1, 1)
    w.set_timer("b", 2, 5)
    clock.advance(1)
    assert discarded == [1]  # "b" was discarded
    assert w.stopped
    for t in threading.enumerate():
        if t.name.startswith("self-stop-"):
            t.join(10)
    assert not [t for t in threading.enumerate() if t.name.startswith("self-stop-")]


# -- the documented use case: expiring keys of an in-process cache ---------------------------
DOCS = Path(__file__).resolve().parents[3] / "docs" / "wheel-and-executors.md"


def docs_example(marker: str) -> dict[str, Any]:
    """Run the python block of the docs page that contains ``marker``; its namespace."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    [code] = [b for b in blocks if marker in b]
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(code, str(DOCS), "exec"), namespace)
    return namespace


def test_expiring_cache_example(clock: FakeClock) -> None:
    cache = docs_example("class ExpiringCache")["ExpiringCache"](ttl=60, clock=clock)
    try:
        cache.set("a", 1)
        clock.advance(30)
        cache.set("b", 2)
        cache.set("a", 10)  # refreshed: expires 60 s from now
        assert len(cache) == 2
        clock.advance(45)
        assert cache.get("a") == 10
        assert cache.get("b") == 2
        clock.advance(16)
        assert cache.get("a") is None
        assert cache.get("b", "gone") == "gone"
        assert len(cache) == 0
        cache.set("c", 3)
        cache.delete("c")
        assert cache.get("c") is None
        clock.advance(120)
        assert len(cache) == 0
    finally:
        cache.close()


def test_expiring_cache_example_ignores_a_stale_expiry(clock: FakeClock) -> None:
    # An expiry already handed to the workers when the key is set again must not
    # delete the new value.
    cache = docs_example("class ExpiringCache")["ExpiringCache"](ttl=60, clock=clock)
    try:
        cache.set("a", 1)
        [(_, stale)] = list(cache._data.items())
        cache.set("a", 2)
        cache._expire("a", stale[0])  # the old timer's expiry, arriving late
        assert cache.get("a") == 2
        clock.advance(60)
        assert cache.get("a") is None
    finally:
        cache.close()
