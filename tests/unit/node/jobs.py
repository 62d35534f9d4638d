"""Jobs the node's unit tests run: one that waits until the test lets it finish."""

from __future__ import annotations

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
