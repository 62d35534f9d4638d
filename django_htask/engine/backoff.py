"""When a failed attempt is tried again: the one retry policy of django-htask.

Tasks, schedules, crashed runs, the node's database reconnects, the LISTEN
connection and the engine's :func:`~django_htask.engine.retry` wrapper all take
their delays from :class:`RetryPolicy`; a failed task or schedule run is retried or
given up by :meth:`RetryPolicy.refusal` too.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "JITTERS",
    "KINDS",
    "Backoff",
    "RetryPolicy",
    "error_names",
    "exception_name",
]

#: How the delay grows with the attempt (see :meth:`RetryPolicy.delay`).
KINDS = ("fixed", "linear", "exponential")
#: How a delay is spread (AWS's "Exponential Backoff And Jitter"): not at all, "full"
#: (uniform from 0 to the delay) or "equal" (half the delay, plus uniform up to half).
JITTERS = ("none", "full", "equal")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed attempt is tried again: after how long, how many times, on which
    errors.

    ``delay(attempt)``, the seconds after the failed ``attempt`` (1 for the first):
    ``fixed``: ``backoff``; ``linear``: ``backoff * attempt``; ``exponential`` (the
    default): ``backoff * 2 ** (attempt - 1)``; each capped at ``max_delay``
    (``math.inf`` for no cap), then spread by ``jitter`` with ``rng`` (a function
    returning a float in [0, 1), ``random.random`` unless given: a test gives its own).

    ``attempts``: the runs in all, retries included (``None``: the caller's own, a
    task's ``max_attempts``). ``retry_on``: retry only an error that is an instance of
    one of these exception classes; ``give_up_on``: never retry one that is (it wins
    over ``retry_on``). Each is given as a class or its dotted path, and kept as the
    dotted path of the class (``"builtins.ConnectionError"``), so that an error raised
    in another process is matched by the names of its type's classes
    (:func:`error_names`).

    >>> RetryPolicy(10, 60).delay(1), RetryPolicy(10, 60).delay(3), RetryPolicy(10, 60).delay(9)
    (10.0, 40.0, 60.0)
    >>> RetryPolicy(2, kind="linear").delay(3), RetryPolicy(2, kind="fixed").delay(3)
    (6.0, 2.0)
    """

    backoff: float = 10.0
    max_delay: float = math.inf
    kind: str = "exponential"
    jitter: str = "none"
    attempts: int | None = None
    retry_on: tuple[str, ...] = ()
    give_up_on: tuple[str, ...] = ()
    rng: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("backoff", "max_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{name} must be a number of seconds, got {value!r}")
            if not value >= 0 or (name == "backoff" and not math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.jitter not in JITTERS:
            raise ValueError(f"jitter must be one of {', '.join(JITTERS)}, got {self.jitter!r}")
        attempts = self.attempts
        if attempts is not None and (
            isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
        ):
            raise ValueError(f"attempts must be an int >= 1 (or None), got {attempts!r}")
        if not callable(self.rng):
            raise TypeError(f"rng must be a function returning a float in [0, 1), got {self.rng!r}")
        for name in ("retry_on", "give_up_on"):
            object.__setattr__(self, name, _exception_names(name, getattr(self, name)))

    def delay(self, attempt: int) -> float:
        """Seconds to wait after ``attempt`` (1 for the first) failed."""
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt!r}")
        if self.kind == "exponential":
            doublings = min(attempt - 1, 1023)  # 2.0 ** 1024 overflows
            base = self.backoff * 2.0**doublings
        elif self.kind == "linear":
            base = self.backoff * attempt
        else:
            base = self.backoff
        capped = float(min(base, self.max_delay))
        if self.jitter == "full":
            return capped * self.rng()
        if self.jitter == "equal":
            return capped / 2 + capped / 2 * self.rng()
        return capped

    def refusal(self, errors: Sequence[str] | None) -> str:
        """Why an attempt that failed with an error of these class names
        (:func:`error_names`; ``None``: it failed without an exception of its own, a
        timeout or a lost run) is not to be retried; ``""`` if it may be."""
        if errors is None or not (self.retry_on or self.give_up_on):
            return ""
        raised = _short(errors[0]) if errors else "the error"
        for name in self.give_up_on:
            if name in errors:
                how = "is" if name == errors[0] else f"is a {name},"
                return f"not retried: {raised} {how} in give_up_on"
        if self.retry_on and not any(name in errors for name in self.retry_on):
            return f"not retried: {raised} is not in retry_on ({', '.join(self.retry_on)})"
        return ""


def error_names(kind: type[BaseException]) -> tuple[str, ...]:
    """The dotted paths of the classes of ``kind``'s MRO, itself first (``object``
    left out): what :meth:`RetryPolicy.refusal` matches, in any process."""
    return tuple(_name(c) for c in kind.__mro__ if c is not object)


def exception_name(value: object) -> str:
    """The dotted path of an exception class, given as the class or a dotted path
    (a builtin by its bare name too: ``"ConnectionError"``); raises naming the value
    when it is not one, or cannot be imported."""
    if isinstance(value, str):
        return _import_name(value)
    if isinstance(value, type) and issubclass(value, BaseException):
        return _name(value)
    raise TypeError(f"expected an exception class or its dotted path, got {value!r}")


@functools.lru_cache(maxsize=256)
def _import_name(path: str) -> str:
    module, _, attribute = path.rpartition(".")
    if not all(part.isidentifier() for part in path.split(".")):
        raise ValueError(f"expected an exception class or its dotted path, got {path!r}")
    try:
        found = getattr(importlib.import_module(module) if module else builtins, attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"exception class {path!r} cannot be imported: {exc}") from None
    if not (isinstance(found, type) and issubclass(found, BaseException)):
        raise TypeError(f"{path!r} is not an exception class, it is {found!r}")
    return _name(found)


def _exception_names(what: str, values: Iterable[object]) -> tuple[str, ...]:
    if isinstance(values, str | type):
        values = (values,)  # one class given bare
    try:
        names = [exception_name(value) for value in values]
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{what}: {exc}") from None
    return tuple(dict.fromkeys(names))


def _name(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _short(name: str) -> str:
    return name.removeprefix("builtins.")


class Backoff:
    """Counts the failures of something tried again and again (a connection): each
    :meth:`failed` returns the next delay from ``policy``; :meth:`succeeded` starts over."""

    __slots__ = ("_delay", "failures", "policy")

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.failures = 0
        self._delay = 0.0

    @property
    def delay(self) -> float:
        """The delay the last failure asked for (0 after a success)."""
        return self._delay

    def failed(self) -> float:
        """Count a failure; return the seconds to wait before trying again."""
        self.failures += 1
        self._delay = self.policy.delay(self.failures)
        return self._delay

    def succeeded(self) -> bool:
        """Start over; return whether anything had failed since the last success."""
        failed, self.failures, self._delay = bool(self.failures), 0, 0.0
        return failed
