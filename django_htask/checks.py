"""System checks (``manage.py check``), registered when the app is ready.

=====================  =======  ===========================================================
id                     level    when
=====================  =======  ===========================================================
``django_htask.E001``  error    ``USE_TZ = False``: the scheduler stores and compares aware
                                UTC datetimes.
``django_htask.E002``  error    the ``HTASK`` setting is not a dict, has an unknown key or a
                                value of the wrong type.
``django_htask.W003``  warning  schedules or pending tasks in the database name functions
                                that are not registered (they would fail when due).
``django_htask.W004``  warning  several live ``runscheduler`` nodes share a SQLite database
                                (PostgreSQL, MySQL and MariaDB take several).
``django_htask.E005``  error    the django.tasks backend is configured but ``django_htask``
                                is not in ``INSTALLED_APPS`` (checked by the backend).
``django_htask.E006``  error    the backend's ``OPTIONS["MAX_ATTEMPTS"]`` is not an int from
                                1 to 1000 (checked by the backend).
``django_htask.W007``  warning  a check could not run (an error it did not foresee, named
                                in the message); the others still ran.
``django_htask.E008``  error    an ``@periodic`` declaration cannot be read (a typo in its
                                schedule, a bad option or argument): the function, its
                                file and line, what it was given and the error.
``django_htask.E009``  error    ``HTASK["DATABASE"]`` names no alias of ``DATABASES``.
``django_htask.W010``  warning  ``HTASK["DATABASE"]`` is set but the routers send
                                django_htask's models (or migrate their tables) elsewhere:
                                add ``django_htask.routers.HtaskRouter``.
``django_htask.W011``  warning  the scheduler's SQLite database (or another alias of the
                                same file) lacks ``"transaction_mode": "IMMEDIATE"`` in its
                                ``OPTIONS``: a request's transaction that reads, then
                                writes, while a node writes fails at once with "database
                                is locked".
=====================  =======  ===========================================================

W003 and W004 read the database, so they run with the ``database`` tag:
``manage.py check --database ALIAS`` (``migrate`` runs them too), on the scheduler's
database only (django_htask.db: ``HTASK["DATABASE"]``, else the routers'). They are quiet
while the tables do not exist yet, and W004 while E001 or E002 is reported (it needs
aware datetimes and the ``NODE_TIMEOUT`` setting).

No check raises, whatever the settings: ``manage.py check`` and ``migrate`` always
finish and show what is wrong.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections

__all__ = [
    "check_database_rows",
    "check_database_setting",
    "check_periodic_declarations",
    "check_settings",
    "check_sqlite_nodes",
    "check_sqlite_transactions",
    "check_use_tz",
]

logger = logging.getLogger(__name__)

#: Unregistered names listed in one warning, at most.
SHOWN = 10

Check = Callable[..., list[Any]]


def _never_raises(check: Check) -> Check:
    """Run ``check``; an error it did not foresee becomes the warning W007 naming the
    check and the error, so ``manage.py check`` and ``migrate`` always finish."""

    @functools.wraps(check)
    def guarded(*args: Any, **kwargs: Any) -> list[Any]:
        try:
            return check(*args, **kwargs)
        except Exception as exc:
            logger.warning(
                "system check %s could not run",
                check.__name__,
                exc_info=True,
                extra={"action": "check_failed"},
            )
            return [
                checks.Warning(
                    f"the check {check.__name__} could not run: {type(exc).__name__}: {exc}",
                    hint="the other django-htask checks ran; please report this error",
                    id="django_htask.W007",
                )
            ]

    return guarded


@checks.register()
@_never_raises
def check_use_tz(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[Any]:
    if getattr(settings, "USE_TZ", False):
        return []
    return [
        checks.Error(
            "USE_TZ is False: django-htask keeps times as UTC instants and will not read "
            "naive local ones (where the clocks change, a naive time names one instant twice "
            "or none, so a task or a schedule's run could fire twice or never)",
            hint=(
                "set USE_TZ = True (Django's default since 5.0); existing naive values in "
                "your own tables are then read as UTC on SQLite and MySQL: convert them "
                "first if they are local times (docs/databases.md, 'USE_TZ = False')"
            ),
            id="django_htask.E001",
        )
    ]


@checks.register()
@_never_raises
def check_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[Any]:
    from .conf import load  # noqa: PLC0415

    try:
        load(getattr(settings, "HTASK", None))
    except ImproperlyConfigured as exc:
        return [
            checks.Error(
                str(exc),
                hint="see the settings in django-htask's documentation",
                obj="settings.HTASK",
                id="django_htask.E002",
            )
        ]
    return []


@checks.register()
@_never_raises
def check_database_setting(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[Any]:
    from .conf import load  # noqa: PLC0415
    from .db import unknown_alias  # noqa: PLC0415

    try:
        database = load(getattr(settings, "HTASK", None)).database
    except ImproperlyConfigured:
        return []  # E002
    if database is None:
        return []
    problem = unknown_alias(database)
    if problem is not None:
        return [
            checks.Error(
                problem,
                hint="name the alias of DATABASES that holds the scheduler's tables, or "
                "remove the key to follow the routers (docs/databases.md, 'A database of "
                "its own')",
                obj="settings.HTASK",
                id="django_htask.E009",
            )
        ]
    return _unrouted(database)


def _unrouted(database: str) -> list[Any]:
    """W010: the routers send django_htask's models elsewhere than ``database``."""
    from django.db import router  # noqa: PLC0415

    from .models import Schedule  # noqa: PLC0415

    routed = router.db_for_write(Schedule)
    migrated = [
        alias for alias in settings.DATABASES if router.allow_migrate_model(alias, Schedule)
    ]
    if routed == database and migrated == [database]:
        return []
    return [
        checks.Warning(
            f"HTASK['DATABASE'] is {database!r}, but the routers send django_htask's models "
            f"to {routed!r} and migrate their tables on {', '.join(map(repr, migrated))}: "
            "django_htask's own code uses the setting, Django's code that asks the routers "
            "(a new instance's save(), the admin's delete confirmation, dumpdata, migrate) "
            "does not",
            hint="add 'django_htask.routers.HtaskRouter' to DATABASE_ROUTERS (docs/databases.md, "
            "'A database of its own')",
            obj="settings.DATABASE_ROUTERS",
            id="django_htask.W010",
        )
    ]


