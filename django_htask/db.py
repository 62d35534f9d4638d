"""Which database holds the scheduler's tables: the one home of that answer.

``HTASK["DATABASE"]`` names a ``DATABASES`` alias; unset (None), the project's routers
decide (``router.db_for_write(Task)``: ``"default"`` without routers). Every part of
django_htask that reads or writes its tables (``schedule()``, the admin,
``runscheduler``, the ``htask`` commands, health, metrics, the checks) asks
:func:`scheduler_alias`; the migrations and the trigger install ask
:func:`holds_tables` (see docs/databases.md, "A database of its own").
"""

from __future__ import annotations

from collections.abc import Callable

from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router, transaction

from .conf import get_settings

__all__ = [
    "after_commit",
    "configured_alias",
    "database_option",
    "holds_tables",
    "scheduler_alias",
    "unknown_alias",
]

#: The app whose models hold the tables (read from the app registry: the models module
#: itself asks this one).
APP_LABEL = "django_htask"
#: How the setting is named in messages.
SETTING = "HTASK['DATABASE']"


def scheduler_alias() -> str:
    """The ``DATABASES`` alias of the scheduler's tables.

    Raises ImproperlyConfigured if ``HTASK["DATABASE"]`` names no alias of
    ``DATABASES`` (the system check django_htask.E009 reports it too)."""
    return configured_alias() or router.db_for_write(apps.get_model(APP_LABEL, "Task"))


def configured_alias() -> str | None:
    """``HTASK["DATABASE"]``, checked (None when unset: the routers decide)."""
    database = get_settings().database
    if database is None:
        return None
    problem = unknown_alias(database)
    if problem:
        raise ImproperlyConfigured(problem)
    return database


def database_option(given: str | None) -> str:
    """The alias a command's ``--database`` option names (None: :func:`scheduler_alias`).
    Raises ValueError, naming it, if it is not an alias of ``DATABASES``."""
    if given is None:
        return scheduler_alias()
    problem = unknown_alias(given, "--database")
    if problem:
        raise ValueError(problem)
    return given


def unknown_alias(database: str, name: str = SETTING) -> str | None:
    """What is wrong with ``database`` given as ``name`` (the setting, an option), or
    None if it is an alias of ``DATABASES``."""
    aliases = list(getattr(settings, "DATABASES", {}))
    if database in aliases:
        return None
    return (
        f"{name} is {database!r}, which is not an alias of DATABASES "
        f"(aliases: {', '.join(map(repr, aliases))})"
    )


def holds_tables(alias: str) -> bool:
    """Whether the scheduler's tables are migrated on ``alias`` (the routers'
    ``allow_migrate`` for django_htask there): the trigger install runs only there."""
    return bool(router.allow_migrate_model(alias, apps.get_model(APP_LABEL, "Schedule")))


def after_commit(fn: Callable[[], object], using: str) -> None:
    """Call ``fn`` once the caller's transaction on ``using`` commits (at once outside
    one), robustly (``transaction.on_commit``): what was written then shows to other
    processes. With ``HTASK["EAGER"]``, also at once when the only transaction open is a
    Django ``TestCase``'s own: it never commits, and for the test's code what was
    written outside its own transactions is committed."""
    if get_settings().eager and _only_a_test_case_transaction(using):
        fn()
    else:
        transaction.on_commit(fn, using=using, robust=True)


def _only_a_test_case_transaction(using: str) -> bool:
    connection = connections[using]
    blocks = connection.atomic_blocks
    return connection.in_atomic_block and all(getattr(b, "_from_testcase", False) for b in blocks)
