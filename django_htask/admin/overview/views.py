"""The overview page in the admin (*Scheduler overview* in the admin index):
:class:`OverviewAdmin`, on the proxy model ``Overview``, serves it read now:
:func:`~.data.read_overview`, laid out by :func:`~.layout.page_context`."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from django_htask.admin.common import ReadOnly
from django_htask.admin_database import SchedulerDatabaseAdmin
from django_htask.models import Overview

from .data import read_overview
from .layout import can_view_overview, page_context

__all__ = ["OverviewAdmin"]


@admin.register(Overview)
class OverviewAdmin(ReadOnly, SchedulerDatabaseAdmin):
    """*Scheduler overview* in the admin index: one read-only page, no rows of its own
    (``Overview`` is a proxy model so that the index lists the page)."""

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return can_view_overview(request.user)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return can_view_overview(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.overview_view)
        return [path("", view, name="django_htask_overview_changelist")]

    def overview_view(self, request: HttpRequest) -> TemplateResponse:
        """``GET``: the overview, read now (see :mod:`~django_htask.admin.overview.data`)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        data = read_overview()
        context = {
            **self.admin_site.each_context(request),
            "title": "Scheduler overview",
            "opts": self.model._meta,
            "app_label": self.model._meta.app_label,
            "overview": data,
            **page_context(data, self.admin_site.name),
        }
        return TemplateResponse(request, "admin/django_htask/overview.html", context)
