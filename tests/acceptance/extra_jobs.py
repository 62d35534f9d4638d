"""A Django ``@task`` outside every installed app (Django >= 6.0 only).

A node imports this module to run its task only when ``HTASK["DJANGO_TASK_MODULES"]``
lists it (the acceptance settings read that list from ``HTASK_ACCEPTANCE_TASK_MODULES``).
"""

from __future__ import annotations

from django.tasks import task


@task
def shout(text: str) -> str:
    return text.upper()
