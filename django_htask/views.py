"""The health and metrics endpoints (see :mod:`django_htask.urls` for how to mount them)."""

from __future__ import annotations

import logging

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from django_htask.health import DEFAULT_MAX_LATE, check_health, parse_max_late, parse_node
from django_htask.metrics import render

__all__ = ["health", "metrics"]

logger = logging.getLogger(__name__)

#: HTTP status of an unhealthy verdict.
UNAVAILABLE = 503


@never_cache
@require_safe
@transaction.non_atomic_requests  # ATOMIC_REQUESTS would open the database before us
def health(request: HttpRequest) -> JsonResponse:
    """``GET`` (or ``HEAD``): the verdict of :func:`~django_htask.health.check_health`
    as JSON, 200 when healthy, 503 when not; 400 naming a bad ``max_late`` or ``node``
    query parameter. It only reads the database."""
    try:
        max_late = parse_max_late(request.GET.get("max_late", DEFAULT_MAX_LATE))
        node = request.GET.get("node")
        if node is not None:
            node = parse_node(node)
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    verdict = check_health(max_late=max_late, node=node)
    if verdict.database_error:
        logger.warning(
            "health check: database unavailable: %s",
            verdict.database_error,
            extra={"action": "health_database_error"},
        )
    body = verdict.as_json()
    return JsonResponse(body, status=200 if body["healthy"] else UNAVAILABLE)


@never_cache
@require_safe
@transaction.non_atomic_requests
def metrics(request: HttpRequest) -> HttpResponse:
    """``GET`` (or ``HEAD``): what the database knows, in Prometheus' text format
    (:class:`~django_htask.metrics.DatabaseCollector`). It only reads the database; a
    database error is ``django_htask_database_up 0``, not an error response. Without
    prometheus-client it raises ImproperlyConfigured naming what to install."""
    body, content_type = render()
    return HttpResponse(body, content_type=content_type)
