"""Django app configuration for django_htask."""

from __future__ import annotations

import gc
import importlib
import sys
from typing import Any

import django
from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models.signals import post_migrate
from django.utils.module_loading import import_string

#: The django.tasks backend of django_htask (Django >= 6.0).
HTASK_BACKEND = "django_htask.backends.HtaskBackend"

#: ``held``: whether this module turned the garbage collector off for a
#: ``runscheduler`` process's set-up, to be turned on again when the apps are ready.
_collector = {"held": False}


def _hold_collector(argv: list[str]) -> None:
    """Turns the garbage collector off in a ``runscheduler`` process from here (the
    apps' modules being imported) to :meth:`HtaskConfig.ready`.

    Importing the models of the project, Django's and the database driver makes tens
    of thousands of objects that live as long as the process; hardly any is garbage, yet
    the collector walks them again and again as they are made. A node pays its start
    at every deploy, restart and recycle, and several node commands on one machine
    pay it each. Python's ``gc.freeze()`` documentation gives the remedy for a process
    that forks: the collector off early, what was made frozen, the collector on; a
    node does the same, so that its own full collections leave the set-up alone too.
    Only for ``runscheduler``: the hold is the node's choice, not every process's
    that installs the app."""
    if argv[1:2] == ["runscheduler"] and gc.isenabled():
        gc.disable()
        _collector["held"] = True


def _release_collector() -> None:
    """The end of :func:`_hold_collector`'s hold: what the set-up made is frozen (left
    out of every later collection) and the collector is on again."""
    if _collector["held"]:
        _collector["held"] = False
        gc.freeze()
        gc.enable()


_hold_collector(sys.argv)


def _install(using: str, **kwargs: Any) -> None:
    """After ``migrate --database using``: the triggers, where the tables are."""
    from .store import install  # noqa: PLC0415

    install(using)


def uses_htask_backend() -> bool:
    """Whether an alias of ``settings.TASKS`` uses :data:`HTASK_BACKEND` or a subclass
    of it (always False before Django 6.0, which has no ``django.tasks``)."""
    configured = getattr(settings, "TASKS", None)
    if django.VERSION < (6, 0) or not isinstance(configured, dict):
        return False
    return any(
        is_htask_backend(params.get("BACKEND"))
        for params in configured.values()
        if isinstance(params, dict)
    )


def is_htask_backend(path: object) -> bool:
    """Whether the backend class at ``path`` is :data:`HTASK_BACKEND` or a subclass."""
    if path == HTASK_BACKEND:
        return True
    if not isinstance(path, str) or path.startswith("django.tasks."):
        return False
    try:
        backend = import_string(path)
    except ImportError:
        return False  # Django reports it when the alias is used
    return any(
        f"{cls.__module__}.{cls.__qualname__}" == HTASK_BACKEND
        for cls in getattr(backend, "__mro__", ())
    )


class HtaskConfig(AppConfig):
    name = "django_htask"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        _release_collector()
        post_migrate.connect(_install, sender=self, dispatch_uid="django_htask.install")
        from . import checks  # noqa: F401, PLC0415  (registers the system checks)
        from .eager import run_when_scheduled  # noqa: PLC0415
        from .signals import task_scheduled  # noqa: PLC0415

        # Always connected: HTASK["EAGER"] is read at each task, so that a test may
        # turn it on and off (override_settings).
        task_scheduled.connect(run_when_scheduled, dispatch_uid="django_htask.eager")

        if uses_htask_backend():
            # Registers the runner of Django's tasks in every process, runscheduler's
            # included, whatever that process imported before.
            importlib.import_module("django_htask.backends")
        from .conf import get_settings  # noqa: PLC0415

        try:
            htask_settings = get_settings()
        except ImproperlyConfigured:
            return  # reported by the system check django_htask.E002
        if htask_settings.autodiscover:
            from .tasks import autodiscover  # noqa: PLC0415

            autodiscover()
