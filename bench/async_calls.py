"""What a node's ``async def`` calls cost on worker threads, against one event loop.

With ``ASYNC_LANE`` off, a node runs an ``async def`` task on a worker thread, on that
thread's own event loop (``django_htask.node.execution``): 50 tasks at once take 50
threads. By default it runs them on its async lane, one event loop on a thread of its
own (``django_htask.node.lane``). This measures both against the leanest equivalents.
Each case makes ``--calls`` calls at ``width`` at once, handed out in rounds of 16 as
a node's claims hand them out, and waits for every end:

* ``ours sync`` / ``ours async``: django-htask's own ``execute()`` (the run signals,
  the timing, the cancel token of a ``RunGuard``) of a registered trivial function,
  plain or ``async def``, on ``width`` threads;
* ``ours lane``: django-htask's async lane, each call begun as the node's supervisor
  begins one (a guard from the node's running jobs, ``aexecute``) and counted among
  ``width`` places;
* ``threads sync`` / ``threads async``: the leanest equivalent of each, the function
  called on ``width`` threads (an ``async def`` one on the thread's kept
  ``asyncio.Runner``);
* ``one loop``: the leanest event loop: one thread runs a loop, each round is handed
  to it with ``call_soon_threadsafe``, each call is a task of that loop, at most
  ``width`` at once, and each end is handed back as the threads' ends are.

With ``--sleep MS`` the functions wait that long (``time.sleep`` or ``asyncio.sleep``):
an I/O-bound task, where the width, not the CPU, bounds the calls a second.

Each case runs in a fresh process, the cases taking turns, ``--rounds`` times; the
table has the median calls/s and CPU per call (all of the process's threads), with
(max - min) / median of the calls/s, and each case against ``threads async``::

    python bench/async_calls.py                      # 20,000 trivial calls, widths 8 50
    python bench/async_calls.py --sleep 5 --widths 50 500 --calls 20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ROUND = 16
CASES = ("ours sync", "ours async", "ours lane", "threads sync", "threads async", "one loop")
REFERENCE = "threads async"


class Sleep:
    """How long each call waits (``--sleep``), in seconds."""

    seconds = 0.0


def plain(n: int) -> None:
    if Sleep.seconds:
        time.sleep(Sleep.seconds)


async def coro(n: int) -> None:
    if Sleep.seconds:
        await asyncio.sleep(Sleep.seconds)


def _rounds(calls: int) -> list[range]:
    return [range(i, min(i + ROUND, calls)) for i in range(0, calls, ROUND)]


def on_threads(calls: int, width: int, call: Callable[[int], object]) -> None:
    """``call(n)`` for each n on ``width`` threads fed by one queue; returns when every
    end has been handed back."""
    todo: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    ends: queue.SimpleQueue[int] = queue.SimpleQueue()

    def work() -> None:
        while (n := todo.get()) is not None:
            call(n)
            ends.put(n)

    threads = [threading.Thread(target=work) for _ in range(width)]
    for thread in threads:
        thread.start()

    def hand(batch: range) -> None:
        for n in batch:
            todo.put(n)

    _feed(calls, width, hand, ends)
    for _ in threads:
        todo.put(None)
    for thread in threads:
        thread.join()


def on_one_loop(calls: int, width: int) -> None:
    """Each call a task of one loop on its own thread, ``width`` at most at once."""
    loop = asyncio.new_event_loop()
    ends: queue.SimpleQueue[int] = queue.SimpleQueue()
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    slots = asyncio.Semaphore(width)
    running: set[asyncio.Task[None]] = set()  # referenced until they end

    async def one(n: int) -> None:
        async with slots:
            await coro(n)
        ends.put(n)

    def start(batch: range) -> None:
        for n in batch:
            task = loop.create_task(one(n))
            running.add(task)
            task.add_done_callback(running.discard)

    _feed(calls, width, lambda batch: loop.call_soon_threadsafe(start, batch), ends)
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def _feed(
    calls: int, width: int, hand: Callable[[range], object], ends: queue.SimpleQueue[int]
) -> None:
    """Hand the calls out a round at a time, keeping at most ``width`` + a round out,
    as a node's claims do; return when all have ended."""
    out = done = 0
    for batch in _rounds(calls):
        while out - done >= width:
            ends.get()
            done += 1
        hand(batch)
        out += len(batch)
    while done < calls:
        ends.get()
        done += 1


def _setup(fn: Callable[..., object]) -> tuple[str, bytes]:
    """Django set up for django-htask's own path, and ``fn`` registered: its name and a
    call's payload."""
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            INSTALLED_APPS=["django_htask"],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
            USE_TZ=True,
            LOGGING_CONFIG=None,
        )
        django.setup()
    from django_htask.engine import registry

    name = f"bench.{fn.__name__}"
    if name not in registry:
        registry.register(fn, name=name)
    return name, registry.check_call(name, (0,), {})


