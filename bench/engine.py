"""Benchmark of the engine core against a minimal reference, as ratios with their spread.

The reference is the leanest correct timer thread that can be written in pure Python
(issue 18): one thread, ``heapq`` under a ``threading.Condition``, entries
``[due, seq, fn]`` lists, cancel sets ``entry[2] = None`` and the heap is compacted
when half its entries are dead. Measured against it, in one process, engines
interleaved (the order rotates every round):

* adds/s of far-future timers: ``Scheduler.call_later`` and ``Scheduler.call_at``
  against the reference's ``call_later`` and ``call_at`` (the reference's ``call_at``
  takes a monotonic float, ours an aware datetime); asyncio's ``call_at`` and the
  standard library's ``sched`` as peers;
* cancels/s (``sched``'s cancel is O(n): a sample of 1,000);
* a burst: 1,000 periodic jobs due on one instant, 4 workers, several periods; the
  lateness of every run (due instant to the job's first line), its p99, for the
  ``Scheduler`` (each job re-arms itself with ``call_at``), the ``Cron`` runner
  (1,000 entries on ``@every``, re-armed by the runner) and the reference (its thread
  hands each due entry to 4 worker threads through a ``queue.SimpleQueue``; each job
  re-arms itself with the reference's ``call_at``);
* bytes per pending timer with 1M pending, each in a fresh child process: growth of
  the resident set (RSS) and, separately, what ``tracemalloc`` counts; both include
  the caller's list of the handles;
* idle CPU with 100,000 timers pending (once, in the driver).

By default the script is a driver: it runs the measurements above in ``--runs``
(5) fresh processes one after another and prints each figure as the median and the
min-max over them, ratios first (ratios are computed inside each process, so that
the load of the machine at that moment cancels out).

    python bench/engine.py                # 5 processes, N = 100k, memory at 1M
    python bench/engine.py --runs 7 --n 200000
    python bench/engine.py --once         # one process, prints JSON
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import itertools
import json
import os
import queue
import sched
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchutil import rss_bytes

from django_htask.engine import Cron, Scheduler
from django_htask.engine.clock import from_us
from django_htask.engine.wrappers import current_run

FAR = 3600.0  # far-future timers: nothing fires during the add / cancel measurements


def noop() -> None:
    pass


# -- the minimal reference ------------------------------------------------------------
class Reference:
    """One thread, heapq under a Condition, ``[due, seq, fn]`` entries, callbacks inline;
    cancel sets ``fn`` to None and compacts when half the entries are dead."""

    def __init__(self) -> None:
        self.heap: list[list[Any]] = []
        self.cond = threading.Condition()
        self.seq = itertools.count()
        self.live = 0
        self.dead = 0
        self.closed = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def call_later(self, delay: float, fn: Callable[..., object]) -> list[Any]:
        entry = [time.monotonic() + delay, next(self.seq), fn]
        with self.cond:
            heapq.heappush(self.heap, entry)
            self.live += 1
            if self.heap[0] is entry:
                self.cond.notify()
        return entry

    def call_at(self, due: float, fn: Callable[..., object]) -> list[Any]:
        entry = [due, next(self.seq), fn]
        with self.cond:
            heapq.heappush(self.heap, entry)
            self.live += 1
            if self.heap[0] is entry:
                self.cond.notify()
        return entry

    def cancel(self, entry: list[Any]) -> None:
        with self.cond:
            if entry[2] is not None:
                entry[2] = None
                self.live -= 1
                self.dead += 1
                if self.dead > self.live:
                    self.heap = [e for e in self.heap if e[2] is not None]
                    heapq.heapify(self.heap)
                    self.dead = 0

    def pop_due(self, now: float) -> list[list[Any]]:
        # Called with the condition held.
        due = []
        heap = self.heap
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if entry[2] is None:
                self.dead -= 1
            else:
                self.live -= 1
                due.append(entry)
        return due

    def dispatch(self, due: list[list[Any]]) -> None:
        for entry in due:
            entry[2]()

    def loop(self) -> None:
        cond = self.cond
        while True:
            with cond:
                if self.closed:
                    return
                now = time.monotonic()
                due = self.pop_due(now)
                if not due:
                    cond.wait(self.heap[0][0] - now if self.heap else None)
                    continue
            self.dispatch(due)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.heap.clear()
            self.cond.notify()
        self.thread.join()


class ReferenceBurst(Reference):
    """The reference for the burst: its thread hands each due call to ``workers``
    threads through a ``queue.SimpleQueue``, passing the entry's due time."""

    def __init__(self, workers: int) -> None:
        self.queue: queue.SimpleQueue[tuple[Callable[[float], object], float] | None]
        self.queue = queue.SimpleQueue()
        self.workers = [threading.Thread(target=self.work, daemon=True) for _ in range(workers)]
        for worker in self.workers:
            worker.start()
        super().__init__()

    def dispatch(self, due: list[list[Any]]) -> None:
        put = self.queue.put
        for entry in due:
            put((entry[2], entry[0]))

    def work(self) -> None:
        get = self.queue.get
        while (item := get()) is not None:
            item[0](item[1])

    def close(self) -> None:
        super().close()
        for _ in self.workers:
            self.queue.put(None)
        for worker in self.workers:
            worker.join()


