"""A database router that keeps django_htask's tables on ``HTASK["DATABASE"]``.

django_htask's own code, and the models' managers, follow the setting without a router;
add this one to ``DATABASE_ROUTERS`` so what Django asks the routers follows it too: a
new instance's ``save()``, ``migrate``, ``dumpdata``/``loaddata``, the admin's delete
confirmation (docs/databases.md, "A database of its own").
"""

from __future__ import annotations

from typing import Any

from .conf import get_settings
from .db import APP_LABEL

__all__ = ["HtaskRouter"]


def _database() -> str | None:
    return get_settings().database


class HtaskRouter:
    """Route django_htask's models to ``HTASK["DATABASE"]``; leave other apps to the
    next router (every method answers None for them, and for all when the setting is
    unset)."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        if model._meta.app_label == APP_LABEL:
            return _database()
        return None

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return self.db_for_read(model, **hints)

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        ours = (obj1._meta.app_label == APP_LABEL, obj2._meta.app_label == APP_LABEL)
        if all(ours):
            return True
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if app_label != APP_LABEL:
            return None
        database = _database()
        if database is None:
            return None
        return db == database
