"""Batching executors (bulk, chunk, periodical), DelayExecutor and LessExecutor."""

from __future__ import annotations

import gc
import logging
import math
import subprocess
import sys
import threading
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from django_htask.engine import (
    BulkExecutor,
    ChunkExecutor,
    DelayExecutor,
    FakeClock,
    LessExecutor,
    PeriodicalExecutor,
    Scheduler,
    SchedulerClosed,
)

START = datetime(2030, 1, 1, tzinfo=UTC)


class Recorder:
    """An ``execute`` that records each batch, the fake time and the thread it ran on."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.batches: list[list[Any]] = []
        self.times: list[float] = []
        self.threads: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, items: list[Any]) -> None:
        with self.lock:
            self.batches.append(list(items))
            self.times.append(self.clock.monotonic())
            self.threads.append(threading.current_thread().name)

    @property
    def items(self) -> list[Any]:
        return [item for batch in self.batches for item in batch]


@pytest.fixture
def rec(clock: FakeClock) -> Recorder:
    return Recorder(clock)


@pytest.fixture
def bulk(clock: FakeClock, rec: Recorder) -> Iterator[BulkExecutor[Any]]:
    executor: BulkExecutor[Any] = BulkExecutor(
        rec, max_tasks=3, interval=1.0, clock=clock, name="b"
    )
    yield executor
    executor.close()


def flusher_alive(name: str) -> bool:
    return any(t.name == f"{name}-flusher" for t in threading.enumerate())


# -- arguments ---------------------------------------------------------------------------
@pytest.mark.parametrize("interval", [0, -1, math.nan, math.inf])
def test_bad_interval(interval: float) -> None:
    with pytest.raises(ValueError, match=f"interval must be .*got {interval}"):
        BulkExecutor(print, interval=interval)
    with pytest.raises(ValueError, match="interval"):
        ChunkExecutor(print, interval=interval)


@pytest.mark.parametrize("max_tasks", [0, -5])
def test_bad_max_tasks(max_tasks: int) -> None:
    with pytest.raises(ValueError, match=f"max_tasks must be an int >= 1, got {max_tasks}"):
        BulkExecutor(print, max_tasks=max_tasks)


def test_bad_types() -> None:
    with pytest.raises(TypeError, match="max_tasks"):
        BulkExecutor(print, max_tasks=2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_bytes"):
        ChunkExecutor(print, max_bytes=True)
    with pytest.raises(ValueError, match="max_bytes"):
        ChunkExecutor(print, max_bytes=0)
    with pytest.raises(TypeError, match="execute"):
        BulkExecutor("print")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="interval"):
        BulkExecutor(print, interval="1")  # type: ignore[arg-type]


# -- bulk: when batches run --------------------------------------------------------------
def test_full_batch_runs_at_once_on_the_adding_thread(
    bulk: BulkExecutor[Any], rec: Recorder
) -> None:
    bulk.add(1)
    bulk.add(2)
    assert rec.batches == []
    bulk.add(3)
    assert rec.batches == [[1, 2, 3]]
    assert rec.threads == [threading.current_thread().name]
    bulk.add(4)
    assert rec.batches == [[1, 2, 3]]


def test_partial_batch_runs_every_interval_on_the_flusher(
    clock: FakeClock, bulk: BulkExecutor[Any], rec: Recorder
) -> None:
    bulk.add("a")
    clock.advance(0.999)
    assert rec.batches == []
    clock.advance(0.001)
    assert rec.batches == [["a"]]
    assert rec.times == [1.0]
    assert rec.threads == ["b-flusher"]
    bulk.add("b")
    bulk.add("c")
    clock.advance(1)
    assert rec.batches == [["a"], ["b", "c"]]
    assert rec.times == [1.0, 2.0]


def test_an_item_waits_at_most_one_interval(
    clock: FakeClock, bulk: BulkExecutor[Any], rec: Recorder
) -> None:
    bulk.add(0)  # the flusher ticks at 1, 2, 3 ...
    clock.advance(1.25)
    bulk.add(1)
    clock.advance(0.75)
    assert rec.batches == [[0], [1]]
    assert rec.times == [1.0, 2.0]


def test_flush_runs_what_is_buffered_on_the_caller(bulk: BulkExecutor[Any], rec: Recorder) -> None:
    assert bulk.flush() is False
    bulk.add(1)
    assert bulk.flush() is True
    assert rec.batches == [[1]]
    assert rec.threads == [threading.current_thread().name]
    assert bulk.flush() is False


def test_an_exception_in_execute_is_logged_with_the_batch_size_and_later_batches_run(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[list[int]] = []

    def execute(items: list[int]) -> None:
        seen.append(items)
        if len(seen) == 1:
            raise RuntimeError("database down")

    with (
        BulkExecutor(execute, max_tasks=2, clock=clock, name="err") as ex,
        caplog.at_level(logging.ERROR, logger="django_htask.engine.executors"),
    ):
        ex.add(1)
        ex.add(2)  # full: executes and fails, the producer does not see it
        ex.add(3)
        clock.advance(1)  # the timed flush still runs
    assert seen == [[1, 2], [3]]
    [record] = caplog.records
    assert record.action == "batch_failed"  # type: ignore[attr-defined]
    assert record.batch_size == 2  # type: ignore[attr-defined]
    assert "batch of 2 items" in record.getMessage()
    assert "database down" in (record.exc_text or "")


# -- wait ------------------------------------------------------------------------------------
def test_wait_flushes_and_waits_for_batches_running_elsewhere(clock: FakeClock) -> None:
    started = threading.Event()
    release = threading.Event()
    done: list[list[int]] = []

    def execute(items: list[int]) -> None:
        if items == [1, 2]:
            started.set()
            assert release.wait(10)
        done.append(items)

    ex: BulkExecutor[int] = BulkExecutor(execute, max_tasks=2, clock=clock)

    def produce() -> None:
        ex.add(1)
        ex.add(2)

    producer = threading.Thread(target=produce)
    producer.start()
    assert started.wait(10)
    ex.add(3)
    assert ex.wait(timeout=0.05) is False  # the batch [1, 2] is still running
    assert done == [[3]]  # but wait() flushed [3]
    release.set()
    assert ex.wait(timeout=10) is True
    assert sorted(done) == [[1, 2], [3]]
    producer.join(10)
    ex.close()


def test_wait_inside_execute_does_not_wait_for_itself(clock: FakeClock) -> None:
    results: list[bool] = []
    holder: list[BulkExecutor[int]] = []

    def execute(items: list[int]) -> None:
        results.append(holder[0].wait(timeout=5))

    ex: BulkExecutor[int] = BulkExecutor(execute, max_tasks=1, clock=clock)
    holder.append(ex)
    ex.add(1)
    assert results == [True]
    ex.close()


# -- close and exit ------------------------------------------------------------------------------
def test_close_flushes_and_refuses_later_adds(clock: FakeClock, rec: Recorder) -> None:
    ex: BulkExecutor[int] = BulkExecutor(rec, max_tasks=10, clock=clock, name="closing")
    ex.add(1)
    ex.add(2)
    assert flusher_alive("closing")
    assert ex.close() is True
    assert rec.batches == [[1, 2]]
    assert rec.threads == [threading.current_thread().name]
    assert ex.closed
    assert not flusher_alive("closing")
    with pytest.raises(SchedulerClosed, match="closing"):
        ex.add(3)
    assert ex.close() is True  # harmless
    assert ex.flush() is False
    assert rec.batches == [[1, 2]]


def test_context_manager_closes(clock: FakeClock, rec: Recorder) -> None:
    with ChunkExecutor(rec, max_bytes=100, clock=clock) as ex:
        ex.add("x", 10)
    assert ex.closed
    assert rec.batches == [["x"]]


EXIT_SCRIPT = """
from django_htask.engine import BulkExecutor, ChunkExecutor
bulk = BulkExecutor(lambda items: print("bulk", items, flush=True), max_tasks=100, interval=3600)
chunk = ChunkExecutor(lambda items: print("chunk", items, flush=True), max_bytes=100, interval=3600)
for i in range(5):
    bulk.add(i)
