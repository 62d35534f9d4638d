"""The same trivial job as ``tests.cluster.clusterapp.tasks.noop``, for procrastinate
(which imports the ``tasks`` module of each installed app)."""

from __future__ import annotations

from procrastinate.contrib.django import app


@app.task(name="p_noop")
def p_noop(n: int) -> None:
    """A trivial job for procrastinate's worker."""
