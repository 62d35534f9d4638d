"""The Django side of the process pool (:mod:`django_htask.node.processes`): what a
worker process is told so that it reaches the node's databases, how it sets Django up
(:mod:`django_htask.node.child` calls it there), the refresh of its connections around
each call, and their close as it exits. The node imports no Django: it calls these."""

from __future__ import annotations

import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections

__all__ = ["close", "config", "misconfigured", "refresh", "set_up"]


def misconfigured(message: str) -> Exception:
    """The error of a process pool that cannot run (``message`` says why): Django's
    ``ImproperlyConfigured``, which ``runscheduler`` reports as a configuration error."""
    return ImproperlyConfigured(message)


def config() -> dict[str, Any]:
    """The databases a worker process is told to use (by the names the node's
    connections have now: a test database, say); ImproperlyConfigured if it could not
    share the node's settings or databases."""
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise ImproperlyConfigured(
            "the process pool needs DJANGO_SETTINGS_MODULE in the environment: its "
            "worker processes set Django up from it (settings.configure() cannot be "
            "handed to another process)"
        )
    databases: dict[str, dict[str, Any]] = {}
    for alias in connections:
        connection: Any = connections[alias]
        # Asked of the connection: only a backend that can hold its database in this
        # process's memory has the question.
        in_memory = getattr(connection, "is_in_memory_db", None)
        if in_memory is not None and in_memory():
            raise ImproperlyConfigured(
                f"the process pool cannot share the in-memory {connection.display_name} "
                f"database {alias!r} with its worker processes: use a database file"
            )
        databases[alias] = {"NAME": connection.settings_dict["NAME"]}
    return {"databases": databases}


def set_up(databases: dict[str, dict[str, Any]]) -> None:
    """In a worker process: Django, on the ``databases`` of :func:`config`."""
    import django  # noqa: PLC0415

    django.setup()
    for alias, values in databases.items():
        connections[alias].settings_dict.update(values)


def refresh() -> None:
    """In a worker process, before and after each call: drop the connections left
    unusable or too old, as around a request."""
    close_old_connections()


def close() -> None:
    """In a worker process that exits: close its connections (none if Django could not
    be set up)."""
    from django.conf import settings  # noqa: PLC0415

    if settings.configured:
        connections.close_all()
