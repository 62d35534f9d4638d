"""Benchmark of BulkExecutor against a plain queue.Queue drained in batches.

Both move the same items from P producer threads into batches of at most 1,000 items
handed to the same ``execute`` (which only counts them), in one run:

* ``bulk``: ``BulkExecutor(execute, max_tasks=1000, interval=0.1)``; producers call
  ``add(item)``; the end is ``wait()``;
* ``Queue``: producers ``put`` into a ``queue.Queue``; one consumer thread ``get``s a
  first item (timeout 0.1 s), takes what else is there with ``get_nowait`` up to 1,000
  and calls ``execute``; the end is a sentinel per producer;
* ``SimpleQueue``: the same with ``queue.SimpleQueue`` (written in C, no Python lock).

Items/s is the number of items divided by the time from the start of the producers to
the last batch executed.

    python bench/executors.py           # 8 producers x 250k items, and 1 x 1M
    python bench/executors.py --quick   # 8 x 25k, and 1 x 100k
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from django_htask.engine import BulkExecutor

BATCH = 1000
_STOP = object()


class Counter:
    def __init__(self) -> None:
        self.items = 0
        self.batches = 0
        self.lock = threading.Lock()

    def __call__(self, items: list[object]) -> None:
        with self.lock:
            self.items += len(items)
            self.batches += 1


def run_producers(
    producers: int, per: int, put: Callable[[object], object]
) -> list[threading.Thread]:
    go = threading.Barrier(producers + 1)

    def produce() -> None:
        go.wait()
        for i in range(per):
            put(i)

    threads = [threading.Thread(target=produce) for _ in range(producers)]
    for t in threads:
        t.start()
    go.wait()
    return threads


def bulk(producers: int, per: int) -> tuple[float, int]:
    counter = Counter()
    ex: BulkExecutor[object] = BulkExecutor(counter, max_tasks=BATCH, interval=0.1)
    t0 = time.perf_counter()
    threads = run_producers(producers, per, ex.add)
    for t in threads:
        t.join()
    ex.wait()
    elapsed = time.perf_counter() - t0
    ex.close()
    assert counter.items == producers * per, counter.items
    return producers * per / elapsed, counter.batches


def batched_queue(producers: int, per: int, simple: bool = False) -> tuple[float, int]:
    counter = Counter()
    q: queue.Queue[object] | queue.SimpleQueue[object] = (
        queue.SimpleQueue() if simple else queue.Queue()
    )

    def consume() -> None:
        stops = 0
        while stops < producers:
            try:
                first = q.get(timeout=0.1)
            except queue.Empty:
                continue
            batch: list[object] = []
            item = first
            while True:
                if item is _STOP:
                    stops += 1
                else:
                    batch.append(item)
                if len(batch) >= BATCH:
                    break
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
            if batch:
                counter(batch)

    consumer = threading.Thread(target=consume)
    consumer.start()
    t0 = time.perf_counter()
    threads = run_producers(producers, per, q.put)
    for t in threads:
        t.join()
    for _ in range(producers):
        q.put(_STOP)
    consumer.join()
    elapsed = time.perf_counter() - t0
    assert counter.items == producers * per, counter.items
    return producers * per / elapsed, counter.batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    cases = [(8, 250_000 // scale), (1, 1_000_000 // scale)]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    print(f"\n== items/s into batches of <= {BATCH} (median of {args.repeat} runs)")
    print(
        f"{'producers':>9} {'items':>10} {'bulk':>12} {'Queue':>12} {'SimpleQueue':>12}"
        f" {'bulk/Queue':>10} {'bulk/Simple':>11}"
    )
    for producers, per in cases:
        b = statistics.median(bulk(producers, per)[0] for _ in range(args.repeat))
        q = statistics.median(batched_queue(producers, per)[0] for _ in range(args.repeat))
        sq = statistics.median(
            batched_queue(producers, per, simple=True)[0] for _ in range(args.repeat)
        )
        print(
            f"{producers:>9} {producers * per:>10,} {b:>12,.0f} {q:>12,.0f} {sq:>12,.0f}"
            f" {b / q:>10.2f} {b / sq:>11.2f}"
        )


if __name__ == "__main__":
    main()
