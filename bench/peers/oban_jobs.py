"""The same trivial job as ``tests.cluster.clusterapp.tasks.noop``, for Oban for Python.
Only Oban's own venv imports this module (``bench/cluster.py`` makes it: Oban needs
Python 3.12 or later); its CLI finds the worker by its dotted path."""

from __future__ import annotations

from typing import Any

from oban import worker


@worker(queue="default")
class ObanNoop:
    """A trivial job for Oban's queue ``default``."""

    async def process(self, job: Any) -> None:
        """Nothing: the job's cost is the engine's."""
