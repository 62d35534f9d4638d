"""When a failed run is tried again: one policy for tasks, schedules and crashes."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff: ``backoff`` seconds after the first failed attempt, doubled
    after each further one, never more than ``max_delay``.

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
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after ``attempt`` (1 for the first) failed."""
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt!r}")
        doublings = min(attempt - 1, 1023)  # 2.0 ** 1024 overflows
        return float(min(self.backoff * 2.0**doublings, self.max_delay))
