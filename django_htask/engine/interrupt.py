"""Stopping a call that runs in another thread: cooperatively first, then by force.

A :class:`RunGuard` is one call's stop switch, shared by the thread making the call
and the thread that may have to stop it (a node's watchdog, at a timeout or an abort):

1. :meth:`RunGuard.stop` cancels the call's :class:`CancelToken` (the cooperative
   request: a task reading ``current_token()`` sees it, an async task is cancelled at
   its next ``await``);
2. :meth:`RunGuard.interrupt`, after a grace, raises :class:`ForcedStop` inside
   the thread, and only while the thread is inside the call (never in the code that
   records its outcome). Python delivers it at the thread's next bytecode: a thread
   blocked in C (a ``time.sleep``, a socket read) does not see it until that returns;
3. :meth:`RunGuard.abandon`, when even that did not end the call, gives the thread
   up: whoever abandons it records the run and replaces the worker, and the thread's
   own outcome, if it ever returns, is dropped (:meth:`RunGuard.settle` says so).

Exactly one of :meth:`settle` (the thread) and :meth:`abandon` (the watchdog) wins, so
a run is recorded once.
"""

from __future__ import annotations

import ctypes
import threading

from .errors import ForcedStop
from .tokens import CancelToken

__all__ = ["RunGuard"]

_RUNNING, _SETTLED, _ABANDONED = 0, 1, 2

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.restype = ctypes.c_int


def _raise_in(ident: int, exc: type[BaseException]) -> int:
    """Have the thread ``ident`` raise ``exc`` at its next bytecode; return how many
    threads were affected."""
    return int(_set_async_exc(ctypes.c_ulong(ident), ctypes.py_object(exc)))


class _TakenBack(BaseException):
    """Raised in a thread by itself, and caught there, in place of an interrupt."""


def _take_back() -> None:
    """Take back an interrupt aimed at this thread, raised already or not: one raised
    here in its place, and caught. Taking it back by a NULL exception instead leaves
    CPython's pending-exception signal on: every thread then takes the slow path at
    each check, and a profile or trace function that raises loops for ever."""
    try:
        _raise_in(threading.get_ident(), _TakenBack)
        while True:  # raised at the loop's first check of pending events
            pass
    except _TakenBack:
        return


class RunGuard:
    """One call's stop switch (see the module). Thread-safe."""

    __slots__ = (
        "_ident",
        "_inside",
        "_interrupted",
        "_lock",
        "_state",
        "reason",
        "retryable",
        "token",
    )

    def __init__(self, token: CancelToken | None = None) -> None:
        self._lock = threading.Lock()
        self.token = token if token is not None else CancelToken()
        #: Why the call was asked to stop (None: it was not), and whether the run may be
        #: tried again for it (a timeout: by the retry policy; an abort: never).
        self.reason: str | None = None
        self.retryable = False
        self._ident = 0
        self._inside = False
        self._interrupted = False
        self._state = _RUNNING

    # -- the thread making the call --------------------------------------------------
    def enter(self) -> bool:
        """The calling thread is about to call: False if the call was stopped before it
        began (it must not be made)."""
        with self._lock:
            if self.reason is not None:
                return False
            self._ident = threading.get_ident()
            self._inside = True
            return True

    def leave(self) -> None:
        """The call returned (or raised): an interrupt can no longer be aimed at it, and
        one aimed but not raised yet is taken back."""
        with self._lock:
            self._inside = False
            aimed = self._interrupted  # none is aimed once _inside is false
        if aimed:
            _take_back()

    def settle(self) -> bool:
        """The calling thread is done: True if it records the outcome, False if the
        call was abandoned meanwhile (it was recorded for it)."""
        with self._lock:
            if self._state == _ABANDONED:
                return False
            self._state = _SETTLED
            return True

    # -- the thread stopping it ------------------------------------------------------
    def stop(self, reason: str, *, retryable: bool = False) -> bool:
        """Ask the call to stop (cancel its token). False if it already finished or was
        asked already (the first reason stays)."""
        with self._lock:
            if self._state != _RUNNING or self.reason is not None:
                return False
            self.reason, self.retryable = reason, retryable
        self.token.cancel(reason)
        return True

    def interrupt(self) -> bool:
        """Raise :class:`ForcedStop` in the calling thread if it is still inside the
        call (once); return whether it was aimed."""
        with self._lock:
            if not self._inside or self._interrupted or self._state != _RUNNING:
                return False
            self._interrupted = True
            return _raise_in(self._ident, ForcedStop) == 1

    def abandon(self) -> bool:
        """Give the calling thread up if the call has not finished: True if it was (the
        caller records the run); False if the thread settled first."""
        with self._lock:
            if self._state != _RUNNING:
                return False
            self._state = _ABANDONED
            return True

    @property
    def inside(self) -> bool:
        """Whether the calling thread is inside the call now."""
        return self._inside

    @property
    def stopped(self) -> bool:
        return self.reason is not None

    def __repr__(self) -> str:
        state = ("running", "settled", "abandoned")[self._state]
        return f"<RunGuard {state}{' stopped' if self.reason else ''}>"
