"""When a failed run is tried again (re-exported from the engine, where the one policy
lives: :mod:`django_htask.engine.backoff`), and how a policy is stored on a task's or
a schedule's row."""

from __future__ import annotations

import math
from typing import Any

from django_htask.engine.backoff import Backoff, RetryPolicy, error_names, exception_name

__all__ = [
    "NAMES_MAX",
    "RETRY_COLUMNS",
    "Backoff",
    "RetryPolicy",
    "attempts_of",
    "error_names",
    "exception_name",
    "policy_columns",
    "split_names",
]

#: The longest ``retry_on`` / ``give_up_on`` a row holds (its column's length).
NAMES_MAX = 1000


def split_names(text: str) -> tuple[str, ...]:
    """The dotted paths a ``retry_on`` / ``give_up_on`` column holds (separated by
    commas, blanks ignored)."""
    return tuple(part for part in (p.strip() for p in text.split(",")) if part)


def policy_columns(policy: RetryPolicy) -> dict[str, Any]:
    """The columns that store ``policy`` on a task or a schedule (its ``attempts`` go
    to ``max_attempts``, which the caller decides). A policy without a cap
    (``max_delay`` infinite) is stored with an empty ``retry_backoff_max``: the
    RETRY_BACKOFF_MAX setting caps it. Its ``rng`` is not stored: a node draws from
    ``random.random``."""
    return {
        "retry_kind": policy.kind,
        "retry_backoff": float(policy.backoff),
        "retry_backoff_max": float(policy.max_delay) if math.isfinite(policy.max_delay) else None,
        "retry_jitter": policy.jitter,
        "retry_on": ", ".join(policy.retry_on),
        "give_up_on": ", ".join(policy.give_up_on),
    }


#: The columns a retry policy is stored in (beside ``max_attempts``).
RETRY_COLUMNS = tuple(policy_columns(RetryPolicy()))


def attempts_of(max_attempts: int | None, policy: RetryPolicy | None) -> int:
    """The ``max_attempts`` to store: the policy's ``attempts`` if it has them, else
    ``max_attempts`` (default 1). Both given and different: a ValueError naming both."""
    if policy is not None and policy.attempts is not None:
        if max_attempts is not None and max_attempts != policy.attempts:
            raise ValueError(
                f"max_attempts {max_attempts!r} and the retry policy's attempts "
                f"{policy.attempts!r} differ: give one of them"
            )
        return policy.attempts
    return 1 if max_attempts is None else max_attempts