@checks.register()
@_never_raises
def check_sqlite_transactions(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[Any]:
    """W011: SQLite transactions that do not take the write lock when they begin.

    SQLite lets one connection write at a time. A transaction begun the default way
    (``DEFERRED``) reads under a shared lock and asks for the write lock at its first
    write; if another connection holds it then (a node recording its tasks), SQLite
    cannot wait, since the two could wait on each other, and the write fails at once:
    "database is locked", whatever the ``timeout``. Begun ``IMMEDIATE``, it takes the
    write lock first, and waits up to the timeout for it."""
    from .db import scheduler_alias  # noqa: PLC0415

    try:
        alias = scheduler_alias()
    except ImproperlyConfigured:
        return []  # E009
    return sqlite_deferred(alias, settings.DATABASES)


def sqlite_deferred(alias: str, databases: dict[str, Any]) -> list[Any]:
    """W011 for ``databases`` (``DATABASES``), the scheduler's being ``alias``."""
    sqlite = "django.db.backends.sqlite3"
    scheduler = databases.get(alias, {})
    if scheduler.get("ENGINE") != sqlite:
        return []
    name = scheduler.get("NAME")
    found = []
    for other, options in databases.items():
        if options.get("ENGINE") != sqlite or (other != alias and options.get("NAME") != name):
            continue
        mode = str((options.get("OPTIONS") or {}).get("transaction_mode", "")).upper()
        if mode in ("IMMEDIATE", "EXCLUSIVE"):
            continue
        found.append(
            checks.Warning(
                f"the SQLite database {other!r} ({options.get('NAME')}) begins its "
                "transactions DEFERRED: while a scheduler node writes, a request's "
                "transaction that reads, then writes, fails at once with 'database is "
                "locked' (SQLite cannot wait for the write lock there)",
                hint='add "transaction_mode": "IMMEDIATE" (and a "timeout" of a few '
                "seconds) to its OPTIONS (docs/databases.md, 'SQLite')",
                obj=f"settings.DATABASES[{other!r}]",
                id="django_htask.W011",
            )
        )
    return found


@checks.register()
@_never_raises
def check_periodic_declarations(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[Any]:
    from .code_schedules import bad_declarations  # noqa: PLC0415

    return [
        checks.Error(
            str(bad),
            hint="fix the declaration: until then its schedule is not synced, and "
            "runscheduler does not start",
            obj=bad.function,
            id="django_htask.E008",
        )
        for bad in bad_declarations()
    ]


def _database_check(
    check: Callable[[Sequence[str] | None], list[Any]],
) -> Callable[..., list[Any]]:
    """Register ``check(databases)`` as a check of what the databases hold (Django runs
    those with ``check --database`` and before ``migrate``), one that never raises."""

    def run(
        app_configs: Sequence[AppConfig] | None = None,
        databases: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> list[Any]:
        return check(databases)

    # Named after ``check`` (its warnings say which check failed), but not wrapping it:
    # Django refuses a check whose signature, unwrapped, takes no ``**kwargs``.
    run.__name__ = run.__qualname__ = check.__name__
    run.__doc__ = check.__doc__
    registered: Callable[..., list[Any]] = checks.register(checks.Tags.database)(_never_raises(run))
    return registered


def _aliases(databases: Sequence[str] | None) -> list[str]:
    """The scheduler's database if it is among ``databases`` (none while E002 or E009
    says the setting is wrong)."""
    if not databases:
        return []
    from .db import scheduler_alias  # noqa: PLC0415

    try:
        wanted = scheduler_alias()
    except ImproperlyConfigured:
        return []
    return [alias for alias in databases if alias == wanted]


@_database_check
def check_database_rows(databases: Sequence[str] | None) -> list[Any]:
    from django_htask.engine import registry  # noqa: PLC0415

    from .models import Schedule, Task, TaskStatus  # noqa: PLC0415

    found: list[Any] = []
    for alias in _aliases(databases):
        try:
            names = set(
                Schedule.objects.using(alias)
                .filter(enabled=True)
                .values_list("function", flat=True)
                .distinct()
            )
            names |= set(
                Task.objects.using(alias)
                .filter(status=TaskStatus.PENDING)
                .values_list("function", flat=True)
                .distinct()
            )
        except DatabaseError:
            continue  # not migrated yet: nothing stored to check
        missing = sorted(n for n in names if n not in registry)
        if missing:
            shown = ", ".join(repr(n) for n in missing[:SHOWN])
            more = f" and {len(missing) - SHOWN} more" if len(missing) > SHOWN else ""
            found.append(
                checks.Warning(
                    f"enabled schedules or pending tasks in database {alias!r} name "
                    f"functions that are not registered: {shown}{more}; they fail when due",
                    hint="register them with @task (in an installed app's tasks module), "
                    "or disable or delete those rows",
                    id="django_htask.W003",
                )
            )
    return found


def _several_nodes(alias: str) -> bool:
    """Whether several nodes may share the database ``alias`` (its store says; true of
    a database without a store, where no node runs)."""
    from .store import get_store  # noqa: PLC0415

    try:
        return get_store(alias).supports_several_nodes
    except ImproperlyConfigured:
        return True


@_database_check
def check_sqlite_nodes(databases: Sequence[str] | None) -> list[Any]:
    from .conf import load  # noqa: PLC0415
    from .models import Node  # noqa: PLC0415
    from .operations import live_nodes  # noqa: PLC0415

    if not getattr(settings, "USE_TZ", False):
        return []  # E001: heartbeats cannot be compared with an aware cutoff
    try:
        load(getattr(settings, "HTASK", None))  # NODE_TIMEOUT decides who is alive
    except ImproperlyConfigured:
        return []  # E002
    found: list[Any] = []
    for alias in _aliases(databases):
        if _several_nodes(alias):
            continue
        name = connections[alias].display_name
        try:
            live = list(Node.objects.using(alias).filter(live_nodes()).values_list("id", flat=True))
        except DatabaseError:
            continue
        if len(live) > 1:
            found.append(
                checks.Warning(
                    f"{len(live)} live scheduler nodes share the {name} database "
                    f"{alias!r} ({', '.join(live)}): {name} is for one node",
                    hint=f"run one runscheduler per {name} database, or use PostgreSQL, "
                    "MySQL or MariaDB for several nodes",
                    id="django_htask.W004",
                )
            )
    return found
