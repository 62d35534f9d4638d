"""Django ``@task`` functions in a module of the app that is not its ``tasks`` module
(Django >= 6.0 only: nothing imports this module on Django 5.2).

``runscheduler`` never imports this module at start; it imports it when it runs one
of these tasks, because the module belongs to an installed app.
"""

from __future__ import annotations

import sys

from django.tasks import TaskContext, task


@task(priority=5, takes_context=True)
def greet(context: TaskContext, name: str) -> dict[str, object]:
    return {"greeting": f"hello {name}", "attempt": context.attempt}


@task
def explode(message: str) -> None:
    raise LookupError(message)


@task
def leave(code: int) -> None:
    sys.exit(code)


#: Not a Django task: a stored call naming it must be refused.
def plain(name: str) -> str:
    return name
