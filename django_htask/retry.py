"""When a failed run is tried again (re-exported from the engine, where the one formula
lives: :mod:`django_htask.engine.backoff`)."""

from django_htask.engine.backoff import Backoff, RetryPolicy

__all__ = ["Backoff", "RetryPolicy"]
