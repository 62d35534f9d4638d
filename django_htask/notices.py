"""Change notices: "something changed in this process's database, look now".

A schedule saved, a task scheduled or moved, a schedule run now: the code that made the
change calls :func:`notify_local_change` (after its transaction commits); the nodes
running in this process subscribe with :func:`subscribe` and look at the database at
once instead of at their next poll. Nothing here imports the node: notices flow down,
the subscriber plugs in (other processes see changes by their poll, or by
PostgreSQL's ``NOTIFY``).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable

__all__ = ["notify_local_change", "subscribe"]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_subscribers: list[weakref.WeakMethod[Callable[[], object]] | Callable[[], object]] = []


def subscribe(callback: Callable[[], object]) -> Callable[[], None]:
    """Call ``callback()`` at each notice; return a function that unsubscribes. A bound
    method is held weakly (a node that is gone stops being called)."""
    ref: weakref.WeakMethod[Callable[[], object]] | Callable[[], object]
    ref = weakref.WeakMethod(callback) if hasattr(callback, "__self__") else callback
    with _lock:
        _subscribers.append(ref)

    def unsubscribe() -> None:
        with _lock:
            if ref in _subscribers:
                _subscribers.remove(ref)

    return unsubscribe


def notify_local_change() -> None:
    """Tell the subscribers that the database changed (they look at once)."""
    with _lock:
        refs = list(_subscribers)
    for ref in refs:
        callback = ref() if isinstance(ref, weakref.WeakMethod) else ref
        if callback is None:
            continue
        try:
            callback()
        except Exception:
            logger.exception("a change notice failed", extra={"action": "notice_failed"})
