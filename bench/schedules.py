"""Benchmark of schedules and the Cron runner.

In one run, against croniter called directly as the reference:

1. ``next_after`` per call: a cron schedule in UTC and in Europe/Berlin, an interval,
   and croniter (a new iterator per call, which is what a stateless "next after t"
   costs, and one iterator reused with ``set_current``).
2. ``next_after`` against croniter's ``get_next`` (one iterator reused) on the same
   specs, each in its zone: croniter's own speed-test specs, robfig/cron's, and the
   forms issue 15 fixed (``5-5``, ``*,5``, ``SUN-SUN`` ...; croniter reads those
   differently, but the text is the same). Each spec is timed in several runs, ours and
   croniter's alternately; the ratio is printed as the median with its spread (min-max)
   over the runs. The aim is at least 4x on every spec.
3. 100k schedules over 100 distinct expressions: parse time and how many compiled
   expressions are held, against building 100k croniter iterators.
4. A Cron runner holding 100k idle entries: process CPU while it waits.
5. A Cron runner with 1k entries due every second: runs per second and lateness
   (p50 / p99 / max) of the jobs, with the entries spread over the second and with all
   of them due on the same second.

    python bench/schedules.py           # full
    python bench/schedules.py --quick   # smaller counts, shorter waits
    python bench/schedules.py --only 2  # one section
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from croniter import croniter

from django_htask.engine import Cron, CronSchedule, IntervalSchedule, RunEvent, parse_schedule
from django_htask.engine.cron_expression import _compile

START = datetime(2026, 1, 1, tzinfo=UTC)


def per_call(fn: Callable[[datetime], object], n: int) -> float:
    """Microseconds per call of ``fn`` over ``n`` successive instants."""
    step = timedelta(seconds=37)
    when = START
    began = time.perf_counter()
    for _ in range(n):
        fn(when)
        when += step
    return (time.perf_counter() - began) / n * 1e6


def bench_next_after(n: int) -> None:
    expr = "*/5 9-17 * * MON-FRI"
    utc = CronSchedule(expr)
    berlin = CronSchedule(expr, "Europe/Berlin")
    interval = IntervalSchedule(300, anchor=START)
    reused = croniter(expr, START)

    def croniter_new(when: datetime) -> object:
        return croniter(expr, when).get_next(datetime)

    def croniter_reused(when: datetime) -> object:
        reused.set_current(when, force=True)
        return reused.get_next(datetime)

    results = {
        "croniter, new iterator per call": per_call(croniter_new, n),
        "croniter, one iterator reused": per_call(croniter_reused, n),
        "CronSchedule UTC": per_call(utc.next_after, n),
        "CronSchedule Europe/Berlin": per_call(berlin.next_after, n),
        "IntervalSchedule": per_call(interval.next_after, n),
    }
    ref = results["croniter, one iterator reused"]
    print(f"\n1. next_after, {n} calls each ({expr!r})")
    for name, us in results.items():
        print(f"   {name:34s} {us:8.2f} us/call   {ref / us:6.2f}x croniter (reused)")


# (spec, zone): croniter's test_croniter_speed.py specs, robfig/cron's TestNext forms,
# and the forms fixed in issue 15.
SAME_SPECS = [
    ("*/1 * * * *", "UTC"),
    ("*/5 * * * *", "UTC"),
    ("0 */3 * * *", "UTC"),
    ("0 0 */3 * *", "UTC"),
    ("0 0 * * *", "UTC"),
    ("0 0 * * sat", "UTC"),
    ("0 0 1 * wed", "UTC"),
    ("15 0,3 * 3 *", "Europe/Bucharest"),
    ("*/5 9-17 * * MON-FRI", "Europe/Berlin"),
    ("15/35 20-35/15 1/2 */2 * *", "UTC"),
    ("0 0 0 * Feb Mon/2", "America/New_York"),
    ("0 9 * JUL-AUG WED", "UTC"),
    ("5-5 * * * *", "UTC"),
    ("59-59/15 * * * *", "UTC"),
    ("*,5 * * * *", "UTC"),
    ("* * * * *,0", "UTC"),
    ("0 0 * * SUN-SUN", "UTC"),
    ("0 0 1 JAN-JAN *", "Asia/Tokyo"),
]


def bench_same_specs(n: int, runs: int) -> float:
    """Ratio croniter / ours per spec, median (min-max) over ``runs``; the lowest median."""
    print(f"\n2. next_after vs croniter get_next on the same specs ({runs} runs x {n} calls)")
    print(f"   {'spec':28s} {'zone':17s} {'ours':>8s} {'croniter':>9s}  ratio (min-max)")
    lowest = (float("inf"), "")
    for spec, zone in SAME_SPECS:
        schedule = parse_schedule(spec, zone)
        tz = ZoneInfo(zone)
        start = START.astimezone(tz)
        reused = croniter(spec, start, second_at_beginning=len(spec.split()) == 6)

        def theirs(when: datetime, it: croniter = reused, tz: ZoneInfo = tz) -> object:
            it.set_current(when.astimezone(tz), force=True)
            return it.get_next(datetime)

        ours_us, theirs_us, ratios = [], [], []
        for run in range(runs):
            if run % 2:  # alternate which goes first
                their = per_call(theirs, n)
                our = per_call(schedule.next_after, n)
            else:
                our = per_call(schedule.next_after, n)
                their = per_call(theirs, n)
            ours_us.append(our)
            theirs_us.append(their)
            ratios.append(their / our)
        median = statistics.median(ratios)
        lowest = min(lowest, (median, spec))
        print(
            f"   {spec!r:28s} {zone:17s} {statistics.median(ours_us):6.2f}us "
            f"{statistics.median(theirs_us):7.2f}us  {median:5.1f}x "
            f"({min(ratios):.1f}-{max(ratios):.1f})"
        )
    verdict = "at least 4x on every spec" if lowest[0] >= 4 else "BELOW the 4x aim"
    print(f"   lowest median ratio: {lowest[0]:.1f}x on {lowest[1]!r} ({verdict})")
    return lowest[0]


def bench_many(n: int, distinct: int) -> None:
    texts = [f"{i % 60} {(i // 60) % 24} * * *" for i in range(distinct)]
    _compile.cache_clear()
    began = time.perf_counter()
    schedules = [parse_schedule(texts[i % distinct], tz="Europe/Berlin") for i in range(n)]
    parse_s = time.perf_counter() - began
    held = _compile.cache_info().currsize
    began = time.perf_counter()
    iters = [croniter(texts[i % distinct], START) for i in range(n)]
    croniter_s = time.perf_counter() - began
    began = time.perf_counter()
    for s in schedules:
        s.next_after(START)
    next_s = time.perf_counter() - began
    print(f"\n3. {n} schedules over {distinct} distinct expressions")
    print(f"   parse_schedule x{n}: {parse_s * 1e3:8.1f} ms ({held} compiled expressions held)")
    print(f"   croniter() x{n}:     {croniter_s * 1e3:8.1f} ms  ({croniter_s / parse_s:.1f}x ours)")
    print(f"   next_after on each:  {next_s * 1e3:8.1f} ms")
    del iters


def bench_idle(n: int, seconds: float) -> None:
    cron = Cron()
    for i in range(n):
        cron.add("@yearly", print, name=f"idle-{i}")
    cron.start()
    time.sleep(0.5)  # let start-up settle
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    assert cron.stop().wait(10)
    print(
        f"\n4. Cron with {n} idle entries: CPU {cpu * 1e3:.1f} ms over {wall:.1f} s wall "
        f"({cpu / wall * 100:.2f}% of one core)"
    )


def bench_busy(n: int, seconds: float, aligned: bool) -> None:
    cron = Cron()
    late: list[tuple[datetime, float]] = []
    lock = threading.Lock()

    def record(event: RunEvent) -> None:
        with lock:
            late.append((event.scheduled, event.lateness))

    cron.on("before_run", record)
    now = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    for i in range(n):
        if aligned:
            cron.add("* * * * * *", _noop, name=f"busy-{i}")
        else:
            anchor = now + timedelta(microseconds=i * 1_000_000 // n)
            cron.add(IntervalSchedule(1, anchor=anchor), _noop, name=f"busy-{i}")
    cron.start()
    time.sleep(2)
    with lock:
        late.clear()
    cpu0 = time.process_time()
    time.sleep(seconds)
    cpu = time.process_time() - cpu0
    with lock:
        got = sorted(lateness for _, lateness in late)
        by_second: dict[datetime, list[float]] = {}
        for scheduled, lateness in late:
            by_second.setdefault(scheduled.replace(microsecond=0), []).append(lateness)
    assert cron.stop().wait(10)
    kind = "all due on the same second" if aligned else "spread over the second"
    q = statistics.quantiles(got, n=100)
    print(f"\n5. Cron with {n} entries every second, {kind}, {seconds:.0f} s")
    print(
        f"   runs: {len(got)} ({len(got) / seconds:.0f}/s, expected {n}/s); "
        f"CPU {cpu / seconds * 100:.0f}% of one core"
    )
    print(
        f"   lateness: p50 {q[49] * 1e3:.2f} ms, p99 {q[98] * 1e3:.2f} ms, "
        f"max {got[-1] * 1e3:.2f} ms"
    )
    # Each second on its own: how much the p99 varies from one second to the next.
    p99s = sorted(
        statistics.quantiles(values, n=100)[98] * 1e3
        for values in by_second.values()
        if len(values) >= n // 2
    )
    if p99s:
        print(
            f"   p99 of each second ({len(p99s)}): min {p99s[0]:.2f} ms, "
            f"median {statistics.median(p99s):.2f} ms, max {p99s[-1]:.2f} ms"
        )


def _noop() -> None:
    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--only", type=int, choices=range(1, 6), metavar="N", help="run section N (1-5) only"
    )
    args = parser.parse_args()
    quick = args.quick

    def busy() -> None:
        bench_busy(1000, 3 if quick else 5, aligned=False)
        bench_busy(1000, 3 if quick else 10, aligned=True)

    sections: list[Callable[[], object]] = [
        lambda: bench_next_after(20_000 if quick else 100_000),
        lambda: bench_same_specs(2_000 if quick else 10_000, 3 if quick else 7),
        lambda: bench_many(20_000 if quick else 100_000, 100),
        lambda: bench_idle(20_000 if quick else 100_000, 2 if quick else 5),
        busy,
    ]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    for number, section in enumerate(sections, 1):
        if args.only in (None, number):
            section()


if __name__ == "__main__":
    main()
