"""Functions the multi-node acceptance test runs in ``runscheduler`` subprocesses."""

from __future__ import annotations

import os
import time

from django_htask import BatchState, RetryPolicy, current_batch, task

# Registered here too: tests/cluster/test_stopping.py runs it on PostgreSQL.
from tests.acceptance.app.tasks import ablock, ahang, hang  # noqa: F401


def _log(line: str) -> None:
    """Append one line to ``HTASK_CLUSTER_LOG`` (one ``write`` on an O_APPEND file)."""
    fd = os.open(os.environ["HTASK_CLUSTER_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@task
def tick() -> None:
    """A periodic job: does nothing (the Run table is the record)."""


@task
def job(n: int) -> None:
    """A one-off job: logs its number and the process that ran it."""
    _log(f"{n} {os.getpid()}\n")


@task
def noop(n: int) -> None:
    """A trivial one-off job for the throughput bench."""


@task
def burn(ms: float) -> None:
    """A CPU-bound one-off job for bench/pool.py: ``ms`` milliseconds of pure Python
    (it holds the GIL throughout, as CPU-heavy Python does)."""
    deadline = time.thread_time() + ms / 1000
    while time.thread_time() < deadline:
        pass


@task
def hold(seconds: float, tick: float = 0.0) -> None:
    """A periodic job that takes a while: logs ``start``/``end`` with its process and
    the time, so a test can tell whether two runs overlapped; with ``tick``, also a
    ``tick`` line that often (the last one says when a killed run was last alive)."""
    pid = os.getpid()
    _log(f"start {pid} {time.time():.6f}\n")
    if tick:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(tick)
            _log(f"tick {pid} {time.time():.6f}\n")
    else:
        time.sleep(seconds)
    _log(f"end {pid} {time.time():.6f}\n")


@task
def slow(n: int, seconds: float) -> None:
    """A one-off job that takes a while: logs ``start n``/``end n`` with its process."""
    _log(f"start {n} {os.getpid()} {time.time():.6f}\n")
    time.sleep(seconds)
    _log(f"end {n} {os.getpid()} {time.time():.6f}\n")


@task
def die() -> None:
    """Take the whole node down, as a segfault or the OOM killer would: logs
    ``start die`` with its process first."""
    _log(f"start die {os.getpid()} {time.time():.6f}\n")
    os._exit(1)


@task
def exits(kind: str) -> None:
    """Raise SystemExit (``system``) or KeyboardInterrupt (``keyboard``): logs
    ``start exits`` with its process first."""
    _log(f"start exits {os.getpid()} {time.time():.6f}\n")
    if kind == "keyboard":
        raise KeyboardInterrupt
    raise SystemExit(1)


@task
def fails(message: str) -> None:
    """Raise RuntimeError(message): logs ``start fails`` with its process first."""
    _log(f"start fails {os.getpid()} {time.time():.6f}\n")
    raise RuntimeError(message)


@task
def locked(n: int, seconds: float) -> None:
    """A one-off job queued with a lock (tests/cluster/test_locks.py): logs ``lstart n``
    and ``lend n`` with its process and the time."""
    _log(f"lstart {n} {os.getpid()} {time.time():.6f}\n")
    time.sleep(seconds)
    _log(f"lend {n} {os.getpid()} {time.time():.6f}\n")


@task(max_running=2)
def limited(n: int, seconds: float) -> None:
    """A one-off job at most two of which run at once on all the nodes: logs ``mstart
    n`` and ``mend n`` with its process and the time."""
    _log(f"mstart {n} {os.getpid()} {time.time():.6f}\n")
    time.sleep(seconds)
    _log(f"mend {n} {os.getpid()} {time.time():.6f}\n")


@task(rate_limit="20/s", per="account")
def metered(n: int, account: int, seconds: float = 0.0) -> None:
    """A one-off job at most 20 of which start in any second per account, on all the
    nodes, that takes ``seconds`` (tests/cluster/test_flow.py: its rows' start times
    are the record)."""
    time.sleep(seconds)


@task(max_running=3, per="key")
def keyed(n: int, key: int, seconds: float) -> None:
    """A one-off job at most three of which run at once per key on all the nodes: logs
    ``kstart n`` and ``kend n`` with its process and the time."""
    _log(f"kstart {n} {os.getpid()} {time.time():.6f}\n")
    time.sleep(seconds)
    _log(f"kend {n} {os.getpid()} {time.time():.6f}\n")


# -- tasks composed (tests/cluster/test_compose.py) ---------------------------------------
@task
def gstep(n: int, seconds: float) -> int:
    """A step of a graph: logs ``gstart n``/``gend n`` with its process and the time."""
    _log(f"gstart {n} {os.getpid()} {time.time():.6f}\n")
    time.sleep(seconds)
    _log(f"gend {n} {os.getpid()} {time.time():.6f}\n")
    return n


@task
def gather(parts: list[int]) -> int:
    """A fan-in: logs ``gather`` with the sum and the count of the results received."""
    _log(f"gather {sum(parts)} {len(parts)} {os.getpid()} {time.time():.6f}\n")
    return sum(parts)


@task
def bmember(n: int, seconds: float, fail: str = "", siblings: int = 0) -> int:
    """A batch's member: ``fail="always"`` fails at once, ``"once"`` fails its first
    attempt only (a marker file says it ran), ``siblings`` adds that many more members
    to its batch while it runs (logging ``spawned n`` for each: a run killed after it
    added some, then run again, adds more); logs ``bstart n`` and ``bend n``."""
    _log(f"bstart {n} {os.getpid()} {time.time():.6f}\n")
    if fail == "always":
        raise RuntimeError(f"member {n} fails")
    if fail == "once":
        try:
            os.close(os.open(f"{os.environ['HTASK_CLUSTER_LOG']}.once.{n}", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            raise RuntimeError(f"member {n} fails its first attempt")
    batch = current_batch()
    for k in range(siblings):
        assert batch is not None
        batch.schedule(bmember, 1000 + 10 * n + k, seconds)
        _log(f"spawned {n} {os.getpid()} {time.time():.6f}\n")
    time.sleep(seconds)
    _log(f"bend {n} {os.getpid()} {time.time():.6f}\n")
    return n


#: What the composed tasks retry by: soon (a killed node's attempt is retried too).
QUICK = RetryPolicy(0.2, attempts=3)


@task(retry=QUICK)
def batch_cb(state: BatchState, role: str) -> None:
    """A batch's callback: logs ``cb`` with its role and the batch's counts."""
    _log(
        f"cb {role} {state.id} {state.total} {state.succeeded} {state.failed} "
        f"{state.cancelled} {os.getpid()}\n"
    )


@task
async def anoop(n: int) -> None:
    """The same, ``async def``, as Oban's jobs are (bench/cluster.py's ``htask async``)."""
