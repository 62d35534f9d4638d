"""Finding the functions: each installed app's ``tasks`` module is imported once.

Importing a ``tasks`` module runs its ``@task`` and ``@periodic`` decorators, which
register the functions (and declare the code-defined schedules).
"""

from __future__ import annotations

import logging

from django.apps import apps

__all__ = ["autodiscover", "discovered_modules"]

logger = logging.getLogger(__name__)

_done = False


def discovered_modules() -> list[str]:
    """The ``<app>.tasks`` module names of the installed apps (whether they exist or not)."""
    return [f"{config.name}.tasks" for config in apps.get_app_configs()]


def autodiscover(force: bool = False) -> list[str]:
    """Import every installed app's ``tasks`` module; return the ones found.

    A ``tasks`` module that fails to import raises (a broken task module must not be
    silently skipped). Runs once unless ``force``.
    """
    global _done  # noqa: PLW0603
    if _done and not force:
        return []
    _done = True
    from django_htask.engine import registry  # noqa: PLC0415

    found: list[str] = registry.autodiscover(discovered_modules())
    logger.debug("task modules: %s", found, extra={"action": "autodiscover"})
    return found
