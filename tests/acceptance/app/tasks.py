"""Functions the acceptance tests schedule in the ``runscheduler`` subprocess."""

from __future__ import annotations

import builtins
import gc
import os
import socket
import time
from pathlib import Path

from django_htask import Snooze, current_token, task


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


def _snooze(seconds: float) -> None:
    raise Snooze(seconds)


@task
def snooze_then_log(times: int, seconds: float, log: str) -> None:
    """Log ``call``; snooze ``seconds`` (from a nested call) at the first ``times``
    calls, counted in ``log`` (the calls may run in different worker processes)."""
    _log(log, "call")
    if Path(log).read_text().count("call") <= times:
        _snooze(seconds)


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


@task
def hang(kind: str, log: str) -> None:
    """Log ``start KIND``, then never return by itself: ``sleep`` (``time.sleep``, in
    C), ``socket`` (a read from a server that never answers, in C), ``loop`` (an
    endless pure-Python loop), ``cooperative`` (waits on its token: stops when asked)."""
    _log(log, f"start {kind}")
    if kind == "sleep":
        time.sleep(1e9)
    elif kind == "socket":
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen()
            with socket.create_connection(server.getsockname()) as client:
                client.recv(1)
    elif kind == "loop":
        while True:
            pass
    elif kind == "cooperative":
        token = current_token()
        assert token is not None
        while not token.wait(60):
            pass
        token.raise_if_cancelled()
    raise AssertionError(f"hang {kind!r} returned")


@task
async def ahang(log: str) -> None:
    """Log ``start await``, then wait at an ``await`` that never ends by itself; log
    ``cancelled`` when its task is cancelled there (its timeout, an abort)."""
    import asyncio

    _log(log, "start await")
    try:
        await asyncio.sleep(1e9)
    except asyncio.CancelledError:
        _log(log, "cancelled")
        raise
    raise AssertionError("ahang returned")


@task
async def ablock(log: str) -> None:
    """Log ``start block``, then block its event loop (a sleep that does not await) for
    a minute; log ``end`` if it ever gets there."""
    import time

    _log(log, "start block")
    time.sleep(60)
    _log(log, "end")


#: What ``grow`` keeps (the memory stays in use until its process ends).
_KEPT: list[bytearray] = []


@task
def grow(mib: int, log: str) -> None:
    """Log ``grow`` (with the pid), then take ``mib`` MiB more and keep it."""
    _log(log, "grow")
    block = bytearray(mib * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])  # touch every page: resident
    _KEPT.append(block)


@task
def flaky(label: str, failures: int, error: str, log: str) -> None:
    """Log ``call LABEL``; raise the builtin exception ``error`` at the first
    ``failures`` calls with ``label`` (counted in the log, whatever the process)."""
    _log(log, f"call {label}")
    made = sum(
        1 for line in Path(log).read_text().splitlines() if line.startswith(f"call {label} ")
    )
    if made <= failures:
        raise getattr(builtins, error)(f"{label}: call {made}")


@task
def add_after(a: int, b: int, seconds: float) -> int:
    """``a + b``, after ``seconds``."""
    time.sleep(seconds)
    return a + b


@task
async def aadd_after(a: int, b: int, seconds: float) -> int:
    """``a + b``, after ``seconds`` awaited."""
    import asyncio

    await asyncio.sleep(seconds)
    return a + b


@task
def counts(n: int) -> int:
    """Report each count with set_progress; return ``n``."""
    from django_htask import set_progress

    for done in range(1, n + 1):
        set_progress({"done": done, "of": n, "pid": os.getpid()})
    return n


@task
def collector() -> dict[str, object]:
    """The garbage collector as the node process that runs this has it."""
    return {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
