"""Functions the acceptance tests schedule in the ``runscheduler`` subprocess."""

from __future__ import annotations

import time
from pathlib import Path

from django_htask import task


@task
def noop(label: str = "") -> None:
    pass


@task
def sleep_then_touch(seconds: float, path: str) -> None:
    time.sleep(seconds)
    Path(path).write_text("done")
