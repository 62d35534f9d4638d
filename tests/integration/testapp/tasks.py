"""Functions the integration tests schedule (found by autodiscovery)."""

from __future__ import annotations

import builtins
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django_htask import BatchState, RetryPolicy, Snooze, current_batch, periodic, task

#: What ran: function name -> list of arguments.
calls: dict[str, list[object]] = defaultdict(list)
lock = threading.Lock()
#: Set by tests to block ``slow`` until released.
gate = threading.Event()


def record(name: str, value: object) -> None:
    with lock:
        calls[name].append(value)


@task
def add(a: int, b: int = 0) -> int:
    record("add", a + b)
    return a + b


@task
def when(at: datetime) -> None:
    record("when", at)


@task
def fetch(url: str, timeout: float = 10.0, /, retry: int = 0, *, key: str = "") -> None:
    """Parameters named like options of schedule(): ``timeout`` positional-only, the
    others given by keyword too (tests/integration/test_using.py)."""
    record("fetch", (url, timeout, retry, key))


@task
def boom(message: str = "boom") -> None:
    record("boom", message)
    raise RuntimeError(message)


@task
def boom_bytes(message: bytes) -> None:
    """Raise with ``message`` decoded as file names are: bytes that are not UTF-8
    become lone surrogates."""
    record("boom_bytes", message)
    raise RuntimeError(os.fsdecode(message))


@task
def slow(label: str = "") -> None:
    record("slow-start", label)
    gate.wait(30)
    record("slow-end", label)


@task(name="custom.name")
def renamed() -> None:
    record("renamed", None)


@periodic("@every 1m", name="testapp-minutely")
def minutely() -> None:
    record("minutely", None)


@task
def exits(kind: str) -> None:
    """Raise what ends a process: ``SystemExit(1)``, ``exit(1)`` or KeyboardInterrupt."""
    record("exits", kind)
    if kind == "keyboard":
        raise KeyboardInterrupt
    if kind == "exit":
        exit(1)  # noqa: PLR1722 - what a careless task calls
    raise SystemExit(1)


#: How many ``exclusive`` calls run at once, and the most seen.
running = {"now": 0, "most": 0}


@task
def exclusive(label: str = "") -> None:
    """Record the most calls running together (overlap tests); waits for ``gate``."""
    with lock:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
    record("exclusive", label)
    gate.wait(30)
    with lock:
        running["now"] -= 1


@task
def nap(seconds: float, started: str = "") -> int:
    """Create the file ``started`` (if named), sleep (in C: only a signal breaks it),
    then return the process id."""
    if started:
        with open(started, "w"):
            pass
    time.sleep(seconds)
    return os.getpid()


# -- results (tests/integration/test_results.py) ----------------------------------------
@dataclass(frozen=True)
class Tally:
    """A typed result: read back as a Tally, its date a date and its words a tuple."""

    total: int
    on: date
    words: tuple[str, ...]


@task
def tally(words: list[str]) -> Tally:
    return Tally(len(words), date(2030, 1, 1), tuple(words))


@task
def echo(value: Any) -> Any:
    """Return the argument as it came (unannotated result: read as decoded)."""
    return value


@task
def environ() -> tuple[list[str], str | None]:
    """The process's import path and its PYTHONPATH (what a worker process inherits)."""
    import os
    import sys

    return list(sys.path), os.environ.get("PYTHONPATH")


@task
def blob(size: int) -> bytes:
    return b"x" * size


@task
def opaque() -> object:
    """Return what msgpack cannot carry."""
    record("opaque", None)
    return threading.Lock()


@task
async def adouble(n: int) -> int:
    return n * 2


@task
def flaky(label: str, failures: int, error: str = "ConnectionError") -> str:
    """Raise the builtin exception ``error`` at the first ``failures`` calls with
    ``label``, then return (the retry policy tests)."""
    with lock:
        calls["flaky"].append(label)
        made = calls["flaky"].count(label)
    if made <= failures:
        raise getattr(builtins, error)(f"{label}: call {made}")
    return label


