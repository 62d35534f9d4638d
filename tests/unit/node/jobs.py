"""Jobs the node's unit tests run: one that waits until the test lets it finish."""

from __future__ import annotations

import asyncio
import threading

from django_htask.engine import registry

#: name -> (started, release): the test waits on ``started``, then sets ``release``.
gates: dict[str, tuple[threading.Event, threading.Event]] = {}
running = {"now": 0, "most": 0}
_lock = threading.Lock()


def gate(name: str) -> tuple[threading.Event, threading.Event]:
    with _lock:
        return gates.setdefault(name, (threading.Event(), threading.Event()))


@registry.register
def hold(name: str) -> None:
    started, release = gate(name)
    with _lock:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
    started.set()
    release.wait(10)
    with _lock:
        running["now"] -= 1


# -- jobs that do not end by themselves (tests/unit/node/test_stopping.py) --------------
#: What each stubborn job saw: name -> how it ended.
ended: dict[str, str] = {}


@registry.register
def spin(name: str) -> None:
    """Busy in Python until released: only a forced stop ends it."""
    started, release = gate(name)
    started.set()
    try:
        while not release.is_set():
            sum(range(10))
    except BaseException as exc:
        ended[name] = type(exc).__name__
        raise
    ended[name] = "released"


@registry.register
def cooperative(name: str) -> None:
    """Waits on its token, as a cooperative task does, and stops when it is cancelled
    (or when the test releases it)."""
    from django_htask.engine import current_token

    started, release = gate(name)
    token = current_token()
    assert token is not None
    token.on_cancel(lambda _token: release.set())
    started.set()
    release.wait(30)
    ended[name] = "token" if token.cancelled else "released"
    token.raise_if_cancelled()


@registry.register
def blocked(name: str) -> None:
    """Blocked in C (a lock's wait) until released: even a forced stop waits for it."""
    started, release = gate(name)
    started.set()
    try:
        release.wait(30)
    except BaseException as exc:  # a forced stop aimed meanwhile is raised on waking
        ended[name] = f"released into {type(exc).__name__}"
        raise
    ended[name] = "released"


@registry.register
def swallow(name: str) -> None:
    """Catches every exception and goes on until released (the forced stop included)."""
    started, release = gate(name)
    started.set()
    while not release.is_set():
        try:
            while not release.is_set():
                sum(range(10))
        except BaseException as exc:
            ended[name] = f"swallowed {type(exc).__name__}"


@registry.register
async def awaiting(name: str) -> None:
    """An async job waiting at an ``await`` until released: its timeout cancels it
    there."""
    started, release = gate(name)
    started.set()
    try:
        while not release.is_set():
            await asyncio.sleep(0.005)
    except asyncio.CancelledError:
        ended[name] = "cancelled"
        raise
    ended[name] = "released"


@registry.register
async def shrugs(name: str, times: int) -> None:
    """An async job that catches its first ``times`` cancellations and goes on
    awaiting until released (``times`` large: it never stops)."""
    started, release = gate(name)
    started.set()
    caught = 0
    while not release.is_set():
        try:
            await asyncio.sleep(0.005)
        except asyncio.CancelledError:
            caught += 1
            ended[name] = f"cancelled {caught}"
            if caught > times:
                raise


@registry.register
async def blocks_its_loop(name: str) -> None:
    """An async job that blocks its event loop (a wait that does not await) until
    released."""
    started, release = gate(name)
    started.set()
    release.wait(30)
    ended[name] = "released"
    await asyncio.sleep(0)


# -- async jobs on a worker's event loop (tests/unit/node/test_node.py) -----------------
#: name -> (its loop, its token, whether the task it left running was cancelled).
seen: dict[str, tuple[int, object, list[bool]]] = {}
#: The names of the threads the calls of leaves_a_task ran on.
threads: set[str] = set()


@registry.register
async def leaves_a_task(name: str) -> None:
    """Records its loop and token, and leaves a task running as it returns."""
    from django_htask.engine import current_token

    left: list[bool] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            left.append(True)
            raise

    asyncio.get_running_loop().create_task(forever())
    await asyncio.sleep(0)  # it starts
    seen[name] = (id(asyncio.get_running_loop()), current_token(), left)
    threads.add(threading.current_thread().name)


@registry.register
async def fails_in_its_loop(name: str) -> None:
    """Records its loop itself (kept alive: its id is not another's later), then raises."""
    seen[name] = (asyncio.get_running_loop(), None, [])  # type: ignore[assignment]
    raise ValueError(name)
