"""Optional URLs: the scheduler's health as JSON, for load balancers and probes, and
its metrics for Prometheus.

Mount them in the project's URLconf::

    path("htask/", include("django_htask.urls")),

``htask/health/`` (URL name ``htask:health``) answers ``GET`` and ``HEAD`` with
:func:`django_htask.views.health`: 200 when healthy, 503 when not.
``htask/metrics/`` (URL name ``htask:metrics``) answers with what the database knows
in Prometheus' text format (:func:`django_htask.views.metrics`; it needs
``pip install django-htask[metrics]``).
"""

from __future__ import annotations

from django.urls import path

from django_htask import views

app_name = "htask"

urlpatterns = [
    path("health/", views.health, name="health"),
    path("metrics/", views.metrics, name="metrics"),
]
