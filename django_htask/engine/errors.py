"""Every error django-htask raises derives from :class:`HtaskError`.

Each one also subclasses the builtin that fits, so callers can catch either.
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
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


class InvalidSchedule(HtaskError, ValueError):
    """A schedule's text or arguments are not valid; the message names the bad part."""


class FunctionNotRegistered(HtaskError, LookupError):
    """No function is registered under the given name."""


class PayloadError(HtaskError, ValueError):
    """A payload cannot be encoded or decoded; the message names the value and its path."""


class ArgumentError(HtaskError, TypeError):
    """Arguments do not match the function's signature or declared types."""
