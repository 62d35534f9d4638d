"""The base of django_htask's ModelAdmins: every query on the scheduler's database.

Django's admin asks the routers where a model lives; without a router that sends
django_htask's models to ``HTASK["DATABASE"]`` it would read and write "default". This
base (Django's "multiple databases" admin recipe) sends the querysets, saves, deletes
and the change and delete pages' transactions to :func:`django_htask.db.scheduler_alias`
either way. What Django does outside the ModelAdmin (the delete confirmation's list of
related rows) still follows the routers: the check django_htask.W010 says so.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import models, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from .db import scheduler_alias

__all__ = ["SchedulerDatabaseAdmin"]


class SchedulerDatabaseAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """A ModelAdmin whose rows are on the scheduler's database."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(scheduler_alias())

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        obj.save(using=obj._state.db or scheduler_alias())

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        obj.delete(using=obj._state.db or scheduler_alias())

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        queryset.using(scheduler_alias()).delete()

    def formfield_for_foreignkey(
        self, db_field: models.ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> Any:
        return super().formfield_for_foreignkey(
            db_field, request, using=scheduler_alias(), **kwargs
        )

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        # Django's own transaction is on the routers' database: this one holds the save.
        with transaction.atomic(using=scheduler_alias()):
            return super().changeform_view(request, object_id, form_url, extra_context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        with transaction.atomic(using=scheduler_alias()):
            return super().delete_view(request, object_id, extra_context)
