"""Django app configuration for django_htask."""

from __future__ import annotations

import importlib
from typing import Any

import django
from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models.signals import post_migrate
from django.utils.module_loading import import_string

#: The django.tasks backend of django_htask (Django >= 6.0).
HTASK_BACKEND = "django_htask.backends.HtaskBackend"


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
