"""Functions the acceptance tests schedule in the ``runscheduler`` subprocess."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django_htask import task


@task
def noop(label: str = "") -> None:
    pass


@task
def sleep_then_touch(seconds: float, path: str) -> None:
    time.sleep(seconds)
    Path(path).write_text("done")


def _log(path: str, line: str) -> None:
    """Append one line to ``path`` (one ``write`` on an O_APPEND file)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line} {os.getpid()} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


@task
def slow(n: int, seconds: float, log: str) -> None:
    """Log ``start n``, sleep, log ``end n`` (with the pid and the time)."""
    _log(log, f"start {n}")
    time.sleep(seconds)
    _log(log, f"end {n}")


@task
def die(log: str) -> None:
    """Take the whole process down, as a segfault or the OOM killer would."""
    _log(log, "start die")
    os._exit(1)


@task
def exits(kind: str) -> None:
    """Raise SystemExit (``system``) or KeyboardInterrupt (``keyboard``)."""
    if kind == "keyboard":
        raise KeyboardInterrupt
    raise SystemExit(1)
