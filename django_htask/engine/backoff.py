"""When a failed attempt is tried again: the one backoff formula of django-htask.

Tasks, schedules, crashed runs, the node's database reconnects, the LISTEN
connection and the engine's :func:`~django_htask.engine.retry` wrapper all take
their delays from :class:`RetryPolicy`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Backoff", "RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff: ``backoff`` seconds after the first failed attempt, doubled
    after each further one, never more than ``max_delay`` (``math.inf`` for no cap).

    >>> RetryPolicy(10, 60).delay(1), RetryPolicy(10, 60).delay(3), RetryPolicy(10, 60).delay(9)
    (10.0, 40.0, 60.0)
    """

    backoff: float
    max_delay: float

    def __post_init__(self) -> None:
        for name in ("backoff", "max_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{name} must be a number of seconds, got {value!r}")
            if not value >= 0 or (name == "backoff" and not math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after ``attempt`` (1 for the first) failed."""
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt!r}")
        doublings = min(attempt - 1, 1023)  # 2.0 ** 1024 overflows
        return float(min(self.backoff * 2.0**doublings, self.max_delay))


class Backoff:
    """Counts the failures of something tried again and again (a connection): each
    :meth:`failed` returns the next delay from ``policy``; :meth:`succeeded` starts over."""

    __slots__ = ("failures", "policy")

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.failures = 0

    @property
    def delay(self) -> float:
        """The delay the last failure asked for (0 after a success)."""
        return self.policy.delay(self.failures) if self.failures else 0.0

    def failed(self) -> float:
        """Count a failure; return the seconds to wait before trying again."""
        self.failures += 1
        return self.policy.delay(self.failures)

    def succeeded(self) -> bool:
        """Start over; return whether anything had failed since the last success."""
        failed, self.failures = bool(self.failures), 0
        return failed