chunk.add("a", 10)
chunk.add("b", 10)
closed = BulkExecutor(lambda items: print("closed", items, flush=True))
closed.add("once")
closed.close()
print("exiting", flush=True)
"""


def test_buffered_items_are_flushed_at_interpreter_exit() -> None:
    result = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["closed ['once']", "exiting"]
    assert sorted(lines[2:]) == ["bulk [0, 1, 2, 3, 4]", "chunk ['a', 'b']"]


def test_an_executor_is_garbage_collected_once_closed_or_idle(clock: FakeClock) -> None:
    ex: BulkExecutor[int] = BulkExecutor(print, clock=clock, name="gc")
    ref = weakref.ref(ex)
    ex.close()
    del ex
    gc.collect()
    assert ref() is None

    idle: BulkExecutor[int] = BulkExecutor(lambda items: None, clock=clock, name="gc-idle")
    idle.add(1)
    clock.advance(11)  # one flush, then ten idle intervals: the flusher leaves
    assert not flusher_alive("gc-idle")
    ref = weakref.ref(idle)
    del idle
    gc.collect()
    assert ref() is None


# -- the flusher thread: idle exit and restart ---------------------------------------------
def test_flusher_starts_on_first_add_leaves_after_ten_idle_intervals_and_restarts(
    clock: FakeClock, rec: Recorder
) -> None:
    ex: BulkExecutor[int] = BulkExecutor(rec, max_tasks=100, interval=1.0, clock=clock, name="fl")
    try:
        assert not flusher_alive("fl")
        clock.advance(5)
        assert not flusher_alive("fl")  # no thread before the first add
        ex.add(1)
        assert flusher_alive("fl")
        clock.advance(1)  # tick 1 flushes [1]
        assert rec.batches == [[1]]
        clock.advance(9)  # nine idle intervals
        assert flusher_alive("fl")
        clock.advance(1)  # the tenth
        assert not flusher_alive("fl")
        ex.add(2)  # a new flusher, and the timed flush works again
        assert flusher_alive("fl")
        clock.advance(1)
        assert rec.batches == [[1], [2]]
        assert rec.times == [6.0, 17.0]
    finally:
        ex.close()


def test_adds_that_fill_batches_keep_the_flusher_alive(clock: FakeClock, rec: Recorder) -> None:
    ex: BulkExecutor[int] = BulkExecutor(rec, max_tasks=1, interval=1.0, clock=clock, name="busy")
    try:
        for i in range(15):
            ex.add(i)  # every add is a full batch: the container is empty at each tick
            clock.advance(1)
            assert flusher_alive("busy")
        assert len(rec.batches) == 15
    finally:
        ex.close()


# -- many producers ------------------------------------------------------------------------
@pytest.mark.parametrize("max_tasks", [1, 7, 64])
def test_many_producers_lose_and_duplicate_nothing(clock: FakeClock, max_tasks: int) -> None:
    batches: list[list[tuple[int, int]]] = []
    lock = threading.Lock()

    def execute(items: list[tuple[int, int]]) -> None:
        with lock:
            batches.append(items)

    # A fresh executor: its flusher starts while the producers are already adding.
    ex: BulkExecutor[tuple[int, int]] = BulkExecutor(execute, max_tasks=max_tasks, clock=clock)
    per_thread = 2000
    go = threading.Event()

    def produce(n: int) -> None:
        go.wait(10)
        for i in range(per_thread):
            ex.add((n, i))

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(30)
    assert ex.wait(timeout=30)
    items = [item for batch in batches for item in batch]
    assert len(items) == 8 * per_thread
    assert set(items) == {(n, i) for n in range(8) for i in range(per_thread)}
    assert all(1 <= len(b) <= max_tasks for b in batches)
    for n in range(8):  # each producer's items stay in its order
        assert [i for m, i in items if m == n] == list(range(per_thread))
    ex.close()


# -- chunk ----------------------------------------------------------------------------------
def test_chunk_flushes_once_sizes_reach_max_bytes(clock: FakeClock, rec: Recorder) -> None:
    with ChunkExecutor(rec, max_bytes=100, interval=1.0, clock=clock) as ex:
        ex.add("a", 40)
        ex.add("b", 59)
        assert rec.batches == []
        ex.add("c", 1)
        assert rec.batches == [["a", "b", "c"]]
        ex.add("huge", 500)  # alone past the limit: flushed at once
        assert rec.batches == [["a", "b", "c"], ["huge"]]
        ex.add("d", 0)
        clock.advance(1)
        assert rec.batches == [["a", "b", "c"], ["huge"], ["d"]]


@pytest.mark.parametrize("size", [-1, 1.5, None, True])
def test_chunk_rejects_bad_sizes(clock: FakeClock, size: Any) -> None:
    ex: ChunkExecutor[str] = ChunkExecutor(print, clock=clock)
    with ex, pytest.raises(ValueError, match="size"):
        ex.add("x", size)


# -- periodical with a container of one's own ------------------------------------------------
class LatestPerKey:
    """Keeps only the latest value per key; full at 3 distinct keys."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}
        self.executed: list[dict[str, int]] = []

    def add(self, item: tuple[str, int]) -> bool:
        self.values[item[0]] = item[1]
        return len(self.values) >= 3

    def execute(self, items: dict[str, int]) -> None:
        self.executed.append(items)

    def remove_all(self) -> dict[str, int]:
        values, self.values = self.values, {}
        return values


