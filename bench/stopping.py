"""Timeouts and aborts on PostgreSQL, with a real ``runscheduler`` (docs/timeouts.md).

Run: ``.venv/bin/python bench/stopping.py`` (starts its own throw-away PostgreSQL).
The node runs with the cluster test settings (``TIMEOUT_GRACE`` 1 s, poll 5 s: an
abort reaches it through ``NOTIFY``), ``--workers 2``, with the thread pool then the
process pool (``--pools``: both).

1. Hung tasks: for each way a task hangs (``sleep`` and ``socket``: blocked in C;
   ``loop``: pure Python; ``cooperative``: waits on its token), 2 hung tasks with
   ``timeout=2`` hold both workers, with 100 trivial tasks queued behind them. Printed:
   each hung run's recorded duration against the bound (timeout + grace + 1 s), the
   time from the first hung task's start to the 100th trivial task done against the
   reference (the same 100 tasks on the same node with nothing hung, same run: its
   time plus the timeout and grace it must wait), and the workers running at once
   afterwards (2 tasks of 1 s each started together: both at once means the capacity
   is back to ``--workers``).
2. Abort: ``--aborts`` rounds (20) each of a cooperative task and of one blocked in C
   (``sleep``), aborted with ``abort(token)`` from another process once running; the
   latency from the abort (``Task.abort_requested_at``) to the run recorded
   (``Run.finished_at``): p50, p99, max, against the bound (1 s; grace + 1 s). Each
   aborted ``sleep`` leaves a thread stuck in C with the thread pool: the node runs
   with ``MAX_ABANDONED_THREADS`` above the rounds, so that it does not stop (status 4).
   The process pool stops it with a signal (and would kill its process): nothing stuck.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.site import ClusterSite  # noqa: E402
from tests.pgcluster import PostgresCluster  # noqa: E402

SETTINGS = "tests.cluster.settings"
HANG = "tests.acceptance.app.tasks:hang"
NOOP = "tests.cluster.clusterapp.tasks:noop"
HOLD = "tests.cluster.clusterapp.tasks:hold"
GRACE = 1.0  # TIMEOUT_GRACE in tests.cluster.settings
TIMEOUT = 2.0
KINDS = ("sleep", "socket", "loop", "cooperative")


class Bench(ClusterSite):
    def __init__(self, pg: PostgresCluster, log: Path) -> None:
        super().__init__(pg, log, SETTINGS)
        self.pool = "thread"

    def reset(self) -> None:
        self.sql("TRUNCATE django_htask_run, django_htask_task, django_htask_node")
        self.log.unlink(missing_ok=True)

    def node(self, **env: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runscheduler", "--workers", "2", "--pool", self.pool],
            env={**os.environ, **self.env, **env},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:  # the banner's last line
            if "stop:" in line:
                return proc
        raise RuntimeError("runscheduler exited before its banner")

    def wait(self, query: str, value: object, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.one(query) != value:
            if time.monotonic() > deadline:
                raise RuntimeError(f"not within {timeout}s: {query} = {value!r}")
            time.sleep(0.02)

    def started(self, text: str, count: int = 1) -> float:
        """Wait until ``count`` log lines hold ``text``; return when the last was seen."""
        deadline = time.monotonic() + 60
        while True:
            lines = self.log.read_text().splitlines() if self.log.exists() else []
            if sum(text in line for line in lines) >= count:
                return time.time()
            if time.monotonic() > deadline:
                raise RuntimeError(f"never started: {text}")
            time.sleep(0.005)

    def trivial(self, kind: str | None) -> dict[str, float]:
        """2 hung tasks of ``kind`` (None: none), 100 trivial ones behind them."""
        self.reset()
        node = self.node()
        try:
            hung = (
                ""
                if kind is None
                else f"for _ in range(2):\n    schedule({HANG!r}, {kind!r}, "
                f"{str(self.log)!r}, timeout={TIMEOUT})\n"
            )
            self.django(
                "from django_htask import schedule\n"
                + hung
                + f"for i in range(100):\n    schedule({NOOP!r}, i, delay=0.3)\n"
            )
            done = f"SELECT count(*) FROM django_htask_task WHERE function = '{NOOP}'"
            self.wait(done + " AND status = 'succeeded'", 100)
            first, last = self.sql(
                "SELECT min(started_at), max(finished_at) FROM django_htask_task"
            )[0]
            result = {"all_s": (last - first).total_seconds()}
            if kind is not None:
                durations = self.sql(
                    "SELECT duration FROM django_htask_run WHERE function = %s", HANG
                )
                result["hung_max_s"] = max(d for (d,) in durations)
            # Capacity: two 1 s tasks scheduled together, both running at once?
            self.log.unlink(missing_ok=True)
            self.django(
                f"from django_htask import schedule\nfor _ in range(2):\n"
                f"    schedule({HOLD!r}, 1.0)\n"
            )
            self.wait(
                f"SELECT count(*) FROM django_htask_task WHERE function = '{HOLD}' "
                "AND status = 'succeeded'",
                2,
            )
            starts = sorted(
                float(line.split()[2])
                for line in self.log.read_text().splitlines()
                if line.startswith("start")
            )
            result["together"] = 2.0 if starts[1] - starts[0] < 0.5 else 1.0
            return result
        finally:
            node.terminate()
            node.wait(30)

    def aborts(self, kind: str, rounds: int) -> list[float]:
        self.reset()
        # Each aborted sleep leaves a thread stuck: let them pile up past the default
        # MAX_ABANDONED_THREADS (4), at which a node would stop and exit with status 4.
        node = self.node(HTASK_CLUSTER_MAX_ABANDONED=str(rounds + 1))
        latencies = []
        try:
            for n in range(rounds):
                token = self.django(
                    "from django_htask import schedule\n"
                    f"print(schedule({HANG!r}, {kind!r}, {str(self.log)!r}).token)\n"
                ).strip()
                self.started(f"start {kind}", n + 1)
                self.django(f"from django_htask import abort\nabort({token!r})\n")
                self.wait(
                    "SELECT count(*) FROM django_htask_task WHERE token = %s "
                    "AND status = 'failed'".replace("%s", f"'{token}'"),
                    1,
                )
                asked, finished = self.sql(
                    "SELECT t.abort_requested_at, r.finished_at FROM django_htask_task t "
                    "JOIN django_htask_run r ON r.task_id = t.id WHERE t.token = %s",
                    token,
                )[0]
                latencies.append((finished - asked).total_seconds())
        finally:
            node.terminate()
            node.wait(30)
        return latencies


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aborts", type=int, default=20, help="section 2's rounds per kind")
    parser.add_argument("--only", type=int, choices=(1, 2), help="run one section")
    parser.add_argument(
        "--pools", nargs="+", choices=("thread", "process"), default=["thread", "process"]
    )
    args = parser.parse_args()
    with PostgresCluster() as pg:
        bench = Bench(pg, pg.root / "jobs.log")
        bench.django(
            "from django.core.management import call_command\ncall_command('migrate', verbosity=0)"
        )
        print(f"PostgreSQL {pg.bin_dir.parent.name}, {os.cpu_count()} CPUs")
        for pool in args.pools:
            bench.pool = pool
            print(f"--pool {pool}")
            _sections(bench, {args.only} if args.only else {1, 2}, args.aborts)


def _sections(bench: Bench, wanted: set[int], aborts: int) -> None:
    if 1 in wanted:
        bound = TIMEOUT + GRACE + 1
        print(
            f"1. 2 hung tasks (timeout {TIMEOUT:g} s, grace {GRACE:g} s) holding both "
            "workers, 100 trivial tasks behind them"
        )
        reference = bench.trivial(None)
        print(
            f"  reference, nothing hung: 100 tasks in {reference['all_s']:.2f} s; "
            f"{reference['together']:.0f} of 2 workers at once after"
        )
        for kind in KINDS:
            got = bench.trivial(kind)
            expected = reference["all_s"] + got["hung_max_s"]
            print(
                f"  {kind:<11} hung run recorded after {got['hung_max_s']:.2f} s "
                f"(bound {bound:g} s: {'met' if got['hung_max_s'] <= bound else 'MISSED'}); "
                f"all done {got['all_s']:.2f} s ({got['all_s'] / expected:.2f}x the "
                f"reference + that wait); {got['together']:.0f} of 2 workers at once after"
            )
    if 2 in wanted:
        print(f"2. abort(token) to the run recorded, {aborts} rounds each")
        for kind, bound in (("cooperative", 1.0), ("sleep", GRACE + 1)):
            lat = bench.aborts(kind, aborts)
            p99 = _pct(lat, 0.99)
            print(
                f"  {kind:<11} p50 {statistics.median(lat) * 1000:.0f} ms, p99 "
                f"{p99 * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms (bound {bound:g} s: "
                f"{'met' if p99 <= bound else 'MISSED'})"
            )


if __name__ == "__main__":
    main()
