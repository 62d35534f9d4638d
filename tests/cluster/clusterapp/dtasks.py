"""The same trivial job for django-tasks' database backend (``bench/cluster.py``)."""

from __future__ import annotations

from django_tasks import task


@task()
def dt_noop(n: int) -> None:
    """A trivial job."""