def on_the_lane(calls: int, width: int) -> None:
    """django-htask's async lane (node/lane.py): each call begun as the supervisor begins
    one (its guard from the node's running jobs, ``aexecute``, its end handed back), at
    most ``width`` at once."""
    name, payload = _setup(coro)
    from functools import partial

    from django_htask.engine import SystemClock
    from django_htask.node.execution import Call, aexecute
    from django_htask.node.lane import Lane
    from django_htask.node.running import Key, Running
    from django_htask.store import RunOutcome, StartedTask

    clock = SystemClock()
    running = Running()
    lane = Lane("bench", clock, running, width, lambda: None)
    running.freed = lane.freed
    ends: queue.SimpleQueue[int] = queue.SimpleQueue()

    def finish(n: int, outcome: RunOutcome) -> None:
        if outcome.status != "succeeded":
            raise SystemExit(f"{name}: {outcome.status} {outcome.error}")
        running.task_done(n)
        ends.put(n)

    def begin(key: Key, n: int) -> Any:
        c = Call(payload, name, name, "bench", 1, None, task_id=n)
        guard = running.call(key, c, clock.now(), partial(finish, n))
        assert guard is not None

        async def run() -> None:
            outcome = await aexecute(c, clock=clock, guard=guard)
            if guard.settle():
                finish(n, outcome)

        return run()

    def hand(batch: range) -> None:
        now = clock.now()
        running.add_tasks([StartedTask(n, "", name, payload, now, 1, 1) for n in batch])
        lane.submit((("task", n), partial(begin, ("task", n), n)) for n in batch)

    _feed(calls, width, hand, ends)
    lane.close(5)


def _ours(asynchronous: bool) -> Callable[[int], object]:
    name, payload = _setup(coro if asynchronous else plain)
    from django_htask.engine import RunGuard, SystemClock
    from django_htask.node.execution import Call, execute

    clock = SystemClock()

    def call(n: int) -> None:
        c = Call(payload, name, name, "bench", 1, None, task_id=n)
        outcome = execute(c, clock=clock, guard=RunGuard())
        if outcome.status != "succeeded":
            raise SystemExit(f"{name}: {outcome.status} {outcome.error}")

    return call


def _run(case: str, calls: int, width: int) -> dict[str, float]:
    if case == "one loop":
        run: Callable[[], None] = lambda: on_one_loop(calls, width)  # noqa: E731
    elif case == "ours lane":
        on_the_lane(ROUND, width)  # imports and the loop's start out of the timing
        run = lambda: on_the_lane(calls, width)  # noqa: E731
    else:
        if case.startswith("ours"):
            call = _ours(case.endswith("async"))
        elif case == "threads async":
            runners = threading.local()

            def call(n: int) -> object:
                if not hasattr(runners, "runner"):
                    runners.runner = asyncio.Runner()
                return runners.runner.run(coro(n))
        else:
            call = plain
        call(-1)  # imports and first-call set-up out of the timing, as in a node
        run = lambda: on_threads(calls, width, call)  # noqa: E731
    cpu0, t0 = time.process_time(), time.perf_counter()
    run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"per_s": calls / wall, "cpu_us": cpu * 1e6 / calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--widths", type=int, nargs="+", default=[8, 50])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=0.0, metavar="MS")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--width", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    Sleep.seconds = args.sleep / 1000
    if args.case:
        print(json.dumps(_run(args.case, args.calls, args.width)))
        return
    print(
        f"{args.calls} calls, sleeping {args.sleep:g} ms each, rounds of {ROUND}, "
        f"{args.rounds} rounds, each case in a fresh process ({os.cpu_count()} CPUs)"
    )
    for width in args.widths:
        results: dict[str, list[dict[str, float]]] = {case: [] for case in CASES}
        for _ in range(args.rounds):
            for case in CASES:
                out = subprocess.run(
                    [
                        *(sys.executable, __file__, "--case", case, "--width", str(width)),
                        *("--calls", str(args.calls), "--sleep", str(args.sleep)),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                results[case].append(json.loads(out.stdout))
        print(f"width {width}:")
        print(f"  {'case':<14} {'calls/s':>9} {'spread':>7} {'CPU us/call':>12}  vs {REFERENCE}")
        ref = _medians(results[REFERENCE])
        for case in CASES:
            med = _medians(results[case])
            rates = [r["per_s"] for r in results[case]]
            spread = (max(rates) - min(rates)) / med["per_s"]
            print(
                f"  {case:<14} {med['per_s']:>9,.0f} {spread:>7.0%} {med['cpu_us']:>12.1f}  "
                f"{med['per_s'] / ref['per_s']:.2f}x calls/s, "
                f"{med['cpu_us'] / ref['cpu_us']:.2f}x CPU"
            )


def _medians(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


if __name__ == "__main__":
    main()
