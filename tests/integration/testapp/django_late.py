"""A Django task module that no code imports: a node imports it to run its task, as
it is a module of an installed app (test_backend forgets it before and after)."""

from __future__ import annotations

from django.tasks import task

from .tasks import record


@task
def late(x: int) -> int:
    record("late", x)
    return x + 1
