"""Cancel tokens: one switch for many timers, readable by the running task.

A :class:`CancelToken` plays the part of Go's ``context.Done()`` in the htask seed.
Pass one token to many ``call_at`` / ``call_later`` calls; ``token.cancel()`` cancels
every timer still pending under it, and a task that is already running can poll
:attr:`CancelToken.cancelled` (or :func:`current_token`) to stop cooperatively.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Protocol

from .errors import TokenCancelled


class TimerHandle(Protocol):
    """What a token holds: a timer it can cancel (the scheduler's ``TimerHandle``)."""

    def cancel(self) -> bool: ...


__all__ = ["CancelToken", "current_token"]

# A context variable rather than a thread-local: each thread has a context of its own,
# and so does each call that runs as a task of an event loop several calls share (a
# node's async lane); ``sync_to_async`` carries it into the thread it calls in.
_current: contextvars.ContextVar[CancelToken | None] = contextvars.ContextVar(
    "htask_token", default=None
)


def current_token() -> CancelToken | None:
    """The token of the task running here (in this thread, or this asyncio task), if it
    was scheduled with one."""
    return _current.get()


def _set_current(token: CancelToken | None) -> CancelToken | None:
    previous = _current.get()
    _current.set(token)
    return previous


class CancelToken:
    """Cancels a group of timers at once; tells running tasks to stop."""

    __slots__ = ("_callbacks", "_cancelled", "_event", "_handles", "_lock", "reason")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._handles: set[TimerHandle] = set()
        self._callbacks: list[Callable[[CancelToken], object]] = []
        self._event: threading.Event | None = None  # made by the first wait()
        self.reason: str | None = None

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` has been called."""
        return self._cancelled

    def cancel(self, reason: str | None = None) -> int:
        """Cancel every pending timer bound to this token; return how many were cancelled.

        Timers already running are not interrupted: they see ``cancelled`` become True.
        Calling it again does nothing and returns 0.
        """
        with self._lock:
            if self._cancelled:
                return 0
            self._cancelled = True
            self.reason = reason
            handles, self._handles = self._handles, set()
            callbacks, self._callbacks = self._callbacks, []
            if self._event is not None:
                self._event.set()
        count = sum(1 for handle in handles if handle.cancel())
        for callback in callbacks:
            callback(self)
        return count

    def on_cancel(self, callback: Callable[[CancelToken], object]) -> None:
        """Call ``callback(token)`` when the token is cancelled (at once if it already is)."""
        with self._lock:
            if not self._cancelled:
                self._callbacks.append(callback)
                return
        callback(self)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`TokenCancelled` if the token is cancelled (for cooperative tasks)."""
        if self._cancelled:
            raise TokenCancelled(f"token cancelled: {self.reason or 'no reason given'}")

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep until the token is cancelled or ``timeout`` seconds have passed; return
        whether it is cancelled. A task's interruptible ``time.sleep``::

            while not token.wait(60):
                poll_once()
        """
        with self._lock:
            if self._cancelled:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def pending(self) -> int:
        """How many timers bound to this token are still pending."""
        return len(self._handles)

    def _bind(self, handle: TimerHandle) -> None:
        with self._lock:
            if self._cancelled:
                raise TokenCancelled("cannot schedule with a token that is already cancelled")
            self._handles.add(handle)

    def _unbind(self, handle: TimerHandle) -> None:
        with self._lock:
            self._handles.discard(handle)

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else f"{len(self._handles)} pending"
        return f"<CancelToken {state}>"