def test_periodical_executor_with_a_custom_container(clock: FakeClock) -> None:
    container = LatestPerKey()
    with PeriodicalExecutor(0.5, container, clock=clock) as ex:
        ex.add(("a", 1))
        ex.add(("a", 2))
        ex.add(("b", 1))
        assert container.executed == []
        ex.add(("c", 1))
        assert container.executed == [{"a": 2, "b": 1, "c": 1}]
        clock.advance(5)  # empty batches are not executed
        assert len(container.executed) == 1
        ex.add(("d", 4))
        clock.advance(0.5)
        assert container.executed[-1] == {"d": 4}


def pending(de: DelayExecutor) -> bool:
    return de.pending


# -- DelayExecutor -----------------------------------------------------------------------------
def test_delay_executor_runs_once_delay_after_the_first_trigger(clock: FakeClock) -> None:
    runs: list[float] = []
    de = DelayExecutor(lambda: runs.append(clock.monotonic()), 2.0, clock=clock)
    assert de.trigger() is True
    assert pending(de)
    clock.advance(1.5)
    assert de.trigger() is False  # absorbed: does not push the run back
    clock.advance(0.499)
    assert runs == []
    clock.advance(0.001)
    assert runs == [2.0]
    assert not pending(de)
    clock.advance(10)
    assert runs == [2.0]
    assert de.trigger() is True  # armed again
    clock.advance(2)
    assert runs == [2.0, 14.0]