# -- adds and cancels -----------------------------------------------------------------
def rates(impl: str, n: int) -> dict[str, float]:
    """Adds/s (call_later, and call_at where there is one) and cancels/s of n far-future
    timers."""
    delays = [FAR + (i % 1000) for i in range(n)]
    out: dict[str, float] = {}
    gc.collect()
    if impl == "htask":
        s = Scheduler(workers=4, name="bench")
        call_later = s.call_later
        t0 = time.perf_counter()
        handles = [call_later(d, noop) for d in delays]
        t1 = time.perf_counter()
        for h in handles:
            h.cancel()
        t2 = time.perf_counter()
        assert len(s) == 0
        assert not s._queue._heap
        del handles
        gc.collect()
        base = datetime.now(UTC)
        whens = [base + timedelta(seconds=d) for d in delays]
        call_at = s.call_at
        t3 = time.perf_counter()
        handles = [call_at(w, noop) for w in whens]
        t4 = time.perf_counter()
        s.close()
        out = {"adds_later": n / (t1 - t0), "cancels": n / (t2 - t1), "adds_at": n / (t4 - t3)}
    elif impl == "reference":
        r = Reference()
        ref_later = r.call_later
        t0 = time.perf_counter()
        entries = [ref_later(d, noop) for d in delays]
        t1 = time.perf_counter()
        cancel = r.cancel
        for e in entries:
            cancel(e)
        t2 = time.perf_counter()
        assert r.live == 0
        assert not r.heap
        del entries
        gc.collect()
        base_m = time.monotonic()
        dues = [base_m + d for d in delays]
        ref_at = r.call_at
        t3 = time.perf_counter()
        entries = [ref_at(due, noop) for due in dues]
        t4 = time.perf_counter()
        r.close()
        out = {"adds_later": n / (t1 - t0), "cancels": n / (t2 - t1), "adds_at": n / (t4 - t3)}
    elif impl == "sched":
        sc = sched.scheduler(time.monotonic)
        enter = sc.enter
        t0 = time.perf_counter()
        events = [enter(d, 0, noop) for d in delays]
        t1 = time.perf_counter()
        sample = events[:: max(1, n // 1000)][:1000]
        for event in sample:
            sc.cancel(event)
        t2 = time.perf_counter()
        out = {"adds_later": n / (t1 - t0), "cancels": len(sample) / (t2 - t1)}
    elif impl == "asyncio":
        loop = asyncio.new_event_loop()
        now = loop.time()
        dues = [now + d for d in delays]
        call_at_ = loop.call_at
        t0 = time.perf_counter()
        ahandles = [call_at_(due, noop) for due in dues]
        t1 = time.perf_counter()
        for ah in ahandles:
            ah.cancel()
        t2 = time.perf_counter()
        loop.close()
        out = {"adds_at": n / (t1 - t0), "cancels": n / (t2 - t1)}
    else:
        raise ValueError(impl)
    return out


# -- the burst ------------------------------------------------------------------------
def burst(impl: str, jobs: int, period: float, bursts: int) -> dict[str, float]:
    """``jobs`` periodic jobs due on one instant, 4 workers, ``bursts`` periods: the
    lateness of every run in ms (p50, p99, max).

    A job's first line records two readings, the clock and its due instant, and the
    lateness is worked out after the burst: so that the measuring costs each engine the
    same (one append), and is not added to the lateness of the jobs behind it."""
    readings: list[tuple[Any, Any]] = []
    record = readings.append
    total = jobs * bursts
    count = itertools.count(1)
    done = threading.Event()
    lead = 0.3  # the first instant, from now: every timer is added before it
    if impl == "htask":
        s = Scheduler(workers=4, name="bench")
        period_us = round(period * 1e6)
        step = timedelta(microseconds=period_us)
        last_us = 0

        def job(due_us: int, due: datetime) -> None:
            record((time.time_ns(), due_us))
            if next(count) == total:
                done.set()
            elif due_us < last_us:
                nxt = due + step
                s.call_at(nxt, job, due_us + period_us, nxt)

        first_us = time.time_ns() // 1000 + round(lead * 1e6)
        last_us = first_us + (bursts - 1) * period_us
        first = from_us(first_us)
        for _ in range(jobs):
            s.call_at(first, job, first_us, first)
        done.wait(30 + bursts * period)
        s.close()
        late = [(ns / 1000 - due_us) / 1000 for ns, due_us in readings]
    elif impl == "cron":

        def cron_job() -> None:
            started = datetime.now(UTC)
            run = current_run()
            assert run is not None
            record((started, run.scheduled))
            if next(count) == total:
                done.set()

        cron = Cron(workers=4)
        for _ in range(jobs):
            cron.add(f"@every {round(period * 1000)}ms", cron_job, max_runs=bursts)
        cron.start()
        done.wait(30 + bursts * period)
        cron.stop().wait(10)
        ms = timedelta(milliseconds=1)
        late = [(started - scheduled) / ms for started, scheduled in readings]
    elif impl == "reference":
        r = ReferenceBurst(4)
        last = 0.0

        def ref_job(due: float) -> None:
            record((time.monotonic(), due))
            if next(count) == total:
                done.set()
            elif due < last:
                r.call_at(due + period, ref_job)

        first_m = time.monotonic() + lead
        last = first_m + (bursts - 1) * period - period / 2
        for _ in range(jobs):
            r.call_at(first_m, ref_job)
        done.wait(30 + bursts * period)
        r.close()
        late = [(now - due) * 1000 for now, due in readings]
    else:
        raise ValueError(impl)
    late.sort()
    if len(late) != total:
        raise RuntimeError(f"{impl}: {len(late)} of {total} runs")
    return {
        "p50_ms": late[len(late) // 2],
        "p99_ms": late[int(len(late) * 0.99) - 1],
        "max_ms": late[-1],
    }


# -- memory (in a child) --------------------------------------------------------------
def memory_child(impl: str, n: int, method: str) -> dict[str, float]:
    delays = [FAR + (i % 1000) for i in range(n)]
    gc.collect()
    if method == "tracemalloc":
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
    else:
        before = rss_bytes()
    holder: Any
    if impl == "htask":
        s = Scheduler(workers=4, name="bench")
        later = s.call_later
        holder = [later(d, noop) for d in delays]
    elif impl == "reference":
        r = Reference()
        ref_later = r.call_later
        holder = [ref_later(d, noop) for d in delays]
    elif impl == "asyncio":
        loop = asyncio.new_event_loop()
        now = loop.time()
        holder = [loop.call_at(now + d, noop) for d in delays]
    elif impl == "sched":
        sc = sched.scheduler(time.monotonic)
        holder = [sc.enter(d, 0, noop) for d in delays]
    else:
        raise ValueError(impl)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] if method == "tracemalloc" else rss_bytes()
    return {"bytes_per_timer": (held - before) / n, "n": len(holder)}


def memory(impl: str, n: int, method: str) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", impl, str(n), method],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return float(json.loads(out.stdout)["bytes_per_timer"])


# -- idle CPU -------------------------------------------------------------------------
def idle_cpu(n: int, seconds: float) -> float:
    """CPU % of this process with n far-future timers pending and nothing due."""
    s = Scheduler(workers=4, name="bench")
    for i in range(n):
        s.call_later(FAR + i, noop)
    time.sleep(0.2)
    c0, w0 = time.process_time(), time.monotonic()
    time.sleep(seconds)
    c1, w1 = time.process_time(), time.monotonic()
    s.close()
    return 100 * (c1 - c0) / (w1 - w0)


# -- one process ----------------------------------------------------------------------
RATE_IMPLS = ("htask", "reference", "asyncio", "sched")
BURST_IMPLS = ("htask", "cron", "reference")


def once(n: int, rounds: int, bursts: int) -> dict[str, Any]:
    """Every in-process figure, engines interleaved; the median of ``rounds`` each."""
    samples: dict[str, dict[str, list[float]]] = {impl: {} for impl in RATE_IMPLS}
    for r in range(rounds):
        order = RATE_IMPLS[r % len(RATE_IMPLS) :] + RATE_IMPLS[: r % len(RATE_IMPLS)]
        for impl in order:
            for key, value in rates(impl, n).items():
                samples[impl].setdefault(key, []).append(value)
    result: dict[str, Any] = {
        impl: {key: statistics.median(values) for key, values in figures.items()}
        for impl, figures in samples.items()
    }
    late: dict[str, list[dict[str, float]]] = {impl: [] for impl in BURST_IMPLS}
    for r in range(rounds):
        order = BURST_IMPLS[r % len(BURST_IMPLS) :] + BURST_IMPLS[: r % len(BURST_IMPLS)]
        for impl in order:
            late[impl].append(burst(impl, 1000, 0.25, bursts))
    for impl, runs in late.items():
        result.setdefault(impl, {}).update(
            {
                f"burst_{key}": statistics.median(run[key] for run in runs)
                for key in ("p50_ms", "p99_ms", "max_ms")
            }
        )
    return result


# -- the driver -----------------------------------------------------------------------
def spread(values: list[float], fmt: str) -> str:
    return (
        f"{format(statistics.median(values), fmt)}"
        f" ({format(min(values), fmt)}-{format(max(values), fmt)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="fresh processes (default 5)")
    parser.add_argument("--n", type=int, default=100_000, help="timers per rate test")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per process")
    parser.add_argument("--bursts", type=int, default=4, help="periods per burst test")
    parser.add_argument("--memory-n", type=int, default=1_000_000)
    parser.add_argument("--once", action="store_true", help="one process; print JSON")
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        impl, n, method = args.memory_child
        print(json.dumps(memory_child(impl, int(n), method)))
        return
    if args.once:
        print(json.dumps(once(args.n, args.rounds, args.bursts)))
        return

    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {args.runs} processes,"
        f" N = {args.n:,} ({args.rounds} interleaved rounds each), memory at"
        f" {args.memory_n:,} pending"
    )
    runs: list[dict[str, Any]] = []
    mem: dict[tuple[str, str], list[float]] = {}
    for i in range(args.runs):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--once",
                "--n",
                str(args.n),
                "--rounds",
                str(args.rounds),
                "--bursts",
                str(args.bursts),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        for impl in ("htask", "reference", "asyncio", "sched"):
            for method in ("rss", "tracemalloc"):
                if impl in ("asyncio", "sched") and (method == "rss" or i):
                    continue  # peers: tracemalloc, once
                mem.setdefault((impl, method), []).append(memory(impl, args.memory_n, method))
        print(f"  process {i + 1}/{args.runs} done", file=sys.stderr)

    def col(impl: str, key: str) -> list[float]:
        return [run[impl][key] for run in runs]

    def ratio(key: str, impl: str = "htask", against: str = "reference") -> list[float]:
        return [run[impl][key] / run[against][key] for run in runs]

    print("\n== ratios, django-htask / reference (median, min-max over processes)")
    print(f"  adds/s, call_later       {spread(ratio('adds_later'), '.2f')}   (goal >= 0.8)")
    print(f"  adds/s, call_at          {spread(ratio('adds_at'), '.2f')}   (goal >= 0.8)")
    print(f"  cancels/s                {spread(ratio('cancels'), '.2f')}   (goal >= 1)")
    print(
        f"  burst p99, Scheduler     {spread(ratio('burst_p99_ms'), '.2f')}   (lateness: goal <= 1)"
    )
    print(
        f"  burst p99, Cron          {spread(ratio('burst_p99_ms', 'cron'), '.2f')}"
        "   (lateness: goal <= 1)"
    )
    print("\n== rates (ops/s, median, min-max over processes)")
    print(f"  {'impl':<10} {'call_later adds':>28} {'call_at adds':>28} {'cancels':>28}")
    for impl in RATE_IMPLS:
        cells = []
        for key in ("adds_later", "adds_at", "cancels"):
            values = [run[impl][key] for run in runs if key in run[impl]]
            cells.append(spread(values, ",.0f") if values else "—")
        print(f"  {impl:<10} {cells[0]:>28} {cells[1]:>28} {cells[2]:>28}")
    print(
        f"\n== bytes per pending timer, {args.memory_n:,} pending (fresh child each;"
        " the caller's list of handles included)"
    )
    for (impl, method), values in sorted(mem.items()):
        print(f"  {impl:<10} {method:<12} {spread(values, '.0f')}")
    print("\n== burst: 1,000 periodic jobs due on one instant, 4 workers (ms late)")
    for impl in BURST_IMPLS:
        print(
            f"  {impl:<10} p50 {spread(col(impl, 'burst_p50_ms'), '.2f')}"
            f"   p99 {spread(col(impl, 'burst_p99_ms'), '.2f')}"
            f"   max {spread(col(impl, 'burst_max_ms'), '.2f')}"
        )

    print(f"\n== idle: 100,000 pending timers, CPU {idle_cpu(100_000, 3.0):.2f}% over 3 s")


if __name__ == "__main__":
    main()
