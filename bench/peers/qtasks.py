"""The same trivial job as ``tests.cluster.clusterapp.tasks.noop``, for django-q2
(which calls it by its dotted path)."""

from __future__ import annotations


def q_noop(n: int) -> None:
    """A trivial job for django-q2's cluster."""