def test_a_trigger_while_fn_runs_arms_a_new_run(clock: FakeClock) -> None:
    runs: list[float] = []
    holder: list[DelayExecutor] = []

    def fn() -> None:
        runs.append(clock.monotonic())
        if len(runs) == 1:
            assert holder[0].trigger() is True  # disarmed before fn runs

    de = DelayExecutor(fn, 1.0, clock=clock)
    holder.append(de)
    de.trigger()
    clock.advance(5)
    assert runs == [1.0, 2.0]


def test_delay_executor_logs_a_failing_fn(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    def fn() -> None:
        raise RuntimeError("nope")

    de = DelayExecutor(fn, 1.0, clock=clock, name="dl")
    with caplog.at_level(logging.ERROR, logger="django_htask.engine.executors"):
        de.trigger()
        clock.advance(1)
    assert [r.action for r in caplog.records] == ["delay_failed"]  # type: ignore[attr-defined]
    assert de.trigger() is True  # still usable
    clock.advance(1)


def test_delay_executor_arguments() -> None:
    with pytest.raises(ValueError, match="delay"):
        DelayExecutor(print, 0)
    with pytest.raises(TypeError, match="fn"):
        DelayExecutor(None, 1)  # type: ignore[arg-type]


def test_concurrent_triggers_arm_once(clock: FakeClock) -> None:
    runs: list[int] = []
    de = DelayExecutor(lambda: runs.append(1), 1.0, clock=clock)
    armed: list[bool] = []
    barrier = threading.Barrier(8)

    def hit() -> None:
        barrier.wait(10)
        armed.append(de.trigger())

    threads = [threading.Thread(target=hit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert armed.count(True) == 1
    clock.advance(1)
    assert runs == [1]


# -- LessExecutor ---------------------------------------------------------------------------
def test_less_executor_runs_at_most_once_per_threshold(clock: FakeClock) -> None:
    runs: list[float] = []
    less = LessExecutor(5.0, clock=clock)

    def fn() -> None:
        runs.append(clock.monotonic())

    assert less.do_or_discard(fn) is True
    clock.advance(4.999)
    assert less.do_or_discard(fn) is False
    clock.advance(0.001)
    assert less.do_or_discard(fn) is True  # exactly the threshold has passed
    assert less.do_or_discard(fn) is False
    clock.advance(100)
    assert less.do_or_discard(fn) is True
    assert runs == [0.0, 5.0, 105.0]


def test_less_executor_check_is_atomic(clock: FakeClock) -> None:
    less = LessExecutor(1.0, clock=clock)
    ran: list[str] = []
    results: list[bool] = []
    barrier = threading.Barrier(16)

    def hit() -> None:
        barrier.wait(10)
        results.append(less.do_or_discard(lambda: ran.append(threading.current_thread().name)))

    threads = [threading.Thread(target=hit) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results.count(True) == 1
    assert len(ran) == 1


def test_less_executor_runs_on_the_caller_and_an_exception_propagates(clock: FakeClock) -> None:
    less = LessExecutor(1.0, clock=clock)
    names: list[str] = []
    assert less.do_or_discard(lambda: names.append(threading.current_thread().name))
    assert names == [threading.current_thread().name]
    clock.advance(1)

    def boom() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        less.do_or_discard(boom)
    assert less.do_or_discard(boom) is False  # the failed run still counts


@pytest.mark.parametrize("threshold", [0, -1, math.nan])
def test_less_executor_threshold(threshold: float) -> None:
    with pytest.raises(ValueError, match="threshold"):
        LessExecutor(threshold)


# -- the documented use case: a scheduled job feeding rows to bulk_create ---------------------
class FakeManager:
    """Stands for ``Reading.objects`` of the docs example: records each bulk_create."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[int, int]]] = []
        self.lock = threading.Lock()

    def bulk_create(self, rows: list[tuple[int, int]]) -> None:
        with self.lock:
            self.calls.append(list(rows))


def test_scheduled_job_feeding_a_bulk_executor_does_one_bulk_create_per_batch(
    clock: FakeClock,
) -> None:
    # The example of docs/wheel-and-executors.md on the engine alone: a job every 10 s
    # polls 7 sensors; rows go into batches of at most 5, flushed every 2 s too.
    objects = FakeManager()
    readings: BulkExecutor[tuple[int, int]] = BulkExecutor(
        objects.bulk_create, max_tasks=5, interval=2.0, clock=clock
    )
    runs = 0

    def collect_readings() -> None:
        nonlocal runs
        runs += 1
        for sensor in range(7):
            readings.add((runs, sensor))

    def every_10s() -> None:
        collect_readings()
        scheduler.call_later(10, every_10s)

    with Scheduler(workers=2, clock=clock) as scheduler:
        scheduler.call_later(10, every_10s)
        clock.advance(10)  # run 1: a full batch of 5 at once, 2 rows wait for the flusher
        assert objects.calls == [[(1, s) for s in range(5)]]
        clock.advance(2)
        assert objects.calls[1] == [(1, 5), (1, 6)]
        clock.advance(33)  # runs 2, 3 and 4 (at 20, 30 and 40 s)
        readings.add((99, 0))  # buffered when the process shuts down
    readings.close()  # what interpreter exit does for an executor still open
    rows = [row for call in objects.calls for row in call]
    assert sorted(rows) == sorted([(r, s) for r in range(1, 5) for s in range(7)] + [(99, 0)])
    assert len(rows) == len(set(rows))  # nothing twice
    assert all(1 <= len(call) <= 5 for call in objects.calls)  # one bulk_create per batch
