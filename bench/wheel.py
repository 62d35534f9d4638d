"""Benchmark of the keyed TimingWheel against the engine's heap Scheduler.

The same keyed work is done by both, in one run:

* ``wheel``: ``TimingWheel(1.0, 4096, execute)``; ``set_timer`` / ``move_timer`` /
  ``remove_timer`` by key;
* ``heap``: the engine's ``Scheduler`` behind a ``dict`` of key -> handle, which is what
  keyed timers on a heap take: a move is ``cancel()`` plus a new ``call_later``, a
  remove is ``cancel()``.

Phases: N keyed timers set (delays of 60 s to 17 min, so nothing fires), N/2 of them
moved, N/4 removed. Memory is the growth of the resident set while N timers are held,
measured in a fresh child process per implementation. Then expiry throughput: E timers
due at the same moment, from their due time to the last ``execute`` returning.

    python bench/wheel.py           # N = 1M, E = 200k
    python bench/wheel.py --quick   # N = 100k, E = 50k
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchutil import memory_in_child, rss_bytes

from django_htask.engine import Scheduler, TimerHandle, TimingWheel

IMPLS = ("wheel", "heap")


def noop(key: Any, value: Any) -> None:
    pass


class HeapTimers:
    """Keyed timers on the engine's heap Scheduler: a dict of key -> (handle, value)."""

    def __init__(self, execute: Any = noop, workers: int = 4) -> None:
        self.scheduler = Scheduler(workers=workers, name="bench-heap")
        self.timers: dict[Any, tuple[TimerHandle, Any]] = {}
        self.lock = threading.Lock()
        self.execute = execute

    def _fire(self, key: Any, value: Any) -> None:
        with self.lock:
            self.timers.pop(key, None)
        self.execute(key, value)

    def set_timer(self, key: Any, value: Any, delay: float) -> None:
        handle = self.scheduler.call_later(delay, self._fire, key, value)
        with self.lock:
            old = self.timers.get(key)
            self.timers[key] = (handle, value)
        if old is not None:
            old[0].cancel()

    def move_timer(self, key: Any, delay: float) -> bool:
        with self.lock:
            old = self.timers.get(key)
            if old is None:
                return False
            handle = self.scheduler.call_later(delay, self._fire, key, old[1])
            self.timers[key] = (handle, old[1])
        old[0].cancel()
        return True

    def remove_timer(self, key: Any) -> bool:
        with self.lock:
            old = self.timers.pop(key, None)
        if old is None:
            return False
        old[0].cancel()
        return True

    def __len__(self) -> int:
        return len(self.timers)

    def stop(self) -> None:
        self.scheduler.close()


def make(impl: str, execute: Any = noop) -> Any:
    if impl == "wheel":
        return TimingWheel(1.0, 4096, execute, name="bench-wheel")
    return HeapTimers(execute)


def delays(n: int) -> list[float]:
    return [60.0 + (i * 7919) % 1000 for i in range(n)]


def rates(impl: str, n: int) -> dict[str, float]:
    keys = [f"key-{i}" for i in range(n)]
    first = delays(n)
    second = first[n // 3 :] + first[: n // 3]
    moved = keys[: n // 2]
    removed = keys[n // 2 : n // 2 + n // 4]
    timers = make(impl)
    gc.collect()
    set_timer, move_timer, remove_timer = timers.set_timer, timers.move_timer, timers.remove_timer
    t0 = time.perf_counter()
    for key, d in zip(keys, first, strict=True):
        set_timer(key, None, d)
    t1 = time.perf_counter()
    for key, d in zip(moved, second, strict=False):
        move_timer(key, d)
    t2 = time.perf_counter()
    for key in removed:
        remove_timer(key)
    t3 = time.perf_counter()
    assert len(timers) == n - len(removed), len(timers)
    timers.stop()
    return {
        "sets_per_s": n / (t1 - t0),
        "moves_per_s": len(moved) / (t2 - t1),
        "removes_per_s": len(removed) / (t3 - t2),
    }


def memory_child(impl: str, n: int) -> dict[str, float]:
    keys = [f"key-{i}" for i in range(n)]
    ds = delays(n)
    timers = make(impl)
    gc.collect()
    before = rss_bytes()
    for key, d in zip(keys, ds, strict=True):
        timers.set_timer(key, None, d)
    gc.collect()
    held = rss_bytes()
    timers.stop()
    return {"bytes_per_timer": (held - before) / n}


def memory(impl: str, n: int) -> dict[str, float]:
    return memory_in_child(__file__, impl, n)


def expiry(impl: str, e: int) -> dict[str, float]:
    """E timers due at the same moment: when the first and the last execute ran."""
    done = threading.Event()
    stamps: list[float] = []
    lock = threading.Lock()

    def execute(key: Any, value: Any) -> None:
        with lock:
            stamps.append(time.time())
            if len(stamps) == e:
                done.set()

    timers: Any
    if impl == "wheel":
        timers = TimingWheel(0.05, 64, execute, name="bench-wheel")  # 50 ms resolution
    else:
        timers = HeapTimers(execute)
    keys = [f"key-{i}" for i in range(e)]
    due = time.time() + 3.0
    for key in keys:
        timers.set_timer(key, None, due - time.time())
    assert time.time() < due, "setting took longer than the lead time"
    assert done.wait(120)
    timers.stop()
    return {"first_s": min(stamps) - due, "last_s": max(stamps) - due}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="N = 100k, E = 50k")
    parser.add_argument("--memory-child", nargs=2, metavar=("IMPL", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child[0], int(args.memory_child[1]))))
        return
    n = 100_000 if args.quick else 1_000_000
    e = 50_000 if args.quick else 200_000
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    print(f"\n== {n:,} keyed timers set, {n // 2:,} moved, {n // 4:,} removed (ops/s)")
    print(f"{'impl':>6} {'sets/s':>12} {'moves/s':>12} {'removes/s':>12} {'B/timer':>8}")
    results = {impl: rates(impl, n) | memory(impl, n) for impl in IMPLS}
    for impl in IMPLS:
        r = results[impl]
        print(
            f"{impl:>6} {r['sets_per_s']:>12,.0f} {r['moves_per_s']:>12,.0f}"
            f" {r['removes_per_s']:>12,.0f} {r['bytes_per_timer']:>8.0f}"
        )
    w, h = results["wheel"], results["heap"]
    print(
        f"{'ratio':>6} {w['sets_per_s'] / h['sets_per_s']:>12.2f}"
        f" {w['moves_per_s'] / h['moves_per_s']:>12.2f}"
        f" {w['removes_per_s'] / h['removes_per_s']:>12.2f}"
        f" {w['bytes_per_timer'] / h['bytes_per_timer']:>8.2f}   (wheel / heap)"
    )
    print(f"\n== expiry: {e:,} timers due at the same moment, 4 workers")
    for impl in IMPLS:
        x = expiry(impl, e)
        print(
            f"{impl:>6}: first executed {x['first_s'] * 1000:,.0f} ms after the due time,"
            f" last {x['last_s'] * 1000:,.0f} ms"
            f" ({e / (x['last_s'] - x['first_s']):,.0f} expiries/s in between)"
        )


if __name__ == "__main__":
    main()
