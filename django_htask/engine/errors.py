"""Every error django-htask raises derives from :class:`HtaskError`.

Each one also subclasses the builtin that fits, so callers can catch either.
:func:`shown`, :func:`short_repr` and :func:`short_path` write the values and places
those errors name, shortened.
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = [
    "CALL_ERRORS",
    "ArgumentError",
    "ForcedStop",
    "FunctionNotRegistered",
    "HtaskError",
    "InvalidSchedule",
    "PayloadError",
    "SchedulerClosed",
    "SchedulerFull",
    "TokenCancelled",
]


class HtaskError(Exception):
    """Base class of every django-htask error."""


class SchedulerClosed(HtaskError, RuntimeError):
    """The scheduler (or other engine component) was closed; it takes no more work."""


class SchedulerFull(HtaskError, RuntimeError):
    """The scheduler holds ``capacity`` pending timers already. Raised at once, never blocks."""


class TokenCancelled(HtaskError, RuntimeError):
    """A timer was scheduled with a :class:`CancelToken` that is already cancelled."""


class ForcedStop(BaseException):
    """Raised inside a running task's thread to force it to stop: its timeout passed, or
    it was aborted, and it did not stop by itself within the grace (see
    :class:`~django_htask.engine.interrupt.RunGuard`).

    It derives from ``BaseException`` (as ``KeyboardInterrupt`` does), not from
    :class:`HtaskError`, so that a task's ``except Exception`` does not swallow it; a
    task that must clean up uses ``finally`` (or catches it and raises it again)."""


class InvalidSchedule(HtaskError, ValueError):
    """A schedule's text or arguments are not valid; the message names the bad part."""


class FunctionNotRegistered(HtaskError, LookupError):
    """No function is registered under the given name."""


class PayloadError(HtaskError, ValueError):
    """A payload cannot be encoded or decoded; the message names the value and its path."""


class ArgumentError(HtaskError, TypeError):
    """Arguments do not match the function's signature or declared types."""


#: What a call that cannot be made raises (``registry.check_call``, ``registry.bind``):
#: its function is not registered, its payload cannot be read, its arguments do not fit.
CALL_ERRORS: tuple[type[HtaskError], ...] = (FunctionNotRegistered, PayloadError, ArgumentError)


class _ShortRepr(reprlib.Repr):
    """``reprlib`` that never builds a long text first: a message stays short and cheap."""

    def __init__(self) -> None:
        super().__init__()
        self.maxstring = self.maxother = 60
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdict = 4
        # Each level may show 4 items of 60 characters: three levels keep the text
        # built under a few thousand characters, which _cut then shortens.
        self.maxlevel = 3

    def repr_int(self, x: int, level: int) -> str:
        # str() of a huge int takes quadratic time and is refused past 4,300 digits.
        if x.bit_length() > 128:
            return f"<int of {x.bit_length()} bits>"
        return super().repr_int(x, level)

    def repr_bytes(self, x: bytes, level: int) -> str:
        return self.repr_instance(x[: self.maxother], level)

    repr_bytearray = repr_bytes


_short = _ShortRepr()
#: The longest a value's text in a message gets (nested containers add up).
MAX_SHOWN = 300


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else f"{text[: MAX_SHOWN - 60]}...{text[-40:]}"


def short_repr(value: Any) -> str:
    """``repr(value)``, cut to about 60 characters (4 items of a container, three
    levels deep), and to :data:`MAX_SHOWN` in all."""
    return _cut(_short.repr(value))


def shown(value: object) -> str:
    """A value as error messages name it: ``str 'tomorrow'``, ``int 1``, ``None``."""
    if value is None:
        return "None"
    return f"{type(value).__name__} {short_repr(value)}"


def short_path(path: str) -> str:
    """A path to a value (``args[0]["a"][2]``) cut in the middle past 200 characters."""
    return path if len(path) <= 200 else f"{path[:100]}...{path[-60:]}"
