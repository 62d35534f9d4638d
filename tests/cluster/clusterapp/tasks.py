"""Functions the multi-node acceptance test runs in ``runscheduler`` subprocesses."""

from __future__ import annotations

import os
import time

from django_htask import task

# Registered here too: tests/cluster/test_stopping.py runs it on PostgreSQL.
from tests.acceptance.app.tasks import hang  # noqa: F401


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
