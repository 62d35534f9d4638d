"""Django app configuration for django_htask."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured
from django.db.models.signals import post_migrate


def _install(using: str = "default", **kwargs: Any) -> None:
    from .store import install  # noqa: PLC0415

    install(using)


class HtaskConfig(AppConfig):
    name = "django_htask"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_install, sender=self, dispatch_uid="django_htask.install")
        from . import checks  # noqa: F401, PLC0415  (registers the system checks)
        from .conf import get_settings  # noqa: PLC0415

        try:
            htask_settings = get_settings()
        except ImproperlyConfigured:
            return  # reported by the system check django_htask.E002
        if htask_settings.autodiscover:
            from .tasks import autodiscover  # noqa: PLC0415

            autodiscover()
