"""Benchmark of the engine core: timer adds, cancels, memory, lateness and idle CPU.

Compares, in one run, django-htask's ``Scheduler`` with:

* ``reference``: the same job written as plainly as possible: one thread, ``heapq`` +
  ``threading.Condition``, callbacks run inline; its cancel does what the engine's
  must (under the lock, count at once, compact when dead entries outnumber live ones);
* ``sched``: the standard library's ``sched.scheduler`` (its cancel is O(n), so its
  cancel rate is measured on a sample of 1,000 cancels);
* ``asyncio``: ``loop.call_at`` on an event loop.

Memory is measured in a fresh child process per (implementation, N) so one
measurement cannot hide in another's freed memory.

    python bench/engine.py            # N = 10k, 100k, 1M
    python bench/engine.py --quick    # N = 10k, 100k; shorter lateness run
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import itertools
import json
import os
import sched
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchutil import memory_in_child, rss_bytes

from django_htask.engine import Scheduler
from django_htask.engine.clock import from_us

FAR = 3600.0  # far-future timers: nothing fires during the add / cancel measurements


def noop() -> None:
    pass


class Reference:
    """The plainest correct timer thread: heapq + Condition, callbacks inline."""

    def __init__(self) -> None:
        self.heap: list[list[Any]] = []
        self.cond = threading.Condition()
        self.seq = itertools.count()
        self.live = 0
        self.dead = 0
        self.closed = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def call_later(self, delay: float, fn: Callable[..., object], *args: Any) -> list[Any]:
        entry = [time.monotonic() + delay, next(self.seq), fn, args]
        with self.cond:
            heapq.heappush(self.heap, entry)
            self.live += 1
            if self.heap[0] is entry:
                self.cond.notify()
        return entry

    def cancel(self, entry: list[Any]) -> None:
        # The same job as the engine's cancel: thread-safe, the pending count drops at
        # once, and dead entries are compacted away when they outnumber live ones.
        with self.cond:
            if entry[2] is not None:
                entry[2] = None
                entry[3] = ()
                self.live -= 1
                self.dead += 1
                if self.dead > self.live:
                    self.heap = [e for e in self.heap if e[2] is not None]
                    heapq.heapify(self.heap)
                    self.dead = 0

    def loop(self) -> None:
        while True:
            with self.cond:
                if self.closed:
                    return
                now = time.monotonic()
                if self.heap and self.heap[0][0] <= now:
                    _, _, fn, args = heapq.heappop(self.heap)
                    if fn is None:
                        self.dead -= 1
                        continue
                    self.live -= 1
                else:
                    self.cond.wait(self.heap[0][0] - now if self.heap else None)
                    continue
            if fn is not None:
                fn(*args)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.heap.clear()
            self.cond.notify()
        self.thread.join()


# -- add / cancel rates ------------------------------------------------------------------
def rates(impl: str, n: int) -> dict[str, float]:
    """Adds/s and cancels/s for n far-future timers."""
    delays = [FAR + (i % 1000) for i in range(n)]
    gc.collect()
    if impl == "htask":
        s = Scheduler(workers=4, name="bench")
        t0 = time.perf_counter()
        call_later = s.call_later
        handles = [call_later(d, noop) for d in delays]
        t1 = time.perf_counter()
        for h in handles:
            h.cancel()
        t2 = time.perf_counter()
        assert len(s) == 0
        s.close()
        cancels = n
    elif impl == "reference":
        r = Reference()
        t0 = time.perf_counter()
        ref_later = r.call_later
        entries = [ref_later(d, noop) for d in delays]
        t1 = time.perf_counter()
        for e in entries:
            r.cancel(e)
        t2 = time.perf_counter()
        r.close()
        cancels = n
    elif impl == "sched":
        sc = sched.scheduler(time.monotonic)
        t0 = time.perf_counter()
        enter = sc.enter
        events = [enter(d, 0, noop) for d in delays]
        t1 = time.perf_counter()
        cancels = min(n, 1000)
        for event in events[:: max(1, n // cancels)][:cancels]:
            sc.cancel(event)
        t2 = time.perf_counter()
    elif impl == "asyncio":
        loop = asyncio.new_event_loop()
        base = loop.time()
        t0 = time.perf_counter()
        call_at = loop.call_at
        ahandles = [call_at(base + d, noop) for d in delays]
        t1 = time.perf_counter()
        for ah in ahandles:
            ah.cancel()
        t2 = time.perf_counter()
        loop.close()
        cancels = n
    else:
        raise ValueError(impl)
    return {"adds_per_s": n / (t1 - t0), "cancels_per_s": cancels / (t2 - t1)}


# -- memory (child process) ------------------------------------------------------------------
def memory_child(impl: str, n: int) -> dict[str, float]:
    delays = [FAR + (i % 1000) for i in range(n)]
    gc.collect()
    before = rss_bytes()
    holder: Any
    if impl == "htask":
        s = Scheduler(workers=4, name="bench")
        holder = [s.call_later(d, noop) for d in delays]
        gc.collect()
        held = rss_bytes()
        for h in holder:
            h.cancel()
        pending_after = len(s)
        heap_after = len(s._queue._heap)
        del holder
        gc.collect()
        after = rss_bytes()
        s.close()
    elif impl == "reference":
        r = Reference()
        holder = [r.call_later(d, noop) for d in delays]
        gc.collect()
        held = rss_bytes()
        for e in holder:
            r.cancel(e)
        pending_after = sum(1 for e in r.heap if e[2] is not None)
        heap_after = len(r.heap)
        del holder
        gc.collect()
        after = rss_bytes()
        r.close()
    elif impl == "asyncio":
        loop = asyncio.new_event_loop()
        base = loop.time()
        holder = [loop.call_at(base + d, noop) for d in delays]
        gc.collect()
        held = rss_bytes()
        for ah in holder:
            ah.cancel()
        heap_after = len(loop._scheduled)  # type: ignore[attr-defined]
        pending_after = 0
        del holder
        gc.collect()
        after = rss_bytes()
        loop.close()
    elif impl == "sched":
        sc = sched.scheduler(time.monotonic)
        holder = [sc.enter(d, 0, noop) for d in delays]
        gc.collect()
        held = rss_bytes()
        pending_after = heap_after = len(sc.queue)
        after = held
    else:
        raise ValueError(impl)
    return {
        "bytes_per_timer": (held - before) / n,
        "rss_after_cancel_per_timer": (after - before) / n,
        "pending_after_cancel": pending_after,
        "heap_entries_after_cancel": heap_after,
    }


def memory(impl: str, n: int) -> dict[str, float]:
    return memory_in_child(__file__, impl, n)


# -- lateness ------------------------------------------------------------------------------
def lateness(impl: str, n: int, window: float) -> dict[str, float]:
    """Start n trivial timers spread evenly over ``window`` seconds; measure how late."""
    late: list[int] = []
    record = late.append
    done = threading.Event()
    count = itertools.count(1)

    def task(due_us: int) -> None:
        record(time.time_ns() // 1000 - due_us)
        if next(count) == n:
            done.set()

    base = time.time_ns() // 1000 + 1_500_000  # let the adds finish first
    step = window * 1e6 / n
    dues = [base + int(i * step) for i in range(n)]
    if impl == "htask":
        s = Scheduler(workers=4, name="bench")
        for due in dues:
            s.call_at(from_us(due), task, due)
        done.wait(window + 30)
        s.close()
    else:
        r = Reference()
        mono_offset = time.monotonic() - time.time()
        for due in dues:
            r.call_later(due / 1e6 + mono_offset - time.monotonic(), task, due)
        done.wait(window + 30)
        r.close()
    late.sort()
    ms = [v / 1000 for v in late]
    return {
        "n": len(ms),
        "p50_ms": ms[len(ms) // 2],
        "p99_ms": ms[int(len(ms) * 0.99)],
        "max_ms": ms[-1],
        "mean_ms": statistics.fmean(ms),
    }


def idle_cpu(n: int, seconds: float) -> dict[str, float]:
    s = Scheduler(workers=4, name="bench")
    for i in range(n):
        s.call_later(FAR + i, noop)
    time.sleep(0.2)
    c0, w0 = time.process_time(), time.monotonic()
    time.sleep(seconds)
    c1, w1 = time.process_time(), time.monotonic()
    s.close()
    return {"pending": n, "cpu_percent": 100 * (c1 - c0) / (w1 - w0), "seconds": w1 - w0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter runs")
    parser.add_argument("--memory-child", nargs=2, metavar=("IMPL", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child[0], int(args.memory_child[1]))))
        return

    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    impls = ["htask", "reference", "sched", "asyncio"]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores")
    print("\n== adds and cancels of far-future timers (ops/s; ratio = htask / reference)")
    print(f"{'N':>9} {'impl':>10} {'adds/s':>12} {'cancels/s':>12} {'B/timer':>8}")
    for n in sizes:
        results = {impl: rates(impl, n) | memory(impl, n) for impl in impls}
        for impl in impls:
            r = results[impl]
            print(
                f"{n:>9} {impl:>10} {r['adds_per_s']:>12,.0f} {r['cancels_per_s']:>12,.0f}"
                f" {r['bytes_per_timer']:>8.0f}"
            )
        h, ref = results["htask"], results["reference"]
        print(
            f"{n:>9} {'ratio':>10} {h['adds_per_s'] / ref['adds_per_s']:>12.2f}"
            f" {h['cancels_per_s'] / ref['cancels_per_s']:>12.2f}"
            f"   after cancelling all: htask holds {h['heap_entries_after_cancel']:.0f}"
            f" heap entries, reference {ref['heap_entries_after_cancel']:.0f}"
        )

    n_late = 100_000
    window = 2.0
    print(f"\n== lateness: {n_late:,} trivial timers due over {window:.0f} s, 4 workers")
    for impl in ("htask", "reference"):
        lat = lateness(impl, n_late, window)
        print(
            f"{impl:>10}: p50 {lat['p50_ms']:.3f} ms  p99 {lat['p99_ms']:.3f} ms"
            f"  max {lat['max_ms']:.3f} ms  (n={lat['n']:.0f})"
        )

    idle = idle_cpu(100_000, 1.0 if args.quick else 3.0)
    print(
        f"\n== idle: {idle['pending']:,.0f} pending timers, CPU {idle['cpu_percent']:.2f}%"
        f" over {idle['seconds']:.1f} s"
    )


if __name__ == "__main__":
    main()
