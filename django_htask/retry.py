"""When a failed run is tried again (re-exported from the engine, where the one policy
lives: :mod:`django_htask.engine.backoff`), and how a policy is stored on a row."""

from __future__ import annotations

from django_htask.engine.backoff import Backoff, RetryPolicy, error_names, exception_name

__all__ = ["Backoff", "RetryPolicy", "error_names", "exception_name", "split_names"]


def split_names(text: str) -> tuple[str, ...]:
    """The dotted paths a ``retry_on`` / ``give_up_on`` column holds (separated by
    commas, blanks ignored)."""
    return tuple(part for part in (p.strip() for p in text.split(",")) if part)
