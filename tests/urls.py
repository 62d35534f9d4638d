"""URLs for the test suite: the admin and django_htask's health endpoint."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("htask/", include("django_htask.urls")),
]