#: The policy ``@task`` gives ``flaky_by_default``.
FLAKY_POLICY = RetryPolicy(3, kind="fixed", attempts=3, retry_on=(ConnectionError,))


@task(retry=FLAKY_POLICY)
def flaky_by_default(label: str, failures: int, error: str = "ConnectionError") -> str:
    """``flaky`` with a retry policy of its own."""
    return flaky(label, failures, error)


@task(lock="testapp:serial", max_running=3)
def serial(label: str = "") -> None:
    """A task with a lock and a limit of its own (tests/integration/test_locks.py)."""
    record("serial", label)


@task(retention=timedelta(hours=1))
def brief() -> None:
    """Kept an hour once it ended (retention of its own)."""


@task(retention=timedelta(0))
def kept() -> None:
    """Kept for ever once it ended."""


def _wait(seconds: Any) -> None:
    """A helper deep in a task's calls that tells the task to wait (``raise Snooze``)."""
    raise Snooze(seconds)


@task
def snoozing(label: str, times: int, seconds: float = 30.0) -> int:
    """Snooze ``seconds`` (from a nested call) at the first ``times`` calls with
    ``label``, then return how many calls there were (docs/retries.md, "Snooze")."""
    with lock:
        calls["snoozing"].append(label)
        made = calls["snoozing"].count(label)
    if made <= times:
        _wait(seconds)
    return made


@task(max_snoozes=1)
def restless(label: str) -> int:
    """Snoozes at every call; ``@task`` lets its tasks snooze once."""
    return snoozing(label, 1_000_000)


@task(max_running=2, per="account_id")
def per_account(account_id: int, label: str = "") -> None:
    """At most two tasks per account run at once (docs/howto-exactly-one.md)."""
    record("per_account", (account_id, label))


@task(rate_limit="2/10s", per="account")
def rated(n: int, *, account: Any = "a") -> None:
    """At most two tasks per account start in any 10 seconds; ``account`` may be any
    value, to test which can be a key."""
    record("rated", (account, n))


@task
def batch_done(state: BatchState, label: str = "") -> int:
    """A batch's callback: records its state (as a BatchState) under ``label``."""
    record(f"batch_done:{label}", state)
    return state.total


@task
def total(parts: list[int]) -> int:
    """A chord's callback: the sum of the results it receives."""
    record("total", parts)
    return sum(parts)


@task
def summary(t: Tally) -> int:
    """Receives a Tally by name (a dependency's result, read as its annotation)."""
    record("summary", t)
    return t.total


@task
def spawn(n: int) -> int:
    """A batch's member that adds a sibling spawning ``n - 1`` more, while it runs."""
    record("spawn", n)
    if n > 0:
        batch = current_batch()
        assert batch is not None
        batch.schedule(spawn, n - 1)
    return n


@task
def reports(steps: int, extra: Any = None) -> int:
    """Report each step done with set_progress (then ``extra``, if given), and return
    how many."""
    from django_htask import set_progress

    for done in range(1, steps + 1):
        set_progress({"done": done, "of": steps})
    if extra is not None:
        set_progress(extra)
    return steps


@task
async def areports(label: str) -> None:
    """Report ``label`` from an async function."""
    from django_htask import aset_progress

    await aset_progress(["async", label])


# -- the eager mode (tests/integration/test_eager.py) -----------------------------------
@task
def chain(n: int) -> int:
    """Schedule ``add(n)``, and ``chain(n - 1)`` while ``n`` > 0, to run at once."""
    from django_htask import schedule

    schedule(add, n)
    if n > 0:
        schedule(chain, n - 1)
    return n


@task
def again() -> None:
    """Schedule itself to run at once, for ever."""
    from django_htask import schedule

    schedule(again)


@task
def spin(seconds: float) -> None:
    """Busy for ``seconds`` in Python (a forced stop's exception reaches it)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
